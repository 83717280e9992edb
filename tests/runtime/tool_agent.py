"""A long, multi-turn, tool-using agent on the real openai and anthropic SDKs, for the
prompt-cache planner's tests and benchmark (``benchmarks/prompt_cache_plan.py``).

A gateway serves several conversations at once: each round, every conversation gets one user
message, answered after one tool call (two requests), on a simulated clock that the caching
loopback provider reads too (``tests/runtime/cache_provider.py``), so hours of traffic play in
seconds and lifetimes and per-minute routing behave as they would. Each conversation runs in
``agent_session(session_id=...)``; its first message names it, so sessions inferred from a
cassette are the conversations.

:class:`Shape` is what the agent does that a plan may change:

- ``clock``: where the current time goes: ``"system"`` (the first line of the system prompt,
  rebuilt every request: the usual mistake), ``"built"`` (the same line, written once when the
  conversation's agent is built: a pooled agent) or ``"user"`` (in the user message: the fix);
- ``parts``: OpenAI system content as text parts (a breakpoint can only sit on a part);
- ``markers``: Anthropic ``cache_control``: ``"top"`` (top-level, automatic caching),
  ``"all"`` (the system block too) or ``"bad"`` (placed where they buy nothing: the clock in a
  second system block that carries the marker, and one on each turn's question, so the tool
  call's follow-up has none at its end); ``hour``: with the 1 h lifetime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai

import dejacache
from runtime.cache_provider import CachingProvider

__all__ = ["RULES", "TOOLS", "Shape", "SimClock", "replies", "run_anthropic", "run_openai"]

RULES = (
    "You are the travel desk of a rail operator. Use the tools for every fact: timetables, "
    "fares and seat maps change daily. Quote prices in euros with two decimals, give the "
    "train number, and say which tool answered. Keep answers under six sentences. "
) * 40  # ~1,600 tokens
TOOLS: list[dict[str, Any]] = [
    {"name": "timetable", "description": "Departures between two stations on a date, with "
     "train numbers, times, changes and the operator of each leg. " * 3,
     "parameters": {"type": "object", "properties": {
         "origin": {"type": "string"}, "destination": {"type": "string"},
         "date": {"type": "string"}}, "required": ["origin", "destination"]}},
    {"name": "fares", "description": "Fares for a train number and travel class, with the "
     "conditions of each fare (refunds, exchanges, seat reservation). " * 3,
     "parameters": {"type": "object", "properties": {
         "train": {"type": "string"}, "travel_class": {"type": "string"}},
         "required": ["train"]}},
]
BASE_WALL = 1_798_000_000.0  # the wall clock the cassettes are stamped with, at time 0


class SimClock:
    """Seconds since the start of the run; ``wall()`` the matching Unix time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return BASE_WALL + self.now

    def stamp(self) -> str:
        s = int(self.now) + 9 * 3600
        return f"2026-05-01 {s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


@dataclasses.dataclass(frozen=True)
class Shape:
    clock: str = "system"  # "system" | "built" | "user"
    parts: bool = False
    markers: str = ""  # "" | "top" | "all"
    hour: bool = False


def replies(api: str, body: dict[str, Any], n: int) -> Any:
    """The loopback's script: a user message gets a tool call, a tool result the answer."""
    if api == "chat":
        last = body["messages"][-1]
        if last.get("role") == "user":
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{n:05d}", "type": "function", "function": {
                    "name": "timetable",
                    "arguments": '{"origin": "Paris", "destination": "Lyon"}'}}]}
        return {"role": "assistant", "content": f"Train {n} leaves at 09:{n % 60:02d} "
                "(timetable)."}
    last = body["messages"][-1]
    content = last.get("content")
    if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
        return [{"type": "text", "text": f"Train {n} leaves at 09:{n % 60:02d} (timetable)."}], \
            "end_turn"
    return [{"type": "tool_use", "id": f"toolu_{n:05d}", "name": "timetable",
             "input": {"origin": "Paris", "destination": "Lyon"}}], "tool_use"


@dataclasses.dataclass
class _Chat:
    history: list[Any] = dataclasses.field(default_factory=list)
    built: list[str] = dataclasses.field(default_factory=list)  # the prompt built once


def _question(name: str, turn: int, clock: SimClock, shape: Shape) -> str:
    text = f"[{name}] Trains from Paris to Lyon, trip {turn + 1}?"
    return f"Current time: {clock.stamp()}\n{text}" if shape.clock == "user" else text


def _system(clock: SimClock, shape: Shape, built: list[str]) -> str:
    """The system prompt: rebuilt with the clock, built once per conversation (``built``
    holds it), or without the clock."""
    if shape.clock == "user":
        return RULES
    if shape.clock == "built" and built:
        return built[0]
    text = f"Current time: {clock.stamp()}\n{RULES}"
    built[:] = [text]
    return text


def _openai_turn(client: openai.OpenAI, model: str, chat: _Chat, question: str,
                 clock: SimClock, shape: Shape, step: float) -> None:
    history = chat.history
    history.append({"role": "user", "content": question})
    tools = [{"type": "function", "function": t} for t in TOOLS]
    for _ in range(2):
        text = _system(clock, shape, chat.built)
        system: Any = [{"type": "text", "text": text}] if shape.parts else text
        msg = client.chat.completions.create(
            model=model, tools=tools,  # type: ignore[arg-type]
            messages=[{"role": "system", "content": system}, *history]).choices[0].message
        clock.now += step
        if not msg.tool_calls:
            history.append({"role": "assistant", "content": msg.content})
            return
        call = msg.tool_calls[0]
        history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": call.function.name, "arguments": call.function.arguments}}]})
        history.append({"role": "tool", "tool_call_id": call.id,
                        "content": "IC 5021 09:04, TGV 6603 09:56, TER 17105 10:12"})


def _anthropic_turn(client: anthropic.Anthropic, model: str, chat: _Chat,
                    question: str, clock: SimClock, shape: Shape, step: float) -> None:
    history = chat.history
    history.append({"role": "user", "content": question})
    tools = [{"name": t["name"], "description": t["description"],
              "input_schema": t["parameters"]} for t in TOOLS]
    mark: dict[str, Any] = {"type": "ephemeral", **({"ttl": "1h"} if shape.hour else {})}
    asked = len(history) - 1
    for _ in range(2):
        text = _system(clock, shape, chat.built)
        kwargs: dict[str, Any] = dict(model=model, max_tokens=256, tools=tools,
                                      messages=history, system=text)
        if shape.markers in ("top", "all"):
            kwargs["cache_control"] = mark
        if shape.markers == "all":
            kwargs["system"] = [{"type": "text", "text": text, "cache_control": mark}]
        if shape.markers == "bad":
            line, _, rules = text.rpartition("\n")  # the clock moved out: one block, marked
            kwargs["system"] = [*([{"type": "text", "text": rules}] if line else []),
                                {"type": "text", "text": line or rules, "cache_control": mark}]
            messages = list(history)
            messages[asked] = {"role": "user", "content": [
                {"type": "text", "text": history[asked]["content"], "cache_control": mark}]}
            kwargs["messages"] = messages
        reply = client.messages.create(**kwargs)
        clock.now += step
        blocks = [b.model_dump(exclude_none=True) for b in reply.content]
        history.append({"role": "assistant", "content": blocks})
        use = next((b for b in blocks if b["type"] == "tool_use"), None)
        if use is None:
            return
        history.append({"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": use["id"],
            "content": "IC 5021 09:04, TGV 6603 09:56, TER 17105 10:12"}]})


def _rounds(sessions: int, turns: int, clock: SimClock, gap: float
            ) -> Iterator[tuple[int, str, _Chat]]:
    chats = {f"chat-{i:02d}": _Chat() for i in range(sessions)}
    for turn in range(turns):
        for name, chat in chats.items():
            yield turn, name, chat
        clock.now += gap


def run_openai(provider: CachingProvider, clock: SimClock, *, model: str = "gpt-4.1",
               shape: Shape = Shape(), sessions: int = 12, turns: int = 6, gap: float = 0.0,
               step: float = 2.0, wrap: Callable[[str], Any] | None = None) -> None:
    """``sessions`` conversations of ``turns`` user messages, interleaved; ``step`` seconds
    between requests, ``gap`` more between rounds; ``wrap(session)``: a context manager each
    turn runs in (an ``AgentPool`` lease), default ``agent_session``."""
    with openai.OpenAI(base_url=provider.url + "/v1", api_key="sk-test", max_retries=0,
                       http_client=dejacache.http_client()) as client:
        for turn, name, chat in _rounds(sessions, turns, clock, gap):
            with (wrap or _session)(name):
                _openai_turn(client, model, chat, _question(name, turn, clock, shape),
                             clock, shape, step)


def run_anthropic(provider: CachingProvider, clock: SimClock, *,
                  model: str = "claude-sonnet-4-6", shape: Shape = Shape(), sessions: int = 6,
                  turns: int = 6, gap: float = 0.0, step: float = 2.0,
                  wrap: Callable[[str], Any] | None = None) -> None:
    """As :func:`run_openai`, on the Messages API."""
    with anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0,
                             http_client=dejacache.http_client()) as client:
        for turn, name, chat in _rounds(sessions, turns, clock, gap):
            with (wrap or _session)(name):
                _anthropic_turn(client, model, chat, _question(name, turn, clock, shape),
                                clock, shape, step)


def _session(name: str) -> Any:
    return dejacache.agent_session(session_id=name)
