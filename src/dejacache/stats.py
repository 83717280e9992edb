"""In-process counters: hits, misses, stores, time and tokens saved.

Layers: a decorated function that calls an SDK inside a block is two cached layers of one
live call (``@cache`` around the function, the HTTP transport around the request). Each
layer has its own row in ``by_name``; ``total`` counts each live call once, at the
outermost layer, so the quick start's two live calls read as two misses, not three. What
ran inside another call's live run is summed in ``nested``. Savings are summed over every
layer: a hit only happens where nothing outside it was served, so no saving is counted
twice.
"""

from __future__ import annotations

import _contextvars as contextvars  # (as scope.py says)
import _thread
from collections.abc import Callable, Mapping
from types import TracebackType
from weakref import ref

from ._slots import add_slots

__all__ = ["CallStats", "Stats", "live_call", "record_hit", "record_miss", "reset_stats",
           "stats", "usage_of", "with_cached_parts"]

_TOKEN_FIELDS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
# Parts of the counts above, kept with them (audio is priced apart from text, cached reads
# and cache writes at their own rates) but never added to a total.
_PART_FIELDS = ("input_audio_tokens", "output_audio_tokens", "input_text_tokens",
                "output_text_tokens", "cached_tokens", "cache_write_tokens",
                "ephemeral_1h_input_tokens")
# Parts a provider reports nested, lifted to the top under the names above: OpenAI's cached
# and (from gpt-5.6) cache-written prompt tokens, chat and Responses, and the 1-hour share of
# Anthropic's cache writes (``cache_creation_input_tokens`` counts both lifetimes).
_NESTED = (("prompt_tokens_details", "cached_tokens"),
           ("prompt_tokens_details", "cache_write_tokens"),
           ("input_tokens_details", "cached_tokens"),
           ("input_tokens_details", "cache_write_tokens"),
           ("cache_creation", "ephemeral_1h_input_tokens"))


TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from ._stats_view import CallStats, Stats


def __getattr__(name: str) -> Any:
    # The snapshot classes live in _stats_view: creating two dataclasses cost ~1.3 ms that
    # every process importing the decorator paid for a function few call.
    # They still name this module as theirs; once read they are plain globals here.
    if name in ("CallStats", "Stats"):
        from . import _stats_view

        value = getattr(_stats_view, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_LOCK = _thread.allocate_lock()


class _Bucket:
    """One call name's counters in one thread. The ``n*`` fields are the part counted while
    an outer cached call ran live (``nested``)."""

    __slots__ = ("errors", "hits", "misses", "nerrors", "nhits", "nmisses", "nstores",
                 "ntime", "ntokens", "stores", "time_saved", "tokens_saved")

    def __init__(self) -> None:
        self.hits = self.misses = self.stores = self.errors = self.tokens_saved = 0
        self.nhits = self.nmisses = self.nstores = self.nerrors = self.ntokens = 0
        self.time_saved = self.ntime = 0.0

    add = add_slots


class _Alive:
    """Held only by a thread's own slot of ``_TLS``: the interpreter drops that slot when
    the thread ends (or is gone after a fork), so a weak reference to it reads None from
    then on. (``threading.current_thread()`` told the same, but loading ``threading`` was
    ~2.5M instructions of a fresh process's first hit.)"""

    __slots__ = ("__weakref__",)


# Counting without a lock (the lock was ~0.5 µs of a 0.7 µs count on a
# 2 KB in-memory hit). Each thread counts in its own cells, one ``_Bucket`` per call name,
# written by that thread only, so plain ``+=`` loses nothing. New cells (a thread's first
# count under a name) are made under ``_LOCK``, which is also what ``stats()`` holds while
# it sums them, so it never sees a dict change size. The registry keeps every thread's
# cells, so a thread that exits keeps its counts: they are folded into ``_RETIRED`` by the
# next thread that registers, which keeps the registry as small as the live threads.
_TLS = _thread._local()
_THREADS: dict[int, tuple[Callable[[], _Alive | None], dict[str, _Bucket]]] = {}
_RETIRED: dict[str, _Bucket] = {}

# True while a cached call's function runs live: dejacache calls made inside are inner
# layers of that call. A context variable, so threads and tasks started with the caller's
# context (asyncio, dejacache.propagate) count as inside too.
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("dejacache_live_call",
                                                               default=False)
_inside = _INSIDE.get


class live_call:
    """Marks the live run of a cached call, so calls inside it count as its inner layers."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _INSIDE.set(True)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        # try/except, not contextlib.suppress: this runs on every miss (suppress is an
        # object and two calls more).
        try:  # noqa: SIM105
            _INSIDE.reset(self._token)
        except ValueError:
            # A coroutine collected un-finished is closed in whatever context is current
            # then, not its own: that context is gone with it, so there is nothing to undo.
            pass


def _cell(name: str) -> _Bucket:
    """This thread's bucket for ``name``, made (and the thread registered) on first use."""
    with _LOCK:
        tls = _TLS  # read under the lock: reset_stats may just have replaced it
        cells: dict[str, _Bucket] | None = getattr(tls, "cells", None)
        if cells is None:
            _retire_dead()
            cells = tls.cells = {}
            alive = tls.alive = _Alive()
            _THREADS[id(cells)] = (ref(alive), cells)
        b = cells.get(name)
        if b is None:
            b = cells[name] = _Bucket()
        return b


def _retire_dead() -> None:
    # Under _LOCK. A thread that is no longer alive writes nothing more: its cells can be
    # summed into _RETIRED and dropped. (This covers threads started outside ``threading``
    # too: their thread-local slots go when they end, as every thread's do.)
    for k, (alive, cells) in list(_THREADS.items()):
        if alive() is None:
            del _THREADS[k]
            for name, b in cells.items():
                r = _RETIRED.get(name)
                if r is None:
                    r = _RETIRED[name] = _Bucket()
                r.add(b)


def record_hit(name: str, duration: float, usage: Mapping[str, int] | None) -> None:
    try:
        b = _TLS.cells[name]
    except (AttributeError, KeyError):
        b = _cell(name)
    b.hits += 1
    b.time_saved += duration
    tokens = 0
    if usage:
        # One lookup for the common int total (``in``, ``[]`` and ``int()`` were ~500 of
        # a 2 KB hit's instructions); anything else is token_total's to read.
        total = usage.get("total_tokens")
        tokens = total if type(total) is int else token_total(usage)
        b.tokens_saved += tokens
    if _inside():
        b.nhits += 1
        b.ntime += duration
        b.ntokens += tokens


def record_miss(name: str, stored: bool, error: bool = False) -> None:
    try:
        b = _TLS.cells[name]
    except (AttributeError, KeyError):
        b = _cell(name)
    b.misses += 1
    b.stores += stored
    b.errors += error
    if _inside():
        b.nmisses += 1
        b.nstores += stored
        b.nerrors += error


def token_total(usage: Mapping[str, int]) -> int:
    """All tokens a call was billed for: OpenAI's ``total_tokens``, else the sum of the parts
    (Anthropic reports cache reads and writes apart from ``input_tokens``)."""
    if "total_tokens" in usage:
        return int(usage["total_tokens"])
    return sum(int(usage.get(f, 0)) for f in _TOKEN_FIELDS if f != "total_tokens")


def with_cached_parts(counts: dict[str, int], usage: Mapping[str, Any]) -> dict[str, int]:
    """``counts`` (a usage object's top-level integers) with the cache counts ``usage`` nests
    lifted beside them (``prompt_tokens_details.cached_tokens`` -> ``cached_tokens``): parts
    that prices read and totals never add. A top-level count of the same name wins."""
    for field, name in _NESTED:
        sub = usage.get(field)
        if sub is None or name in counts:
            continue
        v = sub.get(name) if isinstance(sub, Mapping) else getattr(sub, name, None)
        if type(v) is int and v >= 0:
            counts[name] = v
    return counts


def usage_of(value: Any) -> dict[str, int] | None:
    """The token counts of an OpenAI/Anthropic-style result (``usage`` key or attribute)."""
    usage = value.get("usage") if isinstance(value, dict) else getattr(value, "usage", None)
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        dump = getattr(usage, "model_dump", None)
        usage = dump() if callable(dump) else getattr(usage, "__dict__", {})
    out = {k: int(v) for k, v in usage.items()
           if (k in _TOKEN_FIELDS or k in _PART_FIELDS) and isinstance(v, int)}
    return with_cached_parts(out, usage) if out else None


def stats() -> Stats:
    """Counters since the process started (or the last :func:`reset_stats`)."""
    from ._stats_view import CallStats, Stats

    sums: dict[str, _Bucket] = {}
    with _LOCK:
        for cells in [_RETIRED, *(c for _t, c in _THREADS.values())]:
            for k, b in cells.items():
                acc = sums.get(k)
                if acc is None:
                    acc = sums[k] = _Bucket()
                acc.add(b)
    total, nested = CallStats(), CallStats()
    by_name = {}
    for k, b in sums.items():
        by_name[k] = CallStats(b.hits, b.misses, b.stores, b.errors, b.time_saved,
                               b.tokens_saved)
        # Each live call counts once, at its outermost layer; savings at every layer.
        total.hits += b.hits - b.nhits
        total.misses += b.misses - b.nmisses
        total.stores += b.stores - b.nstores
        total.errors += b.errors - b.nerrors
        total.time_saved += b.time_saved
        total.tokens_saved += b.tokens_saved
        nested.add(CallStats(b.nhits, b.nmisses, b.nstores, b.nerrors, b.ntime, b.ntokens))
    return Stats(total=total, by_name=by_name, nested=nested)


def reset_stats() -> None:
    # A new thread-local: every thread's next count registers fresh cells. A count racing
    # with the reset lands in the old cells, as if it came just before the reset.
    global _TLS
    with _LOCK:
        _TLS = _thread._local()
        _THREADS.clear()
        _RETIRED.clear()
