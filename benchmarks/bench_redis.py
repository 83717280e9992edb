"""Redis tier benchmark: a warm hit through dejacache against a raw redis-py GET of the same
value, on one server and on a Redis Cluster; the storage-layout measurement behind
RedisStore's packed-blob choice; and ``@cache`` hits per second from 1, 2 and 4 client
processes on one server and on the cluster.

    .venv/bin/python benchmarks/bench_redis.py [--budget 0.3] [--rounds 5] [--quick]
                                               [--url redis://...] [--cluster host:port,...]

Without ``--url`` it starts its own ``redis-server`` on a free loopback port, and without
``--cluster`` its own cluster (3 masters + 3 replicas, the test suite's fixture; skipped
with the reason when ``redis-cli`` is missing). Contenders run in interleaved round-robin
batches so machine noise hits all of them alike. Every contender reads the same ~1.2 KB
chat-completion responses under 20 keys, cycling; the full ``@cache`` row is called with a
~2 KB chat request as its argument, as an agent calls it. The cluster rows are divided by a
raw ``RedisCluster`` GET + loads, whose client does the same slot routing. Throughput cells
run their processes at once for ``--budget`` x ``--rounds`` seconds, one server and the
cluster alternating. Prints Markdown (median / p99 in microseconds, ratio to the raw GET);
``--json`` writes the cells.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis
import redis.asyncio
import redis.cluster
from _timing import Cell, fmt_us, interleave, machine, md_table, ratio, versions, write_json
from workload import make_request, make_response

import dejacache
from dejacache.codec import JsonCodec
from dejacache.runtime.session import SESSION
from dejacache.stores import MemoryStore, Record, TieredStore
from dejacache.stores.redis import RedisStore, pack_record

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_KEYS = 20
TARGET = 1.3  # the goal: a full @cache hit through Redis within 1.3x of a raw GET + loads
RAW = "raw redis-py GET + orjson.loads"
CACHE_2KB = "@cache hit, RedisStore, 2 KB request argument"
CLUSTER_RAW = "raw RedisCluster GET + orjson.loads"
CLUSTER_CACHE_2KB = "@cache hit, RedisStore on the cluster, 2 KB request argument"
TOOL = "tool_cache hit, RedisStore (tenant, key=)"
CLUSTER_TOOL = "tool_cache hit, RedisStore on the cluster (tenant, key=)"
ATOOL = "tool_cache hit, RedisStore, asyncio (tenant, key=)"
TOOL_TARGET = 1.5  # the goal: a tool_cache hit (counters read + entry) within 1.5x
PROCESSES = (1, 2, 4)

_ns = time.perf_counter_ns


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
    ap.add_argument("--cluster", help="an existing Redis Cluster's host:port[,host:port] "
                    "(default: start one)")
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--json", default=None, help="write machine-readable results here")
    args = ap.parse_args()
    if args.quick:
        args.budget, args.rounds = 0.05, 2

    server = None
    url = args.url
    tmp = tempfile.TemporaryDirectory()
    if url is None:
        if shutil.which("redis-server") is None:
            why = "redis-server is not installed (`make redis-server`)"
            print(f"## Redis tier\n\nskipped: {why}.")
            write_json(args.json, "redis", {"available": False, "why": why}, quick=args.quick)
            return 0
        sys.path.insert(0, str(ROOT / "tests"))
        from support_redis import RedisServer, free_port

        server = RedisServer(port=free_port(), workdir=tmp.name)
        server.start()
        url = server.url
    cluster, cluster_url, why_not = None, None, None
    if args.cluster:
        cluster_url = f"redis+cluster://{args.cluster}"
    elif shutil.which("redis-cli") is None:
        why_not = "redis-cli is not installed (it creates the cluster)"
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        from support_redis_topologies import ClusterTopology

        cluster = ClusterTopology(root=pathlib.Path(tmp.name) / "cluster")
    try:
        if cluster is not None:
            cluster.start()
            cluster_url = "redis+cluster://" + ",".join(
                f"{h}:{p}" for h, p in cluster.startup_nodes[:3])
        return run(url, cluster_url, why_not, args.budget, args.rounds, args.json, args.quick)
    finally:
        if cluster is not None:
            cluster.stop()
        if server is not None:
            server.stop()
        tmp.cleanup()


def _chat(store: RedisStore) -> Callable[[int], Any]:
    """A ``@cache``d chat call over ``store``, warmed: ``op(i)`` hits the i-th request."""
    responses = [make_response(s) for s in range(N_KEYS)]
    # What an agent passes: a ~2 KB chat request, keyed on every hit.
    requests = [make_request("2KB", s) for s in range(N_KEYS)]
    answer = {id(r): responses[s] for s, r in enumerate(requests)}
    dejacache.configure(store=store, cache_key="bench")

    @dejacache.cache(name="bench.chat")
    def chat(request: dict[str, Any]) -> dict[str, Any]:
        return answer[id(request)]

    for r in requests:
        chat(r)
    return lambda i: chat(requests[i % N_KEYS])


def _tool(store: RedisStore, tag: str) -> tuple[Callable[[int], Any], Callable[[], Any]]:
    """A ``tool_cache``d read tool over ``store``, warmed in a tenant session: ``op(i)`` hits
    the i-th entity (its counters read on every call, as the default ``counter_max_age=0``
    does), ``enter()`` makes the session current (untimed, ahead of each batch)."""
    responses = [make_response(s) for s in range(N_KEYS)]

    @dejacache.tool_cache(resource=f"bench-{tag}", key="item:{seed}", store=store)
    def lookup(seed: int) -> dict[str, Any]:
        return responses[seed]

    sess = dejacache.agent_session(tenant="acme", session_id=f"bench-{tag}")
    with sess:
        for s in range(N_KEYS):
            lookup(s)
    return (lambda i: lookup(i % N_KEYS)), (lambda: SESSION.set(sess))


def run(url: str, cluster_url: str | None, why_not: str | None, budget: float, rounds: int,
        json_path: str | None = None, quick: bool = False) -> int:
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
    chat = _chat(store)
    tiered = TieredStore(MemoryStore(), store)
    tool, enter = _tool(store, "server")
    outside = lambda: SESSION.set(None)  # noqa: E731

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
        CACHE_2KB: chat,
        "@cache hit, RedisStore (int argument)": lambda i: llm(i % N_KEYS),
        TOOL: tool,
        "TieredStore.get + decode (front hit)": tiered_get,
    }
    layout_ops: dict[str, Callable[[int], Any]] = {
        "GET packed blob (chosen)": lambda i: raw.get(bk[i % N_KEYS]),
        "HMGET hash value+meta": lambda i: raw.hmget(hk[i % N_KEYS], ["value", "meta"]),
        "HGETALL hash": lambda i: raw.hgetall(hk[i % N_KEYS]),
    }
    sync = interleave(sync_ops, budget=budget * rounds, batch=20, warmup=50,
                      before={k: enter if k == TOOL else outside for k in sync_ops})
    layout = interleave(layout_ops, budget=budget * rounds / 2, batch=20, warmup=50)
    acells = asyncio.run(_async_cells(url, keys, rk, codec, budget, rounds))
    ccells = (_cluster_cells(cluster_url, budget, rounds) if cluster_url is not None
              else None)
    flows = (_throughput(url, cluster_url, budget, rounds) if cluster_url is not None
             else None)

    print("## Redis tier (warm hits, ~1.2 KB response)\n")
    print(f"Machine: {machine()}; {versions('redis', 'orjson')}; redis-server at {url}.\n")
    print(table(sync, "raw redis-py GET + orjson.loads"))
    print()
    print(table(acells, "raw redis.asyncio GET + orjson.loads"))
    if ccells is not None and flows is not None:
        print(f"\n### Redis Cluster (3 masters + 3 replicas, {cluster_url})\n")
        print(table(ccells, CLUSTER_RAW))
        print("\n### @cache hits per second, client processes at once\n")
        print(md_table(("processes", "one server (hits/s)", "cluster (hits/s)"),
                       [(n, f"{flows['server'][str(n)]:,.0f}", f"{flows['cluster'][str(n)]:,.0f}")
                        for n in PROCESSES]))
    else:
        print(f"\n### Redis Cluster\n\nskipped: {why_not}.")
    print("\n### Storage layout (raw redis-py, no decoding)\n")
    print(table(layout, "GET packed blob (chosen)"))
    store_ratio = sync["RedisStore.get + JsonCodec.decode"].median / sync[
        "raw redis-py GET + orjson.loads"].median
    cache_ratio = sync[CACHE_2KB].median / sync[RAW].median
    tool_ratio = sync[TOOL].median / sync[RAW].median
    def verdict(r: float) -> str:
        return "within" if r <= TARGET else "over"

    print(f"\nRedis-tier hit vs raw GET + loads (target {TARGET}x): RedisStore.get + decode "
          f"{store_ratio:.2f}x ({verdict(store_ratio)}); full @cache hit with a 2 KB request "
          f"argument {cache_ratio:.2f}x ({verdict(cache_ratio)}; includes the decorator's key "
          f"building); tool_cache hit {tool_ratio:.2f}x (target {TOOL_TARGET}x: "
          f"{'within' if tool_ratio <= TOOL_TARGET else 'over'}; its counters read on every "
          "call).")
    write_json(json_path, "redis", {
        "versions": versions("redis", "orjson"), "rounds": rounds, "budget_s": budget,
        "rows": {"raw": RAW, "cache_2kb": CACHE_2KB, "tool": TOOL},
        "sync": {k: c.as_dict() for k, c in sync.items()},
        "async": {k: c.as_dict() for k, c in acells.items()},
        "layout": {k: c.as_dict() for k, c in layout.items()},
        "cluster": (None if ccells is None else {
            "rows": {"raw": CLUSTER_RAW, "cache_2kb": CLUSTER_CACHE_2KB,
                     "tool": CLUSTER_TOOL},
            "cells": {k: c.as_dict() for k, c in ccells.items()}}),
        "cluster_why_not": why_not,
        "throughput": flows,
    }, quick=quick)
    store.close()
    raw.close()
    return 0


def _cluster_cells(cluster_url: str, budget: float, rounds: int) -> dict[str, Cell]:
    """The hit rows on the cluster, each divided by a raw RedisCluster GET + loads."""
    store = RedisStore(cluster_url, key_prefix="bench", timeout=1.0, connect_timeout=1.0)
    nodes = [redis.cluster.ClusterNode(h, int(p)) for h, p in
             (hp.rsplit(":", 1) for hp in cluster_url.removeprefix("redis+cluster://")
              .split(","))]
    raw = redis.cluster.RedisCluster(startup_nodes=nodes)
    codec = JsonCodec()
    responses = [make_response(s) for s in range(N_KEYS)]
    keys = [f"{s:032x}" for s in range(N_KEYS)]
    rk = [f"raw:{k}" for k in keys]
    for k, r, raw_key in zip(keys, responses, rk, strict=True):
        raw.set(raw_key, orjson.dumps(r))
        store.put(k, Record(value=codec.encode(r, key=k), name="bench", namespace="default",
                            request=b"{}", duration=1.0))

    def store_get(i: int) -> Any:
        k = keys[i % N_KEYS]
        rec = store.get(k)
        assert rec is not None
        return codec.decode(rec.value, key=k)

    tool, enter = _tool(store, "cluster")
    outside = lambda: SESSION.set(None)  # noqa: E731
    ops = {
        CLUSTER_RAW: lambda i: orjson.loads(raw.get(rk[i % N_KEYS])),
        "RedisStore.get + JsonCodec.decode, cluster": store_get,
        CLUSTER_CACHE_2KB: _chat(store),
        CLUSTER_TOOL: tool,
    }
    try:
        return interleave(ops, budget=budget * rounds, batch=20, warmup=50,
                          before={k: enter if k == CLUSTER_TOOL else outside for k in ops})
    finally:
        store.close()
        raw.close()


def _hits_worker(url: str, ready: Any, start: Any, stop_at: Any, out: Any) -> None:
    """One client process: warm its hits, wait for the start, count hits until the end."""
    store = RedisStore(url, key_prefix="flow", timeout=1.0, connect_timeout=1.0)
    op = _chat(store)
    for i in range(200):
        op(i)
    ready.put(True)
    start.wait()
    deadline = stop_at.value
    n = 0
    while time.time() < deadline:
        for j in range(20):
            op(n + j)
        n += 20
    out.put(n)
    store.close()


def _hits_per_second(url: str, processes: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as separate clients are
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    stop_at = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_hits_worker, args=(url, ready, start, stop_at, out))
             for _ in range(processes)]
    for p in procs:
        p.start()
    try:
        # The clock starts once every child has imported dejacache and warmed its hits.
        for _ in procs:
            ready.get(timeout=120)
        stop_at.value = time.time() + seconds
        start.set()
        total = sum(out.get(timeout=seconds + 60) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
    return total / seconds


def _throughput(url: str, cluster_url: str, budget: float,
                rounds: int) -> dict[str, dict[str, float]]:
    """Hits per second for 1, 2, 4 processes; one server and the cluster alternate, and each
    cell is the median of its rounds."""
    seconds = max(budget * 2, 0.2)
    samples: dict[str, dict[str, list[float]]] = {"server": {}, "cluster": {}}
    for _ in range(max(2, rounds // 2)):
        for n in PROCESSES:
            for name, u in (("server", url), ("cluster", cluster_url)):
                samples[name].setdefault(str(n), []).append(_hits_per_second(u, n, seconds))
    return {name: {n: statistics.median(v) for n, v in cells.items()}
            for name, cells in samples.items()}


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

    responses = [make_response(s) for s in range(N_KEYS)]

    @dejacache.tool_cache(resource="bench-async", key="item:{seed}", store=store)
    async def lookup(seed: int) -> dict[str, Any]:
        return responses[seed]

    async def tool_hit(i: int) -> Any:
        return await lookup(i % N_KEYS)

    # The session stays current for this task: the other contenders do not look at it.
    SESSION.set(dejacache.agent_session(tenant="acme", session_id="bench-async"))
    for s in range(N_KEYS):
        await lookup(s)
    try:
        return await ainterleave({"raw redis.asyncio GET + orjson.loads": raw_get,
                                  "RedisStore.aget + JsonCodec.decode": store_get,
                                  ATOOL: tool_hit},
                                 budget, rounds)
    finally:
        await araw.aclose()
        await store.aclose()


if __name__ == "__main__":
    raise SystemExit(main())
