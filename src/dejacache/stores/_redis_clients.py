"""The redis-py clients one :class:`~dejacache.stores.redis.RedisStore` talks through, and
how each topology routes what the store sends.

A store is given a URL or a client (``_redis_topology`` reads which topology it names).
Clients built here get the store's millisecond timeouts and no retries (redis-py's
defaults are 5 s timeouts and ten retries with backoff: seconds per call), and are built
lazily: nothing connects until the first call, so a process starts while Redis is down. An
injected client is used as is (its timeouts are its owner's) and left to its owner on
close. One sync client per store (built under a lock); one asyncio client per event loop
(its connections belong to the loop that opened them).

Per topology: reads of one slot on a Cluster go straight to the node serving it
(:meth:`RedisClients.direct`); multi-key reads are split by slot (:meth:`mget`); whole-
keyspace walks visit every primary (:meth:`primaries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import urllib.parse
import weakref
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import ConfigurationError
from ._loop_deadline import MAX_LATE
from ._redis_topology import Kind, Topology, client_topology, cluster_name, url_topology

__all__ = ["RedisClients", "split_own_options"]

_OWN_OPTIONS = ("read_only", "key_prefix")


def split_own_options(url: str) -> tuple[str, dict[str, str]]:
    """Split dejacache's own query options off a URL (redis-py rejects unknown ones)."""
    parts = urllib.parse.urlsplit(url)
    if not parts.query:
        return url, {}
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in pairs if k in _OWN_OPTIONS}
    rest = urllib.parse.urlencode([(k, v) for k, v in pairs if k not in _OWN_OPTIONS])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), own


@functools.cache
def _no_driver_info() -> dict[str, Any]:
    # CLIENT SETINFO on every new connection is an extra command we do not need; the
    # argument that disables it changed name in redis-py 6 (the old one now warns).
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


def _migrating(exc: BaseException) -> bool:
    """A reply of a node whose slot is migrating: ``ASK`` (the keys moved) or ``TRYAGAIN``
    (some moved), not ``MOVED`` (the whole slot did: the cluster client's table is old)."""
    return (isinstance(exc, (redis.exceptions.AskError, redis.exceptions.TryAgainError))
            and not isinstance(exc, redis.exceptions.MovedError))


def _sentinels_of(client: Any) -> list[Any]:
    """The Sentinel clients behind a ``master_for`` client built here."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(getattr(manager, "sentinels", ()))


class RedisClients:
    """The clients of one store: ``client_or_url`` is a URL (clients built from it) or a
    redis-py client (sync or asyncio); ``async_client`` adds an asyncio one next to a sync
    one. ``ConfigurationError`` for anything else, or a URL redis-py cannot read."""

    def __init__(self, client_or_url: Any, async_client: Any, *, timeout: float,
                 connect_timeout: float) -> None:
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.topology: Topology | None = None
        self.client: Any = None  # the sync client, once there is one
        self.aclient: Any = async_client  # an injected asyncio client
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary())
        self._lock = threading.Lock()
        self._reroute = False  # direct(): the last direct read failed, go through the client
        self._checked_plain = False  # primaries(): a plain client's server is not a cluster
        #: The time an async call through a client built here may take, enforced by the
        #: store (``_loop_deadline.within``: the event loop's own lateness is not counted);
        #: None for an injected client, whose timeouts are its owner's.
        self.deadline: float | None = None
        self.kind: Kind = self._adopt(client_or_url)
        #: Whether sync calls can be made at all (a store given only an asyncio client
        #: cannot): fixed at construction, ``close`` keeps it.
        self.has_sync = self.topology is not None or self.client is not None
        if self.topology is not None and self.kind != "cluster":
            # Building a client does no I/O (connections open on first use), so a bad URL
            # fails here, at configuration time, while a down server does not. A cluster
            # client reads the cluster's layout when it is built: that waits for the
            # first call.
            try:
                self.sync()
            except ValueError as exc:
                raise ConfigurationError(f"bad Redis URL {self.url!r}: {exc}") from exc

    def _adopt(self, client_or_url: Any) -> Kind:
        """Take the URL or client the store was given; its topology's kind."""
        if isinstance(client_or_url, str):
            self.topology = url_topology(client_or_url)
            self.url = self.topology.name
            return self.topology.kind
        found = client_topology(client_or_url)
        if found is None:
            raise ConfigurationError(
                "RedisStore needs a redis:// URL or a redis-py client (redis+cluster:// and "
                f"redis+sentinel:// URLs too), not {type(client_or_url).__name__}")
        kind, is_async, self.url = found
        if is_async:
            self.aclient = client_or_url
        else:
            self.client = client_or_url
        return kind

    def _options(self, retry: Any, *, backstop: float | None = None) -> dict[str, Any]:
        timeout, connect = ((self.timeout, self.connect_timeout) if backstop is None
                            else (backstop, backstop))
        kw = {"socket_timeout": timeout, "socket_connect_timeout": connect,
              "retry": retry, "health_check_interval": 0, **_no_driver_info()}
        if self.kind == "server":
            # The cluster client refuses it and Sentinel's warns it is deprecated; the retry
            # object (no retries) is what counts there.
            kw["retry_on_timeout"] = False
        return kw

    def sync(self) -> Any:
        """The sync client, built on first use; ``ConfigurationError`` when the store has
        only an asyncio client."""
        client = self.client
        if client is None:
            if self.topology is None:
                raise ConfigurationError(
                    f"{self.url}: this RedisStore has only an async client; pass a sync "
                    "client or a URL to use it from synchronous code"
                )
            with self._lock:
                if self.client is None:
                    self.client = self.topology.make(self._options(Retry(NoBackoff(), 0)))
                    if self.kind == "cluster":
                        self.url = cluster_name(self.client)
                client = self.client
        return client

    def for_loop(self) -> Any:
        """The asyncio client for the running loop; None when the store has only a sync
        client (its async calls then run that one in a worker thread)."""
        if self.aclient is not None:
            return self.aclient
        if self.topology is None:
            return None
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            # redis-py's own timeouts on an event loop are timers that a busy loop runs
            # late, after the reply has arrived: they are only a backstop here, and the
            # store times each call itself (``deadline``).
            self.deadline = max(self.timeout, self.connect_timeout)
            client = self.topology.amake(self._options(
                AsyncRetry(NoBackoff(), 0), backstop=self.deadline + 2 * MAX_LATE))
            self._aclients[loop] = client
        return client

    # ---------------------------------------------------------------- routing

    def direct(self, client: Any, key: str, op: Callable[[Any], Any],
               moving: Callable[[Any], Any] | None = None) -> Any:
        """``op(client)`` for a read of keys in ``key``'s slot; on a Cluster, ``op`` on the
        plain client of the node serving that slot (the cluster client's routing of each
        command cost ~26 µs of a ~77 µs GET: a tool_cache hit reads twice). A redirection
        or error reply goes to the cluster client, which follows it and re-reads the
        layout; after a failure the next read does too. ``moving(node)``: what to do
        instead when the slot is migrating (``ASK``, or ``TRYAGAIN`` for keys split
        between the two nodes, which the cluster client would retry for ~0.4 s)."""
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
        except redis.ResponseError as exc:  # MOVED, CLUSTERDOWN, WRONGTYPE...: no wait lost
            if moving is not None and _migrating(exc):
                return moving(node)
            return op(client)
        except BaseException:
            self._reroute = True
            raise

    @staticmethod
    def owner(client: Any, key: str) -> Any:
        """The plain client of the node serving ``key``'s slot, by the cluster client's
        table (a cluster client)."""
        return client.get_redis_connection(client.get_node_from_key(key))

    @staticmethod
    def redirected(client: Any, exc: BaseException) -> tuple[Any, bool] | None:
        """Where a cluster node's redirection sends a command again (a cluster client):
        (the plain client of that node, whether ``ASKING`` must come first); None for any
        other error. ``MOVED`` re-reads the cluster's table first."""
        if isinstance(exc, redis.exceptions.MovedError):  # (a subclass of AskError)
            client.nodes_manager.initialize()
            asking = False
        elif isinstance(exc, redis.exceptions.AskError):
            asking = True
        else:
            return None
        node = client.get_node(host=exc.host, port=exc.port)
        return None if node is None else (client.get_redis_connection(node), asking)

    def mget(self, client: Any, keys: list[Any]) -> Any:
        # A cluster's MGET must stay in one slot: mget_nonatomic groups the keys by slot and
        # pipelines one MGET per slot to each node.
        if self.kind == "cluster":
            return client.mget_nonatomic(keys)
        return client.mget(keys)

    def primaries(self, client: Any) -> list[Any]:
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

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the sync client built here (an injected client is left to its owner)."""
        with self._lock:
            client, self.client = ((self.client, None) if self.topology is not None
                                   else (None, self.client))
        if client is not None:
            client.close()
            for sentinel in _sentinels_of(client):
                sentinel.close()

    async def aclose(self) -> None:
        """Close the running loop's client built here, then the sync one."""
        if self.topology is not None:
            with contextlib.suppress(RuntimeError):
                loop = asyncio.get_running_loop()
                client = self._aclients.pop(loop, None)
                if client is not None:
                    await client.aclose()
                    for sentinel in _sentinels_of(client):
                        await sentinel.aclose()
        self.close()
