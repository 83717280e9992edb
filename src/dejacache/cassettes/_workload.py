"""A synthetic agent run, shared by the cassette size tests and ``benchmarks/bench_cassette.py``.

Each step sends a ~20 KB chat request: a 4 KB system prompt, four 1 KB tool schemas and the
last 24 messages (~500 B each), so step n repeats almost everything step n-1 sent, which is
what makes naive cassettes grow out of proportion to the work done.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

__all__ = ["agent_steps", "filler"]

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
          "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
          "sierra", "tango", "uniform", "victor", "whiskey", "xray")


def filler(rng: random.Random, size: int) -> str:
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:size]


def agent_steps(n: int, *, seed: int = 7, window: int = 24,
                message_bytes: int = 500) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(request, response)`` pairs of an n-step tool-using agent."""
    rng = random.Random(seed)
    system = {"role": "system", "content": filler(rng, 4000)}
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "description": filler(rng, 700),
                                          "parameters": {"type": "object", "properties": {
                                              "query": {"type": "string",
                                                        "description": filler(rng, 200)}}}}}
        for i in range(4)
    ]
    history: list[dict[str, Any]] = [{"role": "user", "content": filler(rng, message_bytes)}]
    for step in range(n):
        request = {"model": "gpt-4o-mini", "messages": [system, *history[-window:]],
                   "tools": tools, "temperature": 0}
        reply = {"role": "assistant", "content": f"step {step}: " + filler(rng, message_bytes)}
        response = {
            "id": f"chatcmpl-{step}",
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5000, "completion_tokens": 120, "total_tokens": 5120},
        }
        yield request, response
        history.append(reply)
        history.append({"role": "tool", "content": filler(rng, message_bytes)})
