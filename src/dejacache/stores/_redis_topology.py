"""Which Redis a :class:`~dejacache.stores.redis.RedisStore` talks to, and its name.

Three topologies, one protocol (Valkey speaks the same one)::

    server    redis://[user:pass@]host:port/db   rediss://...   unix:///path?db=N
    cluster   redis+cluster://[user:pass@]host:port[,host:port...]   (database 0 only)
    sentinel  redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[/db]

or a redis-py client already built for one of them (``redis.Redis``, ``RedisCluster``,
``Sentinel.master_for(...)``, and their ``redis.asyncio`` twins). A plain ``redis://`` URL
naming several hosts is refused: it could mean a cluster's seed nodes or a list of
Sentinels, and guessing wrong would run every call against one node.

Names (``RedisStore.url``, stats' ``backend``, every log line and error) never hold a
password: ``redis cluster 127.0.0.1:7000 (+5 nodes)``,
``redis sentinel mymaster via 127.0.0.1:26379``.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from typing import Any, Literal

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from ..errors import ConfigurationError

__all__ = ["Kind", "Topology", "client_topology", "cluster_name", "redact", "topology_advice",
           "url_topology"]

#: ``server``: one Redis (or Valkey) server; ``cluster``: Redis Cluster, through redis-py's
#: cluster client; ``sentinel``: the master a set of Sentinels names, followed on failover.
Kind = Literal["server", "cluster", "sentinel"]

# redis-py 8.2's Sentinel classes are annotated and earlier releases' were not: called through
# Any, the code type-checks against either (an ignore comment is an error on one of them).
_SENTINEL: Any = redis.sentinel.Sentinel
_ASYNC_SENTINEL: Any = redis.asyncio.sentinel.Sentinel
_CLUSTER_SCHEMES = ("redis+cluster",)
_SENTINEL_SCHEMES = ("redis+sentinel",)
_SERVER_SCHEMES = ("redis", "rediss", "unix")
_PLAIN_KEYS = frozenset({"socket_timeout", "socket_connect_timeout", "retry",
                         "retry_on_timeout", "health_check_interval", "driver_info",
                         "lib_name", "lib_version"})


@dataclasses.dataclass(frozen=True, slots=True)
class Topology:
    """How to build clients for one backend (``make(options)`` / ``amake(options)``; no
    I/O until a command is sent), and what to call it."""

    kind: Kind
    name: str
    make: Callable[[dict[str, Any]], Any]
    amake: Callable[[dict[str, Any]], Any]


def url_topology(url: str) -> Topology:
    """The topology a URL names; ``ConfigurationError`` for one it cannot serve."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _SERVER_SCHEMES:
        if "," in parts.netloc:
            raise ConfigurationError(
                f"{redact(url)}: a redis:// URL names one server; for a Redis Cluster use "
                "redis+cluster://host:port,host:port, for Sentinels "
                "redis+sentinel://host:port,host:port/service_name")
        return Topology("server", redact(url),
                        lambda kw: redis.Redis.from_url(url, **kw),
                        lambda kw: _waiting_client(url, kw))
    if scheme in _CLUSTER_SCHEMES:
        return _cluster_url(parts)
    if scheme in _SENTINEL_SCHEMES:
        return _sentinel_url(parts)
    raise ConfigurationError(
        f"bad Redis URL {redact(url)!r}: unknown scheme {parts.scheme!r}; use redis://, "
        "rediss://, unix://, redis+cluster:// or redis+sentinel://")


def _auth(parts: urllib.parse.SplitResult) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The host list and the credentials of a multi-host URL."""
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    creds: dict[str, Any] = {}
    if userinfo:
        user, sep, password = userinfo.partition(":")
        if user:
            creds["username"] = urllib.parse.unquote(user)
        if sep:
            creds["password"] = urllib.parse.unquote(password)
    hosts = [_host_port(h, parts) for h in hostlist.split(",") if h]
    if not hosts:
        raise ConfigurationError(f"{redact(parts.geturl())}: the URL names no host")
    if parts.query:
        raise ConfigurationError(
            f"{redact(parts.geturl())}: query options other than read_only and key_prefix "
            "are not read from cluster and Sentinel URLs; pass a client you built instead")
    return hosts, creds


def _host_port(text: str, parts: urllib.parse.SplitResult) -> tuple[str, int]:
    default = 26379 if parts.scheme.lower() in _SENTINEL_SCHEMES else 6379
    host, port = text, str(default)
    if text.startswith("["):  # [::1]:7000
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or port
    elif ":" in text:
        host, _, port = text.rpartition(":")
    try:
        return host, int(port)
    except ValueError:
        raise ConfigurationError(
            f"{redact(parts.geturl())}: bad port {port!r} for host {host!r}") from None


#: Connections an asyncio client holds at most (redis-py's default). A call beyond them
#: waits for one to come free, within its deadline: redis-py's asyncio pool refused it with
#: ``MaxConnectionsError``, a ``ConnectionError`` booked as Redis failing (250 calls in
#: flight on one loop, Redis healthy: every call bypassed the cache, three breaker trips).
ASYNC_CONNECTIONS = 100


def _waiting_client(url: str, kw: dict[str, Any]) -> Any:
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=ASYNC_CONNECTIONS, timeout=None, **kw)
    return redis.asyncio.Redis.from_pool(pool)


def _cluster_url(parts: urllib.parse.SplitResult) -> Topology:
    hosts, creds = _auth(parts)
    if parts.path.strip("/") not in ("", "0"):
        raise ConfigurationError(
            f"{redact(parts.geturl())}: a Redis Cluster has only database 0; drop "
            f"{parts.path!r} from the URL (use key_prefix to keep caches apart)")
    name = f"redis cluster {_hp(*hosts[0])}" + _more(len(hosts) - 1, "nodes")

    def make(kw: dict[str, Any]) -> Any:
        nodes = [redis.cluster.ClusterNode(h, p) for h, p in hosts]  # type: ignore[no-untyped-call]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **creds, **kw)

    def amake(kw: dict[str, Any]) -> Any:
        nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in hosts]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **creds, **kw)

    return Topology("cluster", name, make, amake)


def _sentinel_url(parts: urllib.parse.SplitResult) -> Topology:
    hosts, creds = _auth(parts)
    path = [p for p in parts.path.split("/") if p]
    if not 1 <= len(path) <= 2:
        raise ConfigurationError(
            f"{redact(parts.geturl())}: a Sentinel URL names the master's service: "
            "redis+sentinel://host:port[,host:port]/service_name[/db]")
    service = urllib.parse.unquote(path[0])
    try:
        db = int(path[1]) if len(path) == 2 else 0
    except ValueError:
        raise ConfigurationError(
            f"{redact(parts.geturl())}: bad database number {path[1]!r}") from None
    name = f"redis sentinel {service} via {_hp(*hosts[0])}" + _more(len(hosts) - 1,
                                                                      "sentinels")

    def make(kw: dict[str, Any]) -> Any:
        # The Sentinels get the same short timeouts as the master; the URL's credentials
        # are the master's (Sentinels with their own password: pass a client you built).
        sentinel = _SENTINEL(hosts, sentinel_kwargs=_plain(kw))
        return sentinel.master_for(service, db=db, **creds, **kw)

    def amake(kw: dict[str, Any]) -> Any:
        sentinel = _ASYNC_SENTINEL(hosts, sentinel_kwargs=_plain(kw))
        # Sentinel's pool has no waiting twin: no cap, as the cluster client's (a refusal
        # past 100 connections would be booked as Redis failing; see ASYNC_CONNECTIONS).
        return sentinel.master_for(service, db=db, **creds, **kw, max_connections=1 << 31)

    return Topology("sentinel", name, make, amake)


def _plain(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if k in _PLAIN_KEYS}


def client_topology(client: Any) -> tuple[Kind, bool, str] | None:
    """(kind, is_async, name) of a redis-py client, or None when it is not one."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        return "cluster", True, cluster_name(client)
    if isinstance(client, redis.cluster.RedisCluster):
        return "cluster", False, cluster_name(client)
    if isinstance(client, redis.asyncio.Redis):
        is_async = True
    elif isinstance(client, redis.Redis):
        is_async = False
    else:
        return None
    pool = client.connection_pool
    if isinstance(pool, redis.sentinel.SentinelConnectionPool
                  | redis.asyncio.sentinel.SentinelConnectionPool):
        sentinels = pool.sentinel_manager.sentinels
        first = sentinels[0].connection_pool.connection_kwargs if sentinels else {}
        name = (f"redis sentinel {pool.service_name} via "
                f"{_hp(first.get('host', '?'), first.get('port', 26379))}"
                + _more(len(sentinels) - 1, "sentinels"))
        return "sentinel", is_async, name
    return "server", is_async, _server_name(pool.connection_kwargs)


def cluster_name(client: Any) -> str:
    """``redis cluster host:port (+N nodes)``: the first seed node, and how many more nodes
    the client knows (the seeds until it has read the cluster's layout)."""
    manager = client.nodes_manager
    nodes = list(manager.startup_nodes)
    known = list(getattr(manager, "nodes_cache", {}) or {})
    first = nodes[0] if nodes else (known[0] if known else "?")
    total = len(set(known) | set(nodes))
    return f"redis cluster {first}" + _more(total - 1, "nodes")


def _server_name(kw: dict[str, Any]) -> str:
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    return f"redis://{_hp(kw.get('host', 'localhost'), kw.get('port', 6379))}/{kw.get('db', 0)}"


def _hp(host: str, port: int | str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _more(n: int, what: str) -> str:
    return f" (+{n} {what})" if n > 0 else ""


def redact(url: str) -> str:
    """``url`` with its password masked (``user:***@host``), for names and messages."""
    parts = urllib.parse.urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    if not colon:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{hostlist}"))


# What to do about a reply that says the client is talking to the wrong part of a topology,
# by the reply's first word. redis-py's parser turns each into its own ResponseError
# subclass, but a plain client and a cluster client raise different ones for the same
# reply, so the word is what is matched.
_ADVICE: dict[str, str] = {
    "MOVED": "is a Redis Cluster node and the key lives on another node (MOVED); use "
             "redis+cluster://host:port (or a redis.cluster.RedisCluster client) so every "
             "node is used",
    "ASK": "is a Redis Cluster node migrating a slot (ASK); use redis+cluster://host:port "
           "(or a redis.cluster.RedisCluster client) so redirections are followed",
    "CROSSSLOT": "refused a command whose keys span hash slots (CROSSSLOT): it is a Redis "
                 "Cluster node; use redis+cluster://host:port (or a RedisCluster client)",
    "CLUSTERDOWN": "reports the cluster down (CLUSTERDOWN): some hash slots have no "
                   "reachable primary; check `redis-cli cluster info` on a node",
    "TRYAGAIN": "is moving slots (TRYAGAIN); calls skip Redis until the resharding settles",
    "MASTERDOWN": "lost its master (MASTERDOWN); wait for the failover, or check the "
                  "replica's master link",
    "READONLY": "is a read-only replica (READONLY); point the store at the primary, or use "
                "redis+sentinel://sentinel:port/service_name so failovers are followed",
    "CLUSTER": "is a Redis Cluster node: a plain client scans only that node's slots, so "
               "stats, iterate and clear would report a part as the whole; use "
               "redis+cluster://host:port (or a redis.cluster.RedisCluster client)",
    "SELECT": "is a Redis Cluster node, which has only database 0 (SELECT refused); drop "
              "the /db from the URL and use redis+cluster://host:port",
}


def topology_advice(exc: BaseException) -> tuple[str, str] | None:
    """(code, what to do) when ``exc`` is a topology error rather than a reply about the
    data (WRONGTYPE, OOM...); None otherwise."""
    text = str(exc)
    code = getattr(exc, "status_code", None)
    if not code:
        code = text.split(" ", 1)[0]
    if code in _ADVICE:
        return code, _ADVICE[code]
    if "SELECT is not allowed in cluster mode" in text:
        return "SELECT", _ADVICE["SELECT"]
    if isinstance(exc, redis.exceptions.ClusterDownError):
        return "CLUSTERDOWN", _ADVICE["CLUSTERDOWN"]
    return None
