"""Where breakpoints go, and which of a request's own are moved: after a volatile value, past
the provider's limit, or out of the lookback's reach of the conversation's end."""

from __future__ import annotations

from typing import Any

from dejacache._core.cache_breakpoints import EPHEMERAL, Move, place, show
from dejacache._core.cache_fixes import apply
from dejacache._core.cache_rules import rules_for
from dejacache._core.json_edit import DELETE

CLAUDE = rules_for("anthropic", "claude-sonnet-4-6")
GPT56 = rules_for("openai", "gpt-5.6")
MARK = {"type": "ephemeral"}


def text(t: str, marked: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": t, **({"cache_control": dict(MARK)} if marked else {})}


def test_a_marker_after_the_clock_moves_before_it() -> None:
    body = {"model": "claude-sonnet-4-6",
            "system": [text("rules"), text("Now: 2026-05-01 09:00:00", True), text("more")],
            "messages": [{"role": "user", "content": [text("hi")]}]}
    placed = place("messages", body, CLAUDE)
    assert placed.edits == ((("system", 1), "cache_control", DELETE),
                            ((), "cache_control", EPHEMERAL),
                            (("system", 0), "cache_control", EPHEMERAL))
    assert placed.moves == (Move("system[1]", "system[0]",
                                 "after the volatile `2026-05-01 09:00:00`"),)
    fixed = apply(body, placed.edits)
    assert "cache_control" not in fixed["system"][1] and fixed["system"][0]["cache_control"]
    assert place("messages", fixed, CLAUDE).edits == ()  # placed: nothing more to do
    # A date changes once a day: an entry after it is read all day, so it stays; and text
    # that only looks like a clock or an id (office hours, a commit, a step) is stable.
    for stable in ("Today is 2026-05-01", "Open 9:00-17:30", "Built from 3f9c2d1a7b6e5f40aa",
                   "Do step 3 first"):
        kept = {**body, "system": [text("rules"), text(stable, True)]}
        assert place("messages", kept, CLAUDE).moves == (), stable
    # A clock with seconds moves it, as a timestamp, a uuid or a request id do.
    for clock in ("Now 12:04:31", "req_7Hq2kLm9ZZ", "1798000000"):
        moved = {**body, "system": [text("rules"), text(clock, True)]}
        assert [m.target for m in place("messages", moved, CLAUDE).moves] == ["system[0]"]


def test_markers_past_the_limit_and_the_lookback() -> None:
    # Six markers: the first two are ignored (the model takes the latest four).
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": [text(f"m{i}", True)]}
               for i in range(6)] + [{"role": "user", "content": [text("now")]}]
    placed = place("messages", {"model": "m", "messages": history}, CLAUDE)
    gone = [m.source for m in placed.moves]
    assert gone[:2] == ["messages[0].content[0]", "messages[1].content[0]"]
    assert all("limit of 4" in m.why for m in placed.moves[:2])
    # Four markers, all far back: the earliest moves to the conversation's end.
    long = [{"role": "user", "content": [text("a", True)]}] * 4 + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": [text(f"x{i}")]}
        for i in range(30)]
    placed = place("messages", {"model": "m", "messages": long}, CLAUDE)
    assert placed.edits == ((("messages", 0, "content", 0), "cache_control", DELETE),
                            ((), "cache_control", EPHEMERAL))
    assert placed.moves[0].target == "top level" and "20-block lookback" in placed.moves[0].why
    # Near the end they still find the previous turn's entries: left alone.
    near = long[:4] + long[4:8]
    assert place("messages", {"model": "m", "messages": near}, CLAUDE).edits == ()


def test_openai_explicit_breakpoint_after_the_clock() -> None:
    body = {"model": "gpt-5.6", "messages": [
        {"role": "system", "content": [
            text("rules"), {"type": "text", "text": "req_7Hq2kLm9ZZ",
                            "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"role": "user", "content": "hi"}]}
    placed = place("chat", body, GPT56)
    assert placed.edits == (
        (("messages", 0, "content", 1), "prompt_cache_breakpoint", DELETE),
        (("messages", 0, "content", 0), "prompt_cache_breakpoint", {"mode": "explicit"}))
    assert placed.moves[0].target == "messages[0].content[0]"
    assert show(()) == "top level" and show(("tools", 2)) == "tools[2]"


def test_a_moved_marker_keeps_its_lifetime() -> None:
    hour = {"type": "ephemeral", "ttl": "1h"}
    body = {"model": "claude-sonnet-4-6",
            "system": [text("rules"), {"type": "text", "text": "Now 12:04:31",
                                       "cache_control": hour}],
            "messages": [{"role": "user", "content": [text("hi")]}]}
    placed = place("messages", body, CLAUDE)
    assert [(p, v) for p, _, v in placed.edits if v is not DELETE] == [
        ((), hour), (("system", 0), hour)]
    twelve = {"mode": "explicit", "ttl": "12h"}
    chat = {"model": "gpt-5.6", "messages": [
        {"role": "system", "content": [
            text("rules"), {"type": "text", "text": "Now 12:04:31",
                            "prompt_cache_breakpoint": twelve}]},
        {"role": "user", "content": "hi"}]}
    assert place("chat", chat, GPT56).edits[1] == (
        ("messages", 0, "content", 0), "prompt_cache_breakpoint", twelve)


def test_added_markers_keep_anthropics_lifetime_order() -> None:
    # A 1 h entry may not follow a 5-minute one (Anthropic refuses the request): a marker
    # added before a 1 h one is 1 h, one added after a 5-minute one is 5 minutes.
    hour = {"type": "ephemeral", "ttl": "1h"}
    body = {"model": "claude-sonnet-4-6", "system": [text("rules")], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a long document",
                                      "cache_control": hour}]},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]}
    added = [(p, v) for p, _, v in place("messages", body, CLAUDE).edits]
    assert added == [((), EPHEMERAL), (("system", 0), hour)]
    # The moved marker's 1 h, put after a kept 5-minute one, becomes 5 minutes.
    body = {"model": "claude-sonnet-4-6",
            "tools": [{"name": "t", "description": "d", "cache_control": EPHEMERAL}],
            "system": [text("rules"), {"type": "text", "text": "Now 12:04:31",
                                       "cache_control": hour}],
            "messages": [{"role": "user", "content": [text("hi")]}]}
    edits = place("messages", body, CLAUDE).edits
    assert [(p, v) for p, _, v in edits if v is not DELETE] == [
        ((), EPHEMERAL), (("system", 0), EPHEMERAL)]
    fixed = apply(body, edits)
    ttls = [b.get("cache_control", {}).get("ttl", "5m") for b in
            [*fixed["tools"], *fixed["system"]] if "cache_control" in b]
    assert ttls == ["5m", "5m"] and fixed["cache_control"] == EPHEMERAL
