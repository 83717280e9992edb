"""Cassettes: replay cost per call, cold load of a 10k-entry cassette, file size.

1. Replay of a ``@cache``-decorated call from a cassette vs the floor (the same key function
   plus a dict lookup in memory) and vs agentcassette's replay of the same calls, at 20 KB and
   200 KB requests (``workload.step``: distinct requests sharing their history).
2. Cold load: a fresh ``Cassette`` over a 10k-entry file of the 20 KB agent run, up to the
   first decoded hit (file in the page cache), vs agentcassette's ``replay()`` of the same run.
3. Size of that file vs the naive JSON of the same calls (request + response per call).

    .venv/bin/python benchmarks/bench_cassette.py [--quick]
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
from _timing import fmt_us, machine, md_table, versions  # noqa: E402
from workload import make_request, make_response, step  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cassettes import Cassette  # noqa: E402
from dejacache.cassettes._workload import agent_steps  # noqa: E402
from dejacache.codec import JsonCodec  # noqa: E402
from dejacache.keys import KeyBuilder, digest  # noqa: E402
from dejacache.stores import Record  # noqa: E402

try:
    import agentcassette
except ImportError:  # pragma: no cover - optional peer
    agentcassette = None

_ns = time.perf_counter_ns


def _median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def bench_replay(size: str, n: int, rounds: int, tmp: pathlib.Path) -> list[Any]:
    base = make_request(size, 0)
    reqs = [step(base, i) for i in range(n)]
    resps = [make_response(i) for i in range(n)]
    answers = {id(r): resps[i] for i, r in enumerate(reqs)}

    def live(request: dict[str, Any]) -> dict[str, Any]:
        return answers[id(request)]

    # floor: the same key function, then a dict lookup returning the stored object
    kb = KeyBuilder(live, "llm")

    def key_of(r: dict[str, Any]) -> str:  # what @cache computes on its hit path
        return digest("bench", "llm", kb.canonical_fast(kb.bind((r,), {})))

    for r in reqs:  # the hit-path form settles once the builder has classified the names
        kb.canonical((r,), {})
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
    f, o = _median_us(floor), _median_us(ours)
    p = _median_us(peer) if peer else float("nan")
    return [size, fmt_us(f), fmt_us(o), f"{o / f:.2f}x", fmt_us(p),
            f"{p / o:.1f}x" if peer else "-"]


def build_agent_cassette(n: int, path: pathlib.Path) -> tuple[int, list[tuple[Any, Any]]]:
    codec = JsonCodec()
    tape = Cassette(path, mode="record")
    raw = 0
    steps = list(agent_steps(n))
    for req, resp in steps:
        canonical = orjson.dumps({"request": req}, option=orjson.OPT_SORT_KEYS)
        key = digest("default", "llm", canonical)
        raw += len(orjson.dumps({"request": req, "response": resp}))
        tape.put(key, Record(value=codec.encode(resp, key=key), name="llm", kind="llm",
                             request=canonical, duration=1.0, usage=resp["usage"]))
    tape.save()
    return raw, steps


def bench_cold(n: int, tmp: pathlib.Path, peer: bool) -> tuple[list[list[Any]], list[Any]]:
    path = tmp / f"agent-{n}.json"
    raw, steps = build_agent_cassette(n, path)
    key = digest("default", "llm",
                 orjson.dumps({"request": steps[0][0]}, option=orjson.OPT_SORT_KEYS))
    codec = JsonCodec()
    times = []
    for _ in range(9):
        gc.collect()
        t0 = _ns()
        tape = Cassette(path, mode="replay")
        rec = tape.get(key)
        assert rec is not None
        codec.decode(rec.value, key=key)
        times.append(_ns() - t0)
        del tape
    ours_ms = statistics.median(times) / 1e6
    full = []
    for _ in range(5):
        t0 = _ns()
        tape = Cassette(path, mode="replay")
        tape._discover_all()
        full.append(_ns() - t0)
    full_ms = statistics.median(full) / 1e6
    size = path.stat().st_size
    rows = [[f"dejacache ({n:,} entries)", f"{ours_ms:.1f} ms (index of all: {full_ms:.0f} ms)",
             f"{size / 1e6:.1f} MB", f"{size / raw:.3f}x"]]
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
        ac_ms = (_ns() - t0) / 1e6
        ac_size = ac_path.stat().st_size
        rows.append([f"agentcassette ({n:,} steps)", f"{ac_ms:,.0f} ms",
                     f"{ac_size / 1e6:.1f} MB", f"{ac_size / raw:.2f}x"])
        ac_path.unlink()
    rows.append([f"naive JSON ({n:,} calls)", "-", f"{raw / 1e6:.1f} MB", "1.00x"])
    return rows, [ours_ms, size / raw]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    n_calls, rounds = (100, 2) if a.quick else (400, 5)
    n_cold = 1_000 if a.quick else 10_000
    dejacache.configure(store="memory://")
    out = ["## Cassettes", "", f"Machine: {machine()}  ",
           f"Versions: {versions('dejacache', 'orjson', 'agentcassette')}", ""]
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        rows = [bench_replay(size, n_calls if size == "20KB" else n_calls // 2, rounds, tmp)
                for size in ("20KB", "200KB")]
        out += ["### Replay of a decorated call (median µs per call)", "",
                md_table(["request", "floor: key + dict", "dejacache cassette", "vs floor",
                          "agentcassette replay", "agentcassette / dejacache"], rows), "",
                f"{n_calls} distinct calls per size (half at 200 KB), {rounds} replays each. "
                "The floor computes the same canonical key and looks it up in a dict holding "
                "the response object; the cassette also decodes a fresh copy of the response. "
                "agentcassette compares every argument with the recording (strict=True).", ""]
        cold_rows, (cold_ms, ratio) = bench_cold(n_cold, tmp, peer=True)
        out += ["### Cold load to first hit, and file size (20 KB agent requests)", "",
                md_table(["cassette", "load + first hit", "file", "vs naive JSON"], cold_rows),
                "", "Load time is the median of 9 fresh loads with the file in the page cache "
                "(agentcassette: one load). Entries are indexed as replay reaches them; the "
                "index of all entries is what a miss or a write pays once. Targets: load ≤ "
                "20 ms, size ≤ 0.3x.", ""]
    print("\n".join(out))
    ok = cold_ms <= 20 and ratio <= 0.3
    print(f"\ncold load {cold_ms:.1f} ms, size {ratio:.3f}x: {'within' if ok else 'OVER'} target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
