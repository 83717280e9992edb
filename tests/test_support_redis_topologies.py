"""The Redis Cluster and Sentinel fixtures themselves: they come up healthy, serve a real
client, survive a killed master (failover) and come back whole for the next test."""

from __future__ import annotations

import time

import pytest

from support_redis_topologies import ClusterTopology, SentinelTopology

redis = pytest.importorskip("redis")
from redis.cluster import ClusterNode, RedisCluster  # noqa: E402
from redis.sentinel import Sentinel  # noqa: E402

pytestmark = pytest.mark.redis


def _cluster_client(topology: ClusterTopology) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in topology.startup_nodes],
                        socket_timeout=1, socket_connect_timeout=1)


def test_cluster_serves_every_slot(redis_cluster: ClusterTopology) -> None:
    client = _cluster_client(redis_cluster)
    try:
        for i in range(50):  # keys spread over the three shards
            client.set(f"k{i}", i)
        assert [int(client.get(f"k{i}")) for i in range(50)] == list(range(50))
        assert len(redis_cluster.masters()) == 3
    finally:
        client.close()


def test_cluster_fails_over_and_restores(redis_cluster: ClusterTopology) -> None:
    old = redis_cluster.master_for("{failover}")
    t0 = time.monotonic()
    redis_cluster.kill_master_for("{failover}")
    redis_cluster.wait_failover(old.port)
    took = time.monotonic() - t0
    assert redis_cluster.master_for("{failover}").port != old.port
    assert took < 15, took
    redis_cluster.restore()  # the old master comes back as a replica
    assert old.alive and old.port not in redis_cluster.masters()


def test_sentinel_serves_and_fails_over(redis_sentinel: SentinelTopology) -> None:
    sentinel = Sentinel(redis_sentinel.sentinels, socket_timeout=1)
    client = sentinel.master_for(redis_sentinel.service_name, socket_timeout=1)
    try:
        client.set("k", "v")
        assert client.get("k") == b"v"
        old = redis_sentinel.kill_master()
        new = redis_sentinel.wait_promoted(old.port)
        assert new.port != old.port
        redis_sentinel.restore()
        assert redis_sentinel.master_port() == new.port
    finally:
        client.close()
        for s in sentinel.sentinels:
            s.close()


def test_sentinel_url_names_every_sentinel(redis_sentinel: SentinelTopology) -> None:
    assert redis_sentinel.url.startswith("redis+sentinel://127.0.0.1:")
    assert redis_sentinel.url.endswith(f"/{redis_sentinel.service_name}/0")
