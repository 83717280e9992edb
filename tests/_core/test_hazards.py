"""Volatile-looking text in a first turn's prefix."""

from __future__ import annotations

from typing import Any

from dejacache._core.hazards import scan
from dejacache._core.prefix import build_prefix


def kinds(body: dict[str, Any], api: str = "messages") -> list[tuple[str, str, str]]:
    return [(h.kind, h.path, h.text) for h in scan(build_prefix(api, body), "s")]


def claude(system: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-6", "system": [
        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Meeting at 12:30, id 7c9e6679"}], **extra}


def test_each_kind_in_the_system_prompt() -> None:
    text = ("Now: 2026-05-01T12:04:31Z. Clock 09:15. Request 3f2b8c1e-0d4a-4b7e-9c1f-"
            "2a6b8d0e4f11, msg_01AbCdEf, trace 5f3a9c0e1b2d4f6a. Turn 14 of the session. "
            "Epoch 1767225600. Today is May 1, 2026; plan for 2026-06-01.")
    found = kinds(claude(text))
    assert [k for k, _, _ in found] == ["timestamp", "time", "uuid", "id", "hex_id", "counter",
                                        "epoch", "date", "date"]
    assert all(path == "system[0].text" for _, path, _ in found)
    assert ("timestamp", "system[0].text", "2026-05-01T12:04:31Z") in found


def test_stable_prompts_and_messages_are_quiet() -> None:
    assert kinds(claude("You are terse. Use metric units. Answer in 3 bullet points.")) == []


def test_tool_descriptions_but_not_schemas() -> None:
    tool = {"name": "search_v2", "description": "Search (index built 2026-05-01 03:00).",
            "input_schema": {"type": "object", "properties": {
                "limit": {"type": "integer", "description": "at most 10"}}}}
    found = kinds(claude("stable", tools=[tool]))
    assert found == [("timestamp", "tools[0].description", "2026-05-01 03:00")]


def test_openai_system_messages_and_responses_instructions() -> None:
    chat = {"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "Session 42 started."},
        {"role": "user", "content": "Session 43?"}]}
    assert kinds(chat, "chat") == [("counter", "messages[0].content[0].text", "Session 42")]
    resp = {"model": "gpt-5", "instructions": "It is 10:30 PM.", "input": "hi"}
    assert kinds(resp, "responses") == [("time", "instructions", "10:30 PM")]


def test_anthropic_without_a_marker_is_a_hazard() -> None:
    body = {"model": "claude-sonnet-4-6", "system": "stable",
            "messages": [{"role": "user", "content": "q"}]}
    (h,) = scan(build_prefix("messages", body), "s")
    assert h.kind == "no_cache_marker"
    assert "caches nothing" in str(h)
