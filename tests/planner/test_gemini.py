"""The planner on Gemini: conversations recorded through the real google-genai SDK against the
caching loopback provider (implicit caching, ``cachedContentTokenCount`` as Gemini reports it),
the model's prediction against what the provider reported, the explicit ``CachedContent`` fix
where turns come further apart than implicit caching keeps a prefix, and the gate."""

from __future__ import annotations

import pathlib
import re

import pytest

genai = pytest.importorskip("google.genai")

import dejacache  # noqa: E402
from dejacache.planner import check_recordings, plan_recordings  # noqa: E402
from runtime.gemini_chat import cache_bill, record  # noqa: E402
from runtime.tool_agent import RULES  # noqa: E402

# google-genai subclasses aiohttp's ClientSession for its async client, which aiohttp warns
# about; -W error would turn that into a failure.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning")


@pytest.fixture(autouse=True)
def _observe_only() -> None:
    dejacache.configure(mode="off")  # every request reaches the provider


def test_implicit_caching_predicted_against_cached_content_token_count(
        tmp_path: pathlib.Path) -> None:
    record(tmp_path / "gemini.json")
    plan = plan_recordings(tmp_path / "gemini.json")
    assert [s.session for s in plan.sessions] == ["gemini.json#1", "gemini.json#2",
                                                  "gemini.json#3"]
    for s in plan.sessions:
        assert s.turns == 4 and s.recorded_cached and s.recorded_cached > 0
        assert abs(s.predicted_cached - s.recorded_cached) <= 0.05 * s.recorded_cached
        assert s.predicted_cost == pytest.approx(s.recorded_cost, rel=0.05)
    # Turns seconds apart: implicit caching already serves the prefix; an explicit cache
    # would only add storage, so it is not proposed.
    assert not [f for s in plan.sessions for f in s.fixes if f.kind == "cached_content"]


def test_an_explicit_cache_where_turns_outlive_implicit_caching(
        tmp_path: pathlib.Path) -> None:
    # Seven minutes between messages: the implicit cache has let the prefix go every time.
    record(tmp_path / "gemini.json", chats=2, step=420.0)
    plan = plan_recordings(tmp_path / "gemini.json")
    assert len(plan.sessions) == 2
    assert plan.total("recorded_cached") == plan.total("predicted_cached") == 0
    fixes = [f for s in plan.sessions for f in s.fixes if f.kind == "cached_content"]
    assert len(fixes) == 2
    for fix in fixes:
        assert fix.saving > 0 and not fix.runtime and fix.path == "systemInstruction"
        assert fix.description.startswith(
            "create a Gemini CachedContent with what every turn repeats (`systemInstruction`, "
            "about ")
        # One cache for both conversations (one system instruction), kept from the first
        # request to the last (2,940 s later) and 5 minutes more.
        assert "ttl of 3,240 s" in fix.description and "storage $1 per million" in \
            fix.description
    # The saving: every request but the first reads it at a tenth of the input price ($0.30
    # per million), less its storage for 3,240 s at $1 per million an hour.
    found = re.search(r"about ([\d,]+) tokens", fixes[0].description)
    assert found is not None
    held = int(found.group(1).replace(",", ""))
    expected = sum(f.tokens for f in fixes) * 0.9 * 0.30 / 1e6 - held * 3240 / 3600 / 1e6
    predicted = sum(f.saving for f in fixes)
    assert predicted == pytest.approx(expected, rel=0.05)
    # Applied as a user would (google-genai's caches.create, then cached_content= on each
    # request): the provider's usage, the cache's creation and its storage, within 5%.
    record(tmp_path / "applied.json", chats=2, step=420.0, explicit=True)
    after = plan_recordings(tmp_path / "applied.json")
    assert after.total("recorded_cached") > 0.9 * after.total("prompt_tokens") * 0.7
    reported = plan.total("recorded_cost") - after.total("recorded_cost") - cache_bill(
        tmp_path / "applied.json")
    assert abs(predicted - reported) <= 0.05 * reported, (predicted, reported)
    # At the Pro model's storage price, a cache kept 35 minutes for two messages does not pay.
    record(tmp_path / "pro.json", chats=1, step=1800.0, turns=2,
           model="gemini-2.5-pro", system=lambda clock: RULES * 3)
    pro = plan_recordings(tmp_path / "pro.json")
    assert len(pro.sessions) == 1
    assert all(f.kind != "cached_content" for s in pro.sessions for f in s.fixes)


def test_the_gate_names_the_turn_and_span_on_gemini(
        tmp_path: pathlib.Path) -> None:
    record(tmp_path / "base" / "gemini.json", chats=1)
    # The seeded regression: the time at the top of the system instruction.
    record(tmp_path / "head" / "gemini.json", chats=1,
           system=lambda clock: f"Current time: {clock.stamp()}\n{RULES}")
    assert check_recordings(tmp_path / "base", 0.5)[0].ok
    (verdict,) = check_recordings(tmp_path / "head", 0.5, baseline=tmp_path / "base")
    assert not verdict.ok and verdict.session == "gemini.json#1"
    assert "below the bar 50%" in verdict.why and "below the baseline's" in verdict.why
    assert verdict.cause.startswith(
        "turn 2: system: `systemInstruction.parts[0].text` at offset 14: "
        "`2026-05-01 09:00:00` → `2026-05-01 09:00:02`")


def test_the_monitor_reads_gemini_requests_and_its_trace_is_planned(
        tmp_path: pathlib.Path) -> None:
    from runtime.tool_agent import SimClock

    clock = SimClock()
    trace = tmp_path / "gemini.jsonl"
    with dejacache.PrefixMonitor(trace=trace, clock=clock) as monitor:
        record(tmp_path / "gemini.json", chats=2, turns=3, clock=clock)
    reports = monitor.report()
    assert sorted(reports) == ["chat-0", "chat-1"]
    # The monitor's expectation, per conversation, against the provider's count (chat-1's
    # first turn also reads the system instruction chat-0 left: the plan, which replays the
    # whole account, counts that).
    first = reports["chat-0"]
    assert first.reported_cached and first.reported_cached > 0
    assert abs(first.expected_cached - first.reported_cached) <= 0.05 * first.reported_cached
    plan = plan_recordings(trace)  # the model read from the URL, as in a cassette
    assert [(s.session, s.turns) for s in plan.sessions] == [("chat-0", 3), ("chat-1", 3)]
    assert plan.total("predicted_cached") == pytest.approx(plan.total("recorded_cached"),
                                                           rel=0.05)
