"""RedisStore on a Redis Cluster (3 masters + 3 replicas) and on a Sentinel-managed master:
the store contract on each, the hash-tagged layout spread over the shards, scans that visit
every primary, names without passwords, and topology errors counted as failures."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
import redis.sentinel
from contract import StoreContract
from redis._parsers.base import BaseParser

import dejacache
from dejacache import ConfigurationError
from dejacache.runtime._redis_counters import RedisCounters
from dejacache.stores import Record
from dejacache.stores._redis_topology import topology_advice
from dejacache.stores.redis import RedisStore
from support_redis_topologies import ClusterTopology, SentinelTopology

pytestmark = pytest.mark.redis

SLOW_OK = {"timeout": 2.0, "connect_timeout": 2.0}


def rec(value: bytes = b"v", *, name: str = "fn", namespace: str = "ns") -> Record:
    return Record(value=value, name=name, namespace=namespace, request=b'{"args":[1]}')


def cluster_url(cluster: ClusterTopology) -> str:
    return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in cluster.startup_nodes[:3])


@pytest.fixture
def cluster(redis_cluster: ClusterTopology) -> ClusterTopology:
    return redis_cluster


@pytest.fixture
def sentinel(redis_sentinel: SentinelTopology) -> SentinelTopology:
    return redis_sentinel


def cluster_client(cluster: ClusterTopology) -> redis.cluster.RedisCluster:
    host, port = cluster.startup_nodes[0]
    return redis.cluster.RedisCluster(host=host, port=port, socket_timeout=5)


@pytest.fixture
def cstore(cluster: ClusterTopology) -> Iterator[RedisStore]:
    s = RedisStore(cluster_url(cluster), key_prefix="t", **SLOW_OK)
    yield s
    s.close()


# ---------------------------------------------------------------- the contract on each


class TestClusterURLContract(StoreContract):
    persistent = True

    @pytest.fixture
    async def store(self, cluster: ClusterTopology) -> AsyncIterator[RedisStore]:
        s = RedisStore(cluster_url(cluster), key_prefix="contract", **SLOW_OK)
        yield s
        await s.aclose()

    def reopen(self, store: RedisStore) -> RedisStore:
        assert store.kind == "cluster"
        ports = store.url.split()[2]
        return RedisStore(f"redis+cluster://{ports}", key_prefix="contract", **SLOW_OK)


class TestClusterClientContract(StoreContract):
    """An injected ``RedisCluster`` next to an injected ``redis.asyncio`` one."""

    persistent = True

    @pytest.fixture
    async def store(self, cluster: ClusterTopology) -> AsyncIterator[RedisStore]:
        sync = cluster_client(cluster)
        node = redis.asyncio.cluster.ClusterNode("127.0.0.1", cluster.startup_nodes[0][1])
        aclient = redis.asyncio.cluster.RedisCluster(startup_nodes=[node], socket_timeout=5)
        s = RedisStore(sync, async_client=aclient, key_prefix="contract")
        self.clients = (sync, aclient)
        yield s
        await aclient.aclose()
        sync.close()

    def reopen(self, store: RedisStore) -> RedisStore:
        return RedisStore(self.clients[0], key_prefix="contract")


class TestSentinelURLContract(StoreContract):
    persistent = True

    @pytest.fixture
    async def store(self, sentinel: SentinelTopology) -> AsyncIterator[RedisStore]:
        s = RedisStore(sentinel.url, key_prefix="contract", **SLOW_OK)
        yield s
        await s.aclose()

    def reopen(self, store: RedisStore) -> RedisStore:
        return RedisStore(self.url, key_prefix="contract", **SLOW_OK)

    @pytest.fixture(autouse=True)
    def _url(self, sentinel: SentinelTopology) -> None:
        self.url = sentinel.url


class TestSentinelClientContract(StoreContract):
    """A client from ``Sentinel.master_for``, as a user builds it."""

    persistent = True

    @pytest.fixture
    def store(self, sentinel: SentinelTopology) -> Iterator[RedisStore]:
        manager = redis.sentinel.Sentinel(sentinel.sentinels,
                                          socket_timeout=5)
        self.client = manager.master_for(sentinel.service_name, socket_timeout=5)
        s = RedisStore(self.client, key_prefix="contract")
        yield s
        self.client.close()
        for c in manager.sentinels:
            c.close()

    def reopen(self, store: RedisStore) -> RedisStore:
        return RedisStore(self.client, key_prefix="contract")


# ---------------------------------------------------------------- cluster layout and scans


def test_entries_spread_over_every_shard_with_their_requests(cluster: ClusterTopology,
                                                             cstore: RedisStore) -> None:
    for i in range(60):
        cstore.put(f"k{i}", rec(b"%d" % i))
    assert sum(cstore.get(f"k{i}") is not None for i in range(60)) == 60
    client = cluster_client(cluster)
    try:
        per_node = {}
        for node in client.get_primaries():
            keys = list(client.get_redis_connection(node).scan_iter(match="t:*"))
            per_node[node.name] = keys
            for k in keys:  # an entry and its request live in one slot, so on one node
                if k.startswith(b"t:e:"):
                    assert b"t:r:" + k[4:] in keys
        assert len(per_node) == 3 and all(per_node.values())
        assert sum(len(v) for v in per_node.values()) == 120
    finally:
        client.close()


def test_stats_iterate_and_clear_visit_every_primary(cstore: RedisStore) -> None:
    for i in range(32):
        cstore.put(f"k{i}", rec(namespace="a" if i % 2 else "b"))
    stats = cstore.stats()
    assert stats.entries == 32 and stats.extra["kind"] == "cluster"
    assert len(list(cstore.iterate())) == 32
    assert cstore.clear(namespace="a") == 16
    assert cstore.clear() == 16
    assert cstore.clear() == 0  # counts what Redis deleted, not what it was asked to
    assert cstore.stats().entries == 0


def test_cache_hits_every_call_through_the_cluster(cstore: RedisStore) -> None:
    dejacache.configure(store=cstore)
    ran: list[int] = []

    @dejacache.cache(name="topo.double")
    def double(x: int) -> int:
        ran.append(x)
        return 2 * x

    assert [double(i) for i in range(30)] == [double(i) for i in range(30)]
    assert ran == list(range(30))


def test_reads_straight_to_a_node_follow_a_moved_slot(cstore: RedisStore) -> None:
    # Hits and counters go to the node serving the slot, by the client's table; a stale
    # table (as after a failover or a resharding) answers MOVED: the cluster client then
    # reads it instead, follows the redirection and corrects its table.
    cstore.put("k", Record(value=b'{"a": 1}', name="n"))
    counters = RedisCounters(cstore)
    landed = counters.incr_many(["gen/c/t/R"])
    assert landed is not None
    client = cstore._clients.sync()
    manager = client.nodes_manager
    vkey = cstore._e + "k}"
    ckey = cstore.key("g", "c", "gen/c/t/R")
    right = {k: client.get_node_from_key(k) for k in (vkey, ckey)}
    masters = client.get_primaries()
    for k, node in right.items():
        wrong = next(n for n in masters if n.name != node.name)
        manager.slots_cache[client.keyslot(k)] = [wrong]
    hit = cstore.hit("k")
    assert hit is not None and hit[3] is not None and hit[3].value == b'{"a": 1}'
    assert counters.get_counters(["gen/c/t/R"]) == landed
    assert {k: client.get_node_from_key(k).name for k in right} == {
        k: n.name for k, n in right.items()}


def test_counters_spanning_slots(cstore: RedisStore) -> None:
    assert cstore.incr("a") == 1 and cstore.incr("b") == 1 and cstore.incr("a") == 2
    assert cstore.get_counters(["a", "b", "c"]) == [2, 1, 0]


async def test_async_counters_spanning_slots(cluster: ClusterTopology) -> None:
    s = RedisStore(cluster_url(cluster), key_prefix="t", **SLOW_OK)
    try:
        assert await s.aincr("x") == 1
        assert await s.aget_counters(["x", "y"]) == [1, 0]
    finally:
        await s.aclose()


def test_seam_keys_of_one_tag_share_a_slot(cstore: RedisStore) -> None:
    keys = [cstore.key("g", "cart", "items"), cstore.key("g", "cart", "users"),
            cstore.key("g", "cart")]
    assert keys == ["t:g:{cart}:items", "t:g:{cart}:users", "t:g:{cart}"]
    script = "for i, k in ipairs(KEYS) do redis.call('INCR', k) end return #KEYS"
    assert cstore.run(lambda c: c.eval(script, len(keys), *keys)) == 3
    assert cstore.run(lambda c: c.mget(keys)) == [b"1", b"1", b"1"]
    # Keys of two tags in one script: the cluster refuses it, and the seam answers default.
    other = cstore.key("g", "orders")
    assert cstore.run(lambda c: c.eval(script, 2, keys[0], other), "failed") == "failed"


def test_names_say_the_topology(cluster: ClusterTopology, sentinel: SentinelTopology) -> None:
    s = RedisStore(cluster_url(cluster), **SLOW_OK)
    assert s.url == f"redis cluster 127.0.0.1:{cluster.startup_nodes[0][1]} (+2 nodes)"
    assert s.stats().backend.startswith(f"redis cluster 127.0.0.1:{cluster.startup_nodes[0][1]} (+")
    s.close()
    t = RedisStore(sentinel.url, **SLOW_OK)
    first = sentinel.sentinels[0][1]
    assert t.url.startswith(f"redis sentinel {sentinel.service_name} via 127.0.0.1:{first}")
    assert t.kind == "sentinel"
    t.close()


def test_credentials_never_appear_in_names() -> None:
    for url in ("redis+cluster://u:s3cret@127.0.0.1:1,127.0.0.1:2",
                "redis+sentinel://:s3cret@127.0.0.1:1/svc/2"):
        s = RedisStore(url)
        assert "s3cret" not in s.url and "s3cret" not in repr(s)
        assert "s3cret" not in str(s.stats())
    with pytest.raises(ConfigurationError) as info:
        RedisStore("redis+cluster://u:s3cret@127.0.0.1:1/3")
    assert "s3cret" not in str(info.value) and "database 0" in str(info.value)


@pytest.mark.parametrize(("url", "message"), [
    ("redis://127.0.0.1:1,127.0.0.1:2/0", "redis\\+cluster://"),
    ("redis+cluster://127.0.0.1:1/2", "only database 0"),
    ("redis+sentinel://127.0.0.1:1", "service_name"),
    ("redis+sentinel://127.0.0.1:1/svc/x", "database number"),
    ("redis+cluster://127.0.0.1:x", "bad port"),
    ("redis+cluster://127.0.0.1:1?ssl=1", "query options"),
    ("redis+cluster:///0", "no host"),
])
def test_bad_topology_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisStore(url)


def test_cluster_down_fails_open_and_fast() -> None:
    s = RedisStore("redis+cluster://127.0.0.1:1", cooldown=60)
    assert s.get("k") is None and s.put("k", rec()) is False
    assert s.stats().entries == 0
    assert s.breaker.failures >= 1 or s.breaker.state.value == "open"
    s.close()


# ---------------------------------------------------------------- topology errors


def test_a_plain_url_to_a_cluster_node_warns_once_and_counts_failures(
        cluster: ClusterTopology, caplog: pytest.LogCaptureFixture) -> None:
    port = cluster.startup_nodes[0][1]
    s = RedisStore(f"redis://127.0.0.1:{port}/0", key_prefix="t", cooldown=60, **SLOW_OK)
    with caplog.at_level(logging.DEBUG, logger="dejacache.redis"):
        for i in range(30):
            s.put(f"k{i}", rec())
            s.get(f"k{i}")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    moved = [w for w in warnings if "(MOVED)" in w]
    assert len(moved) == 1 and "redis+cluster://" in moved[0]
    assert not any("malformed" in r.getMessage() for r in caplog.records)
    assert s.breaker.trips >= 1 or s.breaker.failures >= 1
    s.close()


def test_a_database_url_to_a_cluster_node_opens_the_breaker(
        cluster: ClusterTopology, caplog: pytest.LogCaptureFixture) -> None:
    s = RedisStore(f"redis://127.0.0.1:{cluster.startup_nodes[0][1]}/1", cooldown=60, **SLOW_OK)
    with caplog.at_level(logging.WARNING, logger="dejacache.redis"):
        for _ in range(3):
            assert s.get("k") is None
    assert s.breaker.state.value == "open"
    assert any("only database 0" in r.getMessage() for r in caplog.records)
    s.close()


def test_a_replica_answers_readonly_counted_as_failure(
        sentinel: SentinelTopology, caplog: pytest.LogCaptureFixture) -> None:
    s = RedisStore(f"redis://127.0.0.1:{sentinel.replica().port}/0", cooldown=60, **SLOW_OK)
    with caplog.at_level(logging.WARNING, logger="dejacache.redis"):
        for i in range(3):
            assert s.put(f"k{i}", rec()) is False
    assert s.breaker.state.value == "open"
    (readonly,) = [r.getMessage() for r in caplog.records if "(READONLY)" in r.getMessage()]
    assert "redis+sentinel://" in readonly
    s.close()


@pytest.mark.parametrize("reply", [
    "MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "CLUSTERDOWN The cluster is down",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "READONLY You can't write against a read only replica.",
    "CROSSSLOT Keys in request don't hash to the same slot",
])
def test_topology_replies_are_recognised(reply: str) -> None:
    exc = BaseParser.parse_error(reply)
    found = topology_advice(exc)
    assert found is not None and found[0] == reply.split()[0]


@pytest.mark.parametrize("reply", [
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "OOM command not allowed when used memory > 'maxmemory'.", "ERR unknown command",
])
def test_data_replies_are_not_topology_errors(reply: str) -> None:
    assert topology_advice(BaseParser.parse_error(reply)) is None


def test_fail_closed_names_the_backend_and_the_fix(cluster: ClusterTopology) -> None:
    s = RedisStore(f"redis://127.0.0.1:{cluster.startup_nodes[0][1]}/1", fail_open=False, **SLOW_OK)
    with pytest.raises(dejacache.StoreUnavailable, match="redis\\+cluster://") as info:
        s.get("k")
    assert info.value.backend == f"redis://127.0.0.1:{cluster.startup_nodes[0][1]}/1"
    s.close()



def test_cache_through_a_plain_url_to_a_cluster_node_is_never_wrong(
        cluster: ClusterTopology, caplog: pytest.LogCaptureFixture) -> None:
    port = cluster.startup_nodes[0][1]
    s = RedisStore(f"redis://127.0.0.1:{port}/0", key_prefix="t", **SLOW_OK)
    dejacache.configure(store=s)
    ran: list[int] = []

    @dejacache.cache(name="topo.plain")
    def square(x: int) -> int:
        ran.append(x)
        return x * x

    with caplog.at_level(logging.DEBUG, logger="dejacache.redis"):
        for _ in range(2):
            assert [square(i) for i in range(30)] == [i * i for i in range(30)]
    assert not any("malformed" in r.getMessage() for r in caplog.records)
    assert sum("(MOVED)" in r.getMessage() for r in caplog.records) == 1
    assert s.breaker.trips >= 1  # the MOVED replies opened it: calls ran, Redis skipped
    s.close()


async def test_injected_async_clients_alone(cluster: ClusterTopology,
                                            sentinel: SentinelTopology) -> None:
    import redis.asyncio.sentinel

    host, port = cluster.startup_nodes[0]
    acluster = redis.asyncio.cluster.RedisCluster(host=host, port=port, socket_timeout=5)
    manager = redis.asyncio.sentinel.Sentinel(sentinel.sentinels, socket_timeout=5)
    amaster = manager.master_for(sentinel.service_name, socket_timeout=5)
    try:
        for client, kind, name in ((acluster, "cluster", f"redis cluster {host}:{port}"),
                                   (amaster, "sentinel",
                                    f"redis sentinel {sentinel.service_name} via")):
            s = RedisStore(client, key_prefix="t")
            assert s.kind == kind and s.url.startswith(name)
            assert await s.aput("k", rec()) is True
            got = await s.aget("k")
            assert got is not None and got.value == b"v"
            assert await s.adelete("k") is True
            with pytest.raises(ConfigurationError, match="only an async client"):
                s.stats()
    finally:
        await acluster.aclose()
        await amaster.aclose()
        for c in manager.sentinels:
            await c.aclose()


def test_scans_through_a_plain_url_to_a_cluster_node_refuse_to_report_a_part(
        cluster: ClusterTopology, cstore: RedisStore, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(32):
        cstore.put(f"k{i}", rec())
    port = cluster.startup_nodes[0][1]
    s = RedisStore(f"redis://127.0.0.1:{port}/0", key_prefix="t", cooldown=60, **SLOW_OK)
    with caplog.at_level(logging.WARNING, logger="dejacache.redis"):
        assert s.stats().entries == 0 and s.clear() == 0  # nothing done, and said so
    (warned,) = [r.getMessage() for r in caplog.records if "scans only" in r.getMessage()]
    assert "redis+cluster://" in warned
    assert cstore.stats().entries == 32  # nothing was deleted
    closed = RedisStore(f"redis://127.0.0.1:{port}/0", key_prefix="t", fail_open=False,
                        **SLOW_OK)
    with pytest.raises(dejacache.StoreUnavailable, match="redis\\+cluster://"):
        closed.stats()
    s.close()
    closed.close()


def test_store_urls_name_every_topology(cluster: ClusterTopology,
                                        sentinel: SentinelTopology) -> None:
    from dejacache.stores import store_from_url

    for url, kind in ((cluster_url(cluster), "cluster"), (sentinel.url, "sentinel")):
        s = store_from_url(url)
        assert isinstance(s, RedisStore) and s.kind == kind
        s.close()


def test_a_bad_url_never_shows_its_password() -> None:
    for url in ("redis://u:s3cret@127.0.0.1:notaport/0", "redis+cluster://u:s3cret@h:x",
                "redis+sentinel://u:s3cret@h:1", "redis+cluster://u:s3cret@h:1/5",
                "redis://u:s3cret@h:1,h:2/0", "bogus://u:s3cret@h:1/0"):
        with pytest.raises(ConfigurationError) as info:
            RedisStore(url)
        assert "s3cret" not in str(info.value), url


async def test_async_put_without_request_drops_the_old_one_on_the_cluster(
        cluster: ClusterTopology) -> None:
    s = RedisStore(cluster_url(cluster), key_prefix="t", **SLOW_OK)
    try:
        await s.aput("k", rec())
        await s.aput("k", Record(value=b"new"))
        client = cluster_client(cluster)
        try:
            assert client.exists("t:r:{k}") == 0 and client.get("t:e:{k}") is not None
        finally:
            client.close()
        got = await s.aget("k")
        assert got is not None and got.value == b"new"
        await s.aput("t", rec(), ttl=60)
        got, ttl = await s.aget_with_ttl("t")
        assert got is not None and ttl is not None and 0 < ttl <= 60
        assert s.get_with_ttl("t")[0] is not None
    finally:
        await s.aclose()


@pytest.mark.parametrize(("url", "kind", "name"), [
    ("redis://u:pw@127.0.0.1:6380/1", "server", "redis://u:***@127.0.0.1:6380/1"),
    ("redis+cluster://10.0.0.1", "cluster", "redis cluster 10.0.0.1:6379"),
    ("redis+cluster://:pw@[::1]:7000,[::1]:7001", "cluster", "redis cluster [::1]:7000 (+1 nodes)"),
    ("redis+sentinel://s1,s2:26380/main/3", "sentinel",
     "redis sentinel main via s1:26379 (+1 sentinels)"),
])
def test_urls_name_their_topology_without_connecting(url: str, kind: str, name: str) -> None:
    from dejacache.stores._redis_topology import url_topology

    topology = url_topology(url)
    assert (topology.kind, topology.name) == (kind, name)
    assert "pw" not in topology.name
