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
import contextlib
import dataclasses
import functools
import inspect
import logging
import math
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .._core.durations import Duration, seconds
from ..codec import checked_plain_body
from ..errors import ConfigurationError, StoreUnavailable
from ._base import NOT_SHARED, BaseStore, Hit, Record, StoreStats
from ._breaker import CircuitBreaker, Decision
from ._redis_topology import (
    Kind,
    Topology,
    client_topology,
    cluster_name,
    topology_advice,
    url_topology,
)
from ._short import keeps_short_path

__all__ = ["RedisStore", "pack_record", "unpack_record"]

log = logging.getLogger("dejacache.redis")

_MAGIC = b"DJR\x01"
# RedisClusterException is not a RedisError: the cluster client raises it when it cannot
# read the cluster's layout (every seed node down) or finds no node for a slot.
_FAILURES: tuple[type[BaseException], ...] = (redis.RedisError, OSError,
                                              redis.exceptions.RedisClusterException)
_NOT_WRITTEN = object()  # what a write answers when the breaker or the server refused it
_SCAN_COUNT = 500
# What hit() answers when the general path must decide (see RedisStore.hit).
_GENERAL = Hit(None, 0.0, None, None, NOT_SHARED)
_new_tuple = tuple.__new__
_running_loop = asyncio._get_running_loop  # the C getter: ~40 ns, no exception when none
# Bytes hit() checked, per key (see RedisStore.share): bounded by count and size.
_KNOWN_MAX = 4096
_KNOWN_BYTES = 32 * 1024 * 1024


def pack_record(record: Record) -> bytes:
    """The bytes stored for ``record`` (its request is stored apart)."""
    meta = orjson.dumps([record.name, record.namespace, record.kind, record.duration,
                         dict(record.usage) if record.usage else None, record.created])
    return _MAGIC + len(meta).to_bytes(4, "big") + meta + record.value


_Meta = tuple[str, str, str, float, "dict[str, Any] | None", float]
# Metadata already parsed and checked, by its bytes: a key hit again carries the same bytes,
# and a lookup replaces orjson.loads plus the checks (~1.5 us of a hit). Bounded by
# emptying it when full; every record still gets its own ``usage`` dict.
_METAS: dict[bytes, _Meta | None] = {}
_METAS_MAX = 4096


def _parse_meta(meta_bytes: bytes) -> _Meta | None:
    try:
        meta = orjson.loads(meta_bytes)
    except orjson.JSONDecodeError:
        return None
    if type(meta) is not list or len(meta) != 6:
        return None
    name, namespace, kind, duration, usage, created = meta
    if not (type(name) is str and type(namespace) is str and type(kind) is str
            and type(duration) in (int, float) and type(created) in (int, float)
            and (usage is None or type(usage) is dict)):
        return None
    return name, namespace, kind, float(duration), usage, float(created)


def _header(raw: bytes) -> tuple[_Meta, int] | None:
    """The parsed metadata of a packed record and where its value starts; None when the
    bytes are not one of ours."""
    if raw[:4] != _MAGIC or len(raw) < 8:
        return None
    end = 8 + int.from_bytes(raw[4:8], "big")
    if end > len(raw):
        return None
    meta_bytes = raw[8:end]  # a bytes slice parses 2x faster than a memoryview
    try:
        meta = _METAS[meta_bytes]
    except KeyError:
        meta = _parse_meta(meta_bytes)
        if len(_METAS) >= _METAS_MAX:
            _METAS.clear()
        _METAS[meta_bytes] = meta
    return None if meta is None else (meta, end)


def unpack_record(raw: bytes, request: bytes = b"") -> Record | None:
    """The record in ``raw``, or None when the bytes are not one of ours (never raises)."""
    found = _header(raw)
    if found is None:
        return None
    (name, namespace, kind, duration, usage, created), end = found
    return Record(raw[end:], name, namespace, kind, request, duration,
                  None if usage is None else dict(usage), created)


@functools.cache
def _no_driver_info() -> dict[str, Any]:
    # CLIENT SETINFO on every new connection is an extra command we do not need; the
    # argument that disables it changed name in redis-py 6 (the old one now warns).
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


def _escape_glob(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


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
            client_or_url, own = _own_options(client_or_url)
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
        self.fail_open = fail_open
        self.timeout = seconds(timeout, "RedisStore timeout")
        self.connect_timeout = seconds(connect_timeout, "RedisStore connect_timeout")
        self.breaker = breaker or CircuitBreaker(
            threshold=failures, budget=seconds(failure_budget, "RedisStore failure_budget",
                                               zero=True),
            cooldown=seconds(cooldown, "RedisStore cooldown", zero=True))
        self._topology: Topology | None = None
        self._client: Any = None
        self._aclient: Any = async_client
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._known: dict[str, tuple[bytes, Hit]] = {}
        self._known_bytes = 0
        self._checked_plain = False  # _primaries: a plain client's server is not a cluster
        self.skipped = 0  # calls answered without Redis because the breaker was open
        self._reroute = False  # direct(): the last direct read failed, go through the client
        self.kind: Kind = self._adopt(client_or_url)
        self._e = f"{key_prefix}:e:{{"
        self._r = f"{key_prefix}:r:{{"
        self._n = f"{key_prefix}:n:"
        if self._topology is not None and self.kind != "cluster":
            # Building a client does no I/O (connections open on first use), so a bad URL
            # fails here, at configuration time, while a down server does not. A cluster
            # client reads the cluster's layout when it is built: that waits for the
            # first call.
            try:
                self._sync()
            except ValueError as exc:
                raise ConfigurationError(f"bad Redis URL {self.url!r}: {exc}") from exc

    def _adopt(self, client_or_url: Any) -> Kind:
        """Take the URL or client this store was given; its topology's kind."""
        if isinstance(client_or_url, str):
            self._topology = url_topology(client_or_url)
            self.url = self._topology.name
            return self._topology.kind
        found = client_topology(client_or_url)
        if found is None:
            raise ConfigurationError(
                "RedisStore needs a redis:// URL or a redis-py client (redis+cluster:// and "
                f"redis+sentinel:// URLs too), not {type(client_or_url).__name__}")
        kind, is_async, self.url = found
        if is_async:
            self._aclient = client_or_url
        else:
            self._client = client_or_url
        return kind

    # ---------------------------------------------------------------- the seam

    def key(self, space: str, tag: str, *parts: str) -> str:
        """``{prefix}:{space}:{<tag>}[:part...]``: keys made with one ``tag`` share a Redis
        Cluster slot (see the module docstring for the contract)."""
        return f"{self.key_prefix}:{space}:{{{tag}}}" + "".join(":" + p for p in parts)

    def run(self, op: Callable[[Any], Any], default: Any = None, *,
            probe: bool = False) -> Any:
        """``op(client)`` behind the breaker; ``default`` on any failure or error reply.
        ``probe=True``: go ahead even while the breaker is open, as its recovery probe
        (for a caller retrying on its own schedule: queued counter increments); a success
        closes the breaker, a failure restarts its cooldown."""
        client = self._client
        if client is not None and self.breaker.healthy:
            # As in get(): closed with no failure since the last success, the breaker's
            # bookkeeping changes nothing (the runtime cache reads its counters here on
            # every call); only a failure needs booking, as ``_do`` books it.
            t0 = time.perf_counter()
            try:
                return op(client)
            except _FAILURES as exc:
                self._replied(exc, t0)
                return default
        return self._do(op, default, probe=probe)

    def direct(self, client: Any, key: str, op: Callable[[Any], Any]) -> Any:
        """``op(client)`` for a read of keys in ``key``'s slot; on a Cluster, ``op`` on the
        plain client of the node serving that slot (the cluster client's routing of each
        command cost ~26 µs of a ~77 µs GET: a tool_cache hit reads twice). A redirection
        or error reply goes to the cluster client, which follows it and re-reads the
        layout; after a failure the next read does too."""
        if self.kind != "cluster" or self._reroute:
            out = op(client)
            self._reroute = False
            return out
        try:
            node = client.get_redis_connection(client.get_node_from_key(key))
        except Exception:  # no node known for the slot (a failover): the client decides
            return op(client)
        try:
            return op(node)
        except redis.ResponseError:  # MOVED, ASK, CLUSTERDOWN, WRONGTYPE...: no wait lost
            return op(client)
        except BaseException:
            self._reroute = True
            raise

    async def arun(self, op: Callable[[Any], Any], default: Any = None) -> Any:
        """Async twin of :meth:`run`: ``op(client)`` returns an awaitable."""
        return await self._ado(op, default)

    # ---------------------------------------------------------------- clients

    def _client_kwargs(self, retry: Any) -> dict[str, Any]:
        kw = {"socket_timeout": self.timeout, "socket_connect_timeout": self.connect_timeout,
              "retry": retry, "health_check_interval": 0, **_no_driver_info()}
        if self.kind == "server":
            # The cluster client refuses it and Sentinel's warns it is deprecated; the retry
            # object (no retries) is what counts there.
            kw["retry_on_timeout"] = False
        return kw

    def _sync(self) -> Any:
        client = self._client
        if client is None:
            if self._topology is None:
                raise ConfigurationError(
                    f"{self.url}: this RedisStore has only an async client; pass a sync "
                    "client or a URL to use it from synchronous code"
                )
            with self._lock:
                if self._client is None:
                    self._client = self._topology.make(
                        self._client_kwargs(Retry(NoBackoff(), 0)))
                    if self.kind == "cluster":
                        self.url = cluster_name(self._client)
                client = self._client
        return client

    def _async(self) -> Any:
        if self._aclient is not None:
            return self._aclient
        if self._topology is None:
            return None
        loop = asyncio.get_running_loop()
        # asyncio connections belong to the loop that opened them: one client per loop.
        client = self._aclients.get(loop)
        if client is None:
            client = self._topology.amake(self._client_kwargs(AsyncRetry(NoBackoff(), 0)))
            self._aclients[loop] = client
        return client

    # ---------------------------------------------------------------- breaker plumbing

    def _may_call(self, *, inline_probe: bool = False) -> bool:
        decision = self.breaker.allow()
        if decision is Decision.CALL:
            return True
        if not self.fail_open:
            raise StoreUnavailable("Redis failed recently; skipping it", backend=self.url)
        if decision is Decision.PROBE:
            if inline_probe:
                return True  # no sync client to probe with: this call is the probe
            # Probe off the call path, so an open breaker costs callers ~0 even while a
            # silent Redis makes the probe wait out a whole timeout.
            threading.Thread(target=self._probe, name="dejacache-redis-probe",
                             daemon=True).start()
        self.skipped += 1
        return False

    def _probe(self) -> None:
        t0 = time.perf_counter()
        try:
            # A cluster is probed with a read the slots route (PING goes to one node
            # only, which says nothing about CLUSTERDOWN).
            client = self._sync()
            if self.kind == "cluster":
                client.exists(self._n + "probe")
            else:
                client.ping()
        except _FAILURES as exc:
            if not self._topology_failed(exc, t0):
                self._failed(exc, t0)
        else:
            self._ok()

    def _ok(self) -> None:
        if self.breaker.success():
            log.warning("dejacache: Redis at %s is reachable again; using it", self.url)

    def _failed(self, exc: BaseException, t0: float) -> None:
        if not self.fail_open:
            raise StoreUnavailable(f"Redis did not answer ({exc})", backend=self.url) from exc
        if self.breaker.failure(time.perf_counter() - t0):
            log.warning("dejacache: Redis at %s is failing (%s: %s); skipping it for %.3gs, "
                        "then probing", self.url, type(exc).__name__, exc, self.breaker.cooldown)

    def _topology_failed(self, exc: BaseException, t0: float) -> bool:
        """Book ``exc`` as a failure when it is a topology error (warned about once per
        kind, with what to do); False when it is not one."""
        found = topology_advice(exc)
        if found is None:
            return False
        code, advice = found
        if code not in self._warned:
            self._warned.add(code)
            log.warning("dejacache: Redis at %s %s; counted as a failure (calls skip Redis "
                        "while it lasts)", self.url, advice)
        if not self.fail_open:
            raise StoreUnavailable(f"Redis at {self.url} {advice}", backend=self.url) from exc
        self._failed(exc, t0)
        return True

    def _replied(self, exc: BaseException, t0: float) -> bool:
        """Book a failed call; True when the server replied with an error about the data
        (up, but no useful result: WRONGTYPE, OOM...), False when Redis failed."""
        if isinstance(exc, redis.ResponseError) and not self._topology_failed(exc, t0):
            self._ok()
            log.debug("dejacache: Redis error reply: %r", exc)
            return True
        if not isinstance(exc, redis.ResponseError) and not self._topology_failed(exc, t0):
            self._failed(exc, t0)
        return False

    def _do(self, op: Callable[[Any], Any], default: Any, discard: str | None = None,
            *, probe: bool = False) -> Any:
        """Run ``op(client)`` behind the breaker; any failure answers ``default``.

        ``discard``: the key to delete when the server replies with an error (WRONGTYPE:
        another app's data under our key).
        """
        if not probe and not self._may_call(
                inline_probe=self._client is None and self._topology is None):
            return default
        t0 = time.perf_counter()
        try:
            out = op(self._sync())
        except _FAILURES as exc:
            if self._replied(exc, t0) and discard is not None:
                self._discard(discard)
            return default
        self._ok()
        return out

    async def _ado(self, op: Callable[[Any], Any], default: Any,
                   discard: str | None = None) -> Any:
        """Async twin of :meth:`_do`; ``op`` works with either client (it is the same
        redis-py call; only the async one returns an awaitable)."""
        client = self._async()
        if client is None:  # only a sync client: run it off the event loop
            return await asyncio.to_thread(self._do, op, default, discard)
        if not self._may_call(inline_probe=self._client is None and self._topology is None):
            return default
        t0 = time.perf_counter()
        try:
            out = await op(client)
        except _FAILURES as exc:
            if self._replied(exc, t0) and discard is not None:
                await self._adiscard(discard)
            return default
        self._ok()
        return out

    # ---------------------------------------------------------------- Store protocol

    def _read(self, key: str) -> Any:
        """The entry's bytes; None when absent or Redis is unavailable."""
        vkey = self._e + key + "}"
        client = self._client
        if client is not None and self.breaker.healthy:
            # The hit path: with the breaker closed and nothing failed since the
            # last success, ``_do``'s allow()/success() bookkeeping changes nothing; only a
            # failure needs handling, exactly as ``_do`` does.
            t0 = time.perf_counter()
            try:
                return (client.get(vkey) if self.kind != "cluster"
                        else self.direct(client, vkey, lambda c: c.get(vkey)))
            except _FAILURES as exc:
                if self._replied(exc, t0):
                    self._discard(key)
                return None
        return self._do(lambda c: c.get(vkey), None, key)

    def get(self, key: str) -> Record | None:
        raw = self._read(key)
        if raw is None:
            return None
        rec = unpack_record(raw)
        if rec is None:
            self._discard(key)
        return rec

    async def aget(self, key: str) -> Record | None:
        vkey = self._e + key + "}"
        client = self._async()
        if client is not None and self.breaker.healthy:  # the hit path, as in get()
            t0 = time.perf_counter()
            try:
                raw = await client.get(vkey)
            except _FAILURES as exc:
                if self._replied(exc, t0):
                    await self._adiscard(key)
                return None
        else:
            raw = await self._ado(lambda c: c.get(vkey), None, key)
        if raw is None:
            return None
        rec = unpack_record(raw)
        if rec is None:
            await self._adiscard(key)
        return rec

    def hit(self, key: str) -> Hit | None:
        """:meth:`get` for the decorator's short path (a ``Hit``, see ``stores._base``): one
        ``GET``, the header read from the metadata cache, and the plain JSON body checked
        against the key, with no ``Record`` built (a 2 KB ``@cache`` hit went from 1.55x to
        1.22x a raw GET + loads). Bytes read before are recognised with one comparison and
        answer the same ``Hit`` (hit()'s own work 6.1 -> 1.4 µs). A tagged value or a
        recorded error comes as its record, decoded by the engine without a second round
        trip. Under a running
        event loop, or with no sync client, it answers ``_GENERAL``: the caller's general
        path then uses the async client, and never blocks a loop on the network."""
        client = self._client
        if _running_loop() is not None or (client is None and self._topology is None):
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
        if raw is None:
            return None
        known = self._known.get(key)
        if known is not None and known[0] == raw:
            # The bytes this process read and checked last time: the same Hit again (Hit
            # allows it), maybe with the value a frozen hit made from them (share()). One
            # comparison instead of the header, the checksum and the slicing.
            return known[1]
        found = _header(raw)
        if found is None:
            if discard:
                self._discard(key)
            return None
        (name, namespace, kind, duration, usage, created), end = found
        if kind != "error":
            body = checked_plain_body(raw[end:], key)
            if body is not None:
                # tuple.__new__: Hit(...) runs a Python-level __new__; usage is shared by
                # hits (read only), as Hit documents.
                hit = _new_tuple(Hit, (body, duration, usage, None, NOT_SHARED))
                self._remember(key, raw, hit)
                return hit
        return _new_tuple(Hit, (None, duration, usage, Record(
            raw[end:], name, namespace, kind, b"", duration,
            None if usage is None else dict(usage), created), NOT_SHARED))

    def _remember(self, key: str, raw: bytes, hit: Hit) -> None:
        if len(self._known) >= _KNOWN_MAX or self._known_bytes >= _KNOWN_BYTES:
            self._known.clear()  # bounded: forgetting costs the next hit a checksum
            self._known_bytes = 0
        self._known[key] = (raw, hit)
        self._known_bytes += len(raw)

    def share(self, key: str, item: Hit, value: Any) -> None:
        """Keep ``value``, the immutable form of the body :meth:`hit` just returned in
        ``item``, for later ``@cache(frozen=True)`` hits of this process on the same bytes.
        Only equal bytes ever match (another process may replace the entry), and nothing is
        kept once this store wrote or removed the entry since that hit."""
        known = self._known.get(key)
        if known is not None and known[1] is item and item[4] is NOT_SHARED:
            self._known[key] = (known[0], _new_tuple(Hit, (*item[:4], value)))

    def _forget(self, key: str | None = None) -> None:
        if key is None:
            self._known.clear()
            self._known_bytes = 0
        else:
            self._known.pop(key, None)

    def _get_ttl_op(self, key: str) -> Callable[[Any], Any]:
        vkey = self._e + key + "}"
        return lambda c: c.pipeline(transaction=False).get(vkey).pttl(vkey).execute()

    def get_with_ttl(self, key: str) -> tuple[Record | None, float | None]:
        """The record and its remaining TTL in seconds (None: no expiry), one round trip."""
        rec, ttl, bad = _with_ttl(self._do(self._get_ttl_op(key), None, key))
        if bad:
            self._discard(key)
        return rec, ttl

    async def aget_with_ttl(self, key: str) -> tuple[Record | None, float | None]:
        rec, ttl, bad = _with_ttl(await self._ado(self._get_ttl_op(key), None, key))
        if bad:
            await self._adiscard(key)
        return rec, ttl

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
        self._forget(key)
        if ttl is not None and ttl <= 0:  # expired on arrival: Redis rejects PX 0
            self.delete(key)
            return False
        return self._do(self._write_ops(key, record, ttl), _NOT_WRITTEN) is not _NOT_WRITTEN

    async def aput(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        if self.read_only:
            return False
        self._forget(key)
        if ttl is not None and ttl <= 0:
            await self.adelete(key)
            return False
        return (await self._ado(self._write_ops(key, record, ttl), _NOT_WRITTEN)
                is not _NOT_WRITTEN)

    def delete(self, key: str) -> bool:
        if self.read_only:
            return False
        self._forget(key)
        keys = (self._e + key + "}", self._r + key + "}")
        return bool(self._do(lambda c: c.unlink(*keys), 0))

    async def adelete(self, key: str) -> bool:
        if self.read_only:
            return False
        self._forget(key)
        keys = (self._e + key + "}", self._r + key + "}")
        return bool(await self._ado(lambda c: c.unlink(*keys), 0))

    def _discard(self, key: str) -> None:
        log.debug("dejacache: discarding malformed Redis entry %s", key)
        self.delete(key)

    async def _adiscard(self, key: str) -> None:
        log.debug("dejacache: discarding malformed Redis entry %s", key)
        await self.adelete(key)

    # ---------------------------------------------------------------- scans

    def _match(self, space: str, tagged: bool = True) -> str:
        return _escape_glob(f"{self.key_prefix}:{space}:") + ("{*" if tagged else "*")

    def _primaries(self, client: Any) -> list[Any]:
        """A client per primary: each cluster primary's own, or the one server's. A plain
        client pointed at a cluster node would scan that node's slots only and report a
        part as the whole: that is a topology error, found once per store."""
        if self.kind == "cluster":
            return [client.get_redis_connection(n) for n in client.get_primaries()]
        if not self._checked_plain:
            if str(client.info("cluster").get("cluster_enabled", 0)) == "1":
                raise redis.ResponseError("CLUSTER node", status_code="CLUSTER")
            self._checked_plain = True
        return [client]

    def _scan(self, match: str) -> Iterator[list[bytes]]:
        """Batches of keys matching ``match`` on every primary (SCAN, never KEYS); stops on
        failure (``fail_open=False`` raises instead)."""
        nodes = self._do(self._primaries, None)
        for node in nodes or ():
            cursor = 0
            while True:
                page = self._do(functools.partial(_scan_page, node=node, cursor=cursor,
                                                  match=match), None)
                if page is None:
                    return
                cursor, keys = int(page[0]), list(page[1])
                if keys:
                    yield keys
                if cursor == 0:
                    break

    def _mget(self, client: Any, keys: list[Any]) -> Any:
        # A cluster's MGET must stay in one slot: mget_nonatomic groups the keys by slot and
        # pipelines one MGET per slot to each node.
        if self.kind == "cluster":
            return client.mget_nonatomic(keys)
        return client.mget(keys)

    def _requests_of(self, ekeys: list[bytes]) -> tuple[list[str], list[str]]:
        """(keys, request keys) of a batch of entry keys."""
        strip = len(self._e)
        keys = [k.decode()[strip:-1] for k in ekeys]
        return keys, [self._r + k + "}" for k in keys]

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        for ekeys in self._scan(self._match("e")):
            keys, rkeys = self._requests_of(ekeys)
            got = self._do(functools.partial(self._mget, keys=[*ekeys, *rkeys]), None)
            if got is None:
                return
            n = len(ekeys)
            for key, raw, request in zip(keys, got[:n], got[n:], strict=True):
                if raw is None:
                    continue  # expired between SCAN and MGET
                rec = unpack_record(raw, request or b"")
                if rec is None:
                    continue
                if name is not None and rec.name != name:
                    continue
                if namespace is not None and rec.namespace != namespace:
                    continue
                yield key, rec

    def clear(self, namespace: str | None = None) -> int:
        """Delete entries (all, or one namespace); how many Redis says it deleted. Counters
        are kept: resetting a generation counter could make entries cached under an old
        generation reachable. Clearing everything also deletes entries of the layout
        before hash tags (``{prefix}:v:<key>``), which are never read."""
        if self.read_only:
            return 0
        self._forget()
        removed = 0
        for ekeys in self._scan(self._match("e")):
            if namespace is not None:
                raws = self._do(functools.partial(self._mget, keys=ekeys), None) or []
                ekeys = [k for k, raw in zip(ekeys, raws, strict=False)
                         if raw is not None and (rec := unpack_record(raw)) is not None
                         and rec.namespace == namespace]
            if ekeys:
                removed += self._unlink_counted(ekeys, self._requests_of(ekeys)[1])
        if namespace is None:
            for vkeys in self._scan(self._match("v", tagged=False)):
                removed += self._unlink_counted(vkeys, [])
            for qkeys in self._scan(self._match("q", tagged=False)):
                self._unlink_counted(qkeys, [])
        return removed

    def _unlink_counted(self, counted: list[Any], others: list[Any]) -> int:
        """UNLINK both lists; how many of ``counted`` existed (the server's own reply)."""
        n = self._do(functools.partial(_unlink, keys=counted), 0)
        if others:
            self._do(functools.partial(_unlink, keys=others), 0)
        return int(n)

    def stats(self) -> StoreStats:
        entries = size = 0
        for ekeys in self._scan(self._match("e")):
            rkeys = self._requests_of(ekeys)[1]
            lens = self._do(functools.partial(_strlens, keys=[*ekeys, *rkeys]), None) or []
            entries += sum(1 for n in lens[: len(ekeys)] if n)
            size += sum(int(n) for n in lens)
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
        out = self._do(lambda c: c.incr(self._n + counter), None)
        return None if out is None else int(out)

    async def aincr(self, counter: str) -> int | None:
        if self.read_only:
            return None
        out = await self._ado(lambda c: c.incr(self._n + counter), None)
        return None if out is None else int(out)

    def get_counters(self, counters: list[str]) -> list[int] | None:
        """Current values (0 when never incremented); None when unavailable. One MGET on
        a single server; on a cluster, one per slot (the keys carry no common tag)."""
        if not counters:
            return []
        keys = [self._n + n for n in counters]
        out = self._do(functools.partial(self._mget, keys=keys), None)
        return None if out is None else _ints(out)

    async def aget_counters(self, counters: list[str]) -> list[int] | None:
        if not counters:
            return []
        keys = [self._n + n for n in counters]
        out = await self._ado(functools.partial(self._mget, keys=keys), None)
        return None if out is None else _ints(out)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the clients this store built (an injected client is left to its owner)."""
        with self._lock:
            client, self._client = ((self._client, None) if self._topology is not None
                                    else (None, self._client))
        if client is not None:
            client.close()
            for sentinel in _sentinels_of(client):
                sentinel.close()

    async def aclose(self) -> None:
        """Close the current event loop's client this store built, then the sync one."""
        if self._topology is not None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
                client = self._aclients.pop(loop, None)
                if client is not None:
                    await client.aclose()
                    for sentinel in _sentinels_of(client):
                        await sentinel.aclose()
        self.close()

    def __repr__(self) -> str:
        ro = ", read_only=True" if self.read_only else ""
        return (f"RedisStore({self.url!r}, key_prefix={self.key_prefix!r}{ro}, "
                f"breaker={self.breaker.state.value})")


def _sentinels_of(client: Any) -> list[Any]:
    """The Sentinel clients behind a ``master_for`` client this store built."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(getattr(manager, "sentinels", ()))


def _ints(values: list[Any]) -> list[int] | None:
    try:
        return [int(v) if v is not None else 0 for v in values]
    except ValueError:  # someone stored a non-number under a counter key
        return None


def _scan_page(_client: Any, *, node: Any, cursor: int, match: str) -> Any:
    return node.scan(cursor, match=match, count=_SCAN_COUNT)


def _strlens(client: Any, *, keys: list[Any]) -> Any:
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.strlen(k)
    return pipe.execute()


def _unlink(client: Any, *, keys: list[Any]) -> Any:
    return client.unlink(*keys)


def _with_ttl(out: Any) -> tuple[Record | None, float | None, bool]:
    """(record, remaining TTL, malformed) from a GET + PTTL pipeline reply."""
    if out is None or out[0] is None:
        return None, None, False
    rec = unpack_record(out[0])
    if rec is None:
        return None, None, True
    pttl = int(out[1])
    return rec, (pttl / 1000.0 if pttl >= 0 else None), False


_OWN_OPTIONS = ("read_only", "key_prefix")


def _own_options(url: str) -> tuple[str, dict[str, str]]:
    """Split dejacache's own query options off a URL (redis-py rejects unknown ones)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url, {}
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in pairs if k in _OWN_OPTIONS}
    rest = urllib.parse.urlencode([(k, v) for k, v in pairs if k not in _OWN_OPTIONS])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), own
