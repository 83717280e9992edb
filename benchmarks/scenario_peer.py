"""A warm 2 KB hit through langwatch-scenario's real ``@scenario.cache`` against dejacache's
``@cache`` (MemoryStore; default fresh copies and ``frozen=True``) and the orjson(sorted)+xxh3+dict
floor, interleaved in one process.

Runs in the venv that holds the real package (``.venv-scenario``, which pins openai < 3 and so
cannot share the main venv); ``bench_core.py`` starts it and reads the JSON it prints. The
dejacache timed is the working tree's ``src/`` (put first on ``sys.path`` below), whatever
copy that venv holds.

    .venv-scenario/bin/python benchmarks/scenario_peer.py [--budget 3] [--quick]
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import pathlib
import shutil
import sys
import tempfile
import types
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# The venv installs dejacache editable from this tree today; this keeps a stale non-editable
# copy (an older build of the venv) from being the one measured.
sys.path.insert(0, str(HERE.parent / "src"))

N_HIT = 20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    budget = 0.5 if a.quick else a.budget
    tmp = tempfile.mkdtemp(prefix="dejacache-bench-scenario-")
    # scenario builds its joblib.Memory at import time from this variable
    os.environ["SCENARIO_CACHE_DIR"] = str(pathlib.Path(tmp) / "scenario")
    # scenario imports litellm, which otherwise fetches its price list from the network
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

    import orjson
    import scenario
    import xxhash
    from _timing import interleave, versions
    from scenario.cache import context_scenario
    from scenario.config import ScenarioConfig
    from workload import pairs

    import dejacache

    items = pairs("2KB", N_HIT)
    reqs = [r for r, _ in items]
    pending: list[Any] = [None]

    def llm(request: Any) -> Any:
        return pending[0]

    # What scenario.run() puts in the context: the executor, whose config holds the cache key.
    executor = types.SimpleNamespace(config=ScenarioConfig(cache_key="bench"))
    ctx = contextvars.copy_context()
    ctx.run(context_scenario.set, executor)
    scen = scenario.cache()(llm)
    dejacache.configure(cache_key="bench", store=dejacache.MemoryStore())
    deja = dejacache.cache(name="bench.llm")(llm)
    frozen = dejacache.cache(name="bench.frozen", frozen=True)(llm)
    table: dict[bytes, Any] = {}

    def fkey(r: Any) -> bytes:
        return xxhash.xxh3_128_digest(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))

    for req, resp in items:
        pending[0] = resp
        ctx.run(scen, req)
        deja(req)
        frozen(req)
        table[fkey(req)] = resp
    pending[0] = None
    for req, resp in items:  # a wrong answer would make every number meaningless
        if (ctx.run(scen, req) != resp or deja(req) != resp or frozen(req) != resp
                or table.get(fkey(req)) != resp):
            raise AssertionError("a contender returned a wrong result")
        got = frozen(req)
        try:  # the frozen row is timed under its promise: a shared value nobody can change
            got["__bench_mutation__"] = 1
        except dejacache.ReadOnlyResult:
            pass
        else:
            raise AssertionError("a frozen hit could be mutated")
        if deja(req) is deja(req):
            raise AssertionError("two default hits returned the same object")
    n = len(reqs)
    try:
        cells = interleave({
            "floor": lambda i: table.get(fkey(reqs[i % n])),
            "dejacache": lambda i: deja(reqs[i % n]),
            "dejacache_frozen": lambda i: frozen(reqs[i % n]),
            "scenario": lambda i: ctx.run(scen, reqs[i % n]),
        }, budget=budget, batch=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"versions": versions("langwatch-scenario", "joblib", "dejacache"),
                      "dejacache_from": str(pathlib.Path(dejacache.__file__).parent),
                      "cells": {k: c.as_dict() for k, c in cells.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
