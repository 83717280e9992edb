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
the store (or that no replica confirmed, on Redis) is queued; until it lands this process
bypasses the cache too, and a background thread sends it every ``FLUSH_INTERVAL`` as the
store's recovery probe, so it lands ~0.1 s after Redis answers again. Other processes cannot
know of that queue: one that failed to read its counters keeps off the cache for ``FENCE``
seconds once it reads them again, the time such queues need to land (docs/runtime.md, "Redis:
invalidation across outages and failovers", lists the windows that remain). If
the counters go back to zero (Redis restarted without persistence, a damaged SQLite file moved
aside) a process that sees a counter lower than it saw before moves to a new local epoch (part
of every key), so its memory tier cannot resurrect entries from before.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..stores._base import off_loop
from ..stores.memory import MemoryStore
from ..stores.tiered import TieredStore

__all__ = ["NOT_READ", "LocalGenerations", "SharedGenerations", "generations_for",
           "local_generations", "maybe_generations_for", "process_local"]


#: Counters kept per process before starting over (one counter per written entity).
MAX_COUNTERS = 200_000
#: ``SharedGenerations.read_with``: no entry was read with the counters.
NOT_READ: Any = object()
#: The counter layout's mark, first in every shared-counter key part (see
#: ``SharedGenerations.epoch``); a new letter whenever counter names change meaning.
LAYOUT = "i"


class LocalGenerations:
    """In-process counters (thread-safe), bounded: past ``max_counters`` names they start
    over in a new epoch (part of every key), which invalidates everything once instead of
    letting a forgotten counter fall back to 0 and revive old entries."""

    def __init__(self, max_counters: int = MAX_COUNTERS) -> None:
        self._lock = threading.Lock()
        # (epoch, values) in one attribute: a reader takes the pair in one step, without the
        # lock, and so never pairs an epoch with another epoch's values (a key from before
        # a write, or one a later epoch reaches again). Starting over puts a new pair in
        # place; the old dict is never changed again. (Two attributes were read apart: 5,065
        # of 300,000 reads mixed them while another thread started over.)
        self._state: tuple[int, dict[str, int]] = (0, {})
        self.max_counters = max_counters
        #: Changes after every change of any counter (or the epoch), once the new values
        #: are in place: values read after seeing a version are at least that new, so a
        #: reader that read them at a version may reuse them while the version stays.
        self.version = 0

    @property
    def epoch(self) -> int:
        return self._state[0]

    @property
    def _values(self) -> dict[str, int]:
        return self._state[1]

    def snapshot(self, names: Sequence[str]) -> tuple[int, list[int]]:
        """(epoch, values of ``names`` in that epoch)."""
        epoch, values = self._state
        get = values.get  # dict reads are atomic under the GIL: no lock on the hot path
        return epoch, [get(n, 0) for n in names]

    def read(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        return self.snapshot(names)[1]

    def bump(self, names: Sequence[str], *, land: bool = False) -> bool:
        with self._lock:
            epoch, values = self._state
            if len(values) + len(names) > self.max_counters:
                fresh = dict.fromkeys(names, 0)
                for n in names:
                    fresh[n] += 1
                self._state = (epoch + 1, fresh)  # complete before any reader sees it
            else:
                for n in names:
                    values[n] = values.get(n, 0) + 1
            self.version += 1
        return True

    async def aread(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        return self.read(names)

    async def abump(self, names: Sequence[str], *, land: bool = False) -> bool:
        return self.bump(names)

    def clear(self) -> None:
        with self._lock:
            self._state = (0, {})
            self.version += 1


#: How often a process retries the increments it could not land, in a background thread
#: (whether or not anyone calls), each attempt acting as the Redis store's recovery probe
#: (sent even while its breaker is open): queued increments land within about this long
#: of Redis answering again, whatever the breaker's cooldown.
FLUSH_INTERVAL = 0.1
#: An outage longer than this is retried once a second (the window below stays <= 1 s).
SLOW_AFTER = 30.0
#: The bump after a write (``bump(land=True)``) is sent again until it lands before the write
#: returns (every ``LAND_RETRY`` s, every ``LAND_SLOW`` s after the first second), as long as
#: this process's oldest queued increment is younger than ``LAND_WITHIN``: readers in other
#: processes cannot know of a queued increment, and would serve what the write replaced until
#: it landed. A bound of a second was not enough: a Cluster or Sentinel failover lasts longer
#: (3-5 s with the tests' 1.5 s / 3 s timeouts, 15-30 s with Redis's defaults), writes
#: returned with their increments queued, and only the reader's 1 s fence stood between them
#: and the entries they replaced, which a loaded machine outran (21 stale reads of 3,174 calls,
#: 7 of 3,617, at load 10 on 2 cores). Past ``LAND_WITHIN`` Redis is down rather than failing
#: over: a write then returns after one attempt, its increment queued (see ``FENCE``).
LAND_WITHIN = 30.0
LAND_RETRY = 0.02
LAND_SLOW = 0.1
#: After its counters could not be read, a process keeps off the cache this long once it
#: reads them again: the time another process that queued increments during the same outage
#: needs to land them (one FLUSH_INTERVAL and one timeout after Redis answers it, which is
#: no later than it answers this process), with room for a loaded machine's scheduling.
FENCE = 1.0


class SharedGenerations:
    """Counters kept in a store that offers ``incr``/``get_counters`` (``RedisStore``
    through its key/run seam, ``SQLiteStore``); ``incr_many`` when offered bumps a write's
    counters in one transaction."""

    def __init__(self, backend: Any) -> None:
        from ._redis_counters import redis_counters  # (imports _layout, which imports us)

        self.backend = backend
        redis = redis_counters(backend)
        self._ops: Any = redis or _with_async_twins(backend)
        self._resets = 0
        # Part of every entry key. The letter marks the counter layout of this version
        # (names start with the resource; "h": equal numbers name one entity, so
        # ``order_id=1.0`` counts under ``e/1``; "i": so do all values equal to each other,
        # a named tuple under its tuple's name): counters under new names start at 0, and
        # an entry an earlier version cached under the same values must not be reachable
        # again (one a write through the other spelling left stale).
        self.epoch = f"{LAYOUT}0"
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, float]] = {}
        self._seen: dict[str, int] = {}
        # Counters whose increment has not landed -> the sequence number it was queued at.
        self._pending: dict[str, int] = {}
        self._queued_since = 0.0  # when the queue last went from empty to not (monotonic)
        self._seq = 0
        self._flusher: threading.Thread | None = None
        # Whether the counters' store takes ``probe=True`` (Redis): the background flush
        # is then its recovery probe.
        self._probes = redis is not None
        #: Whether :meth:`read_with` reads an entry in the counters' round trip.
        self.folds = getattr(self._ops, "folds", False) is True
        self.fence = FENCE
        # A read-only file never takes the increment: waiting LAND_WITHIN for it would
        # stall the first write 30 s for nothing (it is queued, and readers fenced, alike).
        self.land_within = 0.0 if getattr(backend, "readonly", False) is True \
            else LAND_WITHIN
        self._failed = False  # counters unreadable since the last successful read
        self._fenced_until = 0.0

    # -- helpers shared by the sync and async paths

    def _cached(self, names: Sequence[str], max_age: float) -> list[int] | None:
        if max_age <= 0 or self._pending or self._failed or self._fenced_until:
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

    def _unreadable(self) -> None:
        self._failed = True
        self._cache.clear()

    def _fenced(self) -> bool:
        """After an outage: whether entries may still be older than an invalidation
        another process queued during it and has not landed yet."""
        if self._failed:
            self._failed = False
            self._fenced_until = time.monotonic() + self.fence
            return True
        until = self._fenced_until
        if not until:
            return False
        if time.monotonic() < until:
            return True
        self._fenced_until = 0.0
        return False

    def _learn(self, names: Sequence[str], values: Sequence[int], remember: bool
               ) -> list[int] | None:
        out = [int(v) for v in values]
        seen = self._seen.get
        if not remember and all(seen(n) == v for n, v in zip(names, out, strict=True)):
            # The steady state (nothing written since this process last looked): no lock.
            # The values are only cached for counter_max_age readers (``remember``).
            return None if (self._failed or self._fenced_until) and self._fenced() else out
        now = time.monotonic()
        with self._lock:
            self._trim()
            for n, v in zip(names, out, strict=True):
                if v < self._seen.get(n, 0):
                    # Redis lost its counters: old keys could become reachable again.
                    self._resets += 1
                    self.epoch = f"{LAYOUT}{self._resets}"
                    self._seen.clear()
                self._seen[n] = max(v, self._seen.get(n, 0))
                self._cache[n] = (v, now)
        return None if self._fenced() else out

    def _queue(self, names: Sequence[str]) -> bool:
        """Remember increments that did not land; a background thread retries them."""
        self._failed = True  # other processes may have queued theirs too: fence on recovery
        with self._lock:
            if not self._pending:
                self._queued_since = time.monotonic()
            for n in names:
                self._seq += 1
                self._pending[n] = self._seq
                self._cache.pop(n, None)
            t = self._flusher
            if t is None or not t.is_alive():  # (not alive: the process forked since)
                t = self._flusher = threading.Thread(
                    target=_flush_loop, args=(self,),
                    name="dejacache-counters-flush", daemon=True)
                t.start()
        return False

    def _landed(self, names: Sequence[str], values: Sequence[int], sent_at: int) -> bool:
        """Record increments that landed; drop what they cover from the queue (entries
        queued before they were sent: one queued later needs an increment of its own)."""
        now = time.monotonic()
        with self._lock:
            self._trim()
            for n, v in zip(names, values, strict=True):
                if self._pending.get(n, sent_at + 1) <= sent_at:
                    del self._pending[n]
                self._seen[n] = max(int(v), self._seen.get(n, 0))
                self._cache[n] = (int(v), now)
            if not self._pending:
                self._queued_since = 0.0
        return True

    def _land_retries(self) -> Iterator[float]:
        """The pauses between attempts to land a write's bump (see ``LAND_WITHIN``)."""
        now = time.monotonic()
        deadline = (self._queued_since or now) + self.land_within
        slow = now + 1.0
        while now < deadline:
            yield LAND_RETRY if now < slow else LAND_SLOW
            now = time.monotonic()

    # -- sync

    def _incr(self, names: Sequence[str], probe: bool = False) -> bool:
        sent_at = self._seq
        many = getattr(self._ops, "incr_many", None)
        try:
            if many is not None:
                values = (many(list(names), probe=True) if probe and self._probes
                          else many(list(names)))
            else:
                values = [self._ops.incr(n) for n in names]
                if any(v is None for v in values):
                    values = None
        except ConfigurationError:
            raise
        except Exception:  # fail open: queued, retried in the background and on reads
            values = None
        if values is None:
            return self._queue(names)
        return self._landed(names, values, sent_at)

    def _flush(self, probe: bool = False) -> bool:
        with self._lock:
            pending = list(self._pending)
        return self._incr(pending, probe) if pending else True

    def read(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        """Current values; up to ``max_age`` seconds old when cached. None: unavailable,
        or not yet trusted again after an outage (see ``FENCE``)."""
        hit = self._cached(names, max_age)
        if hit is not None:
            return hit
        try:
            if self._pending and not self._flush():
                return None  # this process's own write has not landed: nothing is fresh
            values = self._ops.get_counters(list(names))
        except Exception:  # fail open: the caller runs the tool uncached
            values = None
        if values is None:
            self._unreadable()
            return None
        return self._learn(names, values, max_age > 0)

    def read_with(self, names: tuple[str, ...], max_age: float, entry: str
                  ) -> tuple[list[int] | None, Any]:
        """:meth:`read`, and the bytes under the backend's key ``entry`` read in the same
        round trip (``NOT_READ`` when they were not: values from the ``max_age`` cache, a
        queue to land first, a store that cannot, or a new epoch since the caller made
        ``entry``). The caller uses the bytes only if ``entry`` is the key the values make."""
        if max_age > 0 or self._pending or not self.folds:
            return self.read(names, max_age), NOT_READ
        epoch = self.epoch
        try:
            got = self._ops.get_counters_with(names, entry)
        except Exception:  # fail open: the caller runs the tool uncached
            got = None
        return self._with(names, got, epoch)

    async def aread_with(self, names: tuple[str, ...], max_age: float, entry: str
                         ) -> tuple[list[int] | None, Any]:
        if max_age > 0 or self._pending or not self.folds:
            return await self.aread(names, max_age), NOT_READ
        epoch = self.epoch
        try:
            got = await self._ops.aget_counters_with(names, entry)
        except Exception:
            got = None
        return self._with(names, got, epoch)

    def _with(self, names: tuple[str, ...], got: tuple[list[int], Any] | None, epoch: str
              ) -> tuple[list[int] | None, Any]:
        """:meth:`read_with`'s answer from what the store answered (None: it failed)."""
        if got is None:
            self._unreadable()
            return None, NOT_READ
        values, raw = got
        if not (self._failed or self._fenced_until) \
                and list(map(self._seen.get, names)) == values:
            return values, raw  # _learn's steady state, written out: a hit's commonest path
        out = self._learn(names, values, False)
        return out, raw if out is not None and self.epoch == epoch else NOT_READ

    def bump(self, names: Sequence[str], *, land: bool = False) -> bool:
        """Increment ``names``; False when that has not landed (queued). ``land``: the
        bump after a write, sent again until it lands (see ``LAND_WITHIN``)."""
        try:
            landed = self._incr(names)
            if landed or not land:
                return landed
            for pause in self._land_retries():
                time.sleep(pause)
                if self._flush(probe=True):
                    return True
            return False
        except ConfigurationError:
            return self._queue(names)

    # -- async

    async def _aincr(self, names: Sequence[str], probe: bool = False) -> bool:
        sent_at = self._seq
        many = getattr(self._ops, "aincr_many", None)
        try:
            if many is not None:
                values = await (many(list(names), probe=True) if probe and self._probes
                                else many(list(names)))
            else:
                values = [await self._ops.aincr(n) for n in names]
                if any(v is None for v in values):
                    values = None
        except Exception:
            values = None
        if values is None:
            return self._queue(names)
        return self._landed(names, values, sent_at)

    async def _aflush(self, probe: bool = False) -> bool:
        with self._lock:
            pending = list(self._pending)
        return await self._aincr(pending, probe) if pending else True

    async def aread(self, names: Sequence[str], max_age: float = 0.0) -> list[int] | None:
        hit = self._cached(names, max_age)
        if hit is not None:
            return hit
        try:
            if self._pending and not await self._aflush():
                return None
            values = await self._ops.aget_counters(list(names))
        except Exception:
            values = None
        if values is None:
            self._unreadable()
            return None
        return self._learn(names, values, max_age > 0)

    async def abump(self, names: Sequence[str], *, land: bool = False) -> bool:
        """:meth:`bump`, awaited."""
        landed = await self._aincr(names)
        if landed or not land:
            return landed
        for pause in self._land_retries():
            await asyncio.sleep(pause)
            if await self._aflush(probe=True):
                return True
        return False


class _AsyncTwins:
    """Counters of a store offering only the sync ``incr``/``get_counters`` (and maybe
    ``incr_many``): the async twins run them in a worker thread. Without them every async
    tool call ran uncached ("bypassed"), and an async write waited for the background
    flush; inline, the store's I/O would hold the event loop."""

    def __init__(self, ops: Any) -> None:
        self.ops = ops
        self.incr, self.get_counters = ops.incr, ops.get_counters
        many = getattr(ops, "incr_many", None)
        if callable(many):
            self.incr_many = many
            self.aincr_many = self._aincr_many

    async def aget_counters(self, names: Sequence[str]) -> list[int] | None:
        return await off_loop(self.ops.get_counters, names)

    async def aincr(self, name: str) -> int | None:
        return await off_loop(self.ops.incr, name)

    async def _aincr_many(self, names: Sequence[str]) -> list[int] | None:
        return await off_loop(self.ops.incr_many, names)


def _with_async_twins(backend: Any) -> Any:
    """``backend``, or :class:`_AsyncTwins` over it when it lacks the async twins."""
    if all(callable(getattr(backend, a, None)) for a in ("aget_counters", "aincr")):
        return backend
    return _AsyncTwins(backend)


def _flush_loop(gens: SharedGenerations) -> None:
    """Land ``gens``'s queued increments: every FLUSH_INTERVAL for the first SLOW_AFTER
    seconds, then every second (a long outage costs one attempt a second); ends when none
    is left. The thread holds the counters (and their store) until then: a store dropped by
    its caller with increments queued must still land them, or other processes (and a
    new store over the same server) would serve what they invalidate."""
    started = time.monotonic()
    while True:
        slow = time.monotonic() - started > SLOW_AFTER
        time.sleep(1.0 if slow else FLUSH_INTERVAL)
        try:
            gens._flush(probe=True)
            sync = True
        except ConfigurationError:
            sync = False  # a store with only an async client: the next aread lands them
        with gens._lock:  # under the lock: _queue starts a new thread once this one ends
            if not gens._pending or not sync:
                gens._flusher = None
                return


_LOCAL = LocalGenerations()
_SHARED_LOCK = threading.Lock()
# A store's counters live as long as the store: kept on it (``_ATTR``), so a process that
# makes a store per request or per tenant lets each go with its counters (kept here, every
# store stayed for the life of the process, its client and connections with it). Only a
# store that takes no attribute is kept here, by id, for the life of the process.
_ATTR = "_dejacache_generations"
_SHARED: dict[int, tuple[Any, SharedGenerations]] = {}
_ON_STORES: weakref.WeakSet[SharedGenerations] = weakref.WeakSet()  # (for ``reset``)
_INNER_ATTRS = ("remote", "back", "backend", "shared", "lower", "second", "redis", "inner")


def local_generations() -> LocalGenerations:
    return _LOCAL


def counter_backend(store: Any, _depth: int = 0) -> Any:
    """The object holding shared counters for ``store`` (itself or a tier behind it)."""
    if callable(getattr(store, "get_counters", None)) and callable(getattr(store, "incr", None)):
        return store
    if all(callable(getattr(store, a, None)) for a in ("key", "run", "arun")):
        return store  # RedisStore's seam: the counters are kept through it
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
    own = getattr(backend, "__dict__", None)
    gens = _kept_on(own, backend)
    if gens is not None:
        return gens
    with _SHARED_LOCK:
        if isinstance(own, dict):
            gens = _kept_on(own, backend)
            if gens is None:  # (also for a copy of a store, which copied its attributes)
                gens = own[_ATTR] = SharedGenerations(backend)
                _ON_STORES.add(gens)
            return gens
        entry = _SHARED.get(id(backend))
        if entry is None or entry[0] is not backend:
            gens = SharedGenerations(backend)
            _SHARED[id(backend)] = (backend, gens)
        else:
            gens = entry[1]
        return gens


def _kept_on(own: Any, backend: Any) -> SharedGenerations | None:
    """The counters kept on ``backend`` (``own``: its ``__dict__``), if they are its own."""
    gens = own.get(_ATTR) if isinstance(own, dict) else None
    return gens if isinstance(gens, SharedGenerations) and gens.backend is backend else None


def reset() -> None:
    """Forget every counter (tests): a store used again starts with fresh counters."""
    _LOCAL.clear()
    with _SHARED_LOCK:
        _SHARED.clear()
        for gens in list(_ON_STORES):
            own = getattr(gens.backend, "__dict__", None)
            if isinstance(own, dict) and own.get(_ATTR) is gens:
                del own[_ATTR]
        _ON_STORES.clear()
