"""The shared tier: Redis (one server, a Sentinel-managed master or a Cluster), failing
open and fast.

An outage must cost a bounded delay, never a failed call (redis-py's defaults are 5 s
timeouts and ten retries with backoff: seconds per call). So clients built here use
millisecond timeouts and no retries, and every call goes through a :class:`CircuitBreaker`
that skips Redis while it is down and probes it in the background to recover. A topology
error (``CLUSTERDOWN``, ``TRYAGAIN``, ``MASTERDOWN``, ``READONLY``, ``CROSSSLOT``, or
``MOVED`` reaching a plain client pointed at a cluster node) is a failure too: it is
logged once per kind with what to do, and counts toward the breaker. Redirections
(``MOVED``/``ASK``) are followed by redis-py's cluster client, never here.

The store is the hit path and the Store protocol; each other concern has its own private
module: ``_redis_topology`` (which Redis a URL or client names), ``_redis_clients`` (the
clients, and how each topology routes a read), ``_redis_calls`` (the breaker: what a
failure is and what a caller gets instead), ``_redis_codec`` (the bytes of an entry, and
the memos that keep a warm hit cheap), ``_redis_keyspace`` (the key layout below, and the
walks of ``iterate``/``clear``/``stats``).

Layout under ``key_prefix`` (default ``dejacache``; ``<...>`` marks a placeholder, ``{...}``
is a literal Redis Cluster hash tag, so an entry and its request share one slot while
entries spread over the shards)::

    <prefix>:e:{<key>}    packed record: b"DJR\\x01" | u32 meta length | meta JSON | value
    <prefix>:r:{<key>}    the canonical request (explain / nearest-miss only), same TTL
    <prefix>:n:<name>     counters of incr()/get_counters(), never expired or cleared

Entries written by earlier dejacache versions under ``<prefix>:v:<key>`` /
``<prefix>:q:<key>`` (no hash tag) are not read: they are misses, written again in the new
layout on the next call, and ``clear()`` deletes them (they also expire by their own TTL).

One packed blob rather than a hash because the hit path is then a single ``GET`` (measured
in ``benchmarks/bench_redis.py``); the request lives apart so hits do not fetch it.

The seam for code that keeps its own keys next to the entries (the runtime's generation
counters) -- a contract, kept stable:

* ``store.kind``: ``"server"``, ``"cluster"`` or ``"sentinel"``.
* ``store.key(space, tag, *parts)`` -> ``"<prefix>:<space>:{<tag>}"`` followed by
  ``":<part>"`` for each part. Keys made with one ``tag`` live in one slot on every
  topology, so a multi-key command over them (``MGET``, ``EVAL`` whose keys all share the
  tag, ``pipeline(transaction=True)``) works on a Cluster too. ``space`` is a short word of
  the caller's; ``e``, ``r``, ``n``, ``v`` and ``q`` are the store's own. ``key_prefix`` may
  not contain ``{`` or ``}``, so the tag is always the caller's.
* ``store.run(op, default, probe=False)`` / ``await store.arun(op, default)``:
  ``op(client)`` behind the breaker with the store's timeouts and error handling:
  ``default`` when Redis is down or skipped, on a topology error, or on an error reply
  (``WRONGTYPE``...), each booked as for the store's own calls; ``probe=True`` goes ahead
  while the breaker is open, as its recovery probe. ``client`` is redis-py's sync client
  for ``run`` (``redis.Redis`` or ``redis.cluster.RedisCluster``) and its ``redis.asyncio``
  twin for ``arun`` (the sync one in a worker thread when the store has no async client).
  ``op`` must not keep it.
* ``store.read_only``: a caller skips its writes when it is true.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._core.durations import Duration, seconds
from ..errors import ConfigurationError
from ._base import NOT_SHARED, BaseStore, Hit, Record, StoreStats
from ._breaker import CircuitBreaker
from ._loop_deadline import within
from ._lost import MAX_KEYS, LostWrites
from ._redis_calls import FAILURES, RedisCalls, doubtful
from ._redis_clients import RedisClients, split_own_options
from ._redis_codec import (
    KnownHits,
    counter_values,
    pack_record,
    record_with_ttl,
    unpack_record,
)
from ._redis_keyspace import Keyspace
from ._redis_topology import Kind
from ._short import keeps_short_path

__all__ = ["RedisStore", "pack_record", "unpack_record"]

log = logging.getLogger("dejacache.redis")

_NOT_WRITTEN = object()  # what a write answers when the breaker or the server refused it
_BAD = object()  # what a read answers on an error reply about the entry: it is deleted
# What hit() answers when the general path must decide (see RedisStore.hit).
_GENERAL: Hit = (None, 0.0, None, None, NOT_SHARED)
_running_loop = asyncio._get_running_loop  # the C getter: ~40 ns, no exception when none


class RedisStore(BaseStore):
    """Key → Record in Redis, shared by processes and machines.

    ``client_or_url``: a URL -- ``redis://``/``rediss://``/``unix://`` for one server,
    ``redis+cluster://host:port[,host:port...]`` for a Redis Cluster,
    ``redis+sentinel://host:port[,host:port...]/service_name[/db]`` for the master a set of
    Sentinels names (clients are built lazily with ``connect_timeout``/``timeout`` seconds,
    no retries; nothing connects until the first call, so the process starts while Redis is
    down) -- or a redis-py client you already have (``redis.Redis``,
    ``redis.cluster.RedisCluster``, ``Sentinel.master_for(...)`` or their
    ``redis.asyncio`` twins; used as is, its timeouts are yours). ``async_client`` adds an
    async client next to a sync one; without any, async calls run the sync client in a
    worker thread.

    Failures are swallowed (``get`` → None, writes dropped) and counted by a
    :class:`CircuitBreaker` (``failures`` in a row, or ``failure_budget`` seconds lost to
    them, open it; ``cooldown`` seconds later a background ``PING`` probes). Bytes that are
    not a dejacache record are a miss and are deleted. ``read_only=True`` serves reads and
    silently skips every write (fork pull requests reading a team cache). A URL may carry
    both: ``redis://host:6379/0?read_only=1&key_prefix=myteam`` (handy in CI variables).
    ``fail_open=False`` raises ``StoreUnavailable`` instead of answering as if Redis were
    empty: for a person asking what the store holds (``dejacache stats``), not for calls.
    """

    # Its sync calls wait on the network: an async caller that needs one (a miss report's
    # ``iterate``) runs it in a worker thread.
    blocking = True
    short_hits = True  # see :meth:`hit`

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that reads or writes its own way (a test double, a wrapper that fails
        # on purpose) has not promised that hit agrees with get: general path for it.
        if not keeps_short_path(cls, RedisStore):
            cls.short_hits = False

    def __init__(
        self,
        client_or_url: Any,
        *,
        key_prefix: str = "dejacache",
        async_client: Any = None,
        timeout: Duration = 0.05,
        connect_timeout: Duration = 0.05,
        read_only: bool = False,
        failures: int = 3,
        failure_budget: Duration = 0.025,
        cooldown: Duration = 1.0,
        breaker: CircuitBreaker | None = None,
        fail_open: bool = True,
    ) -> None:
        if isinstance(client_or_url, str):
            client_or_url, own = split_own_options(client_or_url)
            read_only = read_only or own.get("read_only", "").lower() in ("1", "true", "yes")
            key_prefix = own.get("key_prefix", key_prefix)
        if not key_prefix or not isinstance(key_prefix, str):
            raise ConfigurationError("RedisStore key_prefix must be a non-empty string")
        if "{" in key_prefix or "}" in key_prefix:
            raise ConfigurationError(
                f"RedisStore key_prefix {key_prefix!r} may not contain '{{' or '}}': the "
                "store puts each entry's key in a Redis Cluster hash tag")
        self.key_prefix = key_prefix
        self.read_only = read_only
        self.timeout = seconds(timeout, "RedisStore timeout")
        self.connect_timeout = seconds(connect_timeout, "RedisStore connect_timeout")
        self.breaker = breaker or CircuitBreaker(
            threshold=failures, budget=seconds(failure_budget, "RedisStore failure_budget",
                                               zero=True),
            cooldown=seconds(cooldown, "RedisStore cooldown", zero=True))
        self._clients = clients = RedisClients(client_or_url, async_client,
                                               timeout=self.timeout,
                                               connect_timeout=self.connect_timeout)
        self.kind: Kind = clients.kind
        self._keys = keys = Keyspace(key_prefix)
        self._calls = RedisCalls(clients, self.breaker, fail_open=fail_open,
                                 probe_key=keys.counter + "probe")
        # The hit path's own references (one attribute each, not two).
        self._e, self._r, self._n = keys.entry, keys.request, keys.counter
        self._direct = clients.direct
        self._hits = KnownHits()
        self._known = self._hits.entries
        # Writes answered without Redis: their keys read as misses until their entries
        # are unlinked (see _lost); the recovery probe does it before the breaker closes.
        self._lost = LostWrites()
        self._lost_keys = self._lost.keys  # the reads' one check: empty
        self._calls.settle = self._settle

    @property
    def url(self) -> str:
        """The store's name: its URL without the password, or its topology's name."""
        return self._clients.url

    @url.setter
    def url(self, value: str) -> None:
        self._clients.url = value

    @property
    def fail_open(self) -> bool:
        return self._calls.fail_open

    @fail_open.setter
    def fail_open(self, value: bool) -> None:
        self._calls.fail_open = value

    @property
    def skipped(self) -> int:
        """Calls answered without Redis because the breaker was open."""
        return self._calls.skipped

    # ---------------------------------------------------------------- the seam

    def key(self, space: str, tag: str, *parts: str) -> str:
        """``{prefix}:{space}:{<tag>}[:part...]``: keys made with one ``tag`` share a Redis
        Cluster slot (see the module docstring for the contract)."""
        return self._keys.key(space, tag, *parts)

    def run(self, op: Callable[[Any], Any], default: Any = None, *,
            probe: bool = False) -> Any:
        """``op(client)`` behind the breaker; ``default`` on any failure or error reply.
        ``probe=True``: go ahead even while the breaker is open, as its recovery probe
        (for a caller retrying on its own schedule: queued counter increments); a success
        closes the breaker, a failure restarts its cooldown."""
        client = self._clients.client
        if client is not None and self.breaker.healthy:
            # As in get(): closed with no failure since the last success, the breaker's
            # bookkeeping changes nothing (the runtime cache reads its counters here on
            # every call); only a failure needs booking, as ``RedisCalls.do`` books it.
            t0 = time.perf_counter()
            try:
                return op(client)
            except FAILURES as exc:
                if doubtful(exc):  # tried again before it counts
                    return self._calls.do(op, default, since=t0)
                self._calls.replied(exc, t0)
                return default
        return self._calls.do(op, default, probe=probe)

    def direct(self, client: Any, key: str, op: Callable[[Any], Any],
               moving: Callable[[Any], Any] | None = None) -> Any:
        """``op(client)`` for a read of keys in ``key``'s slot, on a Cluster straight to
        the node serving it; ``moving(node)`` instead while that slot is migrating
        (``RedisClients.direct``)."""
        return self._direct(client, key, op, moving)

    def redirected(self, client: Any, exc: BaseException) -> tuple[Any, bool] | None:
        """On a Cluster, where a node's ``ASK``/``MOVED`` sends a command again: (that
        node's client, whether ``ASKING`` must precede it); None for any other error."""
        return self._clients.redirected(client, exc)

    async def arun(self, op: Callable[[Any], Any], default: Any = None, *,
                   probe: bool = False) -> Any:
        """Async twin of :meth:`run`: ``op(client)`` returns an awaitable."""
        return await self._calls.ado(op, default, probe=probe)

    # ---------------------------------------------------------------- reads

    def _read(self, key: str) -> Any:
        """The entry's bytes; None when absent or Redis is unavailable."""
        if self._lost_keys and self._still_lost(key):
            return None
        vkey = self._e + key + "}"
        client = self._clients.client
        if client is not None and self.breaker.healthy:
            # The hit path: with the breaker closed and nothing failed since the last
            # success, ``RedisCalls.do``'s allow()/success() bookkeeping changes nothing;
            # only a failure needs handling, exactly as ``do`` does.
            t0 = time.perf_counter()
            try:
                return (client.get(vkey) if self.kind != "cluster"
                        else self._direct(client, vkey, lambda c: c.get(vkey)))
            except FAILURES as exc:
                if not doubtful(exc):
                    if self._calls.replied(exc, t0):
                        self._discard(key)
                    return None
                since: float | None = t0  # tried again below before it counts
        else:
            since = None
        raw = self._calls.do(lambda c: c.get(vkey), None, _BAD, since=since)
        if raw is _BAD:
            self._discard(key)
            return None
        return raw

    def get(self, key: str) -> Record | None:
        raw = self._read(key)
        if raw is None:
            return None
        rec = unpack_record(raw)
        if rec is None:
            self._discard(key)
        return rec

    async def aget(self, key: str) -> Record | None:
        if self._lost_keys and await self._astill_lost(key):
            return None
        vkey = self._e + key + "}"
        client = self._clients.for_loop()
        if client is not None and self.breaker.healthy:  # the hit path, as in get()
            t0 = time.perf_counter()
            deadline = self._clients.deadline
            try:
                raw = await (client.get(vkey) if deadline is None
                             else within(client.get(vkey), deadline))
            except FAILURES as exc:
                if not doubtful(exc):
                    if self._calls.replied(exc, t0):
                        await self._adiscard(key)
                    return None
                # tried again before it counts
                raw = await self._calls.ado(lambda c: c.get(vkey), None, _BAD, since=t0)
        else:
            raw = await self._calls.ado(lambda c: c.get(vkey), None, _BAD)
        if raw is None:
            return None
        rec = None if raw is _BAD else unpack_record(raw)
        if rec is None:
            await self._adiscard(key)
        return rec

    def hit(self, key: str) -> Hit | None:
        """:meth:`get` for the decorator's short path (a ``Hit``, see ``stores._base``): one
        ``GET``, the header read from the metadata cache, and the plain JSON body checked
        against the key, with no ``Record`` built (a 2 KB ``@cache`` hit went from 1.55x to
        1.22x a raw GET + loads). Bytes read before are recognised with one comparison and
        answer the same ``Hit`` (``_redis_codec.KnownHits``). A tagged value or a recorded
        error comes as its record, decoded by the engine without a second round trip.
        Under a running event loop, or with no sync client, it answers ``_GENERAL``: the
        caller's general path then uses the async client, and never blocks a loop on the
        network."""
        if _running_loop() is not None or not self._clients.has_sync:
            return _GENERAL
        return self.hit_of(key, self._read(key))

    def entry_key(self, key: str) -> str:
        """The Redis key of entry ``key`` (for a caller that reads it in a command of its
        own: the runtime cache's counters and entry in one ``MGET``)."""
        return self._e + key + "}"

    def hit_of(self, key: str, raw: bytes | None, *, discard: bool = True) -> Hit | None:
        """:meth:`hit` given the bytes a ``GET`` of :meth:`entry_key` answered.
        ``discard=False``: bytes that are not a record are a miss, left for the caller's
        own read to delete (an async caller: deleting here would block its loop)."""
        if raw is None or (self._lost_keys and self._lost.unsure(key)):
            return None
        known = self._known.get(key)
        if known is not None and known[0] == raw:
            # The bytes this process read and checked last time: the same Hit again (Hit
            # allows it), maybe with the value a frozen hit made from them (share()).
            return known[1]
        hit = self._hits.decode(key, raw)
        if hit is None and discard:
            self._discard(key)
        return hit

    def share(self, key: str, item: Hit, value: Any) -> None:
        """Keep ``value``, the immutable form of the body :meth:`hit` just returned in
        ``item``, for later ``@cache(frozen=True)`` hits of this process on the same bytes.
        Only equal bytes ever match (another process may replace the entry), and nothing is
        kept once this store wrote or removed the entry since that hit."""
        self._hits.share(key, item, value)

    def _get_ttl_op(self, key: str) -> Callable[[Any], Any]:
        vkey = self._e + key + "}"
        return lambda c: c.pipeline(transaction=False).get(vkey).pttl(vkey).execute()

    def get_with_ttl(self, key: str) -> tuple[Record | None, float | None]:
        """The record and its remaining TTL in seconds (None: no expiry), one round trip."""
        if self._lost_keys and self._still_lost(key):
            return None, None
        out = self._calls.do(self._get_ttl_op(key), None, _BAD)
        rec, ttl, bad = record_with_ttl(None if out is _BAD else out)
        if bad or out is _BAD:
            self._discard(key)
        return rec, ttl

    async def aget_with_ttl(self, key: str) -> tuple[Record | None, float | None]:
        if self._lost_keys and await self._astill_lost(key):
            return None, None
        out = await self._calls.ado(self._get_ttl_op(key), None, _BAD)
        rec, ttl, bad = record_with_ttl(None if out is _BAD else out)
        if bad or out is _BAD:
            await self._adiscard(key)
        return rec, ttl

    # ---------------------------------------------------------------- writes

    def _write_ops(self, key: str, record: Record, ttl: float | None
                   ) -> Callable[[Any], Any]:
        px = None if ttl is None else max(1, math.ceil(ttl * 1000))
        if not record.created:  # like SQLiteStore: iterate() reports when it was stored
            record = dataclasses.replace(record, created=time.time())
        blob = pack_record(record)
        vkey, qkey = self._e + key + "}", self._r + key + "}"

        def ops(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            pipe.set(vkey, blob, px=px)
            if record.request:
                pipe.set(qkey, record.request, px=px)
            else:  # do not leave an older request next to the new value
                # Queued by name: an asyncio cluster pipeline's unlink() is a coroutine of
                # its own (it splits keys by slot) and would never run inside the pipeline.
                pipe.execute_command("UNLINK", qkey)
            return pipe.execute()

        return ops

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        if self.read_only:
            return False
        self._hits.forget(key)
        if ttl is not None and ttl <= 0:  # expired on arrival: Redis rejects PX 0
            self.delete(key)
            return False
        out = self._calls.do(self._write_ops(key, record, ttl), _NOT_WRITTEN)
        return self._wrote(key, out)

    async def aput(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        if self.read_only:
            return False
        self._hits.forget(key)
        if ttl is not None and ttl <= 0:
            await self.adelete(key)
            return False
        out = await self._calls.ado(self._write_ops(key, record, ttl), _NOT_WRITTEN)
        return self._wrote(key, out)

    def delete(self, key: str) -> bool:
        if self.read_only:
            return False
        self._hits.forget(key)
        keys = (self._e + key + "}", self._r + key + "}")
        return self._wrote(key, self._calls.do(lambda c: c.unlink(*keys), _NOT_WRITTEN))

    async def adelete(self, key: str) -> bool:
        if self.read_only:
            return False
        self._hits.forget(key)
        keys = (self._e + key + "}", self._r + key + "}")
        return self._wrote(key, await self._calls.ado(lambda c: c.unlink(*keys),
                                                      _NOT_WRITTEN))

    # ---------------------------------------------------------------- lost writes

    def _wrote(self, key: str, out: Any) -> bool:
        """Book a write of ``key`` that answered ``out``: whether it reached Redis (for a
        delete: and removed something). One that did not is lost (``_lost``)."""
        if out is not _NOT_WRITTEN:
            self._lost.landed(key)
            return bool(out)
        if self._lost.lost(key):
            log.warning("dejacache: more than %d writes did not reach Redis at %s; this "
                        "process reads no entry from it until clear()", MAX_KEYS, self.url)
        return False

    def _unlink(self, keys: list[str]) -> Callable[[Any], Any]:
        """``op(client)`` unlinking the entries (and requests) of ``keys``."""
        pairs = [(self._e + k + "}", self._r + k + "}") for k in keys]

        def op(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for pair in pairs:  # an entry and its request share a slot (one hash tag)
                pipe.execute_command("UNLINK", *pair)  # by name: see _write_ops
            return pipe.execute()

        return op

    def _settle(self, client: Any) -> bool:
        """The recovery probe's work: unlink every lost write's entry with ``client`` (a
        failure raises); False when there was none (the probe PINGs instead)."""
        lost, did = self._lost, False
        while (keys := lost.batch()) is not None:
            self._unlink(keys)(client)
            lost.settled(keys)
            did = True
        return did

    def _still_lost(self, key: str) -> bool:
        """Whether ``key``'s entry may be one a lost write replaced; the lost writes are
        settled first when Redis answers (the probe usually did it already)."""
        lost = self._lost
        if not lost.unsure(key):
            return False
        while (keys := lost.batch()) is not None:
            if self._calls.do(self._unlink(keys), _NOT_WRITTEN) is _NOT_WRITTEN:
                break
            lost.settled(keys)
        return lost.unsure(key)

    async def _astill_lost(self, key: str) -> bool:
        lost = self._lost  # :meth:`_still_lost`, awaited
        if not lost.unsure(key):
            return False
        while (keys := lost.batch()) is not None:
            if await self._calls.ado(self._unlink(keys), _NOT_WRITTEN) is _NOT_WRITTEN:
                break
            lost.settled(keys)
        return lost.unsure(key)

    def _discard(self, key: str) -> None:
        log.debug("dejacache: discarding malformed Redis entry %s", key)
        self.delete(key)

    async def _adiscard(self, key: str) -> None:
        log.debug("dejacache: discarding malformed Redis entry %s", key)
        await self.adelete(key)

    # ---------------------------------------------------------------- walks

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        return self._keys.records(self._calls, name, namespace)

    def clear(self, namespace: str | None = None) -> int:
        """Delete entries (all, or one namespace); how many Redis says it deleted. Counters
        are kept: resetting a generation counter could make entries cached under an old
        generation reachable. Clearing everything also deletes entries of the layout
        before hash tags (``{prefix}:v:<key>``), which are never read."""
        if self.read_only:
            return 0
        self._hits.forget()
        calls = self._calls
        before = calls.booked, calls.skipped
        removed = self._keys.clear(calls, namespace)
        if namespace is None and (calls.booked, calls.skipped) == before:
            self._lost.cleared()  # every call reached Redis: no entry is left
        return removed

    def stats(self) -> StoreStats:
        entries, size = self._keys.sizes(self._calls)
        return StoreStats(backend=self.url, entries=entries, bytes=size, extra={
            "kind": self.kind, "key_prefix": self.key_prefix, "read_only": self.read_only,
            "breaker": self.breaker.state.value, "trips": self.breaker.trips,
            "skipped": self.skipped,
        })

    # ---------------------------------------------------------------- counters

    def incr(self, counter: str) -> int | None:
        """Increment a shared counter; its new value, or None when Redis is unavailable."""
        if self.read_only:
            return None
        out = self._calls.do(lambda c: c.incr(self._n + counter), None)
        return None if out is None else int(out)

    async def aincr(self, counter: str) -> int | None:
        if self.read_only:
            return None
        out = await self._calls.ado(lambda c: c.incr(self._n + counter), None)
        return None if out is None else int(out)

    def get_counters(self, counters: list[str]) -> list[int] | None:
        """Current values (0 when never incremented); None when unavailable. One MGET on
        a single server; on a cluster, one per slot (the keys carry no common tag)."""
        if not counters:
            return []
        keys = [self._n + n for n in counters]
        out = self._calls.do(functools.partial(self._clients.mget, keys=keys), None)
        return None if out is None else counter_values(out)

    async def aget_counters(self, counters: list[str]) -> list[int] | None:
        if not counters:
            return []
        keys = [self._n + n for n in counters]
        out = await self._calls.ado(functools.partial(self._clients.mget, keys=keys), None)
        return None if out is None else counter_values(out)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the clients this store built (an injected client is left to its owner)."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the current event loop's client this store built, then the sync one."""
        await self._clients.aclose()

    def __repr__(self) -> str:
        ro = ", read_only=True" if self.read_only else ""
        return (f"RedisStore({self.url!r}, key_prefix={self.key_prefix!r}{ro}, "
                f"breaker={self.breaker.state.value})")
