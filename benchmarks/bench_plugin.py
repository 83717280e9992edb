"""What the pytest plugin costs a run: a one-test suite with the plugin and with
``-p no:dejacache``, in fresh processes.

Three suites: ``plain`` (one test, no cassette: what every project with dejacache installed
pays, cassettes or not), ``cassette`` (one test replaying one call from a cassette through
the plugin's fixture) and ``block`` (the same test opening the same cassette itself with
``with dejacache.cassette(...)``, run with ``-p no:dejacache``: the library's own cost, which
a suite using dejacache without the plugin pays too). The plugin's cost with a cassette is
``cassette`` minus ``block``; ``block`` minus ``plain`` without the plugin is what importing
dejacache and opening, replaying and closing one cassette costs a pytest process. Each
sample is a whole ``python -m pytest`` process; the two variants alternate round by round so
a busy machine slows both alike. ``wall`` is the process's wall time, ``cpu`` its user +
system time (``os.wait4``: less sensitive than wall time to other work on a shared box).
``--src DIR`` measures another copy of ``src/`` (the figures before a change:
``git archive HEAD src | tar -x -C DIR``).

A fourth suite, ``phased``, is ``plain`` with a conftest that leaves K objects in reference
cycles for the collector to free (K drawn per round from 0..70,000, the same K for the run
with and without the plugin). Why: a one-test pytest run ends close to a point where CPython
decides on a full collection (~25 ms of a ~900 ms run here), so a few thousand allocations
more or less (a plugin's, a conftest's, another hash seed) add or save one whole collection;
one fixed suite then reports either 0 or ~25 ms of collector for whatever it measures. Ten
gen-1 collections of 700 allocations each (70,000) are one full period of that decision: over
K the plugin's cost is what a suite pays on average, wherever its own allocations put it.

Instructions. Wall and CPU time are what a user feels on a quiet machine, but on this 2-core
shared box the CPU time of one and the same run varied 466-687 ms, and two trees with the same
no-cassette path measured +3 and +38 ms: too coarse for goals of 20 and 40 ms. So the four
suites (``plain`` without and with the plugin, ``cassette``, ``block``) are also run once each
under ``valgrind --tool=callgrind`` (its "Collected : N"), after the timed rounds, with hash
seed 0 and a sitecustomize that disables the automatic collector: with it on, a fixed suite's
count moves by a whole full collection with the allocations around it (see ``phased``), so the
count would say more about the collector's phase than about the plugin; ``--gc`` counts with
it on (the control). Two counts of the same tree agree within ~1M instructions (~0.3 ms). The
instructions become ms at this box's rate for this kind of process: the floor's count over
the median CPU time of the same process (seed 0, collector off) run natively in every round.
Without valgrind the instruction mode says so and is skipped.

    .venv/bin/python benchmarks/bench_plugin.py [--rounds N | --quick] [--src DIR] [--before DIR]
        [--gc]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE.parent / "src"

_PLAIN = "def test_one():\n    assert 1 + 1 == 2\n"
_CASSETTE = textwrap.dedent("""
    import dejacache

    @dejacache.cache
    def add(a, b):
        return a + b

    def test_one(dejacache_cassette):
        assert add(1, 2) == 3
""")
_BLOCK = textwrap.dedent("""
    import pathlib

    import dejacache

    @dejacache.cache
    def add(a, b):
        return a + b

    def test_one():
        path = pathlib.Path(__file__).parent / "cassettes" / "test_one" / "test_one.json"
        with dejacache.cassette(path):
            assert add(1, 2) == 3
""")


# Cyclic garbage: K allocations that move the collector's counters on, freed by its young
# collections, so the heap a full collection walks does not grow with K.
_PHASED_CONFTEST = textwrap.dedent("""
    import os


    def _garbage(n):
        for _ in range(n):
            cycle = []
            cycle.append(cycle)


    _garbage(int(os.environ.get("BENCH_GC_SHIFT", "0")))
""")
GC_PERIOD = 70_000  # allocations between two decisions on a full collection (700 x 10)


# Counted processes run with the automatic collector off: a one-test run ends near the point
# where CPython decides on a full collection (see ``phased`` above), so with it on one fixed
# suite's count moves by a whole collection with a few thousand allocations more or less.
_NO_GC = "import gc\n\ngc.disable()\n"
_COLLECTED = re.compile(rb"Collected : (\d+)")
# (name, variant, extra arguments): the four suites the instruction mode counts
COUNTED = (("plain", "without", ("-p", "no:dejacache")), ("plain", "with", ()),
           ("cassette", "with", ()), ("block", "without", ("-p", "no:dejacache")))
# cost name -> (suite, variant) minus (suite, variant); for wall, cpu and instructions alike
COSTS = {"plain cost": (("plain", "with"), ("plain", "without")),
         "cassette cost": (("cassette", "with"), ("plain", "without")),
         "over block": (("cassette", "with"), ("block", "without")),
         "block cost": (("block", "without"), ("plain", "without")),
         "phased cost": (("phased", "with"), ("phased", "without"))}


def _env(suite: pathlib.Path, src: pathlib.Path, shift: int = 0,
         site: pathlib.Path | None = None) -> dict[str, str]:
    """The child's environment; with ``site`` (a directory holding a sitecustomize), the
    counted processes': hash seed 0 and ``site`` first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env.update(PYTHONPATH=str(src), DEJACACHE_DIR=str(suite / ".dejacache"),
               BENCH_GC_SHIFT=str(shift))
    if site is not None:
        env.update(PYTHONPATH=f"{site}{os.pathsep}{src}", PYTHONHASHSEED="0")
    env.pop("CI", None)
    return env


def _pytest(suite: pathlib.Path, extra: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            *extra, str(suite)]


def _run(suite: pathlib.Path, src: pathlib.Path, *extra: str, shift: int = 0,
         site: pathlib.Path | None = None) -> tuple[float, float]:
    """(wall ms, cpu ms) of one pytest process over ``suite``."""
    t = time.perf_counter()
    proc = subprocess.Popen(_pytest(suite, extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env(suite, src, shift, site),
                            cwd=suite)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"pytest failed in {suite} ({' '.join(extra)})")
    return wall * 1e3, (usage.ru_utime + usage.ru_stime) * 1e3


def _count(suite: pathlib.Path, src: pathlib.Path, extra: tuple[str, ...],
           site: pathlib.Path) -> int:
    """Instructions of one pytest process over ``suite`` under callgrind (its stderr's
    "Collected : N")."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           *_pytest(suite, extra)]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=_env(suite, src, site=site), cwd=suite, check=False)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind failed in {suite} ({' '.join(extra)}): exit "
                           f"{proc.returncode}; {proc.stderr.decode(errors='replace')[-300:]}")
    return int(found.group(1))


def _instructions(suites: dict[str, pathlib.Path], src: pathlib.Path, site: pathlib.Path,
                  floor_cpu: list[float], gc: bool) -> dict[str, Any]:
    """The counted suites' instructions, the costs in M instructions and in ms at the rate of
    this box: the floor's instructions over the median CPU time of ``floor_cpu`` (native runs
    of the same process, interleaved with the others)."""
    got = {f"{name} {v}": float(_count(suites[name], src, extra, site))
           for name, v, extra in COUNTED}
    cpu = statistics.median(floor_cpu)
    rate = got["plain without"] / cpu  # instructions per ms
    out: dict[str, Any] = {"available": True, "collector": "on" if gc else "off",
                           "rate per ms": rate, "rate runs": len(floor_cpu),
                           "floor cpu ms": cpu, "floor cpu min ms": min(floor_cpu), **got}
    for cost, (a, b) in COSTS.items():
        if a[0] != "phased":
            diff = got[" ".join(a)] - got[" ".join(b)]
            out[f"{cost} M"], out[f"{cost} ms"] = diff / 1e6, diff / rate
    return out


def _suites(tmp: pathlib.Path, srcs: dict[str, pathlib.Path]
            ) -> dict[tuple[str, str], pathlib.Path]:
    """One directory per ``srcs`` label and suite, holding its test file (and conftest)."""
    suites: dict[tuple[str, str], pathlib.Path] = {}
    for label in srcs:
        for name, text in (("plain", _PLAIN), ("cassette", _CASSETTE), ("block", _BLOCK),
                           ("phased", _PLAIN)):
            suite = tmp / f"{len(suites)}-{name}"
            suite.mkdir()
            (suite / "test_one.py").write_text(text)
            if name == "phased":
                (suite / "conftest.py").write_text(_PHASED_CONFTEST)
            suites[label, name] = suite
    return suites


def bench_plugin(rounds: int = 45, srcs: dict[str, pathlib.Path] | None = None,
                 gc: bool = False) -> dict[str, dict[str, Any]]:
    """Per ``srcs`` label (default: this checkout's ``src/``), medians (ms) per suite and
    variant, the plugin's cost (with minus without) and ``instructions`` (callgrind; the
    collector off unless ``gc``; ``available`` false with ``why`` when valgrind is missing).
    Every sample of every label and variant is interleaved round by round."""
    srcs = srcs or {"this checkout": SRC}
    runs: list[tuple[str, str, tuple[str, ...], bool]] = [
        ("plain", "with", (), False), ("plain", "without", ("-p", "no:dejacache"), False),
        ("cassette", "with", (), False),  # (without the plugin the cassette suite has no fixture)
        ("block", "without", ("-p", "no:dejacache"), False),
        ("phased", "with", (), False), ("phased", "without", ("-p", "no:dejacache"), False)]
    counting = shutil.which("valgrind") is not None
    if counting:  # the floor as counted, run natively: the rate's CPU time
        runs.append(("plain", "as counted", ("-p", "no:dejacache"), True))
    shifts = random.Random(35)
    with tempfile.TemporaryDirectory() as tmp:
        site = pathlib.Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("" if gc else _NO_GC)
        suites = _suites(pathlib.Path(tmp), srcs)
        for (label, name), suite in suites.items():  # records the cassette; caches bytecode
            _run(suite, srcs[label], *(("-p", "no:dejacache") if name == "block" else ()))
        if counting:  # caches the sitecustomize's bytecode
            for label in srcs:
                _run(suites[label, "plain"], srcs[label], "-p", "no:dejacache", site=site)
        samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        order = [(label, *run) for label in srcs for run in runs]
        for r in range(rounds):
            shift = shifts.randrange(GC_PERIOD)  # one phase per round, for every variant
            for label, name, v, extra, counted in (order if r % 2 == 0 else order[::-1]):
                got = _run(suites[label, name], srcs[label], *extra, shift=shift,
                           site=site if counted else None)
                samples.setdefault((label, name, v), []).append(got)
        out = {label: _medians(samples, label, rounds) for label in srcs}
        for label in srcs:
            if not counting:
                out[label]["instructions"] = {"available": False, "why": "valgrind not found"}
                continue
            mine = {name: suites[label, name] for name in ("plain", "cassette", "block")}
            cpu = [c for _, c in samples[label, "plain", "as counted"]]
            try:
                out[label]["instructions"] = _instructions(mine, srcs[label], site, cpu, gc)
            except RuntimeError as exc:
                out[label]["instructions"] = {"available": False, "why": str(exc)}
    return out


def _medians(samples: dict[tuple[str, str, str], list[tuple[float, float]]], label: str,
             rounds: int) -> dict[str, Any]:
    res: dict[str, Any] = {"rounds": float(rounds)}
    for (lab, name, v), got in samples.items():
        if lab == label:
            res[f"{name} {v} wall"] = statistics.median(w for w, _ in got)
            res[f"{name} {v} cpu"] = statistics.median(c for _, c in got)

    # Each cost is the median of the differences within a round (the two processes run
    # side by side), not the difference of two medians: on a loaded box two medians of
    # the same suite differed by ~100 ms, far more than the plugin costs.
    def paired(a: tuple[str, str], b: tuple[str, str], i: int) -> list[float]:
        return [x[i] - y[i] for x, y in zip(samples[(label, *a)], samples[(label, *b)],
                                            strict=True)]

    for i, t in enumerate(("wall", "cpu")):
        for name, (a, b) in COSTS.items():
            res[f"{name} {t}"] = statistics.median(paired(a, b, i))
        res[f"phased mean cost {t}"] = statistics.fmean(
            paired(("phased", "with"), ("phased", "without"), i))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=45,
                    help="interleaved rounds (45; the docs' run.py uses as many)")
    ap.add_argument("--quick", action="store_true", help="5 rounds")
    ap.add_argument("--src", type=pathlib.Path, default=SRC, help="the src/ to measure")
    ap.add_argument("--before", type=pathlib.Path, default=None,
                    help="another src/ measured in the same rounds (the figures before)")
    ap.add_argument("--gc", action="store_true",
                    help="count instructions with the automatic collector on (the control)")
    args = ap.parse_args(argv)
    mine = "this checkout" if args.src == SRC else str(args.src)
    srcs = {mine: args.src.resolve()}
    if args.before is not None:
        srcs = {"before": args.before.resolve(), "after": args.src.resolve()}
    results = bench_plugin(5 if args.quick else args.rounds, srcs, gc=args.gc)
    import render  # the table the docs block shows, from the same results

    print("## The pytest plugin's cost\n")
    print(render.plugin_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
