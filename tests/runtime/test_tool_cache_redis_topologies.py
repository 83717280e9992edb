"""``tool_cache`` and ``@invalidates`` on a real Redis Cluster and a Sentinel-managed master:
hits (the counters are readable: one single-slot MGET per call), entity and global
invalidation, async tools, a memory tier in front, another process's writes; increments
that no replica acknowledged are sent again; and how long a process that never saw an
outage can read counters an outage's queued increments have not reached yet."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import dejacache
from dejacache._core.scopes import tenant_prefix
from dejacache.runtime import _redis_counters, generations
from dejacache.runtime._redis_counters import RedisCounters
from dejacache.runtime.generations import SharedGenerations
from dejacache.runtime.tools import _counter_names_w
from support_redis import RedisServer
from support_redis_topologies import ClusterTopology, SentinelTopology

pytest.importorskip("redis")
from dejacache.stores.redis import RedisStore

pytestmark = pytest.mark.redis


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> float:
    """Poll ``cond``; the seconds it took."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)
    return time.monotonic() - t0


@pytest.fixture(params=["cluster", "sentinel"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "cluster":
        cluster: ClusterTopology = request.getfixturevalue("redis_cluster")
        yield cluster.store_url
    else:
        sentinel: SentinelTopology = request.getfixturevalue("redis_sentinel")
        yield sentinel.url


@pytest.fixture
def store(url: str) -> Iterator[RedisStore]:
    # A generous timeout: these tests are about results, not outages, and a 2-core CI
    # machine running six redis-servers can stall a reply past the 50 ms default.
    s = RedisStore(url, key_prefix="tc", timeout=1.0, connect_timeout=1.0)
    yield s
    s.close()


class Carts:
    """A cart database in this process, cached by tool_cache over ``store``."""

    def __init__(self, store: dejacache.Store) -> None:
        self.db = {1: "a0", 2: "b0"}
        self.runs = 0

        @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store)
        def get_cart(uid: int) -> str:
            self.runs += 1
            return self.db[uid]

        @dejacache.tool_cache(resource="cart", store=store)
        def list_carts() -> list[str]:
            self.runs += 1
            return sorted(self.db.values())

        @dejacache.invalidates("cart", key="cart:{uid}", store=store)
        def set_cart(uid: int, v: str) -> None:
            self.db[uid] = v

        @dejacache.invalidates("cart", scope="global", store=store)
        def reset_all(v: str) -> None:
            for k in self.db:
                self.db[k] = v

        self.get_cart, self.list_carts = get_cart, list_carts
        self.set_cart, self.reset_all = set_cart, reset_all


def settled(store: dejacache.Store) -> None:
    """Until this process reads its counters again: its increments confirmed by a replica
    and no fence up. (On a loaded machine WAIT can time out: the increments are then sent
    again ~0.1 s later, and until they land, then for the fence, this process runs its
    tools uncached, which would change the counts below.)"""
    gens = generations.generations_for(store)
    wait_for(lambda: gens.read(["gen/settled/x/R"]) is not None)


def test_hits_and_entity_invalidation(store: RedisStore) -> None:
    c = Carts(store)
    with dejacache.agent_session(tenant="acme"):
        assert [c.get_cart(1), c.get_cart(2), c.list_carts()] == ["a0", "b0", ["a0", "b0"]]
        assert [c.get_cart(1), c.get_cart(2), c.list_carts()] == ["a0", "b0", ["a0", "b0"]]
        assert c.runs == 3  # every second call a hit: the counters were readable
        c.set_cart(1, "a1")
        settled(store)
        assert c.get_cart(1) == "a1" and c.list_carts() == ["a1", "b0"]
        assert c.get_cart(2) == "b0"  # another entity: still cached
        assert c.runs == 5
    stats = dejacache.runtime_stats().by_tool
    assert stats["get_cart"].hits == 3 and stats["get_cart"].bypassed == 0


def test_global_write_reaches_every_tenant(store: RedisStore) -> None:
    c = Carts(store)
    for tenant in ("acme", "globex"):
        with dejacache.agent_session(tenant=tenant):
            assert c.get_cart(1) == "a0" and c.get_cart(1) == "a0"
    assert c.runs == 2
    c.reset_all("z")  # outside any session: every tenant's entries
    settled(store)
    for tenant in ("acme", "globex"):
        with dejacache.agent_session(tenant=tenant):
            assert c.get_cart(1) == "z"
    assert c.runs == 4


def test_a_write_through_another_store_object_is_seen(store: RedisStore, url: str) -> None:
    c = Carts(store)
    other = RedisStore(url, key_prefix="tc", timeout=1.0, connect_timeout=1.0)
    try:
        with dejacache.agent_session(tenant="acme"):
            assert c.get_cart(1) == "a0" and c.get_cart(1) == "a0"
            c.db[1] = "a1"  # another replica's write: its own store object and counters
            names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
            assert SharedGenerations(other).bump(names, land=True)  # as a write does
            assert c.get_cart(1) == "a1"
        assert c.runs == 2
    finally:
        other.close()


def test_memory_tier_in_front_learns_of_writes(url: str) -> None:
    back = RedisStore(url, key_prefix="tc", timeout=1.0, connect_timeout=1.0)
    c = Carts(dejacache.TieredStore(dejacache.MemoryStore(), back))
    with dejacache.agent_session(tenant="acme"):
        assert c.get_cart(1) == "a0" and c.get_cart(1) == "a0"
        c.set_cart(1, "a1")
        settled(back)
        assert c.get_cart(1) == "a1" and c.get_cart(1) == "a1"
    assert c.runs == 2
    back.close()


async def test_async_tools(store: RedisStore) -> None:
    data = {"v": 1}

    @dejacache.tool_cache(resource="n", store=store)
    async def get() -> int:
        return data["v"]

    @dejacache.invalidates("n", store=store)
    async def bump() -> None:
        data["v"] += 1

    async with dejacache.agent_session(tenant="acme"):
        assert await get() == 1
        data["v"] = 5  # behind the cache's back: the entry stays until a write
        assert await get() == 1
        await bump()
        settled(store)
        assert await get() == 6
        assert await get() == 6
    assert dejacache.runtime_stats().by_tool["get"].hits == 2
    await store.aclose()


def test_a_resources_counters_share_one_slot(redis_cluster: ClusterTopology) -> None:
    store = RedisStore(redis_cluster.store_url, key_prefix="tc", timeout=1.0)
    c = Carts(store)
    with dejacache.agent_session(tenant="acme"):
        c.set_cart(1, "a1")
    c.reset_all("z")
    keys: list[bytes] = []
    for port in redis_cluster.masters():
        client = redis_cluster.node(port).client()
        try:
            keys += client.keys("tc:g:*")
        finally:
            client.close()
    # The tenant's entity and "any entity written" counters, the same two at the "any
    # tenant" level (global readers read them), and the global resource one.
    assert len(keys) == 5
    client = redis_cluster.live_nodes()[0].client()
    try:
        slots = {client.execute_command("CLUSTER KEYSLOT", k) for k in keys}
    finally:
        client.close()
    assert len(slots) == 1
    store.close()


def test_an_increment_no_replica_acknowledged_is_sent_again(
        redis_sentinel: SentinelTopology) -> None:
    store = RedisStore(redis_sentinel.url, key_prefix="tc", timeout=1.0)
    gens = SharedGenerations(store)
    names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
    # Learns the master has a replica and sends them again, waiting for it; land=True (as
    # a write does) sends them until it confirms: its ack within WAIT's 400 ms is no promise
    # on a loaded machine. A retry fences gens's own reads for a second: read them directly.
    assert gens.bump(names, land=True)
    before = RedisCounters(store).get_counters(names)
    assert before is not None and min(before) >= 1
    replica = redis_sentinel.replica()
    replica.pause()
    try:
        # The master takes the increments but no replica confirms them within WAIT's
        # timeout: a failover now could lose them, so they count as not landed.
        assert not gens.bump(names)
        assert gens.read(names) is None  # this process's write is pending: no cache
    finally:
        replica.resume()
    wait_for(lambda: not gens._pending, timeout=5)  # the background flush, with a replica
    # Sent again: the counters moved past the unconfirmed values (an extra miss, never a
    # stale read), and the replica has them.
    values = RedisCounters(store).get_counters(names)
    assert values is not None and min(values) >= min(before) + 2
    wait_for(lambda: gens.read(names) is not None, timeout=5)  # past the fence
    store.close()


def test_a_process_that_never_saw_the_outage_is_stale_for_at_most_a_flush_interval(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the design leaves: a process that made no call during an outage cannot
    know that another queued increments in it, and reads the old counters until that
    one's background flush (the breaker's recovery probe) lands them: within about one
    FLUSH_INTERVAL of Redis answering again, whatever the breaker's cooldown."""
    cooldown = 5.0  # far longer than the window: the flush does not wait for it
    # Steps of one (they are random in use): the counters then say how many increments landed
    monkeypatch.setattr(_redis_counters, "_step", lambda: 1)
    writer = RedisStore(redis_server.url, key_prefix="tc", cooldown=cooldown)
    gens = SharedGenerations(writer)
    names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
    assert gens.bump(names)
    redis_server.pause()
    try:
        # This one times out (Redis runs it when it wakes up: it was sent) and opens the
        # breaker; the next is not even sent: only the writer's queue knows of it.
        assert not gens.bump(names)
        assert not gens.bump(names)
        assert writer.breaker.state.value == "open"
    finally:
        redis_server.resume()
    t_back = time.monotonic()
    fresh = RedisStore(redis_server.url, key_prefix="tc", timeout=1.0)
    fresh_counters = RedisCounters(fresh)
    seen: list[Any] = []

    def landed() -> bool:
        seen.append(fresh_counters.get_counters(names))
        return seen[-1] == [3, 3]

    wait_for(landed, timeout=5)
    window = time.monotonic() - t_back
    print(f"\nstale window of a process unaware of the outage: {window:.3f} s "
          f"(breaker cooldown {cooldown} s)")
    assert window < 1.0, seen
    writer.close()
    fresh.close()
    generations.reset()
