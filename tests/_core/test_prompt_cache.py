"""Provider cache rules and one session's verdicts, with explicit times and prices."""

from __future__ import annotations

from typing import Any

import pytest

from dejacache._core.prefix import build_prefix
from dejacache._core.prompt_cache import (
    Rates,
    SessionState,
    SessionTotals,
    Usage,
    lifetime,
    minimum_tokens,
    read_usage,
)

BIG = "Stable instructions. " * 400  # ~8,400 characters: ~2,100 estimated tokens


def rates(provider: str, model: str) -> Rates | None:
    if model.startswith("claude"):
        return Rates(3.0, 0.1, 1.25)
    if model.startswith("gpt"):
        return Rates(2.0, 0.25, 1.0)
    return None


def claude(system: str = BIG, turns: int = 1, ttl: str | None = None) -> Any:
    cc: dict[str, Any] = {"type": "ephemeral"}
    if ttl:
        cc["ttl"] = ttl
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(2 * turns - 1)]
    return build_prefix("messages", {"model": "claude-sonnet-4-6", "messages": msgs,
                                     "system": [{"type": "text", "text": system,
                                                 "cache_control": cc}]})


def gpt(system: str = BIG, turns: int = 1) -> Any:
    msgs = [{"role": "system", "content": system}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
        for i in range(2 * turns - 1)]
    return build_prefix("chat", {"model": "gpt-4.1", "messages": msgs})


def test_minimums_and_lifetimes() -> None:
    assert minimum_tokens("anthropic", "claude-sonnet-4-6") == 1024
    assert minimum_tokens("anthropic", "claude-3-5-haiku-latest") == 2048
    assert minimum_tokens("anthropic", "claude-haiku-4-5") == 4096
    assert minimum_tokens("openai", "gpt-4.1") == 1024
    assert lifetime(claude()) == 300.0
    assert lifetime(claude(ttl="1h")) == 3600.0
    assert lifetime(build_prefix("chat", {"model": "gpt-5", "messages": [],
                                          "prompt_cache_retention": "24h"})) == 86400.0


def test_read_usage_per_provider() -> None:
    assert read_usage({"input_tokens": 10, "cache_read_input_tokens": 2000,
                       "cache_creation_input_tokens": 30}) == Usage(2040, 2000, 30)
    assert read_usage({"prompt_tokens": 2100, "prompt_tokens_details":
                       {"cached_tokens": 1920}}) == Usage(2100, 1920)
    assert read_usage({"prompt_tokens": 11}) == Usage(11, None)
    assert read_usage({"input_tokens": 9, "input_tokens_details":
                       {"cached_tokens": 0}}) == Usage(9, 0)
    # Without the cache counts, Anthropic's input_tokens may be the uncached tail only.
    assert read_usage({"input_tokens": 12}) == Usage(12, None, None, whole=False)
    assert read_usage(None) is None and read_usage({"other": 1}) is None
    # A negative count is no count (a hand-edited trace must not make prompts negative).
    assert read_usage({"prompt_tokens": -5, "prompt_tokens_details":
                       {"cached_tokens": -1}}) == Usage(0, None)


def test_anthropic_frozen_prefix_expects_the_previous_breakpoint() -> None:
    s = SessionState("s")
    rec1, b1, _ = s.turn(claude(turns=1), None, 0.0, rates)
    rec2, b2, _ = s.turn(claude(turns=2), None, 10.0, rates)
    assert b1 == b2 == []
    assert rec1.expected_cached == 0 and rec1.estimated
    assert 2_000 < rec2.expected_cached < 2_300


def test_anthropic_reads_only_where_the_request_has_a_marker_in_reach() -> None:
    # The entry the first turn wrote at the system prompt's end is read only through a
    # breakpoint of the next request at or after it, at most 20 content blocks on.
    def body(msgs: int, marks: bool, tail: bool = False) -> Any:
        system: dict[str, Any] = {"type": "text", "text": BIG}
        if marks:
            system["cache_control"] = {"type": "ephemeral"}
        out: dict[str, Any] = {"model": "claude-sonnet-4-6", "system": [system], "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(msgs)]}
        if tail:
            out["cache_control"] = {"type": "ephemeral"}  # on the last block
        return build_prefix("messages", out)

    for second, reads in ((body(3, marks=True), True),
                          (body(3, marks=False), False),  # markers dropped: nothing read
                          (body(3, marks=False, tail=True), True),  # 3 blocks on
                          (body(25, marks=False, tail=True), False)):  # 25: past the 20
        s = SessionState("s")
        s.turn(body(1, marks=True), None, 0.0, rates)
        rec, _, _ = s.turn(second, None, 10.0, rates)
        assert (rec.expected_cached > 2_000) is reads, second


def test_anthropic_tool_choice_change_keeps_the_system_entry_only() -> None:
    # Anthropic: a changed tool_choice (or thinking) drops the messages' cache entries and
    # keeps the tools' and system's. A forced tool call on turn 1, "auto" on turn 2.
    def body(turns: int, choice: Any) -> Any:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": BIG if i == 0
                 else f"m{i}"} for i in range(2 * turns - 1)]
        return build_prefix("messages", {
            "model": "claude-sonnet-4-6", "tool_choice": choice, "cache_control": {
                "type": "ephemeral"}, "messages": msgs, "system": [
                {"type": "text", "text": BIG, "cache_control": {"type": "ephemeral"}}]})

    s = SessionState("s")
    s.turn(body(1, {"type": "tool", "name": "search"}), None, 0.0, rates)
    rec, (brk,), _ = s.turn(body(2, {"type": "auto"}), None, 10.0, rates)
    assert (brk.reason, brk.segment, brk.path, brk.before, brk.after) == (
        "settings", "settings", "tool_choice.type", "tool", "auto")
    assert 2_000 < rec.expected_cached < 2_300  # the system prompt's entry, not the message's
    assert 2_000 < brk.tokens < 2_300  # the first message's entry, lost
    s = SessionState("s")
    s.turn(body(1, {"type": "auto"}), None, 0.0, rates)
    rec, breaks, _ = s.turn(body(2, {"type": "auto"}), None, 10.0, rates)
    assert breaks == [] and rec.expected_cached > 4_000


def test_a_five_minute_entry_expires_behind_a_one_hour_one() -> None:
    # Anthropic's advice: 1 h on the system prompt, 5 minutes on the conversation. Ten
    # minutes later the system prompt's entry is read and the conversation's is gone.
    def body(turns: int) -> Any:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": BIG if i == 0
                 else f"m{i}"} for i in range(2 * turns - 1)]
        return build_prefix("messages", {
            "model": "claude-sonnet-4-6", "cache_control": {"type": "ephemeral"},
            "messages": msgs, "system": [{"type": "text", "text": BIG, "cache_control": {
                "type": "ephemeral", "ttl": "1h"}}]})

    s = SessionState("s")
    s.turn(body(1), None, 0.0, rates)
    rec, (brk,), _ = s.turn(body(2), None, 600.0, rates)
    assert (brk.reason, brk.before, brk.after) == ("ttl", "600 s idle", "cache lives 300 s")
    assert 2_000 < rec.expected_cached < 2_300  # the system prompt, still cached
    assert 2_000 < brk.tokens < 2_300  # the first message, written again
    assert brk.cost == pytest.approx(brk.tokens * 3.0 / 1e6 * (1.25 - 0.1))
    rec, (brk,), _ = s.turn(body(3), None, 600.0 + 4000.0, rates)  # past the hour too
    assert rec.expected_cached == 0 and brk.after == "cache lives 3,600 s"


def test_gemini_2_0_expects_nothing_cached_and_no_break() -> None:
    def body(model: str, clock: str, turns: int) -> Any:
        contents = [{"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"m{i}"}]}
                    for i in range(2 * turns - 1)]
        return build_prefix("gemini", {"model": model, "contents": contents,
                                       "systemInstruction": {"parts": [{"text": BIG + clock}]}})

    for model, cached in (("gemini-2.5-pro", True), ("gemini-2.0-flash", False)):
        s = SessionState("s")
        s.turn(body(model, "", 1), None, 0.0, rates)
        rec, breaks, hazards = s.turn(body(model, "", 2), None, 10.0, rates)
        assert (rec.expected_cached > 2_000) is cached and breaks == [] and hazards == []


def test_openai_structured_output_schema_prefixes_the_system_message() -> None:
    # OpenAI renders the schema ahead of the system message: a changed schema is a break
    # there, and nothing after it is read (chat, and Responses' text.format).
    def schema(*fields: str) -> dict[str, Any]:
        return {"type": "json_schema", "json_schema": {"name": "trip", "schema": {
            "type": "object", "properties": {f: {"type": "string"} for f in fields}}}}

    def chat(fmt: dict[str, Any], turns: int) -> Any:
        msgs = [{"role": "system", "content": BIG}] + [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
            for i in range(2 * turns - 1)]
        return build_prefix("chat", {"model": "gpt-4.1", "messages": msgs,
                                     "response_format": fmt})

    def responses(fmt: dict[str, Any], turns: int) -> Any:
        return build_prefix("responses", {"model": "gpt-4.1", "instructions": BIG,
                                          "input": [{"role": "user", "content": f"m{i}"}
                                                    for i in range(turns)],
                                          "text": {"format": fmt["json_schema"] | {
                                              "type": "json_schema"}}})

    for build, path in ((chat, "response_format.json_schema.schema.properties.date"),
                        (responses, "text.format.schema.properties.date")):
        s = SessionState("s")
        s.turn(build(schema("city"), 1), None, 0.0, rates)
        rec, (brk,), _ = s.turn(build(schema("city", "date"), 2), None, 10.0, rates)
        assert (brk.reason, brk.path, rec.expected_cached) == ("settings", path, 0)
        rec, breaks, _ = s.turn(build(schema("city", "date"), 3), None, 20.0, rates)
        assert breaks == [] and rec.expected_cached > 2_000


def test_usage_scales_the_estimate() -> None:
    s = SessionState("s")
    p = claude()
    s.turn(p, Usage(p.size // 2, 0, p.size // 2), 0.0, rates)  # 2 characters a token
    rec, _, _ = s.turn(claude(turns=2), Usage(p.size // 2 + 5, p.size // 2, 5), 1.0, rates)
    assert rec.expected_cached == pytest.approx(p.breakpoints()[-1] / 2, abs=2)
    assert rec.reported_cached == p.size // 2 and not rec.estimated


def test_break_tokens_and_cost_anthropic() -> None:
    s = SessionState("s")
    s.turn(claude(BIG + "12:04:31"), None, 0.0, rates)
    rec, (brk,), _ = s.turn(claude(BIG + "12:05:02", turns=2), None, 30.0, rates)
    assert (brk.reason, brk.turn, brk.before, brk.after) == ("system", 2, "12:04:31", "12:05:02")
    assert rec.expected_cached == 0
    assert brk.tokens > 2_000
    assert brk.cost == pytest.approx(brk.tokens * 3.0 / 1e6 * (1.25 - 0.1))
    assert "`system[0].text` at offset 8,400: `12:04:31` → `12:05:02`" in str(brk)


def test_one_hour_marker_prices_the_rewrite_at_2x() -> None:
    s = SessionState("s")
    s.turn(claude("A" + BIG, ttl="1h"), None, 0.0, rates)
    _, (brk,), _ = s.turn(claude("B" + BIG, ttl="1h"), None, 1.0, rates)
    assert brk.cost == pytest.approx(brk.tokens * 3.0 / 1e6 * (2.0 - 0.1))


def test_openai_keeps_the_128_token_steps_before_a_late_change() -> None:
    s = SessionState("s")
    s.turn(gpt(BIG + "12:04:31"), None, 0.0, rates)
    rec, (brk,), _ = s.turn(gpt(BIG + "12:05:02", turns=2), None, 1.0, rates)
    assert rec.expected_cached % 128 == 0 and rec.expected_cached >= 1024
    assert brk.tokens < 128  # only the tail after the last whole step is lost
    assert brk.cost == pytest.approx(brk.tokens * 2.0 / 1e6 * (1.0 - 0.25))


def test_ttl_only_when_the_gap_exceeds_the_lifetime_and_usage_agrees() -> None:
    s = SessionState("s")
    s.turn(claude(), None, 0.0, rates)
    _, (brk,), _ = s.turn(claude(turns=2), None, 400.0, rates)
    assert brk.reason == "ttl" and brk.before == "400 s idle" and brk.path == ""
    # OpenAI keeps entries 5-10 min: a reported hit after 6 minutes is not called a ttl miss.
    o = SessionState("o")
    o.turn(gpt(), Usage(2100, 0), 0.0, rates)
    rec, found, _ = o.turn(gpt(turns=2), Usage(2110, 2048), 360.0, rates)
    assert found == [] and rec.reported_cached == 2048
    rec, (miss,), _ = o.turn(gpt(turns=3), Usage(2120, 0), 1000.0, rates)
    assert miss.reason == "ttl" and rec.expected_cached == 0


def test_below_minimum_is_a_hazard_flagged_once_per_stretch_never_a_break() -> None:
    s = SessionState("s")
    small = [gpt("short", turns=n) for n in (1, 2, 3)]
    verdicts = [s.turn(p, None, float(i), rates) for i, p in enumerate(small)]
    assert [v[1] for v in verdicts] == [[], [], []]
    assert [len(v[2]) for v in verdicts] == [1, 0, 0]
    (hazard,) = verdicts[0][2]
    assert (hazard.kind, hazard.segment, hazard.path) == ("below_minimum", "prefix", "")
    assert "minimum 1,024" in hazard.text
    assert str(hazard).startswith("s: below_minimum in prefix: `")


def test_a_first_turn_never_breaks() -> None:
    # Whatever the first request looks like (short, marked, unmarked, late, priced or not),
    # there is no earlier turn whose cache it could break.
    firsts = [gpt("short"), gpt(), claude("short"), claude(), claude(ttl="1h"),
              build_prefix("messages", {"model": "claude-sonnet-4-6", "system": "x",
                                        "messages": [{"role": "user", "content": "q"}]}),
              build_prefix("chat", {"model": "local-llm", "messages": []})]
    for usage in (None, Usage(51, None, None, whole=False), Usage(2120, 0, 2069)):
        for p in firsts:
            assert SessionState("s").turn(p, usage, 1e9, rates)[1] == []


def test_below_minimum_trusts_the_provider_over_a_partial_count() -> None:
    # Tools + system marked, ~2,069 tokens, then a 51-token question: Anthropic reports
    # input_tokens=51 (the uncached tail) and the 2,069 it wrote to its cache.
    body = {"model": "claude-sonnet-4-6", "tools": [
        {"name": "search", "description": "Search trains. " * 200,
         "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "system": [{"type": "text", "text": "Rules. " * 700,
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Paris to Lyon tomorrow? " * 8}]}
    p = build_prefix("messages", body)
    for usage in (Usage(2120, 0, 2069), Usage(2120, 2069, 0),
                  # the tail alone, without the cache counts: sized from the characters
                  read_usage({"input_tokens": 51})):
        _, breaks, hazards = SessionState("s").turn(p, usage, 0.0, rates)
        assert breaks == [] and [h.kind for h in hazards] == [], usage
    # The tools' own breakpoint is under the minimum, but the system's is not: cacheable.
    only_tools = {**body, "system": "Rules. " * 700}
    _, _, hazards = SessionState("t").turn(build_prefix("messages", only_tools),
                                           Usage(2120, 0, 0), 0.0, rates)
    assert [h.kind for h in hazards] == ["below_minimum"]


def test_local_turns_break_but_count_nothing_for_the_provider() -> None:
    s, totals = SessionState("s"), SessionTotals("s")
    usage = Usage(2100, 2000, 0)  # a stored answer's usage: a past request's cache counts
    for i, sys in enumerate(("A" + BIG, "B" + BIG)):
        rec, found, hazards = s.turn(claude(sys, turns=i + 1), usage, float(i), rates,
                                     local=True)
        totals.add(rec, found, hazards)
        assert rec.local and rec.reported_cached is None and rec.reported_written is None
        assert rec.prompt_tokens == 2100 and not rec.estimated and rec.expected_cached == 0
    (brk,) = found
    assert brk.local and brk.reason == "system" and brk.cost > 0  # what it costs once sent
    assert "answered by dejacache" in str(brk)
    r = totals.report()
    assert (r.turns, r.local_turns, r.breaks) == (2, 2, 1)
    assert (r.prompt_tokens, r.expected_cached, r.reported_cached, r.cost) == (0, 0, None, 0.0)
    assert r.hit_ratio is None and "2 answered by dejacache" in str(r)
    # The provider's cache holds what the provider saw: a live turn after local ones expects
    # nothing from the turns it never saw.
    rec, _, _ = s.turn(claude("B" + BIG, turns=3), None, 2.0, rates)
    assert not rec.local and rec.expected_cached == 0


def test_hazards_are_kept_per_session_once_per_place() -> None:
    totals = SessionTotals("s")
    s = SessionState("s")
    rec, found, hazards = s.turn(claude("Now: 12:04:31. " + BIG), None, 0.0, rates)
    totals.add(rec, found, hazards)
    totals.add(rec, found, hazards)
    (h,) = totals.report().hazards
    assert (h.kind, h.path) == ("time", "system[0].text")
    assert "1 hazard," in str(totals.report())


def test_model_change_loses_everything_and_unknown_models_cost_nothing() -> None:
    s = SessionState("s")
    s.turn(gpt(), None, 0.0, rates)
    other = build_prefix("chat", {"model": "local-llm", "messages": [
        {"role": "system", "content": BIG}]})
    _, (brk,), _ = s.turn(other, None, 1.0, rates)
    assert (brk.reason, brk.before, brk.after) == ("model", "gpt-4.1", "local-llm")
    assert brk.tokens >= 1024 and brk.cost > 0  # priced at the model that had the cache
    t = SessionState("t")
    t.turn(other, None, 0.0, rates)
    _, (free,), _ = t.turn(build_prefix("chat", {"model": "local-llm", "messages": [
        {"role": "system", "content": "x" + BIG}]}), None, 1.0, rates)
    assert free.cost == 0.0


def test_anthropic_without_markers_caches_nothing_so_nothing_breaks() -> None:
    s = SessionState("s")
    body = {"model": "claude-sonnet-4-6", "system": "A" + BIG,
            "messages": [{"role": "user", "content": "q"}]}
    s.turn(build_prefix("messages", body), None, 0.0, rates)
    rec, found, _ = s.turn(build_prefix("messages", {**body, "system": "B" + BIG}), None,
                           1.0, rates)
    assert found == [] and rec.expected_cached == 0


def test_totals() -> None:
    s, totals = SessionState("s"), SessionTotals("s")
    for i, sys in enumerate(("A" + BIG, "B" + BIG)):
        rec, found, hazards = s.turn(claude(sys, turns=i + 1), Usage(2000, 0, 2000),
                                     float(i), rates)
        totals.add(rec, found, hazards)
    r = totals.report()
    assert (r.turns, r.breaks, r.prompt_tokens, r.reported_cached) == (2, 1, 4000, 0)
    assert r.hit_ratio == 0.0 and r.cost > 0
    assert "2 turns, 1 break " in str(r)
    assert SessionTotals("x").report().hit_ratio is None


def test_a_timestamp_is_named_at_one_offset_as_hazard_and_as_break() -> None:
    """The clock in the system prompt is found on the first turn and breaks the cache on the
    second: both name the timestamp where it starts, not the hazard at its start and the
    break at the first digit that changed."""
    s = SessionState("s")
    _, _, hazards = s.turn(claude("Current time: 2026-12-02T04:47:41Z. " + BIG), None, 0.0,
                           rates)
    _, (brk,), _ = s.turn(claude("Current time: 2026-12-02T04:48:02Z. " + BIG, turns=2), None,
                          30.0, rates)
    (h,) = [h for h in hazards if h.kind == "timestamp"]
    assert (h.path, h.offset) == (brk.path, brk.offset) == ("system[0].text", 14)
