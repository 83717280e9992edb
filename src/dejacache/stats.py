"""In-process counters: hits, misses, stores, time and tokens saved."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["CallStats", "Stats", "record_hit", "record_miss", "reset_stats", "stats", "usage_of"]

_TOKEN_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


@dataclasses.dataclass(slots=True)
class CallStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    errors: int = 0
    time_saved: float = 0.0
    tokens_saved: int = 0

    def add(self, other: CallStats) -> None:
        self.hits += other.hits
        self.misses += other.misses
        self.stores += other.stores
        self.errors += other.errors
        self.time_saved += other.time_saved
        self.tokens_saved += other.tokens_saved


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot: totals and per call name."""

    total: CallStats
    by_name: Mapping[str, CallStats]

    @property
    def hit_rate(self) -> float:
        n = self.total.hits + self.total.misses
        return self.total.hits / n if n else 0.0


_LOCK = threading.Lock()
_BY_NAME: dict[str, CallStats] = {}


def _bucket(name: str) -> CallStats:
    b = _BY_NAME.get(name)
    if b is None:
        with _LOCK:
            b = _BY_NAME.setdefault(name, CallStats())
    return b


def record_hit(name: str, duration: float, usage: Mapping[str, int] | None) -> None:
    b = _bucket(name)
    with _LOCK:
        b.hits += 1
        b.time_saved += duration
        if usage:
            b.tokens_saved += token_total(usage)


def record_miss(name: str, stored: bool, error: bool = False) -> None:
    b = _bucket(name)
    with _LOCK:
        b.misses += 1
        b.stores += stored
        b.errors += error


def token_total(usage: Mapping[str, int]) -> int:
    """All tokens a call was billed for: OpenAI's ``total_tokens``, else the sum of the parts
    (Anthropic reports cache reads and writes apart from ``input_tokens``)."""
    if "total_tokens" in usage:
        return int(usage["total_tokens"])
    return sum(int(usage.get(f, 0)) for f in _TOKEN_FIELDS if f != "total_tokens")


def usage_of(value: Any) -> dict[str, int] | None:
    """The token counts of an OpenAI/Anthropic-style result (``usage`` key or attribute)."""
    usage = value.get("usage") if isinstance(value, dict) else getattr(value, "usage", None)
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        dump = getattr(usage, "model_dump", None)
        usage = dump() if callable(dump) else getattr(usage, "__dict__", {})
    out = {k: int(v) for k, v in usage.items() if k in _TOKEN_FIELDS and isinstance(v, int)}
    return out or None


def stats() -> Stats:
    """Counters since the process started (or the last :func:`reset_stats`)."""
    with _LOCK:
        by_name = {k: dataclasses.replace(v) for k, v in _BY_NAME.items()}
    total = CallStats()
    for v in by_name.values():
        total.add(v)
    return Stats(total=total, by_name=by_name)


def reset_stats() -> None:
    with _LOCK:
        _BY_NAME.clear()
