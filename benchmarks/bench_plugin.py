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

    .venv/bin/python benchmarks/bench_plugin.py [--quick] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

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


def _run(suite: pathlib.Path, src: pathlib.Path, *extra: str, shift: int = 0
         ) -> tuple[float, float]:
    """(wall ms, cpu ms) of one pytest process over ``suite``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env.update(PYTHONPATH=str(src), DEJACACHE_DIR=str(suite / ".dejacache"),
               BENCH_GC_SHIFT=str(shift))
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           *extra, str(suite)]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=suite)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"pytest failed in {suite} ({' '.join(extra)})")
    return wall * 1e3, (usage.ru_utime + usage.ru_stime) * 1e3


def bench_plugin(rounds: int = 15, srcs: dict[str, pathlib.Path] | None = None
                 ) -> dict[str, dict[str, float]]:
    """Per ``srcs`` label (default: this checkout's ``src/``), medians (ms) per suite and
    variant, and the plugin's cost: with minus without. Every sample of every label and
    variant is interleaved round by round."""
    srcs = srcs or {"this checkout": SRC}
    runs = [("plain", "with", ()), ("plain", "without", ("-p", "no:dejacache")),
            ("cassette", "with", ()),  # (without the plugin the cassette suite has no fixture)
            ("block", "without", ("-p", "no:dejacache")),
            ("phased", "with", ()), ("phased", "without", ("-p", "no:dejacache"))]
    shifts = random.Random(35)
    with tempfile.TemporaryDirectory() as tmp:
        suites = {}
        for label in srcs:
            for name, text in (("plain", _PLAIN), ("cassette", _CASSETTE), ("block", _BLOCK),
                               ("phased", _PLAIN)):
                suite = pathlib.Path(tmp) / f"{len(suites)}-{name}"
                suite.mkdir()
                (suite / "test_one.py").write_text(text)
                if name == "phased":
                    (suite / "conftest.py").write_text(_PHASED_CONFTEST)
                suites[label, name] = suite
        for (label, name), suite in suites.items():  # records the cassette; caches bytecode
            _run(suite, srcs[label], *(("-p", "no:dejacache") if name == "block" else ()))
        samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        order = [(label, name, v, extra) for label in srcs for name, v, extra in runs]
        for r in range(rounds):
            shift = shifts.randrange(GC_PERIOD)  # one phase per round, for every variant
            for label, name, v, extra in (order if r % 2 == 0 else list(reversed(order))):
                got = _run(suites[label, name], srcs[label], *extra, shift=shift)
                samples.setdefault((label, name, v), []).append(got)
    out: dict[str, dict[str, float]] = {}
    for label in srcs:
        res: dict[str, float] = {"rounds": float(rounds)}
        for (lab, name, v), got in samples.items():
            if lab == label:
                res[f"{name} {v} wall"] = statistics.median(w for w, _ in got)
                res[f"{name} {v} cpu"] = statistics.median(c for _, c in got)
        # Each cost is the median of the differences within a round (the two processes run
        # side by side), not the difference of two medians: on a loaded box two medians of
        # the same suite differed by ~100 ms, far more than the plugin costs.
        def paired(a: tuple[str, str], b: tuple[str, str], i: int,
                   label: str = label) -> list[float]:
            return [x[i] - y[i] for x, y in zip(samples[(label, *a)], samples[(label, *b)],
                                                strict=True)]

        for i, t in enumerate(("wall", "cpu")):
            for name, (a, b) in {
                    "plain cost": (("plain", "with"), ("plain", "without")),
                    "cassette cost": (("cassette", "with"), ("plain", "without")),
                    "over block": (("cassette", "with"), ("block", "without")),
                    "block cost": (("block", "without"), ("plain", "without")),
                    "phased cost": (("phased", "with"), ("phased", "without"))}.items():
                res[f"{name} {t}"] = statistics.median(paired(a, b, i))
            res[f"phased mean cost {t}"] = statistics.fmean(
                paired(("phased", "with"), ("phased", "without"), i))
        out[label] = res
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    ap.add_argument("--src", type=pathlib.Path, default=SRC, help="the src/ to measure")
    ap.add_argument("--before", type=pathlib.Path, default=None,
                    help="another src/ measured in the same rounds (the figures before)")
    args = ap.parse_args(argv)
    srcs = {"this checkout": args.src.resolve()}
    if args.before is not None:
        srcs = {"before": args.before.resolve(), "after": args.src.resolve()}
    results = bench_plugin(5 if args.quick else 15, srcs)
    rounds = int(next(iter(results.values()))["rounds"])
    print(f"## The pytest plugin's cost (median of {rounds} processes each, interleaved)\n")
    print("| src | suite | with the plugin: wall / cpu ms | plugin's cost: wall / cpu ms |")
    print("|---|---|---|---|")
    for label, res in results.items():
        print(f"| {label} | one test, `-p no:dejacache` | {res['plain without wall']:.0f} / "
              f"{res['plain without cpu']:.0f} | (the floor) |")
        for name, text in (("plain", "one test, no cassette"),
                           ("cassette", "one test replaying a cassette")):
            print(f"| {label} | {text} | {res[f'{name} with wall']:.0f} / "
                  f"{res[f'{name} with cpu']:.0f} | {res[f'{name} cost wall']:+.0f} / "
                  f"{res[f'{name} cost cpu']:+.0f} |")
        print(f"| {label} | the same test, its own `dejacache.cassette` block, "
              f"`-p no:dejacache` | {res['block without wall']:.0f} / "
              f"{res['block without cpu']:.0f} | (the library's: {res['block cost wall']:+.0f} / "
              f"{res['block cost cpu']:+.0f}) |")
        print(f"| {label} | the fixture against that block | | {res['over block wall']:+.0f} / "
              f"{res['over block cpu']:+.0f} |")
        print(f"| {label} | one test, no cassette, the collector's phase varied (median / mean "
              f"of the paired rounds) | {res['phased with wall']:.0f} / "
              f"{res['phased with cpu']:.0f} | {res['phased cost wall']:+.0f} / "
              f"{res['phased cost cpu']:+.0f} (mean {res['phased mean cost wall']:+.0f} / "
              f"{res['phased mean cost cpu']:+.0f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
