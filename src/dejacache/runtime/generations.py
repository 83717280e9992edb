"""Generation counters: O(1) invalidation of runtime cache entries.

Every runtime entry key contains the current values of the counters it depends on. A write
bumps a counter; entries written under the old value become unreachable at once (the store's
TTL/LRU reclaims them later), whatever the number of entries.

The rule: **counters live wherever the entries live.** Entries that outlive the process, or
that other processes share, are only as fresh as the counters in their keys; counters kept in
process memory restart at 0 in every process, so a new process computed the keys of entries
cached before a write, and another process's write never reached this one (measured:
397,580 of 398,684 reads stale with two processes on one SQLite file). So:

* :class:`LocalGenerations`: an in-process dict, only for stores whose entries live in this
  process alone (``MemoryStore``, a ``TieredStore`` of memory tiers, or a store declaring
  ``process_local = True``).
* :class:`SharedGenerations`: counters in the store itself, through ``incr``/``get_counters``
  (``RedisStore``: INCR/MGET; ``SQLiteStore``: a ``counters`` table in the same file, atomic
  increments in ``BEGIN IMMEDIATE``, one indexed SELECT per read), or in the tier behind a
  ``TieredStore``, so the memory front's keys embed the durable values too. A write in any
  process, or before a restart, invalidates every reader. Counters are read on every call
  (``tool_cache(counter_max_age=0)``, the default: a reader learns of another's write by its
  next call) or reused for at most ``counter_max_age`` seconds (then a reader may serve an
  entry up to that long after another process's write; its own writes are seen at once).
* Any other store (its entries may outlive the process, and it keeps no counters) is refused
  with ``ConfigurationError``: it could only ever serve stale data after a write elsewhere.

Failing open (shared counters): when the counters cannot be read (Redis down, breaker open,
an unreadable SQLite file) ``read`` returns ``None`` and the caller runs the tool without
reading or writing the cache, because an entry cannot be proven fresh without them (never
zeros instead: that could revive entries a write made unreachable). A bump that cannot reach
the store is remembered and retried; until it lands this process bypasses the cache too. If
the counters go back to zero (Redis restarted without persistence, a damaged SQLite file moved
aside) a process that sees a counter lower than it saw before moves to a new local epoch (part
of every key), so its memory tier cannot resurrect entries from before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError
from ..stores.memory import MemoryStore
from ..stores.tiered import TieredStore

__all__ = ["LocalGenerations", "SharedGenerations", "generations_for", "local_generations",
           "maybe_generations_for", "process_local"]


#: Counters kept per process before starting over (one counter per written entity).
MAX_COUNTERS = 200_000


class LocalGenerations:
    """In-process counters (thread-safe), bounded: past ``max_counters`` names they start
    over in a new epoch (part of every key), which invalidates everything once instead of
    letting a forgotten counter fall back to 0 and revive old entries."""

    def __init__(self, max_counters: int = MAX_COUNTERS) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = {}
        self.max_counters = max_counters
        self.epoch = 0
        #: Changes after every change of any counter (or the epoch), once the new values
        #: are in place: values read after seeing a version are at least that new, so a
        #: reader that read them at a version may reuse them while the version stays.
        self.version = 0

    def read(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        get = self._values.get  # dict reads are atomic under the GIL: no lock on the hot path
        return [get(n, 0) for n in names]

    def bump(self, names: Sequence[str]) -> bool:
        with self._lock:
            if len(self._values) + len(names) > self.max_counters:
                self._values.clear()
                self.epoch += 1
            for n in names:
                self._values[n] = self._values.get(n, 0) + 1
            self.version += 1
        return True

    async def aread(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        return self.read(names)

    async def abump(self, names: Sequence[str]) -> bool:
        return self.bump(names)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self.epoch = 0
            self.version += 1


class SharedGenerations:
    """Counters kept in a store that offers ``incr``/``get_counters`` (``RedisStore``,
    ``SQLiteStore``); ``incr_many`` when offered bumps a write's counters in one
    transaction."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.epoch = 0
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, float]] = {}
        self._seen: dict[str, int] = {}
        self._pending: set[str] = set()

    # -- helpers shared by the sync and async paths

    def _cached(self, names: Sequence[str], max_age: float) -> list[int] | None:
        if max_age <= 0 or self._pending:
            return None
        now = time.monotonic()
        out = []
        for n in names:
            hit = self._cache.get(n)
            if hit is None or now - hit[1] > max_age:
                return None
            out.append(hit[0])
        return out

    def _trim(self) -> None:
        # Bounded memory: forgetting what was seen only weakens the reset detection for old
        # names, whose memory-tier copies the tiered store's front_ttl bounds anyway.
        if len(self._seen) > MAX_COUNTERS:
            self._seen.clear()
        if len(self._cache) > MAX_COUNTERS:
            self._cache.clear()

    def _learn(self, names: Sequence[str], values: Sequence[int], remember: bool) -> list[int]:
        out = [int(v) for v in values]
        seen = self._seen.get
        if not remember and all(seen(n) == v for n, v in zip(names, out, strict=True)):
            # The steady state (nothing written since this process last looked): no lock.
            # The values are only cached for counter_max_age readers (``remember``).
            return out
        now = time.monotonic()
        with self._lock:
            self._trim()
            for n, v in zip(names, out, strict=True):
                if v < self._seen.get(n, 0):
                    # Redis lost its counters: old keys could become reachable again.
                    self.epoch += 1
                    self._seen.clear()
                self._seen[n] = max(v, self._seen.get(n, 0))
                self._cache[n] = (v, now)
        return out

    def _took(self, name: str, value: int | None) -> bool:
        with self._lock:
            if value is None:
                self._pending.add(name)
                self._cache.pop(name, None)
                return False
            self._pending.discard(name)
            self._trim()
            self._seen[name] = max(int(value), self._seen.get(name, 0))
            self._cache[name] = (int(value), time.monotonic())
            return True

    def _took_all(self, names: Sequence[str], values: Sequence[int] | None) -> bool:
        if values is None:
            for n in names:
                self._took(n, None)
            return False
        return all([self._took(n, v) for n, v in zip(names, values, strict=True)])

    # -- sync

    def _incr(self, names: Sequence[str]) -> bool:
        many = getattr(self.backend, "incr_many", None)
        if many is not None:
            try:
                values = many(list(names))
            except Exception:  # fail open: remembered as pending, retried on the next read
                values = None
            return self._took_all(names, values)
        ok = True
        for n in names:
            try:
                value = self.backend.incr(n)
            except Exception:
                value = None
            ok = self._took(n, value) and ok
        return ok

    def _flush(self) -> bool:
        return self._incr(list(self._pending))

    def read(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        """Current values; up to ``max_age`` seconds old when cached. None: unavailable."""
        hit = self._cached(names, max_age)
        if hit is not None:
            return hit
        try:
            if self._pending and not self._flush():
                return None
            values = self.backend.get_counters(list(names))
        except Exception:  # fail open: the caller runs the tool uncached
            return None
        if values is None:
            return None
        return self._learn(names, values, max_age > 0)

    def bump(self, names: Sequence[str]) -> bool:
        return self._incr(names)

    # -- async

    async def _aincr(self, names: Sequence[str]) -> bool:
        many = getattr(self.backend, "aincr_many", None)
        if many is not None:
            try:
                values = await many(list(names))
            except Exception:
                values = None
            return self._took_all(names, values)
        ok = True
        for n in names:
            try:
                value = await self.backend.aincr(n)
            except Exception:
                value = None
            ok = self._took(n, value) and ok
        return ok

    async def _aflush(self) -> bool:
        return await self._aincr(list(self._pending))

    async def aread(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        hit = self._cached(names, max_age)
        if hit is not None:
            return hit
        try:
            if self._pending and not await self._aflush():
                return None
            values = await self.backend.aget_counters(list(names))
        except Exception:
            return None
        if values is None:
            return None
        return self._learn(names, values, max_age > 0)

    async def abump(self, names: Sequence[str]) -> bool:
        return await self._aincr(names)


_LOCAL = LocalGenerations()
_SHARED_LOCK = threading.Lock()
# By id, holding the backend: stores are few and long-lived, and not all are weak-referenceable.
_SHARED: dict[int, tuple[Any, SharedGenerations]] = {}
_INNER_ATTRS = ("remote", "back", "backend", "shared", "lower", "second", "redis", "inner")


def local_generations() -> LocalGenerations:
    return _LOCAL


def counter_backend(store: Any, _depth: int = 0) -> Any:
    """The object holding shared counters for ``store`` (itself or a tier behind it)."""
    if callable(getattr(store, "get_counters", None)) and callable(getattr(store, "incr", None)):
        return store
    if _depth > 3:
        return None
    tiers = getattr(store, "tiers", None)
    inner: list[Any] = list(tiers) if isinstance(tiers, (list, tuple)) else []
    inner += [getattr(store, a, None) for a in _INNER_ATTRS]
    for t in inner:
        if t is not None and t is not store:
            found = counter_backend(t, _depth + 1)
            if found is not None:
                return found
    return None


def process_local(store: Any) -> bool:
    """True when every entry of ``store`` lives in this process's memory and dies with it."""
    declared = getattr(store, "process_local", None)
    if isinstance(declared, bool):
        return declared
    if isinstance(store, MemoryStore):
        return True
    if isinstance(store, TieredStore):
        return process_local(store.front) and process_local(store.back)
    return False


def generations_for(store: Any) -> LocalGenerations | SharedGenerations:
    """The counters entries in ``store`` depend on: kept in the store (or the tier behind it)
    when it has counters, in this process when its entries live only here; any other store
    is refused, because its entries would outlive counters kept in memory."""
    gens = maybe_generations_for(store)
    if gens is None:
        name = getattr(store, "url", "") or type(store).__name__
        raise ConfigurationError(
            f"tool_cache cannot use the store {name!r}: its entries may outlive this process "
            "or be shared with others, but it keeps no generation counters "
            "(incr/get_counters), so a write in another process, or before a restart, could "
            "not invalidate them and stale results would be served. Use SQLiteStore or "
            "RedisStore (alone or behind a TieredStore), or MemoryStore; a custom store can "
            "offer incr()/get_counters(), or declare process_local = True if its entries live "
            "only in this process's memory."
        )
    return gens


def maybe_generations_for(store: Any) -> LocalGenerations | SharedGenerations | None:
    """:func:`generations_for`, with None instead of the error (writers skip such stores)."""
    backend = counter_backend(store)
    if backend is None:
        return _LOCAL if process_local(store) else None
    with _SHARED_LOCK:
        entry = _SHARED.get(id(backend))
        if entry is None or entry[0] is not backend:
            gens = SharedGenerations(backend)
            _SHARED[id(backend)] = (backend, gens)
        else:
            gens = entry[1]
        return gens


def reset() -> None:
    """Forget every counter (tests)."""
    _LOCAL.clear()
    with _SHARED_LOCK:
        _SHARED.clear()
