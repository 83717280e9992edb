"""Timing loops, statistics and Markdown helpers shared by the benchmark scripts."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["RESULTS", "Cell", "fmt_us", "interleave", "machine", "md_table", "ratio",
           "time_each", "versions", "write_json"]

# Machine-readable results: one JSON file per script; benchmarks/render.py turns them into the
# README and docs blocks, so no number in the docs is typed by hand.
RESULTS = pathlib.Path(__file__).resolve().parent / "results"

_ns = time.perf_counter_ns


class Cell:
    """Median / p99 of one measured operation, in microseconds."""

    __slots__ = ("median", "n", "p99")

    def __init__(self, samples_ns: Sequence[int]) -> None:
        s = sorted(samples_ns)
        self.n = len(s)
        self.median = statistics.median(s) / 1000 if s else float("nan")
        self.p99 = s[min(len(s) - 1, round(0.99 * (len(s) - 1)))] / 1000 if s else float("nan")

    def __repr__(self) -> str:
        return f"Cell(median={self.median:.2f}us, p99={self.p99:.2f}us, n={self.n})"

    def as_dict(self) -> dict[str, float | int]:
        return {"median_us": round(self.median, 3), "p99_us": round(self.p99, 3), "n": self.n}


def interleave(ops: Mapping[str, Callable[[int], Any]], *, budget: float, batch: int = 20,
               warmup: int = 20, min_rounds: int = 5,
               before: Mapping[str, Callable[[], Any]] | None = None) -> dict[str, Cell]:
    """Time contenders side by side: round-robin batches (A x batch, B x batch, floor x batch,
    then again, the order rotated each round) for ``budget`` seconds in all, one call timed at
    a time. Every contender sees the same moments of a noisy machine, so their medians and
    p99s can be divided; a best median picked per contender from different moments cannot.
    ``before[name]`` runs untimed ahead of each of that contender's batches (e.g. to make its
    store the configured one)."""
    names = list(ops)
    before = before or {}
    for name in names:
        if name in before:
            before[name]()
        for i in range(warmup):
            ops[name](i)
    gc.collect()
    samples: dict[str, list[int]] = {n: [] for n in names}
    deadline = time.perf_counter() + budget
    rnd = 0
    while rnd < min_rounds or time.perf_counter() < deadline:
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            op, out = ops[name], samples[name]
            if name in before:
                before[name]()
            base = len(out)
            for j in range(batch):
                t0 = _ns()
                op(base + j)
                out.append(_ns() - t0)
        rnd += 1
    return {n: Cell(samples[n]) for n in names}


def time_each(op: Callable[[int], Any], *, budget: float, min_n: int = 50, max_n: int = 50_000,
              warmup: int = 20) -> Cell:
    """Time ``op(i)`` one call at a time (GC on, collected first) for ``budget`` seconds and at
    least ``min_n`` calls."""
    for i in range(warmup):
        op(i)
    gc.collect()
    samples: list[int] = []
    append = samples.append
    deadline = time.perf_counter() + budget
    hard = time.perf_counter() + max(budget * 10, 5.0)
    i = 0
    while True:
        t0 = _ns()
        op(i)
        append(_ns() - t0)
        i += 1
        if i >= max_n:
            break
        now = time.perf_counter()
        if (now >= deadline and i >= min_n) or now >= hard:
            break
    return Cell(samples)


def write_json(path: str | os.PathLike[str] | None, name: str, data: dict[str, Any], *,
               quick: bool) -> dict[str, Any]:
    """Write one script's results with the facts a reader needs to trust them (no file when
    ``path`` is None); returns the document."""
    doc = {"name": name, "quick": quick, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": machine(), **data}
    if path is None:
        return doc
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return doc


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def fmt_us(x: float) -> str:
    if x != x:  # NaN
        return "-"
    if x >= 10_000:
        return f"{x / 1000:,.1f} ms"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({cpu}), {platform.platform()}, "
            f"Python {platform.python_version()} ({platform.python_implementation()})")


def versions(*names: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for n in names:
        try:
            out.append(f"{n} {version(n)}")
        except PackageNotFoundError:
            out.append(f"{n} (not installed)")
    import sqlite3

    out.append(f"sqlite3 {sqlite3.sqlite_version}")
    return ", ".join(out)
