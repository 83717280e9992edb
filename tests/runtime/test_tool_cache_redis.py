"""Redis-backed tool caches: generation counters shared across replicas (two real processes),
a memory tier in front that learns of invalidations, and failing open when Redis is down."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import dejacache
from dejacache._core.scopes import tenant_prefix
from dejacache.runtime.generations import SharedGenerations, generations_for
from dejacache.runtime.tools import _counter_names_w
from support_redis import RedisServer

redis = pytest.importorskip("redis")
from dejacache.stores.redis import RedisStore  # noqa: E402

pytestmark = pytest.mark.redis


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


class Shop:
    """Tools over a 'database' that lives in Redis itself (plain keys), so replicas share it."""

    def __init__(self, url: str, store: dejacache.Store, *, max_age: float = 0.0) -> None:
        self.db = redis.Redis.from_url(url, socket_timeout=1)
        self.reads = 0

        @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store,
                              counter_max_age=max_age)
        def get_cart(user_id: int) -> str:
            self.reads += 1
            return (self.db.get(f"db:cart:{user_id}") or b"").decode()

        @dejacache.invalidates("cart", key="cart:{user_id}", store=store)
        def set_cart(user_id: int, value: str) -> None:
            self.db.set(f"db:cart:{user_id}", value)

        self.get_cart, self.set_cart = get_cart, set_cart


# Tests that are not about a slow Redis give it a second: on a loaded 2-core CI machine the
# 50 ms default was once exceeded by a first EVAL (connect + script), and the failed bump
# read as "not landed".
PATIENT = {"timeout": 1.0, "connect_timeout": 1.0}


def rt(url: str, **kw: Any) -> RedisStore:
    return RedisStore(url, key_prefix="rt", **{**PATIENT, **kw})


def tiered(url: str, **kw: Any) -> dejacache.TieredStore:
    return dejacache.TieredStore(dejacache.MemoryStore(), rt(url, **kw))


def test_tiered_store_learns_of_invalidation_through_redis_counters(
    redis_server: RedisServer,
) -> None:
    store = tiered(redis_server.url)
    shop = Shop(redis_server.url, store)
    shop.db.set("db:cart:1", "v0")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"
        assert shop.get_cart(1) == "v0"
        assert shop.reads == 1
        # Another replica writes: it bumps the counters in Redis (a separate store object,
        # its own generation cache, no shared Python state with this one).
        other = SharedGenerations(rt(redis_server.url))
        shop.db.set("db:cart:1", "v1")
        names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
        assert other.bump(names)
        assert shop.get_cart(1) == "v1"  # bound 0: counters are read on every call
        assert shop.reads == 2


@pytest.mark.parametrize(("read_as", "write_as"), [(1, 1.0), (1.0, True), (1, "1")],
                         ids=["int-float", "float-bool", "int-str"])
def test_a_replica_writing_an_equal_entity_id_invalidates_the_readers_entry(
    redis_server: RedisServer, read_as: Any, write_as: Any,
) -> None:
    """Two replicas (two stores over one Redis, no shared Python state) name cart 1 as
    ``1`` and ``1.0``: one entity, so one counter in Redis. Before, the writer bumped the
    counter of "cart:1.0" and the reader served the cart from before the write."""
    db = redis.Redis.from_url(redis_server.url, socket_timeout=1)
    db.set("db:cart", "v0")

    def replica() -> tuple[Any, Any]:
        store = tiered(redis_server.url)

        @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)
        def get_cart(user_id: Any) -> str:
            return (db.get("db:cart") or b"").decode()

        @dejacache.invalidates("cart", key="cart:{user_id}", store=store)
        def set_cart(user_id: Any, value: str) -> None:
            db.set("db:cart", value)

        return get_cart, set_cart

    (get_a, _), (_, set_b) = replica(), replica()
    with dejacache.agent_session(tenant="acme"):
        assert get_a(read_as) == "v0"
        assert get_a(read_as) == "v0"
        assert dejacache.runtime_stats().by_tool["get_cart"].hits == 1
        set_b(write_as, "v1")
        assert get_a(read_as) == "v1"


def test_counter_max_age_bounds_staleness(redis_server: RedisServer) -> None:
    store = tiered(redis_server.url)
    shop = Shop(redis_server.url, store, max_age=0.3)
    shop.db.set("db:cart:1", "v0")
    other = SharedGenerations(rt(redis_server.url))
    names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"
        shop.db.set("db:cart:1", "v1")
        other.bump(names)
        t0 = time.monotonic()
        # Within max_age this replica may still serve v0; after it, never.
        while shop.get_cart(1) != "v1":
            assert time.monotonic() - t0 < 0.3 + 0.2, "stale beyond counter_max_age"
            time.sleep(0.02)
        # This replica's own writes are seen at once, whatever max_age says.
        shop.set_cart(1, "v2")
        assert shop.get_cart(1) == "v2"


def test_redis_down_fails_open_to_the_origin(redis_server: RedisServer) -> None:
    store = tiered(redis_server.url, cooldown=0.05)
    shop = Shop(redis_server.url, store)
    backend: RedisStore = store.back  # type: ignore[assignment]
    shop.db.set("db:cart:1", "v0")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"  # stored under generation 0, memory tier included
        shop.set_cart(1, "v1")
        assert shop.get_cart(1) == "v1"
        redis_server.stop()
        # The memory tier still holds the entry, but its freshness cannot be proven: the
        # tool runs (and here fails, since its database is down too: the caller sees that,
        # never the possibly stale copy).
        with pytest.raises(redis.RedisError):
            shop.get_cart(1)
        assert dejacache.runtime_stats().by_tool["get_cart"].bypassed >= 1
        assert shop.reads == 3
        redis_server.start()
        wait_for(lambda: backend.get_counters(["x"]) is not None)
        shop.db = redis.Redis.from_url(redis_server.url, socket_timeout=1)
        shop.db.set("db:cart:1", "after-restart")
        # Redis came back empty: counters went back to zero, which would make the gen-0 "v0"
        # entry in the memory tier reachable again; the regression moves this replica to a
        # new epoch instead.
        assert shop.get_cart(1) == "after-restart"


def test_write_while_redis_is_down_is_replayed_before_serving(redis_server: RedisServer) -> None:
    # short timeouts: the paused Redis must time the bumps out
    store = tiered(redis_server.url, cooldown=0.05, timeout=0.05, connect_timeout=0.05)
    backend: RedisStore = store.back  # type: ignore[assignment]
    # Redis down rather than failing over: the write returns after half a second, queued
    # (LAND_WITHIN's 30 s is what test_a_write_returns_once_its_invalidation_landed covers)
    generations_for(store).land_within = 0.5  # type: ignore[union-attr]
    seen: list[str] = []
    value = {"v": "v0"}

    @dejacache.tool_cache(resource="doc", store=store)
    def read() -> str:
        seen.append(value["v"])
        return value["v"]

    @dejacache.invalidates("doc", store=store)
    def write(v: str) -> None:
        value["v"] = v

    with dejacache.agent_session(tenant="acme"):
        assert read() == "v0"
        assert read() == "v0"
        redis_server.pause()  # silent Redis: the bumps time out
        try:
            write("v1")
        finally:
            redis_server.resume()
        wait_for(lambda: backend.get_counters(["x"]) is not None)
        # The failed bumps are applied before any entry is served again; for the fence
        # after an outage (other processes' queued bumps may still be landing) the tool
        # runs uncached, then entries are served again.
        assert read() == "v1"

        def hit() -> bool:
            before = len(seen)
            assert read() == "v1"
            return len(seen) == before

        wait_for(hit)
    assert seen[0] == "v0" and set(seen[1:]) == {"v1"}


def test_a_configured_redis_left_behind_and_down_neither_holds_writes_nor_serves_stale(
    redis_server: RedisServer,
) -> None:
    """A write also bumps the stores configured earlier that readers read through (so a
    reader going back to one does not serve what the write replaced), without waiting for
    one that no longer answers: its bump is queued, and until it lands this process reads
    nothing through that store."""
    old = rt(redis_server.url, cooldown=0.05, timeout=0.05, connect_timeout=0.05)
    value = {"v": "v0"}
    runs: list[str] = []

    @dejacache.tool_cache(resource="doc", scope="global")
    def read() -> str:
        runs.append(value["v"])
        return value["v"]

    @dejacache.invalidates("doc")
    def write(v: str) -> None:
        value["v"] = v

    try:
        dejacache.configure(store=old)
        assert read() == "v0" and read() == "v0" and runs == ["v0"]
        redis_server.pause()
        dejacache.configure(store=dejacache.MemoryStore())
        t0 = time.monotonic()
        write("v1")
        assert time.monotonic() - t0 < 2.0  # not LAND_WITHIN (30 s)
        dejacache.configure(store=old)
        assert read() == "v1"  # its counters unreadable, the bump queued: uncached
    finally:
        redis_server.resume()
        dejacache.configure(store=None)
    wait_for(lambda: old.get_counters(["x"]) is not None)
    dejacache.configure(store=old)
    served: list[str] = []  # what the cache answered (the tool not run), once it does

    def hit() -> bool:
        before = len(runs)
        got = read()
        if len(runs) == before:
            served.append(got)
        return bool(served)

    try:
        wait_for(hit)  # past the fence after the outage
    finally:
        dejacache.configure(store=None)
    assert served == ["v1"]  # before: "v0", cached before the write
    old.close()


@pytest.mark.parametrize("silence", [0.3, 2.5], ids=["0.3 s", "2.5 s: a failover"])
@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_write_returns_once_its_invalidation_landed(redis_server: RedisServer,
                                                     run: str, silence: float) -> None:
    """Another process cannot know of an increment this one queued: it would serve the
    entry the write replaced until the queue landed. So the bump after a write is sent
    again until it lands (a moment of silence from Redis, a timeout on a loaded machine,
    a failover lasting seconds), for up to ``LAND_WITHIN``, before the write returns."""
    import asyncio

    from dejacache.runtime._redis_counters import RedisCounters

    writer = RedisStore(redis_server.url, key_prefix="tc")
    elsewhere = RedisStore(redis_server.url, key_prefix="tc", timeout=1.0)
    reader = RedisCounters(elsewhere).get_counters  # another process's view: no shared state
    gens = SharedGenerations(writer)
    names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
    assert gens.bump(names, land=True)
    before = reader(names)
    redis_server.pause()  # the increment times out (twice: a second attempt confirms it)
    threading.Timer(silence, redis_server.resume).start()
    t0 = time.monotonic()
    landed = (gens.bump(names, land=True) if run == "sync"
              else asyncio.run(gens.abump(names, land=True)))
    took = time.monotonic() - t0
    after = reader(names)  # what another process reads the moment the write returned
    print(f"\nwrite returned after {took:.2f} s, landed={landed}: {before} -> {after}")
    assert landed and silence - 0.05 < took < silence + 1.0
    assert after is not None and before is not None
    assert all(a > b for a, b in zip(after, before, strict=True))
    writer.close()
    elsewhere.close()


def test_past_land_within_redis_is_down_and_writes_stop_waiting(
        redis_server: RedisServer) -> None:
    """Once this process's oldest queued increment is ``land_within`` old, Redis is down
    rather than failing over: a write then returns after one attempt, its increment queued
    (the background flush lands it once Redis answers)."""
    writer = RedisStore(redis_server.url, key_prefix="tc")
    gens = SharedGenerations(writer)
    gens.land_within = 0.5
    names = _counter_names_w([tenant_prefix("acme")], "cart", "cart:1")
    assert gens.bump(names, land=True)
    redis_server.pause()
    try:
        t0 = time.monotonic()
        first = gens.bump(names, land=True)
        t1 = time.monotonic()
        second = gens.bump(names, land=True)
        t2 = time.monotonic()
    finally:
        redis_server.resume()
    assert (first, second) == (False, False)
    assert 0.45 < t1 - t0 < 1.5 and t2 - t1 < 0.45
    wait_for(lambda: not gens._pending)  # landed by the background flush
    assert gens.bump(names, land=True)
    writer.close()


async def test_async_tools_share_counters(redis_server: RedisServer) -> None:
    store = rt(redis_server.url)
    data = {"v": 1}

    @dejacache.tool_cache(resource="n", store=store)
    async def get() -> int:
        return data["v"]

    @dejacache.invalidates("n", store=store)
    async def bump() -> None:
        data["v"] += 1

    async with dejacache.agent_session(tenant="acme"):
        assert await get() == 1
        data["v"] = 5  # changed behind the cache's back: the entry stays until a write
        assert await get() == 1
        await bump()
        assert await get() == 6
    assert dejacache.runtime_stats().by_tool["get"].hits == 1
    await store.aclose()


def test_tool_cache_takes_a_redis_url_as_configure_does(redis_server: RedisServer) -> None:
    """The URL ``configure(store=...)`` accepts: the tool's entries and counters go to that
    Redis, so a write through another store on the same URL invalidates them."""
    data = {"v": 1}

    @dejacache.tool_cache(resource="n", store=redis_server.url)
    def get() -> int:
        return data["v"]

    other = RedisStore(redis_server.url, **PATIENT)

    @dejacache.invalidates("n", store=other)
    def bump() -> None:
        data["v"] += 1

    store = get.tool_cache.store()  # type: ignore[attr-defined]
    assert isinstance(store, RedisStore)
    with dejacache.agent_session(tenant="acme"):
        assert get() == 1
        data["v"] = 5
        assert get() == 1  # cached in Redis
        bump()
        assert get() == 6
    assert [r.kind for _, r in other.iterate()] == ["tool", "tool"]
    store.close()
    other.close()


CHILD = textwrap.dedent("""
    import sys, redis, dejacache
    url = sys.argv[1]
    db = redis.Redis.from_url(url, socket_timeout=2)
    dejacache.configure(store=dejacache.TieredStore(
        dejacache.MemoryStore(), dejacache.RedisStore(url, key_prefix="rt", timeout=1.0,
                                                      connect_timeout=1.0)))
    reads = 0

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}")
    def get_cart(user_id):
        global reads
        reads += 1
        return (db.get(f"db:cart:{user_id}") or b"").decode()

    @dejacache.invalidates("cart", key="cart:{user_id}")
    def set_cart(user_id, value):
        db.set(f"db:cart:{user_id}", value)

    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        with dejacache.agent_session(tenant="acme"):
            if cmd == "get":
                print(get_cart(int(args[0])), reads, flush=True)
            else:
                set_cart(int(args[0]), args[1])
                print("ok", reads, flush=True)
""")


class Replica:
    def __init__(self, url: str, tmp: str) -> None:
        env = {**os.environ, "DEJACACHE_DIR": tmp}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )
        assert self.read_line() == "ready"

    def read_line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, "replica died"
        return line

    def ask(self, cmd: str) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read_line().split()

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def replicas(redis_server: RedisServer, tmp_path: Any) -> Iterator[tuple[Replica, Replica]]:
    a = Replica(redis_server.url, str(tmp_path / "a"))
    b = Replica(redis_server.url, str(tmp_path / "b"))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_two_processes_see_each_others_invalidations(
    replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    a, b = replicas
    redis.Redis.from_url(redis_server.url).set("db:cart:1", "v0")
    assert a.ask("get 1") == ["v0", "1"]
    assert a.ask("get 1") == ["v0", "1"]  # a memory-tier hit in replica A
    assert b.ask("get 1") == ["v0", "0"]  # B is served A's entry through Redis
    assert b.ask("set 1 v1") == ["ok", "0"]
    assert a.ask("get 1") == ["v1", "2"]  # B's write invalidated A's memory tier at once
    assert a.ask("get 1") == ["v1", "2"]
    assert b.ask("get 1") == ["v1", "0"]


# -- one round trip: on one server a hit reads its counters and its entry in one MGET


def _commands(db: Any) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"]
            for k, v in db.info("commandstats").items()}


def test_a_hit_on_one_server_is_one_mget(redis_server: RedisServer) -> None:
    shop = Shop(redis_server.url, rt(redis_server.url))
    shop.db.set("db:cart:1", "v0")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"
        assert shop.get_cart(1) == "v0"  # learns the key the counters make
        shop.db.config_resetstat()
        for _ in range(10):
            assert shop.get_cart(1) == "v0"
    calls = _commands(shop.db)
    assert calls.get("mget") == 10
    assert "get" not in calls and "evalsha" not in calls
    assert shop.reads == 1


def test_a_folded_read_never_serves_the_entry_of_older_counters(
    redis_server: RedisServer,
) -> None:
    store = rt(redis_server.url)
    shop = Shop(redis_server.url, store)
    shop.db.set("db:cart:1", "v0")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"
        assert shop.get_cart(1) == "v0"
        # Another replica writes. The "v0" entry stays in Redis under the key the old
        # counters make, the very key this process reads with the counters next time.
        other = SharedGenerations(rt(redis_server.url))
        shop.db.set("db:cart:1", "v1")
        assert other.bump(_counter_names_w([tenant_prefix("acme")], "cart", "cart:1"))
        assert len(list(store.iterate())) == 1
        assert shop.get_cart(1) == "v1"
        assert shop.reads == 2
        shop.db.config_resetstat()
        assert shop.get_cart(1) == "v1"  # the new key, one round trip again
    assert _commands(shop.db).get("mget") == 1
    assert shop.reads == 2


def test_counters_lost_move_folded_reads_to_a_new_epoch(redis_server: RedisServer) -> None:
    store = rt(redis_server.url)
    shop = Shop(redis_server.url, store)
    shop.db.set("db:cart:1", "v0")
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "v0"  # stored under zeros
        shop.set_cart(1, "v1")
        assert shop.get_cart(1) == "v1"
        assert shop.get_cart(1) == "v1"
        # Redis loses the counters (not the entries): back at zero, the "v0" entry's key
        # would be made again; the regression moves this process to a new epoch.
        shop.db.delete(*shop.db.keys("rt:g:*"))
        shop.db.set("db:cart:1", "v2")
        assert shop.get_cart(1) == "v2"
        assert shop.get_cart(1) == "v2"
    assert shop.reads == 3


def test_a_folded_read_fails_open_when_redis_is_down(redis_server: RedisServer) -> None:
    shop = Shop(redis_server.url, rt(redis_server.url))
    with dejacache.agent_session(tenant="acme"):
        shop.db.set("db:cart:1", "v0")
        assert shop.get_cart(1) == "v0"
        assert shop.get_cart(1) == "v0"
        redis_server.stop()
        with pytest.raises(redis.RedisError):  # the tool ran (its database is down too)
            shop.get_cart(1)
    assert dejacache.runtime_stats().by_tool["get_cart"].bypassed >= 1
    assert shop.reads == 2


def test_folded_reads_never_serve_a_value_older_than_a_returned_write(
    redis_server: RedisServer,
) -> None:
    # Readers on one RedisStore (one MGET per hit) against a writer whose invalidations go
    # through another store object (another replica's counters): once a write has returned,
    # no read that starts after it may answer an older value.
    shop = Shop(redis_server.url, rt(redis_server.url))
    writer = Shop(redis_server.url, rt(redis_server.url))
    shop.db.set("db:cart:1", "0")
    returned = [0]
    stale: list[tuple[int, int]] = []
    stop = threading.Event()

    def read() -> None:
        with dejacache.agent_session(tenant="acme"):
            while not stop.is_set():
                floor = returned[0]
                got = int(shop.get_cart(1))
                if got < floor:
                    stale.append((got, floor))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        with dejacache.agent_session(tenant="acme"):
            for i in range(1, 150):
                writer.set_cart(1, str(i))
                returned[0] = i
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert stale == []
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == "149"


async def test_an_async_hit_on_one_server_is_one_mget(redis_server: RedisServer) -> None:
    store = rt(redis_server.url)
    other_store = rt(redis_server.url)
    other = SharedGenerations(other_store)
    db = redis.Redis.from_url(redis_server.url, socket_timeout=1)
    data = {"v": "v0"}
    runs = []

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)
    async def get_cart(user_id: int) -> str:
        runs.append(user_id)
        return data["v"]

    async with dejacache.agent_session(tenant="acme"):
        assert await get_cart(1) == "v0"
        assert await get_cart(1) == "v0"
        db.config_resetstat()
        for _ in range(5):
            assert await get_cart(1) == "v0"
        calls = _commands(db)
        assert calls.get("mget") == 5 and "get" not in calls
        # Another replica's write: the entry read with the counters is not served.
        data["v"] = "v1"
        assert other.bump(_counter_names_w([tenant_prefix("acme")], "cart", "cart:1"))
        assert await get_cart(1) == "v1"
        assert await get_cart(1) == "v1"
    assert len(runs) == 2
    await store.aclose()
    other_store.close()
    db.close()


@pytest.mark.slow
@pytest.mark.parametrize("held", [0.03, 0.06])
async def test_a_busy_event_loop_keeps_the_cache_on(redis_server: RedisServer,
                                                    held: float) -> None:
    """A saturated worker: 30 sessions call an async tool while the loop is held ``held``
    seconds every 200 ms, with Redis healthy. A late loop is no Redis failure: no call may
    bypass the cache for it (it ran late timers of 50 ms timeouts after the reply had come,
    opened the breaker and the counters' fence for a second each: 74-81% bypassed)."""
    import asyncio
    import random

    store = RedisStore(redis_server.url, key_prefix="lag")

    @dejacache.tool_cache(resource="item", key="item:{i}", store=store, ttl=None)
    async def get_item(i: int) -> dict[str, Any]:
        await asyncio.sleep(0.001)
        return {"i": i, "v": "x" * 200}

    stop = asyncio.Event()

    async def session(n: int) -> None:
        rnd = random.Random(n)
        async with dejacache.agent_session(tenant=f"t{n % 3}", session_id=f"s{n}"):
            while not stop.is_set():
                await get_item(rnd.randrange(40))
                await asyncio.sleep(0.002)

    async def hold() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.2)
            time.sleep(held)

    tasks = [asyncio.ensure_future(session(n)) for n in range(30)]
    await asyncio.sleep(0.5)  # warm: every entry stored once
    dejacache.reset_runtime_stats()
    holder = asyncio.ensure_future(hold())

    def calls_so_far() -> int:
        t = dejacache.runtime_stats().total
        return t.hits + t.misses + t.coalesced + t.bypassed

    # Counted, not timed: a machine loaded by others makes fewer calls in a given time.
    started = time.monotonic()
    while calls_so_far() < 1000 and time.monotonic() - started < 60:
        await asyncio.sleep(0.1)
    stop.set()
    await asyncio.gather(*tasks, holder)
    t = dejacache.runtime_stats().total
    calls = calls_so_far()
    print(f"\nloop held {held * 1000:.0f} ms every 200 ms: {calls} calls, "
          f"{t.bypassed} bypassed ({t.bypassed / calls:.1%}), breaker trips "
          f"{store.breaker.trips}")
    assert calls > 300
    assert t.bypassed / calls < 0.01
    await store.aclose()


def test_counters_made_again_after_a_restart_do_not_revive_entries(
        redis_server: RedisServer) -> None:
    """Redis restarted without persistence starts its counters over. A reader whose memory
    tier holds an entry cached under a counter value it read before must not find that
    value made again by the next write (stepping by one made it again: the write returned
    and the reader served the answer from before it). Counters step by a random amount, so
    a value made again is a one in a million chance, not the rule."""
    db = {"v": 0}
    reader_store, writer_store = tiered(redis_server.url), rt(redis_server.url)

    @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=reader_store, ttl=None)
    def get_cart(uid: int) -> int:
        return db["v"]

    @dejacache.invalidates("cart", key="cart:{uid}", store=writer_store)
    def add_item(uid: int) -> None:
        db["v"] += 1

    with dejacache.agent_session(tenant="acme"):
        add_item(1)
        assert get_cart(1) == 1 and get_cart(1) == 1  # cached, in the memory tier too
        redis_server.restart()  # (the reader makes no call meanwhile: nothing to fence)
        wait_for(lambda: writer_store.get_counters(["x"]) is not None)
        add_item(1)
        assert get_cart(1) == 2
    reader_store.close()
    writer_store.close()


async def test_more_calls_in_flight_than_connections_wait_for_one(
        redis_server: RedisServer) -> None:
    """A worker with more calls in flight than its client has connections (redis-py's
    asyncio pool holds 100, and refused the 101st with ``MaxConnectionsError``, booked as
    Redis failing: the breaker opened and the cache was off for a second) waits for a free
    connection, within the call's deadline, as for Redis itself."""
    import asyncio

    store = RedisStore(redis_server.url, key_prefix="many")

    @dejacache.tool_cache(resource="item", key="item:{i}", store=store, ttl=None)
    async def get_item(i: int) -> int:
        return i

    async with dejacache.agent_session(tenant="acme"):
        await asyncio.gather(*[get_item(i) for i in range(20)])  # cached
        dejacache.reset_runtime_stats()
        for _ in range(3):
            assert await asyncio.gather(*[get_item(i % 20) for i in range(250)]) == [
                i % 20 for i in range(250)]
    t = dejacache.runtime_stats().total
    print(f"\n750 calls, 250 at a time: {t.hits} hits, {t.bypassed} bypassed, "
          f"breaker trips {store.breaker.trips}")
    assert (t.bypassed, store.breaker.trips) == (0, 0)
    await store.aclose()
