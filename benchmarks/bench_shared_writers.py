"""Many writers on one shared cassette: processes recording into one file at once.

What a test suite run under pytest-xdist does to a cassette its tests share: each worker
opens the file in a block per test (``cassette(path, shared=True)``, mode ``auto``), makes a
few new calls and saves. Contenders, interleaved round by round on one machine:

* ``alone``: one process records ``calls`` calls in blocks of ``block`` (the floor: the same
  work with nobody else saving);
* ``writers``: ``procs`` processes at once, ``calls / procs`` calls each, in blocks of the
  same size, into one file.

Each call's request is a conversation turn of ~2 KB (a system prompt, a user message of ~60
words and an assistant reply of ~40), the answer ~300 bytes: a suite's model calls. Every
run starts from no file. Reported: wall time of each contender (medians), their ratio (goal:
``writers`` within 1.5x of ``alone``), the slowest single save of each and the saves of the
first and last tenth (a save that waits on others must not grow with the file), and the
check that the file holds every call once, each answering its own request.

    .venv/bin/python benchmarks/bench_shared_writers.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import versions, write_json  # noqa: E402

_WORDS = ("fare", "seat", "aisle", "window", "layover", "terminal", "gate", "baggage",
          "refund", "voucher", "hotel", "room", "checkin", "breakfast", "shuttle", "museum")

# One worker: records calls [first, first + count) in blocks of ``block``, prints its timings.
_WORKER = r"""
import json, sys, time
import dejacache

path, first, count, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
words = {words!r}

def text(i, n):
    return " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(n))

@dejacache.cache(name="llm")
def llm(messages):
    return {{"role": "assistant", "content": "answer to " + messages[1]["content"][:200],
             "usage": {{"prompt_tokens": 500, "completion_tokens": 60}}}}

saves = []
t0 = time.perf_counter()
for start in range(first, first + count, block):
    blk = dejacache.cassette(path, shared=True, mode="auto", cache_key="bench")
    blk.__enter__()
    for i in range(start, min(start + block, first + count)):
        llm([{{"role": "system", "content": "You are a travel agent. " * 20}},
             {{"role": "user", "content": f"call {{i}}: " + text(i, 60)}},
             {{"role": "assistant", "content": text(i + 1, 40)}}])
    s = time.perf_counter()
    blk.__exit__(None, None, None)
    saves.append(time.perf_counter() - s)
print(json.dumps({{"wall": time.perf_counter() - t0, "saves": saves}}))
"""


def _spawn(path: pathlib.Path, first: int, count: int, block: int) -> subprocess.Popen[str]:
    code = _WORKER.format(words=_WORDS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.Popen([sys.executable, "-c", code, str(path), str(first), str(count),
                             str(block)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _collect(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1200)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {stderr[-2000:]}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _check(path: pathlib.Path, calls: int) -> int:
    """How many calls the file does not answer right (0: every call, once, its own)."""
    import dejacache

    doc = dejacache.load_cassette(path)
    seen: dict[int, int] = {}
    wrong = 0
    for step in doc.steps:
        user = step.request["messages"][1]["content"]
        i = int(user.split(":")[0].removeprefix("call "))
        seen[i] = seen.get(i, 0) + 1
        if not str(step.response.get("content", "")).startswith("answer to " + user[:50]):
            wrong += 1
    return wrong + sum(1 for i in range(calls) if seen.get(i) != 1)


def _run(kind: str, tmp: pathlib.Path, calls: int, procs: int, block: int,
         rnd: int) -> dict[str, Any]:
    path = tmp / f"{kind}-{rnd}.json"
    t0 = time.perf_counter()
    if kind == "alone":
        res = _collect([_spawn(path, 0, calls, block)])
    else:
        each = calls // procs
        res = _collect([_spawn(path, k * each, each, block) for k in range(procs)])
    wall = time.perf_counter() - t0
    saves = [s for r in res for s in r["saves"]]
    # Saves in the order they happened within each worker: first and last tenth of each.
    tenth = max(1, len(res[0]["saves"]) // 10)
    first = [s for r in res for s in r["saves"][:tenth]]
    last = [s for r in res for s in r["saves"][-tenth:]]
    return {"wall_s": wall, "max_save_ms": max(saves) * 1e3,
            "first_tenth_save_ms": statistics.median(first) * 1e3,
            "last_tenth_save_ms": statistics.median(last) * 1e3,
            "file_bytes": path.stat().st_size, "wrong_or_lost": _check(path, calls)}


def bench(calls: int, procs: int, block: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"alone": [], "writers": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for rnd in range(rounds):
            order = ("alone", "writers") if rnd % 2 == 0 else ("writers", "alone")
            for kind in order:
                runs[kind].append(_run(kind, tmp, calls, procs, block, rnd))
    out: dict[str, Any] = {"calls": calls, "procs": procs, "block": block, "rounds": rounds}
    for kind, rs in runs.items():
        out[kind] = {f: statistics.median(r[f] for r in rs) for f in rs[0]}
        out[kind]["wrong_or_lost"] = sum(r["wrong_or_lost"] for r in rs)
    out["ratio"] = out["writers"]["wall_s"] / out["alone"]["wall_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=pathlib.Path, default=None,
                    help="where the results go (default: benchmarks/results/ for a full run)")
    a = ap.parse_args()
    calls, rounds = (300, 1) if a.quick else (1200, 3)
    res = bench(calls, 3, 10, rounds)
    res.update(versions=versions("dejacache", "orjson", "xxhash"))
    out = a.json or (None if a.quick else HERE / "results" / "shared_writers.json")
    write_json(out, "shared_writers", res, quick=a.quick)
    for kind in ("alone", "writers"):
        r = res[kind]
        print(f"{kind:8} {r['wall_s']:.2f} s  save max {r['max_save_ms']:.1f} ms  first/last "
              f"tenth {r['first_tenth_save_ms']:.1f}/{r['last_tenth_save_ms']:.1f} ms  "
              f"{r['file_bytes'] / 1e6:.2f} MB  wrong or lost {r['wrong_or_lost']}")
    print(f"ratio writers/alone: {res['ratio']:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
