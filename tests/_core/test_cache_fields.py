"""Cache controls out of a body: exactly the documented places, nothing else, the same object
when there is nothing to strip."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.cache_fields import FIELDS, fields_in, may_hold, parse, strip

MARK = {"type": "ephemeral"}
_TEXT = st.text(max_size=6)


@st.composite
def anthropic_bodies(draw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a body with cache_control markers at random documented places, the same without)."""
    def block(kind: str) -> dict[str, Any]:
        b: dict[str, Any] = {"type": kind, "text": draw(_TEXT)}
        if kind == "tool_result":
            b = {"type": kind, "tool_use_id": "t", "content": [
                {"type": "text", "text": draw(_TEXT)} for _ in range(draw(st.integers(0, 2)))]}
        return b

    bare: dict[str, Any] = {
        "model": "claude-x",
        "tools": [{"name": draw(_TEXT), "input_schema": {"type": "object", "properties": {
            "cache_control": {"type": "string"}}}}],  # a parameter: not a marker
        "system": [{"type": "text", "text": draw(_TEXT)} for _ in range(draw(st.integers(0, 2)))],
        "messages": [{"role": "user", "content": [block(draw(st.sampled_from(
            ["text", "tool_result"]))) for _ in range(draw(st.integers(1, 3)))]}
            for _ in range(draw(st.integers(1, 4)))]}
    marked = copy.deepcopy(bare)
    places: list[dict[str, Any]] = [*marked["tools"], *marked["system"]]
    for m in marked["messages"]:
        for b in m["content"]:
            places.append(b)
            places.extend(b.get("content", []) if b["type"] == "tool_result" else [])
    for place in draw(st.lists(st.sampled_from(places), max_size=4)) if places else []:
        place["cache_control"] = dict(MARK)
    if draw(st.booleans()):
        marked["cache_control"] = dict(MARK)
    return marked, bare


@given(anthropic_bodies())
def test_strip_removes_the_markers_and_nothing_else(pair: tuple[dict[str, Any], Any]) -> None:
    marked, bare = pair
    before = copy.deepcopy(marked)
    out = strip(marked, FIELDS["anthropic"])
    assert out == bare
    assert marked == before  # the input is never modified
    assert strip(bare, FIELDS["anthropic"]) is bare
    assert out["tools"][0]["input_schema"]["properties"] == {"cache_control": {"type": "string"}}
    assert list(fields_in(out, FIELDS["anthropic"])) == []


def test_paths_parse_and_the_needles() -> None:
    assert parse(("messages[*].content[*].cache_control",)) == (
        ("messages", None, "content", None, "cache_control"),)
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        parse(("messages[0].cache_control",))
    assert may_hold(b'{"prompt_cache_key":"k"}', FIELDS["openai"])
    assert not may_hold(b'{"messages":[]}', FIELDS["openai"]) and not may_hold(b"{}", ())
