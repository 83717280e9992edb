"""The provider cache model, with explicit times and token counts: writes, reads, lifetimes,
lookback, routing and spill-over, per provider mode."""

from __future__ import annotations

from typing import Any

from dejacache._core.cache_model import ProviderCache, Sent, Served
from dejacache._core.prefix import build_prefix

RULES = "Stable rules for the agent. " * 250  # ~7,000 characters
EPH = {"type": "ephemeral"}


def send(cache: ProviderCache, api: str, body: dict[str, Any], at: float | None = None
         ) -> Served:
    p = build_prefix(api, body)
    return cache.send(Sent(p, p.size // 4, at))  # 4 characters a token, exactly


def claude(turns: int, *, marker: Any = EPH, top: bool = False, system: str = RULES,
           ) -> dict[str, Any]:
    msgs: list[Any] = []
    for i in range(turns):
        msgs += [{"role": "user", "content": f"question {i}"}]
        if i < turns - 1:
            msgs += [{"role": "assistant", "content": f"answer {i}"}]
    if marker is not None and not top:
        msgs[-1] = {"role": "user", "content": [{"type": "text", "text": msgs[-1]["content"],
                                                 "cache_control": marker}]}
    body: dict[str, Any] = {"model": "claude-sonnet-4-6", "system": system, "messages": msgs}
    if top:
        body["cache_control"] = marker
    return body


def test_anthropic_writes_at_markers_and_reads_what_the_next_turn_repeats() -> None:
    cache = ProviderCache()
    first = send(cache, "messages", claude(1), at=0.0)
    assert first.read == 0 and first.written == first.prompt > 1024  # all of it written
    second = send(cache, "messages", claude(2), at=10.0)
    assert second.read == first.written  # the first turn's entry, read
    assert second.written == second.prompt - second.read
    assert second.uncached == 0
    # No marker: nothing is cached.
    bare = ProviderCache()
    for turns in (1, 2):
        assert send(bare, "messages", claude(turns, marker=None), at=0.0) == Served(
            send(ProviderCache(), "messages", claude(turns, marker=None)).prompt)


def test_anthropic_minimum_and_top_level_marker() -> None:
    cache = ProviderCache()
    small = send(cache, "messages", claude(1, system="short"), at=0.0)
    assert (small.read, small.written) == (0, 0)  # under 1,024 tokens: nothing cached
    cache = ProviderCache()
    send(cache, "messages", claude(1, top=True), at=0.0)
    assert send(cache, "messages", claude(2, top=True), at=1.0).read > 1024


def test_anthropic_lifetimes_are_renewed_by_reads() -> None:
    cache = ProviderCache()
    send(cache, "messages", claude(1), at=0.0)
    assert send(cache, "messages", claude(2), at=299.0).read > 0
    assert send(cache, "messages", claude(3), at=598.0).read > 0  # renewed at 299
    assert send(cache, "messages", claude(4), at=899.0).read == 0  # 301 s idle: expired
    hour = {"type": "ephemeral", "ttl": "1h"}
    cache = ProviderCache()
    first = send(cache, "messages", claude(1, marker=hour), at=0.0)
    assert first.written_long == first.written
    assert send(cache, "messages", claude(2, marker=hour), at=3000.0).read > 0
    assert send(cache, "messages", claude(3, marker=hour), at=6601.0).read == 0


def test_anthropic_breakpoint_looks_back_20_blocks() -> None:
    def tools_turn(n: int) -> dict[str, Any]:
        # One user message, then n tool rounds of one block each; marker on the last.
        body = claude(1, marker=None)
        for i in range(n):
            body["messages"] += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}",
                                                   "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                              "content": "ok"}]}]
        last = body["messages"][-1]["content"][-1]
        last["cache_control"] = EPH
        return body

    near = ProviderCache()
    send(near, "messages", claude(1), at=0.0)
    assert send(near, "messages", tools_turn(9), at=1.0).read > 0  # 18 blocks back
    far = ProviderCache()
    send(far, "messages", claude(1), at=0.0)
    assert send(far, "messages", tools_turn(11), at=1.0).read == 0  # 22 blocks back


def gpt(turns: int, *, key: str = "", model: str = "gpt-4.1", head: str = "") -> dict[str, Any]:
    msgs: list[Any] = [{"role": "system", "content": head + RULES}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"question {i}"}]
        if i < turns - 1:
            msgs += [{"role": "assistant", "content": f"answer {i}"}]
    body: dict[str, Any] = {"model": model, "messages": msgs}
    if key:
        body["prompt_cache_key"] = key
    return body


def test_openai_caches_every_prompt_in_128_token_steps() -> None:
    cache = ProviderCache()
    first = send(cache, "chat", gpt(1), at=0.0)
    assert (first.read, first.written) == (0, 0)  # writes are free: not counted
    second = send(cache, "chat", gpt(2), at=1.0)
    assert second.read % 128 == 0 and first.prompt - 128 < second.read <= first.prompt
    assert send(cache, "chat", gpt(2), at=400.0).read == 0  # 5 minutes idle: gone
    long = ProviderCache()
    send(long, "chat", {**gpt(1), "prompt_cache_retention": "24h"}, at=0.0)
    assert send(long, "chat", {**gpt(2), "prompt_cache_retention": "24h"}, at=7200.0).read > 0


def test_openai_routes_spill_past_15_a_minute_and_a_key_keeps_a_conversation() -> None:
    doc = "A long document the user pasted. " * 250  # ~2,000 tokens of this conversation

    def mine(turns: int, key: str = "") -> dict[str, Any]:
        b = gpt(turns, key=key)
        b["messages"][1]["content"] = doc
        return b

    def traffic(cache: ProviderCache, keyed: bool) -> tuple[int, int]:
        send(cache, "chat", mine(1, "me" if keyed else ""), at=0.0)
        for i in range(15):  # others sharing the first 256 tokens: the route's minute fills
            other = gpt(1, key=f"other-{i}" if keyed else "")
            other["messages"][1]["content"] = f"someone else's question {i}"
            send(cache, "chat", other, at=1.0 + i)
        return send(cache, "chat", mine(2, "me" if keyed else ""), at=16.5).read, \
            send(cache, "chat", mine(2, "me" if keyed else ""), at=17.0).read

    spilled, _ = traffic(ProviderCache(), keyed=False)
    kept, _ = traffic(ProviderCache(), keyed=True)
    # Spilled to a second machine: only the instructions another conversation left there.
    assert 1024 < spilled < 1900
    assert kept > spilled + 1900  # its own route: its document too
    # Without a clock nothing spills.
    still = ProviderCache()
    send(still, "chat", mine(1))
    for _ in range(40):
        send(still, "chat", gpt(1))
    assert send(still, "chat", mine(2)).read > 3500


def test_openai_from_gpt_5_6_writes_at_breakpoints_only() -> None:
    def body(turns: int, question: str = "", explicit: bool = False) -> dict[str, Any]:
        b = gpt(turns, model="gpt-5.6")
        b["messages"][0]["content"] = [{"type": "text", "text": RULES, **(
            {"prompt_cache_breakpoint": {"mode": "explicit"}} if explicit else {})}]
        if question:
            b["messages"][-1]["content"] = question
        return b

    cache = ProviderCache()
    first = send(cache, "chat", body(1), at=0.0)
    assert first.written == first.prompt  # the implicit breakpoint: the latest user message
    assert send(cache, "chat", body(2), at=1.0).read == first.prompt
    # Another conversation with the same instructions reads nothing without an explicit
    # breakpoint at their end...
    assert send(cache, "chat", body(1, "another question"), at=2.0).read == 0
    # ...and their prefix with one.
    marked = ProviderCache()
    send(marked, "chat", body(1, explicit=True), at=0.0)
    got = send(marked, "chat", body(1, "another question", explicit=True), at=1.0)
    assert 1024 < got.read < got.prompt
    # "explicit" mode and no marker: no caching at all.
    off = ProviderCache()
    b = {**body(1), "prompt_cache_options": {"mode": "explicit"}}
    assert send(off, "chat", b, at=0.0).written == 0


def test_gemini_before_2_5_caches_nothing_implicitly() -> None:
    # Implicit caching is for Gemini 2.5 and newer: 2.0 reads only an explicit cache.
    def gemini(model: str, turns: int) -> dict[str, Any]:
        contents = [{"role": "user" if i % 2 == 0 else "model", "parts": [{"text": f"m{i}"}]}
                    for i in range(2 * turns - 1)]
        return {"model": model, "systemInstruction": {"parts": [{"text": RULES * 2}]},
                "contents": contents}

    for model, reads in (("gemini-2.5-flash", True), ("gemini-2.0-flash", False)):
        cache = ProviderCache()
        send(cache, "gemini", gemini(model, 1), at=0.0)
        second = send(cache, "gemini", gemini(model, 2), at=10.0)
        assert (second.read > 2048) is reads, model
