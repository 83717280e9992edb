"""The planner on recordings of a long, multi-turn, tool-using agent (``runtime/tool_agent.py``)
against the caching loopback provider: the model's prediction against what the provider
reported, and each fix's predicted saving against the provider's once the fix is applied
(within 5%). Traces written by ``PrefixMonitor(trace=...)``; the provider's clock simulated."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import orjson
import pytest

import dejacache
from dejacache.planner import check_recordings, plan_recordings
from dejacache.planner.load import TRACE_HEAD, accounts
from runtime.cache_provider import CachingProvider
from runtime.tool_agent import Shape, SimClock, replies, run_anthropic, run_openai


@pytest.fixture(autouse=True)
def _observe_only() -> None:
    dejacache.configure(mode="off")  # every request reaches the provider


def traced(path: pathlib.Path, model: str, shape: Shape, apply: list[str] | None = None,
           **kwargs: Any) -> Any:
    clock = SimClock()
    provider = CachingProvider(clock=clock, replies=replies).start()
    run = run_anthropic if model.startswith("claude") else run_openai
    try:
        with dejacache.PrefixMonitor(clock=clock, trace=path, apply=apply):
            run(provider, clock, model=model, shape=shape, **kwargs)  # type: ignore[operator]
    finally:
        provider.stop()
    return plan_recordings(path)


def close(predicted: float, reported: float) -> bool:
    return abs(predicted - reported) <= 0.05 * abs(reported)


def test_trace_file_and_calibration(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gpt.jsonl"
    plan = traced(path, "gpt-5.6", Shape(clock="user", parts=True), sessions=4, turns=3)
    lines = path.read_bytes().splitlines()
    assert orjson.loads(lines[0]) == TRACE_HEAD and len(lines) == 1 + 4 * 3 * 2
    row = orjson.loads(lines[1])
    assert row["session"] == "chat-00" and row["at"] == 0.0 and row["provider"] == "openai"
    assert row["body"]["model"] == "gpt-5.6" and row["usage"]["prompt_tokens"] > 1024
    assert "sk-test" not in path.read_text()  # credentials never reach the trace
    assert [s.session for s in plan.sessions] == ["chat-00", "chat-01", "chat-02", "chat-03"]
    for s in plan.sessions:
        assert s.turns == 6 and s.recorded_cached and s.recorded_cached > 0
        assert s.predicted_cached == s.recorded_cached  # to the token
        assert s.predicted_cost == pytest.approx(s.recorded_cost)


@pytest.mark.parametrize(("model", "shape", "kwargs", "fix", "applied"), [
    # The clock on the first line of the system prompt: every request its own prefix.
    ("gpt-4.1", Shape(clock="system"), {}, "move", {"shape": Shape(clock="user")}),
    # No cache marker at all, and long gaps between messages.
    ("claude-sonnet-4-6", Shape(clock="user"), {"gap": 400.0}, "long_ttl",
     {"shape": Shape(clock="user", markers="top", hour=True)}),
    ("claude-sonnet-4-6", Shape(clock="user"), {}, "breakpoints", {"apply": ["breakpoints"]}),
    # Instructions as parts on gpt-5.6: an explicit breakpoint shares them across chats.
    ("gpt-5.6", Shape(clock="user", parts=True), {}, "breakpoints",
     {"apply": ["breakpoints"]}),
])
def test_each_fix_saves_what_the_plan_predicted(
        tmp_path: pathlib.Path, model: str, shape: Shape, kwargs: dict[str, Any], fix: str,
        applied: dict[str, Any]) -> None:
    size = {"sessions": 6, "turns": 4, **kwargs}
    before = traced(tmp_path / "before.jsonl", model, shape, **size)
    assert before.total("predicted_cached") == before.total("recorded_cached")
    found = [f for s in before.sessions for f in s.fixes if f.kind == fix]
    assert found and not found[0].alternative, [
        (f.kind, f.alternative) for f in before.sessions[0].fixes]
    predicted = sum(f.saving for f in found)
    after = traced(tmp_path / "after.jsonl", model, applied.pop("shape", shape),
                   applied.pop("apply", None), **size)
    reported = before.total("recorded_cost") - after.total("recorded_cost")
    assert reported > 0 and close(predicted, reported), (predicted, reported)
    # And the provider's hit rate with the fix is the one the plan gave for it.
    rate = after.total("recorded_cached") / after.total("prompt_tokens")
    hit = sum(f.hit_rate * s.prompt_tokens for s in before.sessions for f in s.fixes
              if f.kind == fix) / before.total("prompt_tokens")
    assert abs(rate - hit) <= 0.05, (rate, hit)


def test_check_on_a_trace_names_the_conversation(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gpt.jsonl"
    traced(path, "gpt-4.1", Shape(clock="system"), sessions=2, turns=3)
    verdicts = check_recordings(path, 0.5)
    assert [(v.session, v.ok) for v in verdicts] == [("chat-00", False), ("chat-01", False)]
    assert verdicts[0].cause.startswith("turn 2: system: `messages[0].content[0].text` at "
                                        "offset 14: `2026-05-01 09:00:00` → "
                                        "`2026-05-01 09:00:02`")


def test_loading_cassettes_and_traces(tmp_path: pathlib.Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.cassettes import ageing

    clock = SimClock()
    monkeypatch.setattr(ageing, "clock", clock.wall)  # entries stamped on the simulated clock
    provider = CachingProvider(clock=clock, replies=replies).start()
    try:
        with dejacache.cassette(tmp_path / "rec" / "agent.json", mode="record"):
            run_openai(provider, clock, sessions=2, turns=2)
    finally:
        provider.stop()
    (account,) = accounts(tmp_path / "rec")
    assert account.name == "agent.json" and len(account.turns) == 8
    assert {t.session for t in account.turns} == {"agent.json#1", "agent.json#2"}
    # When each was sent: recorded_at (whole seconds) less the call's duration.
    times = [t.at for t in account.turns]
    assert [round(t - clock.wall() + clock.now) for t in times if t is not None] == [
        0, 2, 4, 6, 8, 10, 12, 14]
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(orjson.dumps(TRACE_HEAD) + b"\n" + orjson.dumps(
        {"session": "a", "at": 1.5, "provider": "openai", "endpoint": "openai.chat.completions",
         "body": dataclasses.asdict(Shape()) | {"model": "gpt-4.1", "messages": []},
         "usage": None, "local": True}) + b"\n\n" + orjson.dumps({"body": 3}) + b"\n")
    ((turn,),) = [a.turns for a in accounts(trace)]
    assert (turn.session, turn.at, turn.local, turn.api) == ("a", 1.5, True, "chat")


def test_badly_placed_breakpoints_are_moved_and_save_what_the_plan_said(
        tmp_path: pathlib.Path) -> None:
    # The marker on a system block after the clock, and one on each question: nothing cached.
    size = {"sessions": 4, "turns": 3}
    bad = Shape(clock="system", markers="bad")
    before = traced(tmp_path / "before.jsonl", "claude-sonnet-4-6", bad, **size)
    assert before.total("recorded_cached") == before.total("predicted_cached") == 0
    (fix,) = [f for f in before.sessions[0].fixes if f.kind == "breakpoints"]
    assert fix.path == "system[1]" and fix.runtime
    assert fix.description.startswith(
        "move the cache breakpoints: `system[1]` (after the volatile `2026-05-01 09:00:00`) "
        "to `system[0]`")
    # Applied at runtime: the provider's saving is the one priced on the recording.
    from dejacache._core.cache_plan import price
    from dejacache.cassettes.prices import rates_from_table

    predicted = before.total("predicted_cost") - price(
        accounts(tmp_path / "before.jsonl"), ("breakpoints",), rates_from_table())
    after = traced(tmp_path / "after.jsonl", "claude-sonnet-4-6", bad, ["breakpoints"], **size)
    reported = before.total("recorded_cost") - after.total("recorded_cost")
    assert reported > 0 and close(predicted, reported), (predicted, reported)
    # And the model, given the moved breakpoints, predicts what the provider reported.
    assert close(after.total("predicted_cached"), after.total("recorded_cached"))
    assert after.total("recorded_cached") / after.total("prompt_tokens") > 0.5
