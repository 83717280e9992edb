"""Cassettes at scale, each figure from a fresh interpreter.

For cassettes of the 20 KB agent run (``dejacache.cassettes._workload``) at 10 / 1,000 /
10,000 entries:

* ``open_hit_ms``: a fresh process opens a ``with dejacache.cassette(...)`` block and serves
  one entry (the first, the last and a random one), medians over ``repeats`` processes;
* ``close_ms``: the same block's exit (nothing changed: no write);
* ``mean_us`` / ``p99_us`` / ``max_us``: one fresh process replays every entry once in a
  random order (up to ``max_calls``), timing each call.

Then, for a 10k-entry cassette of growing conversations (``conversation_steps``: each
request resends its history plus one new message; ~37 MB), ``bench_growing`` measures from
fresh processes: open + hit of the last entry (imports reported apart), an auto-mode miss,
and the save of that one new entry.

``bench_scale()`` returns one dict per size, then the growing row (``"shape": "growing"``);
``--src DIR`` runs the children against another
copy of ``src/`` (the numbers before a change: ``git archive HEAD src | tar -x -C DIR``).

    .venv/bin/python benchmarks/cassette_scale.py [--quick] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import orjson

__all__ = ["bench_growing", "bench_scale", "conversation_steps"]

_RECORD = """
import sys
import dejacache
from dejacache.cassettes._workload import agent_steps
steps = list(agent_steps(int(sys.argv[2])))
pending = [None]

@dejacache.cache(name="llm")
def llm(request):
    return pending[0]

with dejacache.cassette(sys.argv[1], mode="record", cache_key="bench"):
    for req, resp in steps:
        pending[0] = resp
        llm(req)
"""

# one entry: open the block, serve it, close the block (what one test of a big cassette pays)
_ONE = """
import json, sys, time
import dejacache, orjson
from dejacache.cassettes._workload import agent_steps
dejacache.cassette  # (loaded on first use: not part of the open)
n, i = int(sys.argv[2]), int(sys.argv[3])
req, resp = next(s for k, s in enumerate(agent_steps(n)) if k == i)

@dejacache.cache(name="llm")
def llm(request):
    raise RuntimeError("a replay went live")

t0 = time.perf_counter()
block = dejacache.cassette(sys.argv[1], mode="replay", cache_key="bench")
block.__enter__()
got = llm(req)
t1 = time.perf_counter()
block.__exit__(None, None, None)
t2 = time.perf_counter()
print(json.dumps({"open_hit_ms": (t1 - t0) * 1e3, "close_ms": (t2 - t1) * 1e3,
                  "ok": got == resp}))
"""

# every entry once, in a random order, one block
_ALL = """
import json, random, sys, time
import dejacache
from dejacache.cassettes._workload import agent_steps
n, max_calls = int(sys.argv[2]), int(sys.argv[3])
steps = list(agent_steps(n))
order = list(range(n))
random.Random(n).shuffle(order)
order = order[:max_calls]

@dejacache.cache(name="llm")
def llm(request):
    raise RuntimeError("a replay went live")

times = []
ns = time.perf_counter_ns
block = dejacache.cassette(sys.argv[1], mode="replay", cache_key="bench")
block.__enter__()
ok = True
for k in order:
    req, resp = steps[k]
    t0 = ns()
    got = llm(req)
    times.append(ns() - t0)
    ok = ok and got == resp
t1 = ns()
block.__exit__(None, None, None)
close = ns() - t1
print(json.dumps({"times": times, "close_ns": close, "ok": ok}))
"""


# Growing conversations: each request resends its conversation's whole history plus one
# new message (an agent loop), ``turns`` turns per conversation, as many conversations as
# it takes to make ``n`` entries (10k: ~33 MB on disk).
_HERE = str(pathlib.Path(__file__).resolve().parent)
_GROWING_RECORD = """
import sys
sys.path.insert(0, sys.argv[3])
import dejacache
from cassette_scale import conversation_steps
steps = list(conversation_steps(int(sys.argv[2])))
pending = [None]

@dejacache.cache(name="llm")
def llm(request):
    return pending[0]

with dejacache.cassette(sys.argv[1], mode="record", cache_key="bench"):
    for req, resp in steps:
        pending[0] = resp
        llm(req)
"""

# open + hit one late entry; then, on a copy, an auto-mode miss (a new conversation: runs
# live) and the block's exit, which saves the one new entry
_GROWING_ONE = """
import json, sys, time
t0 = time.perf_counter()
import dejacache
dejacache.cassette  # (loaded on first use)
t_import = time.perf_counter() - t0
sys.path.insert(0, sys.argv[4])
from cassette_scale import conversation_steps
n, job = int(sys.argv[2]), sys.argv[3]

@dejacache.cache(name="llm")
def llm(request):
    if job == "hit":
        raise RuntimeError("a replay went live")
    return {"role": "assistant", "content": "live"}

if job == "hit":
    req, resp = next(s for k, s in enumerate(conversation_steps(n)) if k == n - 1)
else:
    req, resp = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "new"}]}, None
t0 = time.perf_counter()
block = dejacache.cassette(sys.argv[1], mode="replay" if job == "hit" else "auto",
                           cache_key="bench")
block.__enter__()
got = llm(req)
t1 = time.perf_counter()
block.__exit__(None, None, None)
t2 = time.perf_counter()
print(json.dumps({"import_ms": t_import * 1e3, "call_ms": (t1 - t0) * 1e3,
                  "close_ms": (t2 - t1) * 1e3, "ok": resp is None or got == resp}))
"""


def conversation_steps(n: int, *, turns: int = 30, seed: int = 11, message_bytes: int = 300
                       ) -> Any:
    """``(request, response)`` pairs of agent loops whose requests resend their history."""
    import random

    from dejacache.cassettes._workload import filler

    rng = random.Random(seed)
    system = {"role": "system", "content": filler(rng, 2000)}
    made, conv = 0, 0
    while made < n:
        history: list[dict[str, Any]] = [system]
        for t in range(min(turns, n - made)):
            history.append({"role": "user",
                            "content": f"c{conv} t{t}: " + filler(rng, message_bytes)})
            reply = {"role": "assistant",
                     "content": f"c{conv} r{t}: " + filler(rng, message_bytes)}
            yield ({"model": "gpt-4o-mini", "messages": list(history), "temperature": 0},
                   {"id": f"chatcmpl-{made}", "model": "gpt-4o-mini-2024-07-18",
                    "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100 * t + 500, "completion_tokens": 80,
                              "total_tokens": 100 * t + 580}})
            history.append(reply)
            made += 1
        conv += 1


def bench_growing(n: int = 10_000, *, repeats: int = 5, env: dict[str, str] | None = None,
                  base: pathlib.Path | None = None) -> dict[str, Any]:
    """Fresh-process figures for a cassette of ``n`` growing-conversation entries: open +
    hit of the last entry, an auto-mode miss, and the save of that one new entry (on a
    fresh copy each time); medians over ``repeats`` processes, imports reported apart."""

    env = env if env is not None else _env(None)
    with tempfile.TemporaryDirectory() as d:
        where = base or pathlib.Path(d)
        path, copy = where / f"growing-{n}.json", where / f"growing-{n}-copy.json"
        _run(_GROWING_RECORD, [path, n, _HERE], env)
        hits, misses = [], []
        for rep in range(-1, repeats):  # round -1 warms the page cache and bytecode
            h = _run(_GROWING_ONE, [path, n, "hit", _HERE], env)
            _clean_copy(path, copy)
            m = _run(_GROWING_ONE, [copy, n, "miss", _HERE], env)
            if not h["ok"]:
                raise AssertionError("wrong replay of the last growing entry")
            if rep >= 0:
                hits.append(h)
                misses.append(m)
        med = statistics.median
        row = {"shape": "growing", "entries": n, "file_bytes": path.stat().st_size,
               "import_ms": med(r["import_ms"] for r in hits),
               "late_open_hit_ms": med(r["call_ms"] for r in hits),
               "max_late_open_hit_ms": max(r["call_ms"] for r in hits),
               "late_close_ms": med(r["close_ms"] for r in hits),
               "auto_miss_ms": med(r["call_ms"] for r in misses),
               "save_one_ms": med(r["close_ms"] for r in misses)}
        for p in (path, copy):
            p.unlink(missing_ok=True)
    return row


def _clean_copy(src: pathlib.Path, dst: pathlib.Path) -> None:
    """``dst`` a copy of ``src`` already on disk, as a checked-out cassette is: a save's
    fsync then costs what it writes, not the flush of a 38 MB copy made a moment ago."""
    import shutil

    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _env(src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("DEJACACHE_MODE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's process has its bytecode cached
    return env


def _run(code: str, args: list[Any], env: dict[str, str]) -> Any:
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed: {proc.stderr[-2000:]}")
    out = proc.stdout.strip().splitlines()
    return orjson.loads(out[-1]) if out else None


def bench_scale(sizes: tuple[int, ...] = (10, 1_000, 10_000), *, repeats: int = 5,
                max_calls: int = 10_000, tmp: pathlib.Path | None = None,
                src: str | None = None, growing: int = 10_000) -> list[dict[str, Any]]:
    """One dict per size: fresh-process open + hit of the first / last / a random entry and
    the block's close (medians over ``repeats`` processes, interleaved), and the per-call
    cost of a random-order replay of every entry (mean, p99, worst); then, unless
    ``growing`` is 0, one row (``"shape": "growing"``) from :func:`bench_growing`."""
    import random

    env = _env(src)
    with tempfile.TemporaryDirectory() as d:
        base = tmp or pathlib.Path(d)
        rows = []
        for n in sizes:
            path = base / f"scale-{n}.json"
            path.unlink(missing_ok=True)
            _run(_RECORD, [path, n], env)
            rng = random.Random(n)
            picks = {"first": lambda: 0, "last": lambda n=n: n - 1,
                     "random": lambda n=n, rng=rng: rng.randrange(n)}
            runs: dict[str, list[dict[str, Any]]] = {k: [] for k in picks}
            for rep in range(-1, repeats):  # round -1 warms the page cache and bytecode
                for label, pick in picks.items():
                    r = _run(_ONE, [path, n, pick()], env)
                    if not r["ok"]:
                        raise AssertionError(f"wrong replay of the {label} entry of {n}")
                    if rep >= 0:
                        runs[label].append(r)
            row: dict[str, Any] = {"entries": n, "file_bytes": path.stat().st_size}
            for label, rs in runs.items():
                row[f"{label}_open_hit_ms"] = statistics.median(r["open_hit_ms"] for r in rs)
                row[f"{label}_close_ms"] = statistics.median(r["close_ms"] for r in rs)
            row["max_open_hit_ms"] = max(r["open_hit_ms"] for rs in runs.values() for r in rs)
            row["max_close_ms"] = max(r["close_ms"] for rs in runs.values() for r in rs)
            r = _run(_ALL, [path, n, max_calls], env)
            if not r["ok"]:
                raise AssertionError(f"wrong value in the random-order replay of {n}")
            s = sorted(r["times"])
            row.update(calls=len(s), mean_us=statistics.fmean(s) / 1e3,
                       median_us=statistics.median(s) / 1e3,
                       p99_us=s[min(len(s) - 1, round(0.99 * (len(s) - 1)))] / 1e3,
                       max_us=s[-1] / 1e3, replay_close_ms=r["close_ns"] / 1e6)
            rows.append(row)
            path.unlink()
        if growing:
            rows.append(bench_growing(growing, repeats=repeats, env=env, base=base))
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| entries | file | open+hit first / last / random (ms) | close (ms) | "
            "replay mean / p99 / worst (µs) |\n|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        if r.get("shape") == "growing":
            continue
        lines.append(
            f"| {r['entries']:,} | {r['file_bytes'] / 1e6:.1f} MB | "
            f"{r['first_open_hit_ms']:.1f} / {r['last_open_hit_ms']:.1f} / "
            f"{r['random_open_hit_ms']:.1f} | {r['random_close_ms']:.1f} "
            f"(max {r['max_close_ms']:.1f}) | {r['mean_us']:.0f} / {r['p99_us']:.0f} / "
            f"{r['max_us']:.0f} |")
    for r in rows:
        if r.get("shape") == "growing":
            lines.append(
                f"\ngrowing conversations, {r['entries']:,} entries, "
                f"{r['file_bytes'] / 1e6:.1f} MB: open + late hit {r['late_open_hit_ms']:.1f} "
                f"ms (imports {r['import_ms']:.0f} ms apart), auto miss "
                f"{r['auto_miss_ms']:.1f} ms, save of one new entry {r['save_one_ms']:.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--src", default=None, help="run the children against this src/ copy")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--growing-only", action="store_true")
    a = ap.parse_args(argv)
    sizes = (10, 100, 1_000) if a.quick else (10, 1_000, 10_000)
    growing = 1_000 if a.quick else 10_000
    if a.growing_only:
        rows = [bench_growing(growing, repeats=a.repeats, env=_env(a.src))]
    else:
        rows = bench_scale(sizes, repeats=1 if a.quick else a.repeats, src=a.src,
                           growing=growing)
    print(_table(rows))
    print(orjson.dumps(rows).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
