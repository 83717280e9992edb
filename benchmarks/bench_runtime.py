"""Runtime benchmark: a tool-cache hit against a core ``@cache`` hit (both in memory), the cost
of an invalidation with 10 and with 100,000 cached entries, and Redis-backed tool caches
(counters in Redis) when ``redis-server`` is installed.

    .venv/bin/python benchmarks/bench_runtime.py [--budget 0.5] [--entries 100000] [--quick]

Targets: tool-cache hit within 2x of the core decorator's hit; invalidation cost
independent of the number of cached entries. Prints Markdown.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
from typing import Any

from _timing import Cell, fmt_us, interleave, machine, md_table, ratio, time_each, write_json

import dejacache
from dejacache.runtime.session import SESSION

ROOT = pathlib.Path(__file__).resolve().parent.parent

RESULT = {"user_id": 42, "items": [{"sku": f"sku-{i}", "qty": i % 3 + 1} for i in range(5)],
          "total": 123.45, "currency": "EUR"}


def bench_hits(budget: float) -> dict[str, Cell]:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.cache
    def core_get_cart(user_id: int) -> dict[str, Any]:
        return RESULT

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=dejacache.MemoryStore())
    def get_cart(user_id: int) -> dict[str, Any]:
        return RESULT

    @dejacache.tool_cache(resource="cart", scope="global", store=dejacache.MemoryStore())
    def get_cart_global(user_id: int) -> dict[str, Any]:
        return RESULT

    guard = dejacache.LoopGuard(max_repeats=10**9, max_depth=10**9, on_loop="warn")
    plain = dejacache.agent_session(tenant="acme", session_id="s1")
    guarded = dejacache.agent_session(tenant="acme", session_id="s2", loop_guard=guard)

    def within(sess: dejacache.agent_session | None) -> Any:
        # Each contender's batch runs in its own session, set untimed ahead of the batch
        # (entering one per call would time the enter and exit too).
        return lambda: SESSION.set(sess)

    core_get_cart(42)
    with plain:
        get_cart(42)
    get_cart_global(42)
    with guarded:
        get_cart(42)
    # One interleaved run: each row is divided by the core hit timed in the same batches.
    out = interleave({
        "core @cache hit": lambda i: core_get_cart(42),
        "tool_cache hit (tenant, key=)": lambda i: get_cart(42),
        "tool_cache hit (global)": lambda i: get_cart_global(42),
        "tool_cache hit + loop guard": lambda i: get_cart(42),
    }, budget=budget * 4, before={
        "core @cache hit": within(None),
        "tool_cache hit (tenant, key=)": within(plain),
        "tool_cache hit (global)": within(None),
        "tool_cache hit + loop guard": within(guarded),
    })
    SESSION.set(None)
    try:
        import cachetools
    except ImportError:
        pass
    else:
        @cachetools.cached(cachetools.TTLCache(maxsize=1024, ttl=60))
        def peer_get_cart(user_id: int) -> dict[str, Any]:
            return RESULT

        peer_get_cart(42)
        out["cachetools TTLCache hit (peer, no copy)"] = time_each(lambda i: peer_get_cart(42),
                                                                 budget=budget)
    dejacache.configure(store=None)
    return out


def bench_redis(url: str, budget: float) -> dict[str, Cell]:
    import redis

    from dejacache.stores.redis import RedisStore

    def remote() -> RedisStore:
        return RedisStore(url, key_prefix="bench-rt", timeout=1.0, connect_timeout=1.0)

    tiered = dejacache.TieredStore(dejacache.MemoryStore(), remote())
    tools = {
        "tiered (memory front), counters read every call": dejacache.tool_cache(
            resource="r1", store=tiered)(lambda user_id: RESULT),
        "tiered, counter_max_age=0.05 s": dejacache.tool_cache(
            resource="r2", store=tiered, counter_max_age=0.05)(lambda user_id: RESULT),
        "RedisStore only": dejacache.tool_cache(resource="r3", store=remote())(
            lambda user_id: RESULT),
    }
    out: dict[str, Cell] = {}
    raw = redis.Redis.from_url(url)
    raw.set("bench-raw", b"x" * 300)
    out["raw redis-py GET (reference)"] = time_each(lambda i: raw.get("bench-raw"),
                                                    budget=budget)
    with dejacache.agent_session(tenant="acme"):
        for label, fn in tools.items():
            fn(42)
            out[f"tool_cache hit, {label}"] = time_each(lambda i, fn=fn: fn(42), budget=budget)

        @dejacache.invalidates("r1", key="cart:{user_id}", store=tiered)
        def write(user_id: int) -> None:
            return None

        out["invalidation (entity) through Redis"] = time_each(lambda i: write(i % 100),
                                                              budget=budget)
    raw.close()
    return out


def bench_invalidation(entries: int, budget: float) -> dict[int, Cell]:
    out: dict[int, Cell] = {}
    for n in (10, entries):
        store = dejacache.MemoryStore(maxsize=n + 10)

        @dejacache.tool_cache(resource=f"inv{n}", key="item:{item_id}", store=store)
        def get_item(item_id: int) -> dict[str, int]:
            return {"id": item_id}

        @dejacache.invalidates(f"inv{n}", key="item:{item_id}", store=store)
        def update_item(item_id: int) -> str:
            return "ok"

        @dejacache.invalidates(f"inv{n}", store=store)
        def reset_items() -> str:
            return "ok"

        with dejacache.agent_session(tenant="acme"):
            for i in range(n):
                get_item(i)
            assert len(store) == n
            # The same ten entities in both runs: only the number of cached entries differs.
            out[n] = time_each(lambda i: update_item(i % 10), budget=budget)
            out[-n] = time_each(lambda i: reset_items(), budget=budget)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="short run for CI smoke tests")
    ap.add_argument("--json", default=None, help="write machine-readable results here")
    a = ap.parse_args(argv)
    budget = 0.05 if a.quick else a.budget
    entries = 1000 if a.quick else a.entries

    print("## Runtime: tool cache and invalidation\n")
    print(f"Machine: {machine()}\n")
    hits = bench_hits(budget)
    base = hits["core @cache hit"].median
    print(md_table(["operation", "median µs", "p99 µs", "vs core @cache hit"],
                   [[k, fmt_us(c.median), fmt_us(c.p99), ratio(c.median, base)]
                    for k, c in hits.items()]))
    inv = bench_invalidation(entries, budget)
    small, big = inv[10], inv[entries]
    print()
    print(md_table(
        ["invalidation", "10 entries µs", f"{entries:,} entries µs", "ratio"],
        [["entity (key=...)", fmt_us(small.median), fmt_us(big.median),
          ratio(big.median, small.median)],
         ["whole resource", fmt_us(inv[-10].median), fmt_us(inv[-entries].median),
          ratio(inv[-entries].median, inv[-10].median)]],
    ))
    tool_hit = hits["tool_cache hit (tenant, key=)"].median
    print(f"\nTool-cache hit / core hit: {ratio(tool_hit, base)} (target ≤ 2x). Invalidation "
          f"at {entries:,} vs 10 entries: {ratio(big.median, small.median)} (target: constant).")
    doc: dict[str, Any] = {
        "entries": entries,
        "hits": {k: c.as_dict() for k, c in hits.items()},
        "invalidation": {"entity": {"10": small.as_dict(), "many": big.as_dict()},
                         "resource": {"10": inv[-10].as_dict(), "many": inv[-entries].as_dict()}},
    }
    print("\n### Redis-backed tool caches\n")
    if shutil.which("redis-server") is None:
        print("skipped: redis-server is not installed (`make redis-server`).")
        write_json(a.json, "runtime", doc, quick=a.quick)
        return 0
    sys.path.insert(0, str(ROOT / "tests"))
    from support_redis import RedisServer, free_port

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(port=free_port(), workdir=tmp)
        server.start()
        try:
            rc = bench_redis(server.url, budget)
        finally:
            server.stop()
    doc["redis"] = {k: c.as_dict() for k, c in rc.items()}
    write_json(a.json, "runtime", doc, quick=a.quick)
    ref = rc["raw redis-py GET (reference)"].median
    print(md_table(["operation", "median µs", "p99 µs", "vs raw GET"],
                   [[k, fmt_us(c.median), fmt_us(c.p99), ratio(c.median, ref)]
                    for k, c in rc.items()]))
    print("\nCounters read on every call cost one MGET per hit: a replica sees another's write "
          "on its next call. `counter_max_age` trades that bound for memory-speed hits.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
