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

__all__ = ["cache_bill", "record"]


def record(path: pathlib.Path, *, chats: int = 3, turns: int = 4, gap: float = 0.0,
           step: float = 2.0, model: str = "gemini-2.5-flash",
           system: Callable[[SimClock], str] = lambda clock: RULES,
           explicit: bool = False, clock: SimClock | None = None) -> None:
    """``chats`` conversations of ``turns`` messages, interleaved, ``step`` seconds apart and
    ``gap`` more between rounds, recorded into the cassette ``path``. ``explicit``: the
    planner's ``cached_content`` fix, as a user applies it: one ``CachedContent`` with what
    every turn of every conversation repeats (the system instruction: a first message is all
    a first turn sends), created before the first request and kept until the last one and 5
    minutes more, named by each request in place of the system instruction. Each request runs
    in ``agent_session(session_id=<its conversation>)``; ``clock``: one a monitor reads too."""
    from dejacache.cassettes import ageing

    ttl = (turns - 1) * (chats * step + gap) + (chats - 1) * step + 300.0
    clock = clock or SimClock()
    stamp, ageing.clock = ageing.clock, clock.wall  # entries stamped on the simulated clock
    provider = CachingProvider(clock=clock).start()
    histories: dict[str, list[Any]] = {f"chat-{i}": [] for i in range(chats)}
    cache = ""
    try:
        with dejacache.cassette(path, mode="record"), genai.Client(
                api_key="gemini-test", http_options=types.HttpOptions(
                    base_url=provider.url)) as client:
            for turn in range(turns):
                for name, history in histories.items():
                    history.append(types.Content(role="user", parts=[
                        types.Part(text=f"[{name}] Paris to Lyon, trip {turn + 1}?")]))
                    if explicit and not cache:
                        cache = client.caches.create(
                            model=model, config=types.CreateCachedContentConfig(
                                system_instruction=system(clock), ttl=f"{ttl:.0f}s")).name or ""
                    config = types.GenerateContentConfig(cached_content=cache) if explicit \
                        else types.GenerateContentConfig(system_instruction=system(clock))
                    with dejacache.agent_session(session_id=name):
                        reply = client.models.generate_content(
                            model=model, contents=history, config=config)
                    history.append(reply.candidates[0].content)  # type: ignore[index]
                    clock.now += step
                clock.now += gap
    finally:
        ageing.clock = stamp
        provider.stop()


def cache_bill(path: pathlib.Path) -> float:
    """What the explicit caches a cassette created cost beyond its requests' usage: each one's
    tokens (as the provider counted them) at the input price, and stored for its ttl at the
    model's storage price per hour."""
    from dejacache._core.cache_rules import rules_for
    from dejacache.cassettes.prices import input_price
    from dejacache.cassettes.view import expanded_entries, load

    total = 0.0
    for entry in expanded_entries(load(path)):
        req, res = entry.get("request") or {}, entry.get("response") or {}
        if not str(req.get("path", "")).endswith("/cachedContents"):
            continue
        model = str(req["body"]["model"]).removeprefix("models/")
        tokens = res["json"]["usageMetadata"]["totalTokenCount"]
        hours = float(str(req["body"]["ttl"]).rstrip("s")) / 3600
        total += tokens / 1e6 * ((input_price(model) or 0.0) + rules_for(
            "gemini", model).storage * hours)
    return total
