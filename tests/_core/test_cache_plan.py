"""The plan of recorded sessions: recorded and predicted hit rates and costs, and the fixes
found, each priced; and the gate's verdicts on a plan. Synthetic recordings, explicit times."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from dejacache._core.cache_gate import check, failed
from dejacache._core.cache_plan import Account, Plan, SessionPlan, Turn, plan
from dejacache._core.prompt_cache import Rates, Usage

RULES = "House rules: cite the tool, answer briefly, never guess a price. " * 120
EPH = {"type": "ephemeral"}


def rates(provider: str, model: str) -> Rates | None:
    if model.startswith("claude"):
        return Rates(3.0, 0.1, 1.25, 2.0)
    return Rates(2.0, 0.25, 1.0, 1.0)


def no_rates(provider: str, model: str) -> Rates | None:
    return None


def claude_turn(n: int, *, clock: str = "", marked: bool = True, session: str = "s",
                at: float | None = None, usage: Usage | None = None) -> Turn:
    system: Any = f"{clock}{RULES}"
    if marked:
        system = [{"type": "text", "text": system, "cache_control": EPH}]
    msgs: list[Any] = []
    for i in range(n):
        msgs += [{"role": "user", "content": f"{session}: question {i}"}]
        if i < n - 1:
            msgs += [{"role": "assistant", "content": f"answer {i}"}]
    if marked:
        msgs[-1] = {"role": "user", "content": [{"type": "text", "text": msgs[-1]["content"],
                                                 "cache_control": EPH}]}
    body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": system, "messages": msgs}
    return Turn(session, "messages", body, usage, at)


def one(p: Plan) -> Any:
    (s,) = p.sessions
    return s


def kinds(s: Any) -> list[tuple[str, bool]]:
    return [(f.kind, f.alternative) for f in s.fixes]


def test_a_clock_in_a_marked_system_prompt_pools_or_moves() -> None:
    turns = [claude_turn(i + 1, clock=f"Time: 12:0{i}:00\n", at=30.0 * i) for i in range(4)]
    s = one(plan([Account("rec.json", tuple(turns))], rates))
    assert (s.turns, s.predicted_cached, s.recorded_cached, s.recorded_hit_rate) == (
        4, 0, None, None)
    assert [(b.turn, b.reason, b.path) for b in s.breaks] == [
        (2, "system", "system[0].text"), (3, "system", "system[0].text"),
        (4, "system", "system[0].text")]
    assert kinds(s) == [("pool", False), ("move", True)]
    pool, move = s.fixes
    assert pool.saving > move.saving > 0 and not pool.runtime
    assert "AgentPool" in pool.description and "system[0].text" in pool.description
    assert "`12:00:00` → `12:01:00`" in move.description or "12:0" in move.description
    assert s.combined_cached > 0.6 * s.prompt_tokens and s.combined_cost < s.predicted_cost
    assert pool.hit_rate == s.combined_cached / s.prompt_tokens


def test_no_marker_finds_breakpoints_and_long_gaps_the_long_lifetime() -> None:
    quick = [claude_turn(i + 1, marked=False, at=10.0 * i) for i in range(4)]
    s = one(plan([Account("a", tuple(quick))], rates))
    assert s.predicted_cached == 0
    # The 1 h lifetime would save too, less: its writes cost 2x, and 10 s gaps need none.
    assert kinds(s) == [("breakpoints", False), ("long_ttl", True)] and s.fixes[0].runtime
    assert s.fixes[1].saving < s.fixes[0].saving
    assert any(h.kind == "no_cache_marker" for h in s.hazards)
    slow = [claude_turn(i + 1, marked=False, at=400.0 * i) for i in range(4)]
    s = one(plan([Account("a", tuple(slow))], rates))
    # 400 s apart, 5-minute entries expire unread: markers alone would only add 1.25x writes.
    assert kinds(s) == [("long_ttl", False)] and s.fixes[0].saving > 0


def test_routing_keys_keep_conversations_on_their_machines() -> None:
    doc = "A long document the user pasted. " * 300

    def gpt(session: str, n: int, at: float) -> Turn:
        msgs: list[Any] = [{"role": "system", "content": RULES},
                           {"role": "user", "content": f"{session}: {doc}"}]
        for i in range(1, n):
            msgs += [{"role": "assistant", "content": f"a{i}"},
                     {"role": "user", "content": f"q{i}"}]
        return Turn(session, "chat", {"model": "gpt-4.1", "messages": msgs}, None, at)

    turns, at = [], 0.0
    for n in range(1, 5):  # 20 conversations, one message each every 40 s: 30 a minute
        for c in range(20):
            turns.append(gpt(f"chat-{c}", n, at))
            at += 2.0
    p = plan([Account("trace.jsonl", tuple(turns))], rates)
    fixes = {f.kind for s in p.sessions for f in s.fixes}
    assert fixes == {"prompt_cache_key"}
    assert p.total("combined_cost") < p.total("predicted_cost")


def test_a_healthy_session_needs_nothing_and_local_turns_do_not_count() -> None:
    turns = [claude_turn(i + 1, at=10.0 * i) for i in range(3)]
    turns.insert(1, Turn("s", "messages", turns[0].body, None, 5.0, local=True))
    s = one(plan([Account("a", tuple(turns))], rates))
    assert s.fixes == () and s.turns == 3  # the local turn left out
    assert s.predicted_cached > 0.5 * s.prompt_tokens


def test_recorded_usage_and_no_price() -> None:
    usage = Usage(3000, 2000, 100, written_long=0)
    turns = [claude_turn(1, at=0.0, usage=Usage(3000, 0, 2900)),
             claude_turn(2, at=5.0, usage=usage)]
    s = one(plan([Account("a", tuple(turns))], rates))
    assert (s.prompt_tokens, s.recorded_cached) == (6000, 2000)
    assert s.recorded_hit_rate == pytest.approx(2000 / 6000)
    # Recorded: 100 + 2900 * 1.25 + ... priced at $3/M.
    expected = (3000 - 2900 + 2900 * 1.25 + 900 + 2000 * 0.1 + 100 * 1.25) * 3.0 / 1e6
    assert s.recorded_cost == pytest.approx(expected)
    broken = [claude_turn(i + 1, clock=f"{i}\n", at=10.0 * i) for i in range(3)]
    s = one(plan([Account("a", tuple(broken))], no_rates))
    assert s.predicted_cost == 0.0 and s.fixes and all(f.saving == 0.0 for f in s.fixes)
    assert s.fixes[0].tokens > 0  # without prices, cached tokens decide


def test_the_gate_names_the_turn_and_the_span() -> None:
    good = plan([Account("a.json", tuple(claude_turn(i + 1, at=10.0 * i) for i in range(4)))],
                rates)
    bad = plan([Account("a.json", tuple(claude_turn(i + 1, clock=f"Time: 12:0{i}:00\n",
                                                    at=10.0 * i) for i in range(4)))], rates)
    assert failed(check(good, 0.5)) == []
    (v,) = check(bad, 0.5)
    assert not v.ok and v.predicted == 0.0
    assert v.why == "predicted hit rate 0% is below the bar 50%"
    assert v.cause.startswith("turn 2: system: `system[0].text` at offset ")
    assert "(and 2 more)" in v.cause
    (v,) = check(bad, 0.0, baseline=good, max_drop=0.05)
    assert not v.ok and "below the baseline's" in v.why and v.baseline is not None
    (v,) = check(good, 0.0, baseline=good)
    assert v.ok and v.why == "" and v.cause == ""


def rated(cached: int, prompt: int) -> Plan:
    return Plan((SessionPlan("s", "a.json", 3, prompt, None, None, cached, 0.0),))


def test_the_gate_allows_a_drop_of_exactly_max_drop() -> None:
    # 0.40 - 0.05 is a hair above 0.35 in floats: the exact allowance must still pass.
    (v,) = check(rated(7, 20), 0.0, baseline=rated(2, 5), max_drop=0.05)
    assert v.ok, v.why
    (v,) = check(rated(69, 200), 0.0, baseline=rated(2, 5), max_drop=0.05)
    assert not v.ok
    assert v.why == "predicted hit rate 34% is 6% below the baseline's 40% (allowed: 5%)"


def test_the_gate_shows_a_rate_just_under_the_bar_apart_from_it() -> None:
    (v,) = check(rated(6996, 10000), 0.7)
    assert not v.ok and v.why == "predicted hit rate 69.96% is below the bar 70.00%"
    (v,) = check(rated(7, 10), 0.7)
    assert v.ok


def test_the_gate_skips_single_turns_and_names_hazards() -> None:
    single = plan([Account("a", (claude_turn(1),))], rates)
    (v,) = check(single, 0.9)
    assert v.ok and v.skipped
    unmarked = plan([Account("a", tuple(claude_turn(i + 1, marked=False) for i in range(2)))],
                    rates)
    (v,) = check(unmarked, 0.5)
    assert not v.ok and v.cause.startswith("no_cache_marker:")


def test_an_inline_image_weighs_its_tokens_not_its_base64() -> None:
    # A ~2,000-token marked system prompt and a 300 KB photo (~1,600 tokens) in the first
    # message; the provider reads the system prompt from its cache from turn 2 on. Scaled by
    # characters, the photo's 400,000 base64 characters put the system prompt at ~40
    # tokens, under the minimum: 0% predicted.
    photo = base64.b64encode(bytes(range(256)) * 1200).decode()
    system = [{"type": "text", "text": RULES[:8000], "cache_control": EPH}]
    msgs: list[Any] = [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                     "data": photo}},
        {"type": "text", "text": "What is on this ticket?"}]}]
    turns = []
    for i in range(3):
        body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": system,
                "messages": list(msgs)}
        usage = Usage(3600 + 20 * i, 0 if i == 0 else 2000, 2000 if i == 0 else 0)
        turns.append(Turn("s", "messages", body, usage, 10.0 * i))
        msgs += [{"role": "assistant", "content": "A train ticket."},
                 {"role": "user", "content": f"And the seat {i}?"}]
    s = one(plan([Account("a.json", tuple(turns))], rates))
    assert s.recorded_cached == 4000
    assert 3000 < s.predicted_cached < 5500  # two reads of the ~2,000-token system prompt
