"""SQLite store: file size for a growing conversation, and hits against the plain-SQLite floor.

1. Size: ``n`` calls of the 20 KB agent run (``dejacache.cassettes._workload.agent_steps``:
   the n-th request repeats the messages before it), stored through ``SQLiteStore.put`` as
   ``@cache`` stores them, vs the naive JSON of the same calls (request + response per call,
   the cassette benchmark's measure). The file is measured after the store is closed (the
   WAL checkpointed into it). Target: <= 0.3x.
2. Hits at 2 KB and 20 KB (``benchmarks/workload.py``), interleaved in one process with the
   floor "orjson+xxh3 key -> SQLite WAL SELECT -> orjson.loads": a full ``@cache`` hit, and
   ``SQLiteStore.get`` + decode with the key precomputed (what the store itself adds).

    .venv/bin/python benchmarks/bench_sqlite_size.py [--quick] [--json]

``bench_sqlite_size()`` returns the numbers as a dict for the harness.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import pathlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import orjson  # noqa: E402
import xxhash  # noqa: E402
from workload import make_request, make_response, nbytes, step  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cassettes._workload import agent_steps  # noqa: E402
from dejacache.codec import JsonCodec  # noqa: E402
from dejacache.keys import digest  # noqa: E402
from dejacache.stores import Record, SQLiteStore  # noqa: E402

__all__ = ["bench_sqlite_size"]

_ns = time.perf_counter_ns
_SORT = orjson.OPT_SORT_KEYS


def _file_bytes(path: pathlib.Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            total += pathlib.Path(str(path) + suffix).stat().st_size
    return total


def measure_size(n: int, tmp: pathlib.Path) -> dict[str, Any]:
    """Store ``n`` agent calls; raw JSON bytes, store file bytes, their ratio, put time."""
    codec = JsonCodec()
    path = tmp / "size.db"
    store = SQLiteStore(path)
    raw = 0
    puts: list[int] = []
    for req, resp in agent_steps(n):
        canonical = orjson.dumps({"request": req}, option=_SORT)
        key = digest("default", "llm", canonical)
        raw += len(orjson.dumps({"request": req, "response": resp}))
        rec = Record(value=codec.encode(resp, key=key), name="llm", kind="llm",
                     request=canonical, duration=1.0, usage=resp["usage"])
        t0 = _ns()
        store.put(key, rec)
        puts.append(_ns() - t0)
    store.close()  # the last connection checkpoints the WAL into the file
    size = _file_bytes(path)
    return {"calls": n, "raw_bytes": raw, "store_bytes": size, "ratio": size / raw,
            "put_median_us": statistics.median(puts) / 1000}


class _Floor:
    """orjson+xxh3 key -> SQLite WAL SELECT -> orjson.loads (bench_core's FloorSQLite)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")

    @staticmethod
    def key(request: Any) -> bytes:
        return xxhash.xxh3_128_digest(orjson.dumps(request, option=_SORT))

    def store(self, request: Any, response: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)",
                        (self.key(request), orjson.dumps(response)))

    def hit(self, request: Any) -> Any:
        row = self.db.execute("SELECT v FROM kv WHERE k = ?", (self.key(request),)).fetchone()
        return None if row is None else orjson.loads(row[0])


def _interleave(ops: dict[str, Callable[[int], Any]], budget: float,
                batch: int = 20) -> dict[str, float]:
    """Median µs per call; contenders run in rotated round-robin batches so a noisy
    neighbour slows all of them alike."""
    names = list(ops)
    for name in names:
        for i in range(batch):
            ops[name](i)
    gc.collect()
    samples: dict[str, list[int]] = {n: [] for n in names}
    deadline = time.perf_counter() + budget
    rnd = 0
    while rnd < 5 or time.perf_counter() < deadline:
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            op, out = ops[name], samples[name]
            for j in range(batch):
                t0 = _ns()
                op(j)
                out.append(_ns() - t0)
        rnd += 1
    return {n: statistics.median(s) / 1000 for n, s in samples.items()}


def measure_hits(size: str, tmp: pathlib.Path, budget: float, n: int = 20) -> dict[str, float]:
    base = make_request(size, 0)
    items = [(step(base, i), make_response(i)) for i in range(n)]
    floor = _Floor(tmp / f"floor-{size}.db")
    store = SQLiteStore(tmp / f"dejacache-{size}.db")
    pending: list[Any] = [None]
    fn = dejacache.cache(name="bench.llm")(lambda request: pending[0])
    codec = JsonCodec()
    keys: list[str] = []
    dejacache.configure(store=store, cache_key="bench", mode="auto")
    try:
        for req, resp in items:
            floor.store(req, resp)
            pending[0] = resp
            fn(req)
            keys.append(fn.cache_key(req))  # type: ignore[attr-defined]
        pending[0] = None
        for req, resp in items:  # the verification round doubles as warm-up
            if floor.hit(req) != resp or fn(req) != resp:
                raise AssertionError(f"wrong hit at {size}")

        def store_get(i: int) -> Any:
            k = keys[i % n]
            rec = store.get(k)
            assert rec is not None
            return codec.decode(rec.value, key=k, namespace="bench")

        cells = _interleave({
            "floor": lambda i: floor.hit(items[i % n][0]),
            "cache_hit": lambda i: fn(items[i % n][0]),
            "store_get": store_get,
        }, budget)
    finally:
        dejacache.configure(store=None)
    store.close()
    floor.db.close()
    return {
        "request_bytes": nbytes(base),
        "floor_us": cells["floor"],
        "cache_hit_us": cells["cache_hit"],
        "store_get_us": cells["store_get"],
        "cache_hit_vs_floor": cells["cache_hit"] / cells["floor"],
    }


def bench_sqlite_size(n: int = 10_000, budget: float = 1.0) -> dict[str, Any]:
    """Size of ``n`` growing-conversation calls in a SQLiteStore vs raw JSON, and hit medians
    (µs) at 2 KB and 20 KB against the plain-SQLite floor of the same run."""
    with tempfile.TemporaryDirectory(prefix="dejacache-sqlite-size-") as d:
        tmp = pathlib.Path(d)
        out: dict[str, Any] = {"size": measure_size(n, tmp)}
        out["hits"] = {size: measure_hits(size, tmp, budget) for size in ("2KB", "20KB")}
    out["target_ratio"] = 0.3
    out["ok"] = out["size"]["ratio"] <= 0.3
    return out


def _markdown(r: dict[str, Any]) -> str:
    s = r["size"]
    lines = ["## SQLite store: size of a growing conversation, hits", "",
             f"{s['calls']:,} calls of the 20 KB agent run: raw JSON {s['raw_bytes'] / 1e6:.1f} "
             f"MB, store file {s['store_bytes'] / 1e6:.1f} MB = **{s['ratio']:.3f}x** "
             f"(target <= 0.3x; put median {s['put_median_us']:.0f} µs).", "",
             "| request | floor: key + SELECT + loads | @cache hit | vs floor | "
             "SQLiteStore.get + decode |", "|---|---|---|---|---|"]
    for size, h in r["hits"].items():
        lines.append(f"| {size} ({h['request_bytes']:,} B) | {h['floor_us']:.1f} µs | "
                     f"{h['cache_hit_us']:.1f} µs | {h['cache_hit_vs_floor']:.2f}x | "
                     f"{h['store_get_us']:.1f} µs |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the result dict as JSON")
    ap.add_argument("--calls", type=int, default=None)
    a = ap.parse_args(argv)
    n = a.calls or (1_000 if a.quick else 10_000)
    r = bench_sqlite_size(n, budget=0.3 if a.quick else 1.0)
    print(json.dumps(r, indent=2) if a.json else _markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
