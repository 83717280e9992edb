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
Each cost also keeps its median's 95% interval (the sign test's order statistics), so a
figure that one run puts under a goal and the next over it shows its spread.
``--src DIR`` measures another copy of ``src/`` (the figures before a change:
``git archive HEAD src | tar -x -C DIR``).

Timed with the automatic collector off. A one-test pytest run ends close to a point where
CPython decides on a full collection (~25-60 ms of a ~600 ms run here): the floor ran 120
young, 10 middle and 2 full collections, the plugin's run (one more young one: ~700
allocations) 3 full ones. So with the collector on, one fixed suite reports either 0 or a
whole full collection for whatever it measures, and which of the two depends on the suite
around the plugin, not on the plugin (any plugin's few hundred allocations tip it). The timed
processes therefore run with a sitecustomize that calls ``gc.disable()`` and hash seed 0,
exactly as they are counted below; what the collector costs on average is counted apart.

Instructions. Wall and CPU time are what a user feels on a quiet machine, but on this 2-core
shared box the CPU time of one and the same run varied 466-708 ms, and paired differences of
one round moved by ±100 ms: too coarse alone for goals of 20 and 40 ms. So the four suites
(``plain`` without and with the plugin, ``cassette``, ``block``) are also run once each under
``valgrind --tool=callgrind`` (its "Collected : N"), after the timed rounds, in the timed
processes' environment. Two counts of one tree agree within ~1M instructions (~0.3 ms). The
instructions become ms at this box's rate for this kind of process: the floor's count over the
median CPU time of the same process timed in the rounds.

The collector's average share. ``phased`` suites (``plain`` and ``cassette`` with a conftest
that first leaves K objects in reference cycles for young collections to free) are counted
with the collector on at five K spread over 0..70,000 (ten middle collections of 700
allocations each: one full period of the decision on a full collection). Over K, the plugin's
cost is what a suite pays on average wherever its own allocations put it; that average less
the collector-off cost is the collector's share, added to the counted and to the timed cost
when they are held to the goals. Without valgrind the instruction mode says so and is skipped.

    .venv/bin/python benchmarks/bench_plugin.py [--rounds N | --quick] [--src DIR] [--before DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import os
import pathlib
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


_NO_GC = "import gc\n\ngc.disable()\n"
_COLLECTED = re.compile(rb"Collected : (\d+)")
# (name, variant, extra arguments): the four suites timed, and counted, with the collector off
COUNTED = (("plain", "without", ("-p", "no:dejacache")), ("plain", "with", ()),
           ("cassette", "with", ()), ("block", "without", ("-p", "no:dejacache")))
# the same with the collector on, counted at each of PHASES (the phased suites)
PHASED = (("phased", "without", ("-p", "no:dejacache")), ("phased", "with", ()),
          ("phased cassette", "with", ()))
PHASES = tuple(GC_PERIOD * i // 5 for i in range(5))
# cost name -> (suite, variant) minus (suite, variant); for wall, cpu and instructions alike
COSTS = {"plain cost": (("plain", "with"), ("plain", "without")),
         "cassette cost": (("cassette", "with"), ("plain", "without")),
         "over block": (("cassette", "with"), ("block", "without")),
         "block cost": (("block", "without"), ("plain", "without"))}
# a goal's cost -> its phased twin (the collector on, averaged over PHASES)
AVERAGED = {"plain cost": (("phased", "with"), ("phased", "without")),
            "cassette cost": (("phased cassette", "with"), ("phased", "without"))}


def _env(suite: pathlib.Path, src: pathlib.Path, site: pathlib.Path, shift: int = 0
         ) -> dict[str, str]:
    """The child's environment: hash seed 0, ``site`` (a directory holding a sitecustomize)
    first on the path, ``shift`` objects of cyclic garbage for a phased suite's conftest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env.update(PYTHONPATH=f"{site}{os.pathsep}{src}", PYTHONHASHSEED="0",
               DEJACACHE_DIR=str(suite / ".dejacache"), BENCH_GC_SHIFT=str(shift))
    env.pop("CI", None)
    return env


# The peers' plugins, off in every variant (the floor too): cassetter's and agentcassette's
# both add --record-mode, so in the bench venv, which has both, pytest refused to start.
_PEERS = ("-p", "no:cassetter", "-p", "no:agentcassette")


def _pytest(suite: pathlib.Path, extra: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            *_PEERS, *extra, str(suite)]


def _run(suite: pathlib.Path, src: pathlib.Path, site: pathlib.Path, *extra: str
         ) -> tuple[float, float]:
    """(wall ms, cpu ms) of one pytest process over ``suite``."""
    t = time.perf_counter()
    proc = subprocess.Popen(_pytest(suite, extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env(suite, src, site), cwd=suite)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"pytest failed in {suite} ({' '.join(extra)})")
    return wall * 1e3, (usage.ru_utime + usage.ru_stime) * 1e3


def _count(suite: pathlib.Path, src: pathlib.Path, extra: tuple[str, ...],
           site: pathlib.Path, shift: int = 0) -> int:
    """Instructions of one pytest process over ``suite`` under callgrind (its stderr's
    "Collected : N")."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           *_pytest(suite, extra)]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=_env(suite, src, site, shift), cwd=suite, check=False)
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind failed in {suite} ({' '.join(extra)}): exit "
                           f"{proc.returncode}; {proc.stderr.decode(errors='replace')[-300:]}")
    return int(found.group(1))


def _instructions(suites: dict[str, pathlib.Path], src: pathlib.Path,
                  sites: dict[str, pathlib.Path], floor_cpu: list[float]) -> dict[str, Any]:
    """The counted suites' instructions, the costs in M instructions and in ms at the rate of
    this box (the floor's instructions over the median CPU time of ``floor_cpu``, its timed
    runs), and each goal's cost with the collector on averaged over ``PHASES``. Two counts
    run at a time: callgrind counts the same whatever else the box runs."""
    jobs = {f"{name} {v}": (suites[name], extra, sites["off"], 0)
            for name, v, extra in COUNTED}
    jobs |= {f"{name} {v} @{k}": (suites[name], extra, sites["on"], k)
             for name, v, extra in PHASED for k in PHASES}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {key: pool.submit(_count, suite, src, extra, site, k)
                   for key, (suite, extra, site, k) in jobs.items()}
        got = {key: float(f.result()) for key, f in futures.items()}
    cpu = statistics.median(floor_cpu)
    rate = got["plain without"] / cpu  # instructions per ms
    out: dict[str, Any] = {"available": True, "rate per ms": rate, "rate runs": len(floor_cpu),
                           "floor cpu ms": cpu, "floor cpu min ms": min(floor_cpu),
                           "phases": len(PHASES), **got}
    diffs = {cost: got[" ".join(a)] - got[" ".join(b)] for cost, (a, b) in COSTS.items()}
    for cost, (a, b) in AVERAGED.items():  # the collector on, over its phases
        avg = statistics.fmean(got[f"{' '.join(a)} @{k}"] - got[f"{' '.join(b)} @{k}"]
                               for k in PHASES)
        diffs[f"{cost} averaged"], diffs[f"{cost} collector"] = avg, avg - diffs[cost]
    for name, diff in diffs.items():
        out[f"{name} M"], out[f"{name} ms"] = diff / 1e6, diff / rate
    return out


def _suites(tmp: pathlib.Path, srcs: dict[str, pathlib.Path]
            ) -> dict[tuple[str, str], pathlib.Path]:
    """One directory per ``srcs`` label and suite, holding its test file (and conftest)."""
    suites: dict[tuple[str, str], pathlib.Path] = {}
    for label in srcs:
        for name, text in (("plain", _PLAIN), ("cassette", _CASSETTE), ("block", _BLOCK),
                           ("phased", _PLAIN), ("phased cassette", _CASSETTE)):
            suite = tmp / f"{len(suites)}-{name.replace(' ', '-')}"
            suite.mkdir()
            (suite / "test_one.py").write_text(text)
            if name.startswith("phased"):
                (suite / "conftest.py").write_text(_PHASED_CONFTEST)
            suites[label, name] = suite
    return suites


def _sites(tmp: pathlib.Path) -> dict[str, pathlib.Path]:
    """A sitecustomize directory per collector setting: ``off`` (``gc.disable()``), ``on``."""
    sites = {}
    for name, text in (("off", _NO_GC), ("on", "")):
        site = sites[name] = tmp / f"site-{name}"
        site.mkdir()
        (site / "sitecustomize.py").write_text(text)
    return sites


def bench_plugin(rounds: int = 45, srcs: dict[str, pathlib.Path] | None = None
                 ) -> dict[str, dict[str, Any]]:
    """Per ``srcs`` label (default: this checkout's ``src/``), medians (ms) per suite and
    variant with the collector off, the plugin's cost (with minus without) and
    ``instructions`` (callgrind; ``available`` false with ``why`` when valgrind is missing).
    Every sample of every label and variant is interleaved round by round."""
    srcs = srcs or {"this checkout": SRC}
    counting = shutil.which("valgrind") is not None
    with tempfile.TemporaryDirectory() as tmp:
        sites = _sites(pathlib.Path(tmp))
        suites = _suites(pathlib.Path(tmp), srcs)
        for (label, name), suite in suites.items():  # records the cassette; caches bytecode
            _run(suite, srcs[label], sites["on" if name.startswith("phased") else "off"],
                 *(("-p", "no:dejacache") if name == "block" else ()))
        samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        order = [(label, *run) for label in srcs for run in COUNTED]
        for r in range(rounds):
            for label, name, v, extra in (order if r % 2 == 0 else order[::-1]):
                got = _run(suites[label, name], srcs[label], sites["off"], *extra)
                samples.setdefault((label, name, v), []).append(got)
        out = {label: _medians(samples, label, rounds) for label in srcs}
        for label in srcs:
            if not counting:
                out[label]["instructions"] = {"available": False, "why": "valgrind not found"}
                continue
            mine = {name: suites[label, name] for name, _, _ in (*COUNTED, *PHASED)}
            cpu = [c for _, c in samples[label, "plain", "without"]]
            try:
                out[label]["instructions"] = _instructions(mine, srcs[label], sites, cpu)
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
            res[f"{name} {t} interval"] = median_interval(paired(a, b, i))
    return res


def median_interval(xs: list[float], level: float = 0.95) -> list[float]:
    """The sign test's interval for the median of ``xs``: the order statistics ``j`` and
    ``n + 1 - j`` (1-based) for the largest ``j`` whose binomial coverage is at least
    ``level``; it assumes nothing about how the paired differences are spread (this box's
    are skewed by bursts of other work). Below 6 samples no ``j`` reaches 95%: then the
    smallest and largest. 45 rounds give the 16th and 30th."""
    x = sorted(xs)
    n = len(x)
    tail, j = 0.0, 0  # tail: P(Binomial(n, 1/2) <= j - 1)
    while j < n // 2 and 2 * (tail + math.comb(n, j) / 2**n) <= 1 - level:
        tail += math.comb(n, j) / 2**n
        j += 1
    j = max(j, 1)
    return [x[j - 1], x[n - j]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=45,
                    help="interleaved rounds (45; the docs' run.py uses as many)")
    ap.add_argument("--quick", action="store_true", help="5 rounds")
    ap.add_argument("--src", type=pathlib.Path, default=SRC, help="the src/ to measure")
    ap.add_argument("--before", type=pathlib.Path, default=None,
                    help="another src/ measured in the same rounds (the figures before)")
    args = ap.parse_args(argv)
    mine = "this checkout" if args.src == SRC else str(args.src)
    srcs = {mine: args.src.resolve()}
    if args.before is not None:
        srcs = {"before": args.before.resolve(), "after": args.src.resolve()}
    results = bench_plugin(5 if args.quick else args.rounds, srcs)
    import render  # the table the docs block shows, from the same results

    print("## The pytest plugin's cost\n")
    print(render.plugin_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
