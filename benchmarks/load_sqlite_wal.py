"""The SQLite store's write-ahead log under a fleet of busy readers: does it stay bounded?

Four processes share one ``SQLiteStore`` file (90% reads of a working set, 10% writes of
2-6 KB entries and counter increments), while ``dejacache stats`` and ``dejacache clear``
run against the same file every half second, as an operator would. Every 0.5 s the size of
the ``-wal`` file next to the database is sampled. At the end: the largest and the last WAL
size, the database size, the integrity check, and every error a process met. Every read is
checked against what its own process last wrote (wrong answers: a value for another key).

    .venv/bin/python benchmarks/load_sqlite_wal.py [--seconds 60] [--procs 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pathlib
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

MB = 2**20


def _worker(path: str, seconds: float, seed: int, out: Any) -> None:
    from dejacache.stores import Record, SQLiteStore

    store = SQLiteStore(path)
    rnd = random.Random(seed)
    errors: list[str] = []
    ops = wrong = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = f"k{rnd.randrange(2000)}"
        try:
            if rnd.random() < 0.1:
                body = orjson.dumps({"key": key, "pad": "x" * rnd.randrange(2000, 6000)})
                store.put(key, Record(value=body, name="load"))
                store.incr_many([f"gen/{key}"])
            else:
                rec = store.get(key)
                if rec is not None and orjson.loads(rec.value)["key"] != key:
                    wrong += 1
            ops += 1
        except Exception as exc:  # every error is reported: none may happen
            if len(errors) < 5:
                errors.append(repr(exc))
    store.close()
    out.put({"ops": ops, "wrong": wrong, "errors": errors})


def _operator(path: str, seconds: float, out: Any) -> None:
    """``dejacache stats`` and, every fourth time, ``dejacache clear``, every 0.5 s."""
    cli = [sys.executable, "-m", "dejacache"]
    url = f"sqlite:///{path}"
    runs, failed = 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cmd = "clear" if runs % 4 == 3 else "stats"
        done = subprocess.run([*cli, cmd, "--store", url], capture_output=True, text=True,
                              timeout=60)
        runs += 1
        if done.returncode != 0 and len(failed) < 5:
            failed.append(f"{cmd}: {done.stderr.strip()[-300:]}")
        time.sleep(0.5)
    out.put({"cli_runs": runs, "cli_failed": failed})


def run(seconds: float, procs: int, root: pathlib.Path) -> dict[str, Any]:
    path = root / "fleet.db"
    wal = pathlib.Path(str(path) + "-wal")
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    from dejacache.stores import SQLiteStore

    SQLiteStore(path).close()  # created before the fleet starts
    workers = [ctx.Process(target=_worker, args=(str(path), seconds, i, out))
               for i in range(procs)]
    workers.append(ctx.Process(target=_operator, args=(str(path), seconds, out)))
    for p in workers:
        p.start()
    samples: list[tuple[float, int]] = []
    t0 = time.monotonic()
    while any(p.is_alive() for p in workers):
        size = wal.stat().st_size if wal.exists() else 0
        samples.append((round(time.monotonic() - t0, 1), size))
        time.sleep(0.5)
    results = [out.get(timeout=30) for _ in workers]
    for p in workers:
        p.join()
    db = sqlite3.connect(path)
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    db.close()
    fleet = [r for r in results if "ops" in r]
    cli = next(r for r in results if "cli_runs" in r)
    return {
        "seconds": seconds, "procs": procs,
        "wal_max_mb": round(max(s for _, s in samples) / MB, 1),
        "wal_end_mb": round(samples[-1][1] / MB, 1),
        "wal_at": {f"{t:g}s": round(s / MB, 1) for t, s in samples[:: max(1, len(samples) // 8)]},
        "db_mb": round(path.stat().st_size / MB, 1),
        "ops": sum(r["ops"] for r in fleet), "wrong": sum(r["wrong"] for r in fleet),
        "errors": [e for r in fleet for e in r["errors"]],
        "cli_runs": cli["cli_runs"], "cli_failed": cli["cli_failed"],
        "integrity": integrity,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dejacache-wal-") as d:
        result = run(args.seconds, args.procs, pathlib.Path(d))
    print(f"## SQLite WAL under {args.procs} processes and the CLI ({args.seconds:g} s)\n")
    print(f"WAL max {result['wal_max_mb']} MB, at the end {result['wal_end_mb']} MB, "
          f"database {result['db_mb']} MB; {result['ops']:,} operations, "
          f"{result['wrong']} wrong, {len(result['errors'])} errors, "
          f"{result['cli_runs']} CLI runs ({len(result['cli_failed'])} failed), "
          f"integrity {result['integrity']}")
    print("WAL over time (MB):", result["wal_at"])
    if args.json:
        pathlib.Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    bad = result["wrong"] or result["errors"] or result["cli_failed"] or \
        result["integrity"] != "ok"
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::ResourceWarning")
    sys.exit(main())
