"""Cassettes: replay cost per call, replay cost against cassette size, cold open, file size.

1. Replay of a ``@cache``-decorated call from a cassette vs the floor (a plain orjson(sorted)
   + xxh3 of the request and a dict lookup) and vs agentcassette's replay of the same calls,
   at 20 KB and 200 KB requests (``workload.step``), interleaved round by round.
2. Replay against size: cassettes of 10 / 1,000 / 10,000 entries, every entry served once in
   a random order from one block; mean, p99 and worst call.
3. Cold: a fresh interpreter opens a 10k-entry cassette of the 20 KB agent run in a
   ``with dejacache.cassette(...)`` block, serves the first, the last or a random entry and
   closes the block (file in the page cache); medians over several processes. The same in
   processes that loaded pytest first (what a test process pays), and the floor: a fresh
   interpreter importing orjson and xxhash.
4. Size of that file vs the naive JSON of the same calls (request + response per call).

    .venv/bin/python benchmarks/bench_cassette.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import orjson  # noqa: E402
import xxhash  # noqa: E402
from _timing import versions, write_json  # noqa: E402
from workload import make_request, make_response, step  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cassettes._workload import agent_steps  # noqa: E402

try:
    import agentcassette
except ImportError:  # pragma: no cover - optional peer
    agentcassette = None

_ns = time.perf_counter_ns


def _median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def bench_replay(size: str, n: int, rounds: int, tmp: pathlib.Path) -> dict[str, Any]:
    base = make_request(size, 0)
    reqs = [step(base, i) for i in range(n)]
    resps = [make_response(i) for i in range(n)]
    answers = {id(r): resps[i] for i, r in enumerate(reqs)}

    def live(request: dict[str, Any]) -> dict[str, Any]:
        return answers[id(request)]

    # floor: a plain orjson(sorted) + xxh3 of the request, then a dict lookup returning the
    # stored object (never dejacache's own key function: the floor must not move with it)
    def key_of(r: dict[str, Any]) -> bytes:
        return xxhash.xxh3_128_digest(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))

    table = {key_of(r): resps[i] for i, r in enumerate(reqs)}
    llm = dejacache.cache(name="llm")(live)
    path = tmp / f"replay-{size}.json"
    with dejacache.cassette(path, mode="record", cache_key="bench"):
        for r in reqs:
            llm(r)
    ac_llm: Any = None
    ac_path = tmp / f"ac-{size}.json"
    if agentcassette is not None:
        ac_llm = agentcassette.intercept(live, name="llm", kind="llm")
        with agentcassette.record(ac_path):
            for r in reqs:
                ac_llm(r)
    floor: list[int] = []
    ours: list[int] = []
    peer: list[int] = []
    for _ in range(rounds):  # interleaved, so a noisy neighbour hits all three alike
        for r in reqs:
            t0 = _ns()
            table[key_of(r)]
            floor.append(_ns() - t0)
        with dejacache.cassette(path, mode="replay", cache_key="bench"):
            for r in reqs:
                t0 = _ns()
                llm(r)
                ours.append(_ns() - t0)
        if ac_llm is not None:
            with agentcassette.replay(ac_path, strict=True):
                for r in reqs:
                    t0 = _ns()
                    ac_llm(r)
                    peer.append(_ns() - t0)
    return {"request": size, "calls": n, "floor_us": _median_us(floor),
            "dejacache_us": _median_us(ours),
            "agentcassette_us": _median_us(peer) if peer else None}


def record_agent_cassette(n: int, path: pathlib.Path) -> tuple[int, list[tuple[Any, Any]]]:
    """``n`` steps of the 20 KB agent run recorded through ``@cache`` (as a test records them);
    returns the naive JSON size of the same calls and the steps."""
    steps = list(agent_steps(n))
    raw = sum(len(orjson.dumps({"request": q, "response": r})) for q, r in steps)
    record_calls(path, steps)
    return raw, steps


def record_calls(path: pathlib.Path, steps: list[tuple[Any, Any]]) -> None:
    pending: list[Any] = [None]

    @dejacache.cache(name="llm")
    def llm(request: Any) -> Any:
        return pending[0]

    with dejacache.cassette(path, mode="record", cache_key="bench"):
        for req, resp in steps:
            pending[0] = resp
            llm(req)


# A fresh interpreter opens the cassette in a ``with dejacache.cassette(...)`` block, serves one
# recorded call and closes the block: what one test pays. Import time is reported apart.
# ``pytest`` as the third argument loads pytest first, untimed: what a test process has loaded
# before its first block (typing, dataclasses, inspect, pathlib, re and pytest itself).
_COLD_CHILD = """
import json, sys, time
if sys.argv[3] == "pytest":
    import pytest
t = time.perf_counter()
import dejacache, orjson
dejacache.cassette  # loaded on first use: counted (and reported) as import time, not as the open

@dejacache.cache(name="llm")
def llm(request):
    raise RuntimeError("a replay went live")

imp = time.perf_counter() - t
case = orjson.loads(open(sys.argv[2], "rb").read())

t0 = time.perf_counter()
block = dejacache.cassette(sys.argv[1], mode="replay", cache_key="bench")
block.__enter__()
got = llm(case["request"])
t1 = time.perf_counter()
block.__exit__(None, None, None)
t2 = time.perf_counter()
print(json.dumps({"import_ms": imp * 1e3, "open_hit_ms": (t1 - t0) * 1e3,
                  "close_ms": (t2 - t1) * 1e3, "total_ms": (t2 - t0) * 1e3,
                  "ok": got == case["response"]}))
"""

# The floor of the fresh-process row: the two C libraries every import of dejacache loads.
# orjson imports dataclasses, inspect, uuid and datetime when it loads (~20 ms of the ~23 ms of
# ``import orjson`` in a fresh interpreter on the 2-core box).
_FLOOR_CHILD = """
import json, sys, time
t = time.perf_counter()
import orjson, xxhash
print(json.dumps({"import_ms": (time.perf_counter() - t) * 1e3}))
"""
_PRELOADS = {"fresh": "none", "in_pytest": "pytest"}


def _child(code: str, *args: str) -> dict[str, Any]:
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cold child failed: {proc.stderr[-2000:]}")
    return orjson.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cold_medians(rs: list[dict[str, Any]]) -> dict[str, Any]:
    for r in rs:  # what a test pays: every import the block triggers counted
        r["with_imports_ms"] = r["import_ms"] + r["total_ms"]
    out = {f: statistics.median(r[f] for r in rs)
           for f in ("open_hit_ms", "close_ms", "total_ms", "import_ms", "with_imports_ms")}
    out["max_total_ms"] = max(r["total_ms"] for r in rs)
    return out


def bench_cold(n: int, tmp: pathlib.Path, repeats: int, peer: bool) -> dict[str, Any]:
    """Fresh-process open + one hit + close of an ``n``-entry cassette, for the first entry,
    the last one and random ones (medians over ``repeats`` processes each), and its size; the
    same in processes that loaded pytest first (``in_pytest``), and the orjson + xxhash floor
    (``floor_ms``), all interleaved round by round."""
    import random

    path = tmp / f"agent-{n}.json"
    raw, steps = record_agent_cassette(n, path)
    rng = random.Random(12)
    where = {"first": lambda: 0, "last": lambda: n - 1, "random": lambda: rng.randrange(n)}
    out: dict[str, Any] = {"entries": n, "repeats": repeats, "file_bytes": path.stat().st_size,
                           "raw_bytes": raw}
    out["size_ratio"] = out["file_bytes"] / raw
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        pre: {k: [] for k in where} for pre in _PRELOADS}
    floor: list[float] = []
    case_file = tmp / "case.json"
    for rep in range(-1, repeats):  # round -1 compiles and caches bytecode; not measured
        for label, pick in where.items():  # interleaved: the positions share the noise
            req, resp = steps[pick()]
            case_file.write_bytes(orjson.dumps({"request": req, "response": resp}))
            for pre, arg in _PRELOADS.items():
                r = _child(_COLD_CHILD, str(path), str(case_file), arg)
                if not r["ok"]:
                    raise AssertionError(f"cold replay of the {label} entry returned a wrong "
                                         "value")
                if rep >= 0:
                    runs[pre][label].append(r)
            if rep >= 0:
                floor.append(_child(_FLOOR_CHILD)["import_ms"])
    for label, rs in runs["fresh"].items():
        out[label] = _cold_medians(rs)
    out["in_pytest"] = {label: _cold_medians(rs) for label, rs in runs["in_pytest"].items()}
    out["floor_ms"] = statistics.median(floor)
    if peer and agentcassette is not None:
        ac_path = tmp / f"ac-agent-{n}.json"
        answers = iter([s[1] for s in steps])

        def live(request: Any) -> Any:
            return next(answers)

        ac_llm = agentcassette.intercept(live, name="llm", kind="llm")
        with agentcassette.record(ac_path):
            for req, _ in steps:
                ac_llm(req)
        gc.collect()
        t0 = _ns()
        with agentcassette.replay(ac_path, strict=True):
            ac_llm(steps[0][0])
        out["agentcassette"] = {"first_ms": (_ns() - t0) / 1e6,
                                "file_bytes": ac_path.stat().st_size,
                                "size_ratio": ac_path.stat().st_size / raw,
                                "note": "one in-process load, first entry"}
        ac_path.unlink()
    return out


def bench_replay_random(sizes: tuple[int, ...], tmp: pathlib.Path,
                        max_calls: int) -> dict[str, Any]:
    """Replay cost per call against cassette size: every size's entries served in a random
    order (up to ``max_calls`` of them) from a block opened once; mean, p99 and worst call,
    the block's open and close included in the worst-case figures."""
    import random

    base = make_request("2KB", 0)
    out: dict[str, Any] = {}
    for n in sizes:
        steps = [(step(base, i, "s"), make_response(i % 50)) for i in range(n)]
        path = tmp / f"scale-{n}.json"
        record_calls(path, steps)

        @dejacache.cache(name="llm")
        def llm(request: Any) -> Any:
            raise RuntimeError("a replay went live")

        order = list(range(n))
        random.Random(n).shuffle(order)
        order = order[:max_calls]
        times: list[int] = []
        gc.collect()
        t_open = _ns()
        block = dejacache.cassette(path, mode="replay", cache_key="bench")
        block.__enter__()
        opened = _ns() - t_open
        try:
            for k in order:
                req, resp = steps[k]
                t0 = _ns()
                got = llm(req)
                times.append(_ns() - t0)
                if got != resp:
                    raise AssertionError(f"wrong replay at entry {k} of {n}")
        finally:
            t1 = _ns()
            block.__exit__(None, None, None)
            closed = _ns() - t1
        s = sorted(times)
        out[str(n)] = {"calls": len(s), "mean_us": statistics.fmean(s) / 1000,
                       "median_us": statistics.median(s) / 1000,
                       "p99_us": s[min(len(s) - 1, round(0.99 * (len(s) - 1)))] / 1000,
                       "max_us": s[-1] / 1000, "open_us": opened / 1000,
                       "close_us": closed / 1000}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None, help="write machine-readable results here")
    a = ap.parse_args(argv)
    n_calls, rounds = (100, 2) if a.quick else (400, 5)
    # 9 processes per figure: with 3, one slow start on this shared 2-core box moved a median
    # by ~10 ms of a ~50 ms cold start
    n_cold, repeats = (1_000, 1) if a.quick else (10_000, 9)
    scale = (10, 100, 1_000) if a.quick else (10, 1_000, 10_000)
    dejacache.configure(store="memory://")
    doc: dict[str, Any] = {"versions": versions("dejacache", "orjson", "agentcassette")}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        doc["replay"] = [bench_replay(size, n_calls if size == "20KB" else n_calls // 2,
                                      rounds, tmp) for size in ("20KB", "200KB")]
        doc["replay_calls"], doc["replay_rounds"] = n_calls, rounds
        doc["scale"] = bench_replay_random(scale, tmp, max_calls=10_000)
        doc["cold"] = bench_cold(n_cold, tmp, repeats, peer=not a.quick)
    full = write_json(a.json, "cassette", doc, quick=a.quick)
    import render

    print(render.cassette_markdown(full))
    return 0


if __name__ == "__main__":
    sys.exit(main())
