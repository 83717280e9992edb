"""Run every benchmark, write its JSON results and benchmarks/RESULTS.md (``make bench``).

Each benchmark runs in its own process (one tool's imports and heap cannot slow another):
the scripts in ``SCRIPTS`` take ``--json PATH`` (and ``--quick``) and print Markdown; the
functions in ``FUNCTIONS`` return a dict or list, stored under ``result``. A function whose
module is not there yet is recorded as not available rather than failing the run. Other
``bench_*.py`` scripts run the old way (Markdown only).

A full run writes ``benchmarks/results/<name>.json`` and RESULTS.md; ``benchmarks/render.py``
then rewrites the README and docs blocks from the JSON. ``--quick`` (a smoke run) writes its
JSON to a temporary directory unless ``--results`` says where, so a smoke run never replaces
the committed numbers.

    .venv/bin/python benchmarks/run.py [--quick] [--only core,cassette] [--results DIR]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import render  # noqa: E402
from _timing import RESULTS, machine, versions, write_json  # noqa: E402

SCRIPTS = ("core", "cassette", "http", "redis", "runtime", "flat")
# dejacache proxy against a floor and aimock, from a Node client (needs node; installs
# aimock with npm ci in benchmarks/node)
SCRIPTS += ("proxy",)
# dejacache vs cassetter vs vcrpy over httpx (~15 min in full: the peers' record and replay
# rows are capped by time budgets, and say so)
SCRIPTS += ("peers_http",)

# name -> (module, function, full-run arguments, quick arguments); arguments the function does
# not accept are dropped, so a helper's signature can change without breaking the run.
FUNCTIONS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "sqlite_size": ("bench_sqlite_size", "bench_sqlite_size", {"n": 10_000, "budget": 1.0},
                    {"n": 1_000, "budget": 0.3, "quick": True}),
    "keys_growth": ("bench_keys_growth", "bench_keys_growth", {},
                    {"conversations": 10, "repeats": 1}),
    "import": ("bench_import", "bench_import", {"rounds": 21}, {"rounds": 5, "quick": True}),
    # 9 processes per median: with 5, one slow start moved the growing row's ~5 ms by ~2 ms
    "cassette_scale": ("cassette_scale", "bench_scale", {"repeats": 9},
                       {"sizes": [10, 100, 1_000], "repeats": 1}),
    # two suites run twice live, then replayed (~5 min with the scenario venv)
    "learn": ("bench_learn", "bench_learn", {}, {"quick": True}),
    # pytest processes timed natively, then counted under callgrind (~6 min in full). 45
    # rounds: the paired medians of 15 moved by ~40 ms between runs of one tree on the 2-core
    # box, more than the goals they are held to
    "plugin": ("bench_plugin", "bench_plugin", {"rounds": 45}, {"rounds": 5}),
}
MARKDOWN = {"sqlite_size": ("SQLite store: size of a growing conversation, hits",
                            render.block_sqlite_size),
            "keys_growth": ("Keys for growing conversations", render.block_keys_growth),
            "import": ("Import time", render.block_import),
            "cassette_scale": ("Cassettes at scale, fresh processes", render.block_cassette_scale),
            "learn": ("dejacache learn", render.block_learn),
            "plugin": ("The pytest plugin's cost", render.block_plugin)}

_CHILD = """
import importlib, inspect, json, sys
sys.path.insert(0, sys.argv[1])
try:
    fn = getattr(importlib.import_module(sys.argv[2]), sys.argv[3])
except (ImportError, AttributeError) as exc:
    print(json.dumps({"available": False, "why": f"{sys.argv[2]}.{sys.argv[3]}: {exc}"}))
    raise SystemExit(0)
params = inspect.signature(fn).parameters
kwargs = {k: v for k, v in json.loads(sys.argv[4]).items() if k in params}
print(json.dumps({"available": True, "result": fn(**kwargs)}, default=str))
"""


def run_script(name: str, out: pathlib.Path, quick: bool) -> str:
    script = HERE / f"bench_{name}.py"
    proc = subprocess.run([sys.executable, str(script), "--json", str(out / f"{name}.json"),
                           *(["--quick"] if quick else [])],
                          capture_output=True, text=True, cwd=HERE.parent)
    if proc.returncode != 0:
        return (f"## {script.name}: FAILED (exit {proc.returncode})\n\n```\n"
                f"{proc.stderr[-3000:]}\n```\n")
    return proc.stdout.rstrip() + "\n"


def run_function(name: str, out: pathlib.Path, quick: bool) -> str:
    module, fn, full, short = FUNCTIONS[name]
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(HERE), module, fn,
                           json.dumps(short if quick else full)],
                          capture_output=True, text=True, cwd=HERE.parent)
    if proc.returncode != 0:
        doc: dict[str, Any] = {"available": False,
                               "why": f"{module}.{fn} failed: "
                                      + (proc.stderr.strip().splitlines() or ["?"])[-1]}
    else:
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
    write_json(out / f"{name}.json", name, doc, quick=quick)
    title, block = MARKDOWN[name]
    R = render.load(out)
    return f"## {title}\n\n{block(R)}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short budgets (smoke run)")
    ap.add_argument("--only", default="", help="comma-separated names (core for bench_core)")
    ap.add_argument("--results", default=None,
                    help="where the JSON goes (default: benchmarks/results for a full run, a "
                         "temporary directory for --quick)")
    ap.add_argument("--out", default=None,
                    help="write the Markdown here (default: RESULTS.md for a full run of "
                         "everything; otherwise print only)")
    a = ap.parse_args(argv)
    # Cold starts are measured with bytecode cached: a PYTHONDONTWRITEBYTECODE
    # inherited from the shell would make every fresh process recompile each edited module
    # inside the timed window, so the children run without it, after one compile of src/.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(str(HERE.parent / "src"), quiet=1)
    only = {n.strip() for n in a.only.split(",") if n.strip()}
    tmp = None
    if a.results:
        out = pathlib.Path(a.results)
    elif a.quick:
        tmp = tempfile.TemporaryDirectory(prefix="dejacache-bench-quick-")
        out = pathlib.Path(tmp.name)
    else:
        out = RESULTS
    out.mkdir(parents=True, exist_ok=True)
    others = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py")
                    if p.stem.removeprefix("bench_") not in (*SCRIPTS, *FUNCTIONS))
    names = [*SCRIPTS, *FUNCTIONS, *others]
    if only:
        names = [n for n in names if n in only]
    t0 = time.perf_counter()
    parts = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        t1 = time.perf_counter()
        if name in SCRIPTS:
            part = run_script(name, out, a.quick)
        elif name in FUNCTIONS:
            part = run_function(name, out, a.quick)
        else:
            proc = subprocess.run([sys.executable, str(HERE / f"bench_{name}.py"),
                                   *(["--quick"] if a.quick else [])],
                                  capture_output=True, text=True, cwd=HERE.parent)
            part = proc.stdout.rstrip() + "\n" if proc.returncode == 0 else (
                f"## bench_{name}.py: FAILED\n\n```\n{proc.stderr[-3000:]}\n```\n")
        parts.append(part + f"\n_{name}: {time.perf_counter() - t1:.0f} s_\n")
    wall = time.perf_counter() - t0
    doc = "\n".join([
        "# dejacache benchmarks",
        "",
        f"Generated by `make bench` (`benchmarks/run.py`) on "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC in {wall:.0f} s"
        f"{' (quick run)' if a.quick else ''}. Machine: {machine()}.",
        "",
        "Versions: " + versions("dejacache", "orjson", "xxhash", "joblib", "diskcache",
                                "cachetools") + ".",
        "",
        "Contenders are timed in interleaved batches and every ratio divides by the floor its "
        "row names, measured in the same run. This 2-core VM is shared and noisy; compare rows "
        "within one run. Machine-readable results: `benchmarks/results/*.json`.",
        "",
        *parts,
    ])
    dest = a.out or (None if (a.quick or only) else str(HERE / "RESULTS.md"))
    print(doc)
    if dest:
        pathlib.Path(dest).write_text(doc, encoding="utf-8")
        print(f"wrote {dest}", file=sys.stderr)
    print(f"results in {out}" + (" (temporary)" if tmp else ""), file=sys.stderr)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
