"""The cache-control fixes as edits: where each provider gets a breakpoint or a routing key,
within its limits, and what a long lifetime changes; the same edits on bytes and on values."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dejacache._core import cache_fixes
from dejacache._core.cache_fixes import (
    EPHEMERAL,
    apply,
    breakpoint_edits,
    key_edits,
    long_lived,
    routing_key,
)
from dejacache._core.cache_rules import rules_for
from dejacache._core.json_edit import insert

CLAUDE = rules_for("anthropic", "claude-sonnet-4-6")
GPT56 = rules_for("openai", "gpt-5.6")
GPT41 = rules_for("openai", "gpt-4.1")


def claude(system: Any = "rules", marks: int = 0, tail_marked: bool = False,
           **extra: Any) -> dict[str, Any]:
    last: dict[str, Any] = {"type": "text", "text": "and now?"}
    if tail_marked:
        last["cache_control"] = dict(EPHEMERAL)
    tools = [{"name": f"t{i}", "input_schema": {}, **(
        {"cache_control": dict(EPHEMERAL)} if i < marks else {})} for i in range(4)]
    return {"model": "claude-sonnet-4-6", "system": system, "tools": tools,
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "hello"},
                         {"role": "user", "content": [last]}], **extra}


def test_routing_key_is_a_stable_digest_of_the_session() -> None:
    key = routing_key("telegram:42")
    assert key == routing_key("telegram:42") != routing_key("telegram:43")
    assert key.startswith("dejacache-") and "42" not in key[10:] and len(key) == 32
    body = {"model": "gpt-4.1", "messages": []}
    assert key_edits("chat", body, "telegram:42") == [((), "prompt_cache_key", key)]
    assert key_edits("responses", body, "s") != []
    assert key_edits("chat", {**body, "prompt_cache_key": "mine"}, "s") == []  # theirs kept
    assert key_edits("messages", claude(), "s") == []  # Anthropic routes no key


@pytest.mark.parametrize(("body", "expected"), [
    # No marker: the conversation's end (top level) and the end of the system blocks.
    (claude(system=[{"type": "text", "text": "rules"}]),
     [((), "cache_control", EPHEMERAL), (("system", 0), "cache_control", EPHEMERAL)]),
    # A string system prompt cannot carry one; the tools before it are not its end.
    (claude(), [((), "cache_control", EPHEMERAL)]),
    # No system at all: the last tool ends what every conversation shares.
    (claude(system=None), [((), "cache_control", EPHEMERAL),
                           (("tools", 3), "cache_control", EPHEMERAL)]),
    # The newest block already marked: no top-level marker on top of it.
    (claude(tail_marked=True), []),
    (claude(top=1, cache_control=dict(EPHEMERAL)), []),
    # Four markers already: the request is at Anthropic's limit.
    (claude(system=[{"type": "text", "text": "r"}], marks=4), []),
    # Three: room for one, the conversation's end first.
    (claude(system=[{"type": "text", "text": "r"}], marks=3), [((), "cache_control",
                                                                EPHEMERAL)]),
])
def test_anthropic_breakpoints(body: dict[str, Any], expected: list[Any]) -> None:
    body.pop("top", None)
    assert breakpoint_edits("messages", body, CLAUDE) == expected


def gpt(system: Any, model: str = "gpt-5.6", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "system", "content": system},
                                         {"role": "developer", "content": [
                                             {"type": "text", "text": "more rules"}]},
                                         {"role": "user", "content": "hi"}], **extra}


def test_openai_breakpoint_on_the_instructions_from_gpt_5_6() -> None:
    parts = [{"type": "text", "text": "rules"}]
    mark = {"mode": "explicit"}
    assert breakpoint_edits("chat", gpt(parts), GPT56) == [
        (("messages", 1, "content", 0), "prompt_cache_breakpoint", mark)]
    assert breakpoint_edits("chat", gpt(parts), GPT41) == []  # automatic caching: no markers
    assert breakpoint_edits("chat", {"model": "gpt-5.6", "messages": [
        {"role": "system", "content": "a string"}]}, GPT56) == []
    # Three explicit markers and the implicit one: the limit of four.
    three = [{"type": "text", "text": str(i), "prompt_cache_breakpoint": mark}
             for i in range(3)]
    full = gpt(parts)
    full["messages"][2]["content"] = three
    assert breakpoint_edits("chat", full, GPT56) == []
    # Without the implicit breakpoint ("explicit" mode) there is room for a fourth.
    assert breakpoint_edits("chat", {**full, "prompt_cache_options": {"mode": "explicit"}},
                            GPT56) != []
    responses = {"model": "gpt-5.6", "instructions": "x", "input": [
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"role": "user", "content": "hi"}]}
    assert breakpoint_edits("responses", responses, GPT56) == [
        (("input", 0, "content", 0), "prompt_cache_breakpoint", mark)]


def test_edits_on_values_are_the_edits_on_bytes() -> None:
    body = claude(system=[{"type": "text", "text": "rules"}])
    edits = [*breakpoint_edits("messages", body, CLAUDE), ((), "prompt_cache_key", "k")]
    raw = orjson.dumps(body)
    assert orjson.loads(insert(raw, edits)) == apply(body, edits)
    assert "cache_control" not in body  # the original is untouched


def test_long_lifetime() -> None:
    marked = claude(system=[{"type": "text", "text": "r", "cache_control": dict(EPHEMERAL)}])
    out = long_lived("messages", marked, CLAUDE)
    assert out is not None
    assert out["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert out["cache_control"] == {"type": "ephemeral", "ttl": "1h"}  # the added one too
    assert long_lived("messages", out, CLAUDE) is None  # already asks for it
    # No marker at all: the breakpoints fix's, with the long lifetime.
    bare = long_lived("messages", claude(), CLAUDE)
    assert bare is not None and bare["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert long_lived("chat", gpt("x", model="gpt-4.1"), GPT41) == {
        **gpt("x", model="gpt-4.1"), "prompt_cache_retention": "24h"}
    assert long_lived("chat", gpt("x", model="gpt-4.1", prompt_cache_retention="24h"),
                      GPT41) is None
    assert long_lived("chat", gpt("x"), GPT56) is None  # its 30 min are per breakpoint
    assert long_lived("chat", gpt("x", model="gpt-5.5"), rules_for("openai", "gpt-5.5")) is None


def test_every_edit_is_a_cache_field() -> None:
    # The runtime may only add what keys leave out (``cache_fields.FIELDS``).
    from dejacache._core.cache_fields import FIELDS, parse

    body = claude(system=[{"type": "text", "text": "rules"}])
    for provider, edits in (("anthropic", breakpoint_edits("messages", body, CLAUDE)),
                            ("openai", [*cache_fixes.key_edits("chat", gpt("x"), "s"),
                                        *breakpoint_edits("chat", gpt([{"type": "text",
                                                                        "text": "r"}]),
                                                          GPT56)])):
        allowed = {tuple(s for s in steps) for steps in parse(FIELDS[provider])}
        for path, name, _ in edits:
            shape = (*(None if isinstance(s, int) else s for s in path), name)
            assert shape in allowed, (provider, path, name)
