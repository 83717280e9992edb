"""Multi-turn Gemini conversations through the real google-genai SDK against the caching
loopback provider (``cache_provider.py``), recorded into a cassette stamped on a simulated
clock: for the planner's Gemini tests and ``benchmarks/prompt_cache_plan.py``.

Each conversation resends its whole history with the system instruction (``generateContent``
with ``contents``, as google-genai's chats do); its first message names it, so the sessions a
cassette infers are the conversations.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from google import genai
from google.genai import types

import dejacache
from runtime.cache_provider import CachingProvider
from runtime.tool_agent import RULES, SimClock

__all__ = ["record"]


def record(path: pathlib.Path, *, chats: int = 3, turns: int = 4, gap: float = 0.0,
           step: float = 2.0, model: str = "gemini-2.5-flash",
           system: Callable[[SimClock], str] = lambda clock: RULES) -> None:
    """``chats`` conversations of ``turns`` messages, interleaved, ``step`` seconds apart and
    ``gap`` more between rounds, recorded into the cassette ``path``."""
    from dejacache.cassettes import ageing

    clock = SimClock()
    stamp, ageing.clock = ageing.clock, clock.wall  # entries stamped on the simulated clock
    provider = CachingProvider(clock=clock).start()
    histories: dict[str, list[Any]] = {f"chat-{i}": [] for i in range(chats)}
    try:
        with dejacache.cassette(path, mode="record"), genai.Client(
                api_key="gemini-test", http_options=types.HttpOptions(
                    base_url=provider.url)) as client:
            for turn in range(turns):
                for name, history in histories.items():
                    history.append(types.Content(role="user", parts=[
                        types.Part(text=f"[{name}] Paris to Lyon, trip {turn + 1}?")]))
                    reply = client.models.generate_content(
                        model=model, contents=history,
                        config=types.GenerateContentConfig(system_instruction=system(clock)))
                    history.append(reply.candidates[0].content)  # type: ignore[index]
                    clock.now += step
                clock.now += gap
    finally:
        ageing.clock = stamp
        provider.stop()
