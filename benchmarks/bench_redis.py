"""Redis tier benchmark: a warm hit through dejacache against a raw redis-py GET of the same
value, plus the storage-layout measurement behind RedisStore's packed-blob choice.

    .venv/bin/python benchmarks/bench_redis.py [--budget 0.3] [--rounds 5] [--quick]
                                               [--url redis://...]

Without ``--url`` it starts its own ``redis-server`` on a free loopback port. Contenders run
in interleaved rounds (each round gives every contender ``budget`` seconds) so machine noise
hits all of them alike. Every contender reads the same ~1.2 KB chat-completion response
under 20 keys, cycling. Prints Markdown (median / p99 in microseconds, ratio to the raw GET).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis
import redis.asyncio
from _timing import Cell, fmt_us, machine, md_table, ratio, versions
from workload import make_response

import dejacache
from dejacache.codec import JsonCodec
from dejacache.stores import MemoryStore, Record, TieredStore
from dejacache.stores.redis import RedisStore, pack_record

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_KEYS = 20
TARGET = 1.3  # the bar: a Redis-tier hit within 1.3x of a raw GET + loads

_ns = time.perf_counter_ns


def sample(op: Callable[[int], Any], budget: float, start: int) -> list[int]:
    out: list[int] = []
    deadline = time.perf_counter() + budget
    i = start
    while time.perf_counter() < deadline or len(out) < 50:
        t0 = _ns()
        op(i)
        out.append(_ns() - t0)
        i += 1
    return out


async def asample(op: Callable[[int], Awaitable[Any]], budget: float, start: int) -> list[int]:
    out: list[int] = []
    deadline = time.perf_counter() + budget
    i = start
    while time.perf_counter() < deadline or len(out) < 50:
        t0 = _ns()
        await op(i)
        out.append(_ns() - t0)
        i += 1
    return out


def interleave(ops: dict[str, Callable[[int], Any]], budget: float, rounds: int
               ) -> dict[str, Cell]:
    samples: dict[str, list[int]] = {name: [] for name in ops}
    for op in ops.values():  # warm up every connection and code path
        for i in range(50):
            op(i)
    for _ in range(rounds):
        for name, op in ops.items():
            gc.collect()
            samples[name] += sample(op, budget, len(samples[name]))
    return {name: Cell(s) for name, s in samples.items()}


async def ainterleave(ops: dict[str, Callable[[int], Awaitable[Any]]], budget: float,
                      rounds: int) -> dict[str, Cell]:
    samples: dict[str, list[int]] = {name: [] for name in ops}
    for op in ops.values():
        for i in range(50):
            await op(i)
    for _ in range(rounds):
        for name, op in ops.items():
            gc.collect()
            samples[name] += await asample(op, budget, len(samples[name]))
    return {name: Cell(s) for name, s in samples.items()}


def table(cells: dict[str, Cell], base: str) -> str:
    b = cells[base]
    rows = [(name, fmt_us(c.median), fmt_us(c.p99), ratio(c.median, b.median),
             ratio(c.p99, b.p99)) for name, c in cells.items()]
    return md_table(("operation", "median µs", "p99 µs", "ratio (median)", "ratio (p99)"),
                    rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per contender per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--url", help="an existing Redis (default: start redis-server)")
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    args = ap.parse_args()
    if args.quick:
        args.budget, args.rounds = 0.05, 2

    server = None
    url = args.url
    tmp = tempfile.TemporaryDirectory()
    if url is None:
        if shutil.which("redis-server") is None:
            print("## Redis tier\n\nskipped: redis-server is not installed (`make redis-server`).")
            return 0
        sys.path.insert(0, str(ROOT / "tests"))
        from support_redis import RedisServer, free_port

        server = RedisServer(port=free_port(), workdir=tmp.name)
        server.start()
        url = server.url
    try:
        return run(url, args.budget, args.rounds)
    finally:
        if server is not None:
            server.stop()
        tmp.cleanup()


def run(url: str, budget: float, rounds: int) -> int:
    raw = redis.Redis.from_url(url)
    store = RedisStore(url, key_prefix="bench", timeout=1.0, connect_timeout=1.0)
    codec = JsonCodec()
    responses = [make_response(s) for s in range(N_KEYS)]
    keys = [f"{s:032x}" for s in range(N_KEYS)]
    payloads = [orjson.dumps(r) for r in responses]
    for k, r, p in zip(keys, responses, payloads, strict=True):
        raw.set(f"raw:{k}", p)
        store.put(k, Record(value=codec.encode(r, key=k), name="bench", namespace="default",
                            request=b"{}", duration=1.0))
        # The alternative layout: one hash per entry, value and metadata as fields.
        blob = pack_record(Record(value=codec.encode(r, key=k)))
        raw.hset(f"hash:{k}", mapping={"value": codec.encode(r, key=k), "meta": blob[8:60]})
        raw.set(f"blob:{k}", blob)

    dejacache.configure(store=store, cache_key="bench")

    @dejacache.cache(name="bench.llm")
    def llm(seed: int) -> dict[str, Any]:
        return responses[seed]

    for s in range(N_KEYS):
        llm(s)
    tiered = TieredStore(MemoryStore(), store)

    rk = [f"raw:{k}" for k in keys]
    hk = [f"hash:{k}" for k in keys]
    bk = [f"blob:{k}" for k in keys]

    def store_get(i: int) -> Any:
        k = keys[i % N_KEYS]
        rec = store.get(k)
        assert rec is not None
        return codec.decode(rec.value, key=k)

    def tiered_get(i: int) -> Any:
        k = keys[i % N_KEYS]
        rec = tiered.get(k)
        assert rec is not None
        return codec.decode(rec.value, key=k)

    sync_ops: dict[str, Callable[[int], Any]] = {
        "raw redis-py GET + orjson.loads": lambda i: orjson.loads(raw.get(rk[i % N_KEYS])),
        "RedisStore.get + JsonCodec.decode": store_get,
        "@cache hit, RedisStore (int argument)": lambda i: llm(i % N_KEYS),
        "TieredStore.get + decode (front hit)": tiered_get,
    }
    layout_ops: dict[str, Callable[[int], Any]] = {
        "GET packed blob (chosen)": lambda i: raw.get(bk[i % N_KEYS]),
        "HMGET hash value+meta": lambda i: raw.hmget(hk[i % N_KEYS], ["value", "meta"]),
        "HGETALL hash": lambda i: raw.hgetall(hk[i % N_KEYS]),
    }
    sync = interleave(sync_ops, budget, rounds)
    layout = interleave(layout_ops, budget / 2, rounds)
    acells = asyncio.run(_async_cells(url, keys, rk, codec, budget, rounds))

    print("## Redis tier (warm hits, ~1.2 KB response)\n")
    print(f"Machine: {machine()}; {versions('redis', 'orjson')}; redis-server at {url}.\n")
    print(table(sync, "raw redis-py GET + orjson.loads"))
    print()
    print(table(acells, "raw redis.asyncio GET + orjson.loads"))
    print("\n### Storage layout (raw redis-py, no decoding)\n")
    print(table(layout, "GET packed blob (chosen)"))
    store_ratio = sync["RedisStore.get + JsonCodec.decode"].median / sync[
        "raw redis-py GET + orjson.loads"].median
    cache_ratio = sync["@cache hit, RedisStore (int argument)"].median / sync[
        "raw redis-py GET + orjson.loads"].median
    def verdict(r: float) -> str:
        return "within" if r <= TARGET else "over"

    print(f"\nRedis-tier hit vs raw GET + loads (target {TARGET}x): RedisStore.get + decode "
          f"{store_ratio:.2f}x ({verdict(store_ratio)}); full @cache hit {cache_ratio:.2f}x "
          f"({verdict(cache_ratio)}; includes the decorator's key building, the same cost as "
          "a memory-tier hit).")
    store.close()
    raw.close()
    return 0


async def _async_cells(url: str, keys: list[str], rk: list[str], codec: JsonCodec,
                       budget: float, rounds: int) -> dict[str, Cell]:
    araw = redis.asyncio.Redis.from_url(url)
    store = RedisStore(url, key_prefix="bench", timeout=1.0, connect_timeout=1.0)

    async def raw_get(i: int) -> Any:
        return orjson.loads(await araw.get(rk[i % N_KEYS]))

    async def store_get(i: int) -> Any:
        k = keys[i % N_KEYS]
        rec = await store.aget(k)
        assert rec is not None
        return codec.decode(rec.value, key=k)

    try:
        return await ainterleave({"raw redis.asyncio GET + orjson.loads": raw_get,
                                  "RedisStore.aget + JsonCodec.decode": store_get},
                                 budget, rounds)
    finally:
        await araw.aclose()
        await store.aclose()


if __name__ == "__main__":
    raise SystemExit(main())
