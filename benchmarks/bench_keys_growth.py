"""Keying a conversation that resends its history: cost per turn at 10 / 100 / 1000 messages.

Each sample is a new turn: the previous turn of the same conversation (two messages shorter)
was keyed first, untimed, as an agent loop would have; then the new request is keyed, timed,
and right after it the floor, ``xxh3_128(orjson.dumps(request, OPT_SORT_KEYS))`` of the same
request, so both see the same machine load. Messages are shaped like an agent's (user text,
assistant tool calls with ``"content": null``, tool results, assistant replies).

Two workloads (``WORKLOADS``): ``agent``, an agent's turns (user text of 10-30 words, tool
calls, tool results of 1-3 rows, replies of 15-45 words from a 34-word travel vocabulary), and
``filler``, plain chat of ~200-character messages in filler prose whose words include what a
secret scan looks for (a URL, "token", "key", "sk-learn") but no secret.

Rows: ``full`` is ``KeyBuilder.key`` (the key a miss stores under: bind, volatile walk,
orjson, xxh3); ``miss`` is what ``@cache`` pays for the key on a miss (``probe_key`` then
``bind_key``, as the decorator calls them: on bytes never seen before the hit-path form is
the full form); ``decorated miss`` is the whole ``@cache`` miss of a free function in a
``MemoryStore`` (the default store outside a project): key, run, encode, scrub the stored
request, store, count. Goals: a ratio to the floor that does not grow with N, ≤ 2x for
the key and ≤ 4x for the whole miss at N = 1000.

    .venv/bin/python benchmarks/bench_keys_growth.py
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
import xxhash

import dejacache
from dejacache.keys import KeyBuilder, digest, key_seed

__all__ = ["bench_keys_growth"]

_WORDS = ("fare", "seat", "aisle", "window", "layover", "terminal", "gate", "baggage",
          "refund", "voucher", "hotel", "room", "checkin", "breakfast", "shuttle", "museum",
          "ticket", "forecast", "rain", "budget", "direct", "airline", "booking", "confirm",
          "cancel", "change", "morning", "price", "total", "tax", "discount", "lounge",
          "visa", "passport")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def _message(rng: random.Random, i: int) -> dict[str, Any]:
    kind = i % 4
    if kind == 0:
        return {"role": "user", "content": _text(rng, rng.randint(10, 30))}
    call_id = f"call_{rng.getrandbits(96):024x}"
    if kind == 1:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {
                "name": "search_flights", "arguments": json.dumps({"to": rng.choice(_WORDS)})}}]}
    if kind == 2:
        rows = [{"id": rng.randrange(10**6), "detail": _text(rng, 12),
                 "score": round(rng.random(), 3)} for _ in range(rng.randint(1, 3))]
        return {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"rows": rows})}
    return {"role": "assistant", "content": _text(rng, rng.randint(15, 45))}


# The second workload: plain chat of ~200-character messages in filler prose whose words
# include what a secret scan looks for (URLs, "token", "key", "sk-" words) but no secret.
_FILLER = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
           "sed", "do", "eiusmod", "tempor", "token", "key", "session", "see",
           "https://docs.example.com/guide?page=2", "sk-learn", "api", "bearer")


def _filler(rng: random.Random, i: int) -> dict[str, Any]:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 200:
        words.append(rng.choice(_FILLER))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(words)}


WORKLOADS = {
    # an agent's turns: user text, tool calls with "content": null, tool results, replies
    "agent": _message,
    "filler": _filler,
}


def _conversation(seed: int, n: int, workload: str = "agent") -> list[dict[str, Any]]:
    rng = random.Random(f"dejacache-bench-growth/{seed}")
    make = WORKLOADS[workload]
    return [{"role": "system", "content": _text(rng, 40)},
            *(make(rng, i) for i in range(n - 1))]


def _request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "temperature": 0.2, "tools": [
        {"type": "function", "function": {"name": "search_flights", "parameters": {
            "type": "object", "properties": {"to": {"type": "string"}}}}}],
        "messages": messages}


def _floor(request: dict[str, Any]) -> bytes:
    return xxhash.xxh3_128_digest(orjson.dumps(request, option=orjson.OPT_SORT_KEYS))


def _chat(**request: Any) -> Any:  # the usual LLM wrapper shape: chat(**request)
    return request


def _miss_key(kb: KeyBuilder, request: dict[str, Any]) -> str:
    """The keys ``@cache`` builds on a miss: the hit-path form (``probe_key``, whose bytes
    ``bind_key`` reuses), then the full form unless the first one already was it."""
    seed = key_seed("bench", kb.name)
    found = kb.probe_key((), request, seed)
    if type(found) is str:
        return found
    bound, key, _body, _tail, full = kb.bind_key((), request, seed, (), found)
    return key if full else digest("bench", kb.name, kb.canonical_bound(bound))


_RESPONSE = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                 "role": "assistant", "content": "Booked: aisle seat, direct."}}],
             "usage": {"prompt_tokens": 12000, "completion_tokens": 9, "total_tokens": 12009}}


def _decorated(rep: int) -> Callable[..., Any]:
    """A fresh ``@cache`` function (its own name: no entry of an earlier round can hit)."""
    def chat(**request: Any) -> Any:
        return _RESPONSE

    chat.__qualname__ = f"chat_{rep}"
    return dejacache.cache(chat)


PATHS = ("full", "miss", "decorated miss")


def _contender(path: str, kb: KeyBuilder, rep: int) -> Callable[[dict[str, Any]], Any]:
    if path == "full":
        return lambda request: kb.key("bench", (), request)
    if path == "miss":
        return lambda request: _miss_key(kb, request)
    fn = _decorated(rep)
    return lambda request: fn(**request)


def bench_keys_growth(sizes: tuple[int, ...] = (10, 100, 1000), conversations: int = 40,
                      repeats: int = 3, workloads: tuple[str, ...] = tuple(WORKLOADS),
                      ) -> list[dict[str, Any]]:
    """One row per (workload, N, path): our µs, floor µs, ratio (medians of all samples)."""
    return [row for wl in workloads for row in _bench_workload(wl, sizes, conversations,
                                                               repeats)]


def _bench_workload(workload: str, sizes: tuple[int, ...], conversations: int,
                    repeats: int) -> list[dict[str, Any]]:
    dejacache.configure(store=dejacache.MemoryStore())
    rows: list[dict[str, Any]] = []
    for n in sizes:
        convs = [_conversation(seed, n + 2, workload) for seed in range(conversations)]
        samples: dict[str, list[int]] = {p: [] for p in (*PATHS, "floor")}
        for rep in range(repeats):
            for path in PATHS:
                # A fresh builder (and function) per round: every round starts with no key
                # remembered beyond what its own previous turns left.
                kb = KeyBuilder(_chat, f"bench.growth.{rep}.{path}")
                run = _contender(path, kb, rep)
                gc.collect()  # once per round: a collection right before a sample would
                # leave its caches cold and charge that to whichever runs first
                for i, msgs in enumerate(convs):
                    prev, new = _request(msgs[:n]), _request(msgs[: n + 2])
                    run(prev)
                    floor_first = i % 2 == 1  # alternate, so neither always runs warmer
                    if floor_first:
                        t0 = time.perf_counter_ns()
                        _floor(new)
                        t1 = time.perf_counter_ns()
                    t2 = time.perf_counter_ns()
                    run(new)
                    t3 = time.perf_counter_ns()
                    if not floor_first:
                        t0 = time.perf_counter_ns()
                        _floor(new)
                        t1 = time.perf_counter_ns()
                    samples[path].append(t3 - t2)
                    samples["floor"].append(t1 - t0)
        floor = statistics.median(samples["floor"]) / 1000
        for path in PATHS:
            ours = statistics.median(samples[path]) / 1000
            rows.append({"workload": workload, "N": n, "path": path,
                         "ours_us": round(ours, 2),
                         "floor_us": round(floor, 2), "ratio": round(ours / floor, 2)})
    dejacache.configure(store=None)
    return rows


if __name__ == "__main__":
    print("| workload | N messages | key | ours (µs) | floor: orjson+xxh3 (µs) | ratio |")
    print("|---|---|---|---|---|---|")
    for r in bench_keys_growth():
        print(f"| {r['workload']} | {r['N']} | {r['path']} | {r['ours_us']} | {r['floor_us']} "
              f"| {r['ratio']}x |")
