"""A minimal tool-using agent loop, independent of which model answers.

The model is any callable ``model(messages, tools) -> chat.completion`` (an OpenAI-style dict,
or an SDK object with ``model_dump()``), so the scripted local model and a real client are
interchangeable. Tools are plain callables taking keyword arguments.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["AgentRun", "Model", "Step", "run_agent"]

Message = dict[str, Any]
Model = Callable[[list[Message], list[dict[str, Any]]], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One thing the agent did: a model call (``tool_calls`` or an answer) or a tool call."""

    kind: str  # "model" | "tool"
    name: str
    detail: str
    seconds: float


@dataclasses.dataclass(slots=True)
class AgentRun:
    answers: list[str] = dataclasses.field(default_factory=list)
    steps: list[Step] = dataclasses.field(default_factory=list)
    wall: float = 0.0


def _as_dict(response: Any) -> dict[str, Any]:
    dump = getattr(response, "model_dump", None)
    data = dump() if callable(dump) else response
    if not isinstance(data, dict):
        raise TypeError(f"model returned {type(response).__name__}, expected a chat.completion")
    return data


def _brief(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def run_agent(
    model: Model,
    tools: Mapping[str, Callable[..., Any]],
    schemas: list[dict[str, Any]],
    questions: Sequence[str],
    *,
    system: str,
    on_step: Callable[[Step], None] | None = None,
    max_model_calls: int = 8,
) -> AgentRun:
    """Ask each question in one conversation; run tool calls until the model answers."""
    run = AgentRun()
    messages: list[Message] = [{"role": "system", "content": system}]
    t_start = time.perf_counter()

    def emit(step: Step) -> None:
        run.steps.append(step)
        if on_step is not None:
            on_step(step)

    for question in questions:
        messages.append({"role": "user", "content": question})
        for _ in range(max_model_calls):
            t0 = time.perf_counter()
            # Pass a copy: the conversation keeps growing after this call, and a cache must
            # see the request as it was when the call was made.
            reply = _as_dict(model(list(messages), schemas))
            msg = reply["choices"][0]["message"]
            calls = msg.get("tool_calls") or []
            assistant: Message = {"role": "assistant", "content": msg.get("content")}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls:
                answer = msg.get("content") or ""
                emit(Step("model", "answer", answer, time.perf_counter() - t0))
                run.answers.append(answer)
                break
            names = ", ".join(c["function"]["name"] for c in calls)
            emit(Step("model", "tool_calls", f"asks for {names}", time.perf_counter() - t0))
            for call in calls:
                fname = call["function"]["name"]
                args = json.loads(call["function"]["arguments"] or "{}")
                t0 = time.perf_counter()
                result = tools[fname](**args)
                emit(Step("tool", fname, _brief(args), time.perf_counter() - t0))
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": json.dumps(result, sort_keys=True)})
        else:
            run.answers.append("")  # the model never stopped calling tools: record no answer
    run.wall = time.perf_counter() - t_start
    return run
