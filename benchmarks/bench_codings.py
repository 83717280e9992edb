"""Decoding an encoded answer's stored copy (``http/codings.py``): microseconds per body.

A JSON chat answer of 2 KB and of 1 MB under gzip, decoded as the exchange decodes a whole
answer's copy (``decoded(..., bound=MAX_RECORDED_STREAM)``), beside ``zlib.decompress``
alone (the floor). ``--baseline FILE`` adds another checkout's ``codings.py`` (the module
needs only the standard library: ``git show main:src/dejacache/http/codings.py > /tmp/c.py``;
one taking no ``bound``), timed in the same rounds, for a before/after on a busy machine.

    .venv/bin/python benchmarks/bench_codings.py [--budget SECONDS] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import zlib
from collections.abc import Callable
from typing import Any

from _timing import fmt_us, interleave

from dejacache.http.codings import decoded
from dejacache.http.recording import MAX_RECORDED_STREAM

WORDS = ["the", "model", "said", "token", "cache", "reply", "agent", "tool", "call", "json"]


def _answer(size: int) -> bytes:
    rnd = random.Random(size)
    text = " ".join(rnd.choice(WORDS) for _ in range(size // 5))
    body = {"id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    return json.dumps(body).encode()[:size]


def _baseline(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("baseline_codings", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=4.0, help="seconds per body size")
    ap.add_argument("--baseline", help="another checkout's codings.py")
    args = ap.parse_args()
    base = _baseline(args.baseline) if args.baseline else None
    for size in (2048, 1024 * 1024):
        body = _answer(size)
        wire = gzip.compress(body)
        assert decoded("gzip", wire, bound=MAX_RECORDED_STREAM) == body
        ops: dict[str, Callable[[int], Any]] = {
            "decoded": lambda _, w=wire: decoded("gzip", w, bound=MAX_RECORDED_STREAM),
            "zlib.decompress": lambda _, w=wire: zlib.decompress(w, 31),
        }
        if base is not None:
            ops["baseline"] = lambda _, w=wire: base.decoded("gzip", w)
        cells = interleave(ops, budget=args.budget, batch=5 if size > 4096 else 20)
        print(f"{size} B answer ({len(wire)} B gzip):")
        for name, cell in cells.items():
            print(f"  {name:16} median {fmt_us(cell.median):>10}  p99 {fmt_us(cell.p99):>10}")


if __name__ == "__main__":
    main()
