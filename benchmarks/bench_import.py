"""Import time: ``import dejacache`` in a fresh interpreter vs importing its two C
dependencies (orjson + xxhash), the floor any import of dejacache pays.

Every sample is a new interpreter with bytecode already cached (one warm-up run of each
first). The contenders are interleaved, round by round, so a busy machine slows them alike;
the ratio divides the two medians of the same run. ``import`` is the time of the import
statement measured inside the child; ``process`` is the child's whole wall time, interpreter
start-up included. ``first @cache`` is ``from dejacache import cache, scope`` (what a test or
an agent imports first), to show the lazy names are not hiding a slow first use.

    .venv/bin/python benchmarks/bench_import.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _timing import machine, md_table, versions  # noqa: E402

CONTENDERS: dict[str, str] = {
    "floor: import orjson, xxhash": "import orjson, xxhash",
    "import dejacache": "import dejacache",
    "from dejacache import cache, scope": "from dejacache import cache, scope",
}
FLOOR = "floor: import orjson, xxhash"
TARGET = "import dejacache"

_CHILD = ("import time\nt = time.perf_counter()\n{stmt}\n"
          "print(time.perf_counter() - t)\n")


def _sample(stmt: str) -> tuple[float, float]:
    """(import seconds, process seconds) of one fresh interpreter."""
    # PYTHON* settings (no bytecode, dev mode) would distort the child; PYTHONPATH is kept so
    # a checkout other than the installed one can be measured.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") or k == "PYTHONPATH"}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD.format(stmt=stmt)], check=True,
                         capture_output=True, text=True, env=env, cwd=HERE).stdout
    return float(out.strip().splitlines()[-1]), time.perf_counter() - t


def bench_import(rounds: int = 15) -> dict[str, float]:
    """Medians in milliseconds over ``rounds`` interleaved fresh interpreters per contender,
    and ``ratio``: ``import dejacache`` over the orjson + xxhash floor of the same run."""
    for stmt in CONTENDERS.values():  # compile and cache bytecode; not measured
        _sample(stmt)
    imports: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    procs: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    names = list(CONTENDERS)
    for r in range(rounds):
        # Alternate the order each round so neither contender always runs right after the
        # other (page cache, CPU frequency).
        for name in names if r % 2 == 0 else reversed(names):
            imp, proc = _sample(CONTENDERS[name])
            imports[name].append(imp * 1e3)
            procs[name].append(proc * 1e3)
    out: dict[str, float] = {"rounds": float(rounds)}
    for name in names:
        out[f"{name} import ms"] = statistics.median(imports[name])
        out[f"{name} process ms"] = statistics.median(procs[name])
    out["ratio"] = out[f"{TARGET} import ms"] / out[f"{FLOOR} import ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds instead of 21")
    args = ap.parse_args(argv)
    res = bench_import(5 if args.quick else 21)
    floor = res[f"{FLOOR} import ms"]
    rows = [
        (name, f"{res[f'{name} import ms']:.1f}", f"{res[f'{name} import ms'] / floor:.2f}x",
         f"{res[f'{name} process ms']:.1f}")
        for name in CONTENDERS
    ]
    print("## Import time (fresh interpreter, bytecode cached)\n")
    print(f"{machine()}; {versions('orjson', 'xxhash')}. Median of {int(res['rounds'])} "
          "interleaved fresh interpreters per row; goal: `import dejacache` ≤ 50 ms.\n")
    print(md_table(["statement", "import ms", "x floor", "process ms"], rows))
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
