"""TieredStore: read-through, write-both, the front tier's staleness bound, fail-open back."""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from contract import StoreContract, within_ttl
from redis_shared import flushed, module_server

import dejacache
from dejacache.stores import MemoryStore, Record, SQLiteStore, TieredStore
from dejacache.stores.redis import RedisStore
from support_redis import RedisServer, free_port

SLOW_OK = {"timeout": 2.0, "connect_timeout": 2.0}


def rec(value: bytes = b"v", namespace: str = "ns", name: str = "fn") -> Record:
    return Record(value=value, name=name, namespace=namespace, request=b"req")


class CountingMemory(MemoryStore):
    """A real MemoryStore that also counts reads, to see which tier answered."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, key: str) -> Record | None:
        self.reads += 1
        return super().get(key)


def value_of(store: TieredStore, key: str) -> bytes | None:
    got = store.get(key)
    return None if got is None else got.value


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from module_server(tmp_path_factory)


@pytest.fixture
def redis_server(shared_server: RedisServer) -> RedisServer:
    """Overrides the per-test server: nothing in this module stops or pauses it."""
    return flushed(shared_server)


@pytest.fixture
def redis_back(redis_server: RedisServer) -> Iterator[RedisStore]:
    s = RedisStore(redis_server.url, key_prefix="tier", **SLOW_OK)
    yield s
    s.close()


@pytest.fixture
def tiered(redis_back: RedisStore) -> TieredStore:
    return TieredStore(MemoryStore(), redis_back)


@pytest.mark.redis
class TestTieredOverRedisContract(StoreContract):
    persistent = True  # the Redis tier keeps entries across a new process (fresh front)

    @pytest.fixture
    async def store(self, redis_server: RedisServer) -> AsyncIterator[TieredStore]:
        s = TieredStore(MemoryStore(), RedisStore(redis_server.url, key_prefix="contract",
                                                  **SLOW_OK))
        yield s
        await s.aclose()

    def reopen(self, store: TieredStore) -> TieredStore:
        back = store.back
        assert isinstance(back, RedisStore)
        return TieredStore(MemoryStore(), RedisStore(back.url, key_prefix="contract",
                                                     **SLOW_OK))


class TestTieredInProcessContract(StoreContract):
    @pytest.fixture
    def store(self) -> TieredStore:
        return TieredStore(MemoryStore(), MemoryStore())


# ---------------------------------------------------------------- in-process tiers only


@pytest.mark.parametrize(("front", "back", "named"), [
    (5, MemoryStore(), "TieredStore front must be a Store instance .*, not int 5"),
    (MemoryStore(), "memory://", "TieredStore back must be a Store instance .*, not str "
                                 "'memory://'"),
])
def test_a_tier_that_is_not_a_store_is_refused_naming_it(front: object, back: object,
                                                         named: str) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=named):
        TieredStore(front, back)  # type: ignore[arg-type]


def test_front_hit_does_not_touch_the_back() -> None:
    back = CountingMemory()
    t = TieredStore(MemoryStore(), back)
    t.put("k", rec())
    assert t.get("k") is not None
    assert back.reads == 0


def test_miss_in_front_reads_through_and_fills_the_front() -> None:
    front, back = MemoryStore(), CountingMemory()
    back.put("k", rec())
    t = TieredStore(front, back)
    assert t.get("k") == rec()
    assert front.get("k") == rec()
    assert t.get("k") == rec()
    assert back.reads == 1
    assert t.get("nope") is None


def test_front_copy_of_a_back_entry_expires_after_front_ttl() -> None:
    front, back = MemoryStore(), MemoryStore()
    back.put("k", rec())
    t = TieredStore(front, back, front_ttl=0.1)

    def fill_then_delete_behind() -> Record | None:
        front.clear()
        back.put("k", rec())
        assert t.get("k") is not None
        back.delete("k")  # as another process would
        return t.get("k")

    assert within_ttl(0.1, fill_then_delete_behind) is not None  # stale within the bound...
    time.sleep(0.15)
    assert t.get("k") is None  # ...and not after it


def test_writes_and_deletes_reach_both_tiers() -> None:
    front, back = MemoryStore(), MemoryStore()
    t = TieredStore(front, back)
    t.put("k", rec())
    assert front.get("k") is not None and back.get("k") is not None
    assert t.delete("k") is True
    assert front.get("k") is None and back.get("k") is None
    assert t.delete("k") is False
    back.put("only-back", rec())
    assert t.delete("only-back") is True


def test_put_with_expired_ttl_does_not_fill_the_front() -> None:
    front, back = MemoryStore(), MemoryStore()
    t = TieredStore(front, back)
    t.put("k", rec(), ttl=0)
    assert len(front) == 0


def test_iterate_clear_and_stats_cover_both_tiers() -> None:
    front, back = MemoryStore(), MemoryStore()
    t = TieredStore(front, back)
    t.put("a", rec(namespace="x"))
    t.put("b", rec(namespace="y"))
    front.put("front-only", rec(namespace="x"))
    assert sorted(k for k, _ in t.iterate()) == ["a", "b", "front-only"]
    assert sorted(k for k, _ in t.iterate(namespace="x")) == ["a", "front-only"]
    st = t.stats()
    assert st.entries == 2 and st.extra["front"].entries == 3
    assert t.clear("x") == 2
    assert sorted(k for k, _ in t.iterate()) == ["b"]
    assert t.clear() == 1
    assert list(t.iterate()) == []


def test_sqlite_back(tmp_path: pathlib.Path) -> None:
    back = SQLiteStore(tmp_path / "c.db")
    t = TieredStore(MemoryStore(), back)
    t.put("k", rec(), ttl=60)
    fresh = TieredStore(MemoryStore(), back)
    assert fresh.get("k") is not None
    assert t.url == back.url
    t.close()


def test_no_counters_on_the_tiered_store_itself() -> None:
    # Runtime generation counters are found on the shared tier (``.back``); a tiered
    # store over in-process tiers must not pretend to have them.
    t = TieredStore(MemoryStore(), MemoryStore())
    assert not hasattr(t, "incr") and not hasattr(t, "get_counters")
    assert "TieredStore(" in repr(t)


async def test_async_read_through() -> None:
    front, back = MemoryStore(), CountingMemory()
    back.put("k", rec())
    t = TieredStore(front, back)
    assert await t.aget("k") == rec()
    assert await t.aget("k") == rec()
    assert back.reads == 1
    await t.aput("j", rec())
    assert front.get("j") is not None
    assert await t.adelete("j") is True
    assert await t.aget("missing") is None
    await t.aclose()


# ---------------------------------------------------------------- memory in front of Redis


@pytest.mark.redis
def test_front_fill_uses_the_remaining_redis_ttl(tiered: TieredStore,
                                                 redis_back: RedisStore) -> None:
    # filled with ~0.3 s left, not front_ttl (60 s)
    assert within_ttl(0.3, lambda: (redis_back.put("k", rec(), ttl=0.3),
                                    tiered.get("k"))[1]) is not None
    time.sleep(0.4)
    assert tiered.front.get("k") is None
    assert tiered.get("k") is None


@pytest.mark.redis
def test_other_process_sees_writes_and_deletes_within_front_ttl(redis_back: RedisStore
                                                                ) -> None:
    here = TieredStore(MemoryStore(), redis_back, front_ttl=0.15)
    there = TieredStore(MemoryStore(), redis_back, front_ttl=0.15)  # another replica

    def write_over_a_copy() -> tuple[bytes | None, bytes | None]:
        there.front.clear()
        here.put("k", rec(b"one"))
        got = there.get("k")
        assert got is not None and got.value == b"one"
        here.put("k", rec(b"two"))
        return value_of(here, "k"), value_of(there, "k")

    mine, theirs = within_ttl(0.15, write_over_a_copy)
    assert mine == b"two"  # its own writes: at once
    assert theirs == b"one"  # another's: stale for at most front_ttl
    time.sleep(0.2)
    assert value_of(there, "k") == b"two"
    here.delete("k")
    time.sleep(0.2)
    assert there.get("k") is None


@pytest.mark.redis
async def test_async_front_fill_uses_the_remaining_redis_ttl(redis_server: RedisServer
                                                             ) -> None:
    back = RedisStore(redis_server.url, key_prefix="tier", **SLOW_OK)
    t = TieredStore(MemoryStore(), back)
    for _ in range(20):  # contract.within_ttl, awaited
        t0 = time.monotonic()
        await back.aput("k", rec(), ttl=0.3)
        got, front = await t.aget("k"), await t.front.aget("k")
        if time.monotonic() - t0 < 0.3:
            break
    assert got is not None and front is not None
    await t.aput("j", rec())
    assert await back.aget("j") is not None
    await asyncio.sleep(0.4)
    assert await t.aget("k") is None
    await t.aclose()


@pytest.fixture
async def down_tiered() -> AsyncIterator[TieredStore]:
    t = TieredStore(MemoryStore(), RedisStore(f"redis://127.0.0.1:{free_port()}/0"))
    yield t
    await t.aclose()


async def test_redis_down_leaves_the_front_working(down_tiered: TieredStore) -> None:
    down_tiered.put("k", rec())
    assert down_tiered.get("k") is not None
    await down_tiered.aput("j", rec())
    assert await down_tiered.aget("j") is not None
    assert sorted(k for k, _ in down_tiered.iterate()) == ["j", "k"]


@pytest.mark.redis
def test_cache_through_tiered_redis(tiered: TieredStore, redis_server: RedisServer) -> None:
    dejacache.configure(store=tiered)
    calls: list[int] = []

    @dejacache.cache(name="tiered.neg")
    def neg(x: int) -> int:
        calls.append(x)
        return -x

    assert neg(4) == -4
    assert neg(4) == -4
    assert calls == [4]
    # A fresh process (empty front) still hits through Redis.
    dejacache.configure(store=TieredStore(MemoryStore(), tiered.back))
    assert neg(4) == -4
    assert calls == [4]
