"""Soak AgentPool: 10,000 sessions churning through max_size=128 with 1,000 concurrent turns.

Checks, and prints as Markdown:
- resident memory (RSS) after warm-up vs at the end: flat, since evicted agents are freed;
- every agent built is released exactly once (``on_evict``), none while leased;
- event-loop lag p50/p99/max while 1,000 asyncio sessions run turns (target p99 <= 5 ms).

Turns take 0.5-1.5 s of provider time (an LLM call takes seconds; with sub-millisecond turns
the driver alone saturates the loop and the lag measures the harness, not the pool). Each
agent holds 64 KiB (a stand-in for its clients and prompt), so a leak of even a few
hundred agents shows in RSS. The factory is sync (like hermes-agent's ``AIAgent``) and runs in
a worker thread; ``on_evict`` runs in the pool's release thread.

    .venv/bin/python benchmarks/soak_pool.py [--quick] [--sessions N] [--concurrency N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from dejacache import AgentPool
from dejacache.runtime import PoolStats

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class SoakAgent:
    __slots__ = ("closed", "leased", "model", "payload", "reasoning")

    def __init__(self, model: str, reasoning: Any = None) -> None:
        self.model = model
        self.reasoning = reasoning
        self.payload = bytearray(64 * 1024)
        self.leased = False
        self.closed = 0


class Checker:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.built = 0
        self.released = 0
        self.double = 0
        self.while_leased = 0

    def factory(self, **config: Any) -> SoakAgent:
        with self.lock:
            self.built += 1
        return SoakAgent(**config)

    def on_evict(self, agent: SoakAgent) -> None:
        with self.lock:
            agent.closed += 1
            self.released += 1
            if agent.closed > 1:
                self.double += 1
            if agent.leased:
                self.while_leased += 1
        agent.payload = bytearray(0)  # what closing the clients frees


async def lag_probe(stop: asyncio.Event, out: list[float]) -> None:
    interval = 0.001
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(interval)
        out.append(max(0.0, time.perf_counter() - t0 - interval))


class _Rebuilt:
    """The baseline: a fresh agent every turn (built off the loop, closed after the turn),
    what gateways did before caching agents; same driver, no pool."""

    def __init__(self, chk: Checker) -> None:
        self.chk = chk

    @contextlib.asynccontextmanager
    async def lease(self, key: str, **config: Any) -> AsyncIterator[SoakAgent]:
        agent = await asyncio.to_thread(self.chk.factory, **config)
        try:
            yield agent
        finally:
            await asyncio.to_thread(self.chk.on_evict, agent)

    def stats(self) -> PoolStats:
        return PoolStats(0, 0, 0, 0, 0, self.chk.built, 0, {}, self.chk.released, 0, 0)

    async def aclose(self) -> None:
        return None


async def soak(sessions: int, concurrency: int, turns: int, max_size: int,
               latency: float, baseline: bool = False) -> dict[str, Any]:
    chk = Checker()
    pool: Any = (AgentPool(chk.factory, signature=("model",), max_size=max_size,
                           idle_ttl=3600.0, on_evict=chk.on_evict)
                 if not baseline else _Rebuilt(chk))
    rng = random.Random(7)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(sessions):
        queue.put_nowait(i)
    done = 0
    samples: list[tuple[int, float]] = []
    warm_at = max(1, sessions // 5)

    async def worker() -> None:
        nonlocal done
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            for turn in range(turns):
                # a few sessions change model mid-conversation (a rebuild); some turns
                # revisit a recent session (a hit on a warm agent)
                key = f"s{i}" if rng.random() > 0.2 else f"s{max(0, i - rng.randint(1, 64))}"
                model = "m2" if i % 50 == 0 and turn == turns - 1 else "m1"
                async with pool.lease(key, model=model, reasoning={"turn": turn}) as agent:
                    agent.leased = True
                    await asyncio.sleep(latency * (0.5 + rng.random()))  # the provider call
                    agent.leased = False
            done += 1
            if done % 1000 == 0:  # no gc.collect() here: it would pause the loop measured
                samples.append((done, rss_mb()))

    stop = asyncio.Event()
    lags: list[float] = []
    probe = asyncio.create_task(lag_probe(stop, lags))
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    stop.set()
    await probe
    peak_size = pool.stats()
    await pool.aclose()
    gc.collect()
    st = pool.stats()
    warm = [m for n, m in samples if n >= warm_at]
    lags.sort()
    return {
        "sessions": sessions, "concurrency": concurrency, "turns": sessions * turns,
        "elapsed": elapsed, "rss_warm": warm[0] if warm else rss_mb(),
        "rss_end": warm[-1] if warm else rss_mb(), "rss_max": max(warm) if warm else rss_mb(),
        "rss_after_close": rss_mb(), "built": chk.built, "released": chk.released,
        "double": chk.double, "while_leased": chk.while_leased, "stats": st,
        "size_before_close": peak_size.size,
        "lag_p50": statistics.median(lags) * 1e3 if lags else 0.0,
        "lag_p99": lags[int(len(lags) * 0.99)] * 1e3 if lags else 0.0,
        "lag_max": lags[-1] * 1e3 if lags else 0.0, "lag_n": len(lags),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=1_000)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-size", type=int, default=128)
    ap.add_argument("--latency", type=float, default=1.0,
                    help="mean seconds per provider call (uniform 0.5x-1.5x)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sessions, args.concurrency, args.latency = 2_000, 200, 0.2
    base = asyncio.run(soak(args.sessions, args.concurrency, args.turns, args.max_size,
                            args.latency, baseline=True))
    r = asyncio.run(soak(args.sessions, args.concurrency, args.turns, args.max_size,
                         args.latency))
    st = r["stats"]
    ok = r["released"] == r["built"] and r["double"] == 0 and r["while_leased"] == 0
    print(f"## AgentPool soak ({r['sessions']:,} sessions, {r['concurrency']:,} concurrent, "
          f"max_size={args.max_size}, provider call {args.latency:g} s mean)\n")
    print("| measure | AgentPool | rebuilt every turn (no pool) |\n| --- | --- | --- |")

    def lag(x: dict[str, Any]) -> str:
        return (f"{x['lag_p50']:.2f} / {x['lag_p99']:.2f} / {x['lag_max']:.2f} ms "
                f"({x['lag_n']:,} probes)")

    rows = [
        ("turns", f"{r['turns']:,} in {r['elapsed']:.1f} s",
         f"{base['turns']:,} in {base['elapsed']:.1f} s"),
        ("agents built / released", f"{r['built']:,} / {r['released']:,}",
         f"{base['built']:,} / {base['released']:,}"),
        ("released twice / while leased", f"{r['double']} / {r['while_leased']}", ""),
        ("hits / builds / rebuilds", f"{st.hits:,} / {st.builds:,} / {st.rebuilds:,}", ""),
        ("evicted by reason",
         ", ".join(f"{k} {v:,}" for k, v in sorted(st.evicted.items())), ""),
        ("pool size before close", f"{r['size_before_close']}", ""),
        ("RSS after warm-up / end / max",
         f"{r['rss_warm']:.1f} / {r['rss_end']:.1f} / {r['rss_max']:.1f} MiB", ""),
        ("event-loop lag p50 / p99 / max", lag(r), lag(base)),
        ("lag p99 <= 5 ms", "yes" if r["lag_p99"] <= 5.0 else "no",
         "yes" if base["lag_p99"] <= 5.0 else "no"),
        ("release accounting", "ok" if ok else "FAILED", ""),
    ]
    for k, v, b in rows:
        print(f"| {k} | {v} | {b} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
