"""RedisStore against a real redis-server: layout, TTLs, scans, counters, corrupt data,
read-only mode and client injection. Outages are in test_redis_outage.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from contract import StoreContract
from redis_shared import flushed, module_server

import dejacache
from dejacache import ConfigurationError
from dejacache.stores import Record, store_from_url
from dejacache.stores.redis import RedisStore, pack_record, unpack_record
from support_redis import RedisServer

pytestmark = pytest.mark.redis

# Generous timeouts here: these tests are about behaviour, not outages, and must not trip
# the breaker on a loaded CI machine.
SLOW_OK = {"timeout": 2.0, "connect_timeout": 2.0}


def rec(value: bytes = b"v", *, name: str = "fn", namespace: str = "ns",
        request: bytes = b'{"args":[1]}') -> Record:
    return Record(value=value, name=name, namespace=namespace, kind="call", request=request,
                  duration=0.25, usage={"input_tokens": 3}, created=1700000000.5)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from module_server(tmp_path_factory)


@pytest.fixture
def redis_server(shared_server: RedisServer) -> RedisServer:
    """Overrides the per-test server: nothing in this module stops or pauses it."""
    return flushed(shared_server)


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[RedisStore]:
    s = RedisStore(redis_server.url, key_prefix="t", **SLOW_OK)
    yield s
    s.close()


@pytest.fixture
async def astore(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    s = RedisStore(redis_server.url, key_prefix="t", **SLOW_OK)
    yield s
    await s.aclose()


def all_keys(client: redis.Redis) -> set[bytes]:
    return set(client.scan_iter(match="*"))


@pytest.mark.redis
class TestRedisStoreContract(StoreContract):
    persistent = True

    @pytest.fixture
    async def store(self, redis_server: RedisServer) -> AsyncIterator[RedisStore]:
        # An async fixture so teardown can close the event loop's client too.
        s = RedisStore(redis_server.url, key_prefix="contract", **SLOW_OK)
        yield s
        await s.aclose()

    def reopen(self, store: RedisStore) -> RedisStore:
        return RedisStore(store.url, key_prefix="contract", **SLOW_OK)


# ---------------------------------------------------------------- packing (no server)


def test_pack_round_trip() -> None:
    r = rec(b"\x00\xffpayload")
    back = unpack_record(pack_record(r), r.request)
    assert back == r


@pytest.mark.parametrize("raw_bytes", [
    b"", b"DJR", b"DJR\x01", b"hello world", b"DJR\x02\x00\x00\x00\x02[]",
    b"DJR\x01\x00\x00\x00\xffshort", b"DJR\x01\x00\x00\x00\x03{}x",
    b"DJR\x01\x00\x00\x00\x02[]", b'DJR\x01\x00\x00\x00\x1a[1,"ns","call",0,null,0.0]v',
    b'DJR\x01\x00\x00\x00\x05[1,2,value',
])
def test_unpack_rejects_malformed_bytes(raw_bytes: bytes) -> None:
    assert unpack_record(raw_bytes) is None


# ---------------------------------------------------------------- Store protocol


def test_put_get_round_trip_without_request_on_the_hit_path(store: RedisStore) -> None:
    r = rec()
    store.put("k1", r)
    got = store.get("k1")
    assert got is not None
    assert (got.value, got.name, got.namespace, got.kind) == (b"v", "fn", "ns", "call")
    assert (got.duration, got.usage, got.created) == (0.25, {"input_tokens": 3}, 1700000000.5)
    assert got.request == b""  # fetched only by iterate()
    assert store.get("missing") is None


def test_every_key_is_prefixed(store: RedisStore, raw: redis.Redis) -> None:
    store.put("k1", rec())
    store.incr("gen:cart")
    assert all_keys(raw) == {b"t:e:{k1}", b"t:r:{k1}", b"t:n:gen:cart"}


def test_ttl_is_applied_by_the_server(store: RedisStore, raw: redis.Redis) -> None:
    store.put("short", rec(), ttl=0.2)
    store.put("long", rec(), ttl=100)
    for key in ("t:e:{short}", "t:r:{short}"):
        left = raw.pttl(key)  # -2: expired already (a stalled test can pass 200 ms)
        assert left == -2 or 0 < left <= 200  # and never -1, no TTL at all
    got, remaining = store.get_with_ttl("long")
    assert got is not None and remaining is not None and 90 < remaining <= 100
    time.sleep(0.3)
    assert store.get("short") is None
    assert store.get_with_ttl("short") == (None, None)


def test_no_ttl_means_no_expiry_even_after_a_ttl_put(store: RedisStore, raw: redis.Redis
                                                      ) -> None:
    store.put("k", rec(), ttl=50)
    store.put("k", rec(b"new"))
    assert raw.pttl("t:e:{k}") == -1
    got, remaining = store.get_with_ttl("k")
    assert got is not None and got.value == b"new" and remaining is None


def test_non_positive_ttl_is_expired_on_arrival(store: RedisStore) -> None:
    store.put("k", rec())
    store.put("k", rec(), ttl=0)
    assert store.get("k") is None
    store.put("k2", rec(), ttl=-1)
    assert store.get("k2") is None


def test_put_without_request_drops_the_old_request(store: RedisStore, raw: redis.Redis) -> None:
    store.put("k", rec())
    store.put("k", rec(request=b""))
    assert raw.exists("t:r:{k}") == 0


def test_delete(store: RedisStore, raw: redis.Redis) -> None:
    store.put("k", rec())
    assert store.delete("k") is True
    assert store.delete("k") is False
    assert all_keys(raw) == set()


def test_iterate_filters_and_fills_requests(store: RedisStore) -> None:
    store.put("a", rec(name="f", namespace="x"))
    store.put("b", rec(name="g", namespace="x", request=b""))
    store.put("c", rec(name="f", namespace="y"))
    got = dict(store.iterate())
    assert set(got) == {"a", "b", "c"}
    assert got["a"].request == b'{"args":[1]}'
    assert got["b"].request == b""
    assert {k for k, _ in store.iterate(name="f")} == {"a", "c"}
    assert {k for k, _ in store.iterate(namespace="x")} == {"a", "b"}
    assert {k for k, _ in store.iterate(name="f", namespace="y")} == {"c"}


def test_iterate_walks_many_scan_pages(store: RedisStore, raw: redis.Redis) -> None:
    pipe = raw.pipeline(transaction=False)
    for i in range(1200):
        pipe.set(f"t:e:{{k{i}}}", pack_record(rec(name=f"n{i % 3}")))
    pipe.execute()
    assert sum(1 for _ in store.iterate()) == 1200
    assert sum(1 for _ in store.iterate(name="n1")) == 400
    assert store.stats().entries == 1200


def test_clear_keeps_counters_and_other_prefixes(redis_server: RedisServer, store: RedisStore,
                                                 raw: redis.Redis) -> None:
    other = RedisStore(redis_server.url, key_prefix="other", **SLOW_OK)
    try:
        other.put("k", rec())
        store.put("a", rec(namespace="x"))
        store.put("b", rec(namespace="y"))
        store.incr("gen")
        assert store.clear("x") == 1
        assert store.get("a") is None and store.get("b") is not None
        assert store.clear() == 1
        assert store.get("b") is None
        assert store.get_counters(["gen"]) == [1]
        assert other.get("k") is not None
        assert all_keys(raw) == {b"other:e:{k}", b"other:r:{k}", b"t:n:gen"}
    finally:
        other.close()


def test_prefix_with_glob_characters_is_matched_literally(redis_server: RedisServer,
                                                           raw: redis.Redis) -> None:
    a = RedisStore(redis_server.url, key_prefix="app[1]*", **SLOW_OK)
    b = RedisStore(redis_server.url, key_prefix="app1x", **SLOW_OK)
    try:
        a.put("k", rec())
        b.put("k", rec())
        assert [k for k, _ in a.iterate()] == ["k"]
        assert a.stats().entries == 1
        assert a.clear() == 1
        assert b.get("k") is not None
    finally:
        a.close()
        b.close()


def test_stats(store: RedisStore) -> None:
    store.put("a", rec(b"12345", request=b"abc"))
    st = store.stats()
    assert st.entries == 1
    assert st.bytes == len(pack_record(rec(b"12345"))) + 3
    assert st.backend == store.url
    assert st.extra["breaker"] == "closed" and st.extra["key_prefix"] == "t"


async def test_async_twins(astore: RedisStore) -> None:
    await astore.aput("k", rec(), ttl=30)
    got = await astore.aget("k")
    assert got is not None and got.value == b"v"
    got2, remaining = await astore.aget_with_ttl("k")
    assert got2 == got and remaining is not None and 20 < remaining <= 30
    assert await astore.adelete("k") is True
    assert await astore.aget("k") is None
    assert await astore.aget_with_ttl("k") == (None, None)
    await astore.aput("z", rec(), ttl=0)
    assert await astore.aget("z") is None


# ---------------------------------------------------------------- counters


def test_counters(store: RedisStore) -> None:
    assert store.get_counters(["a", "b"]) == [0, 0]
    assert store.incr("a") == 1
    assert store.incr("a") == 2
    assert store.incr("b") == 1
    assert store.get_counters(["a", "b", "c"]) == [2, 1, 0]
    assert store.get_counters([]) == []


async def test_async_counters(astore: RedisStore) -> None:
    assert await astore.aincr("a") == 1
    assert await astore.aincr("a") == 2
    assert await astore.aget_counters(["a", "nope"]) == [2, 0]
    assert await astore.aget_counters([]) == []


def test_foreign_counter_value_is_unavailable_not_an_error(store: RedisStore,
                                                           raw: redis.Redis) -> None:
    raw.set("t:n:bad", b"not a number")
    assert store.incr("bad") is None
    assert store.get_counters(["bad"]) is None
    assert store.breaker.state == "closed"  # the server answered: no outage


# ---------------------------------------------------------------- damaged and foreign data


@pytest.mark.parametrize("garbage", [
    b"hello", b"\x00\x01\x02", b"DJR\x01\xff\xff\xff\xff", b'{"json": "from another app"}',
])
def test_garbage_is_a_miss_and_is_deleted(store: RedisStore, raw: redis.Redis,
                                          garbage: bytes) -> None:
    raw.set("t:e:{k}", garbage)
    raw.set("t:r:{k}", b"req")
    assert store.get("k") is None
    assert all_keys(raw) == set()
    raw.set("t:e:{k}", garbage)
    assert store.get_with_ttl("k") == (None, None)
    assert all_keys(raw) == set()


def test_another_apps_hash_under_our_key_is_a_miss_and_is_deleted(store: RedisStore,
                                                                    raw: redis.Redis) -> None:
    raw.hset("t:e:{k}", mapping={"field": "value"})
    assert store.get("k") is None
    assert raw.exists("t:e:{k}") == 0
    assert store.breaker.state == "closed"


async def test_async_hash_under_our_key_is_a_miss_and_is_deleted(astore: RedisStore,
                                                                 raw: redis.Redis) -> None:
    raw.hset("t:e:{k}", mapping={"field": "value"})
    assert await astore.aget("k") is None
    assert raw.exists("t:e:{k}") == 0
    assert astore.breaker.state == "closed" and astore.breaker.healthy


def test_each_unpacked_record_gets_its_own_usage() -> None:
    """Unpacking reuses the parse of metadata bytes it saw before, never the same dict,
    and bytes it refused stay refused."""
    blob = pack_record(dataclasses.replace(rec(b"v"), usage={"total_tokens": 4}, duration=0.5))
    first = unpack_record(blob)
    assert first is not None and first.usage == {"total_tokens": 4}
    first.usage["total_tokens"] = 999  # type: ignore[index]
    again = unpack_record(blob)
    assert again is not None and again.usage == {"total_tokens": 4}
    assert again.usage is not first.usage and again.duration == 0.5
    assert unpack_record(blob, b"req") == Record(
        b"v", first.name, first.namespace, first.kind, b"req", 0.5, {"total_tokens": 4},
        first.created)
    bad = blob[:8] + blob[8:].replace(b'"fn"', b"1234", 1)
    assert unpack_record(bad) is None and unpack_record(bad) is None


async def test_async_garbage_is_a_miss_and_is_deleted(astore: RedisStore,
                                                      raw: redis.Redis) -> None:
    raw.set("t:e:{k}", b"garbage")
    assert await astore.aget("k") is None
    assert raw.exists("t:e:{k}") == 0
    raw.rpush("t:e:{k}", b"a list")
    assert await astore.aget("k") is None
    assert raw.exists("t:e:{k}") == 0
    raw.set("t:e:{k}", b"garbage")
    assert await astore.aget_with_ttl("k") == (None, None)
    assert raw.exists("t:e:{k}") == 0


def test_flipped_value_bytes_are_never_served(store: RedisStore, raw: redis.Redis) -> None:
    dejacache.configure(store=store)
    calls: list[int] = []

    @dejacache.cache(name="flip.double")
    def double(x: int) -> dict[str, int]:
        calls.append(x)
        return {"result": 2 * x}

    assert double(21) == {"result": 42}
    (vkey,) = list(raw.scan_iter(match="t:e:*"))
    blob = bytearray(raw.get(vkey) or b"")
    blob[-3] ^= 0x01  # inside the codec payload: the record frame is still valid
    raw.set(vkey, bytes(blob))
    with pytest.warns(dejacache.DejacacheWarning, match="discarding"):
        assert double(21) == {"result": 42}
    assert calls == [21, 21]
    assert double(21) == {"result": 42}  # the rewritten entry hits
    assert calls == [21, 21]


# ---------------------------------------------------------------- read-only mode


def test_read_only_reads_and_skips_writes(redis_server: RedisServer, store: RedisStore,
                                          raw: redis.Redis) -> None:
    store.put("k", rec())
    store.incr("gen")
    ro = RedisStore(redis_server.url, key_prefix="t", read_only=True, **SLOW_OK)
    try:
        assert ro.get("k") is not None
        assert [k for k, _ in ro.iterate()] == ["k"]
        assert ro.put("other", rec()) is False
        assert ro.delete("k") is False
        assert ro.clear() == 0
        assert ro.incr("gen") is None
        assert ro.get_counters(["gen"]) == [1]
        raw.set("t:e:{bad}", b"garbage")
        assert ro.get("bad") is None
        assert raw.exists("t:e:{bad}") == 1  # read-only never deletes, even garbage
        assert all_keys(raw) == {b"t:e:{k}", b"t:r:{k}", b"t:n:gen", b"t:e:{bad}"}
        assert ro.stats().extra["read_only"] is True
        assert "read_only=True" in repr(ro)
    finally:
        ro.close()


async def test_read_only_async(redis_server: RedisServer, raw: redis.Redis) -> None:
    ro = RedisStore(redis_server.url, key_prefix="t", read_only=True, **SLOW_OK)
    try:
        await ro.aput("k", rec())
        assert await ro.aget("k") is None
        assert await ro.adelete("k") is False
        assert await ro.aincr("gen") is None
        assert all_keys(raw) == set()
    finally:
        await ro.aclose()


def test_read_only_store_through_cache_still_answers(redis_server: RedisServer,
                                                     store: RedisStore) -> None:
    calls: list[int] = []

    @dejacache.cache(name="ro.square")
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    dejacache.configure(store=store)
    assert square(3) == 9  # a trusted job fills the team cache
    ro = RedisStore(redis_server.url, key_prefix="t", read_only=True, **SLOW_OK)
    try:
        dejacache.configure(store=ro)
        assert square(3) == 9  # hit from the team cache
        assert square(4) == 16  # miss: computed, not written
        assert square(4) == 16
        assert calls == [3, 4, 4]
    finally:
        ro.close()


def test_read_only_and_prefix_from_the_url(redis_server: RedisServer, store: RedisStore,
                                            raw: redis.Redis) -> None:
    store.put("k", rec())
    ro = RedisStore(redis_server.url + "?read_only=true&key_prefix=t&health_check_interval=0",
                    **SLOW_OK)
    try:
        assert ro.read_only is True and ro.key_prefix == "t"
        assert "read_only" not in ro.url and "health_check_interval=0" in ro.url
        assert ro.get("k") is not None
        ro.put("new", rec())
        assert raw.exists("t:e:{new}") == 0
    finally:
        ro.close()
    assert RedisStore(redis_server.url + "?read_only=0").read_only is False


# ---------------------------------------------------------------- construction and clients


def test_injected_sync_client_is_used_and_left_open(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    s = RedisStore(client, key_prefix="inj")
    s.put("k", rec())
    assert s.get("k") is not None
    assert s.url == redis_server.url
    s.close()
    assert client.get("inj:e:{k}") is not None  # still usable: the caller owns it
    client.close()


async def test_injected_sync_client_serves_async_calls_off_the_loop(
    redis_server: RedisServer,
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    s = RedisStore(client, key_prefix="inj")
    await s.aput("k", rec())
    assert (await s.aget("k")) is not None
    assert await s.aincr("c") == 1
    raw_garbage = client.set("inj:e:{bad}", b"x")
    assert raw_garbage
    assert await s.aget("bad") is None
    assert client.exists("inj:e:{bad}") == 0
    await s.aclose()
    client.close()


async def test_injected_async_client(redis_server: RedisServer) -> None:
    client = redis.asyncio.Redis.from_url(redis_server.url)
    s = RedisStore(client, key_prefix="ainj")
    await s.aput("k", rec())
    assert (await s.aget("k")) is not None
    with pytest.raises(ConfigurationError, match="only an async client"):
        s.get("k")
    await s.aclose()
    assert await client.get("ainj:e:{k}") is not None
    await client.aclose()


def test_bad_arguments() -> None:
    with pytest.raises(ConfigurationError, match="redis:// URL or a redis-py client"):
        RedisStore(42)
    with pytest.raises(ConfigurationError, match="key_prefix"):
        RedisStore("redis://127.0.0.1:1/0", key_prefix="")
    with pytest.raises(ConfigurationError, match="bad Redis URL"):
        RedisStore("http://127.0.0.1:1/0")


def test_password_is_not_shown() -> None:
    s = RedisStore("redis://user:s3cret@127.0.0.1:6390/2")
    assert "s3cret" not in s.url and "s3cret" not in repr(s)
    assert s.url == "redis://user:***@127.0.0.1:6390/2"
    assert RedisStore("redis://:pw@localhost/0").url == "redis://:***@localhost/0"


def test_public_exports() -> None:
    assert dejacache.RedisStore is RedisStore
    assert "RedisStore" in dejacache.__all__ and "TieredStore" in dejacache.__all__
    with pytest.raises(AttributeError):
        _ = dejacache.NoSuchThing  # type: ignore[attr-defined]


def test_url_configuration(redis_server: RedisServer) -> None:
    s = store_from_url(redis_server.url)
    assert isinstance(s, RedisStore) and s.timeout == 0.05
    s.close()
    dejacache.configure(store=redis_server.url)
    calls: list[int] = []

    @dejacache.cache(name="url.inc")
    def inc(x: int) -> int:
        calls.append(x)
        return x + 1

    assert inc(1) == 2
    assert inc(1) == 2
    assert calls == [1]
    configured = dejacache.config.get_settings().store
    assert isinstance(configured, RedisStore)
    configured.close()


async def test_async_cache_through_redis(astore: RedisStore) -> None:
    dejacache.configure(store=astore)
    calls: list[str] = []

    @dejacache.cache(name="async.upper")
    async def upper(s: str) -> str:
        calls.append(s)
        return s.upper()

    assert await upper("a") == "A"
    assert await upper("a") == "A"
    assert calls == ["a"]


def test_old_layout_entries_are_misses_and_cleared(store: RedisStore,
                                                   raw: redis.Redis) -> None:
    """Entries written before keys carried hash tags are never read (a miss is safe);
    clear() deletes them and counts them."""
    raw.set("t:v:old", pack_record(rec()))
    raw.set("t:q:old", b"{}")
    assert store.get("old") is None
    assert list(store.iterate()) == [] and store.stats().entries == 0
    store.put("new", rec())
    assert store.clear() == 2
    assert all_keys(raw) == set()


def test_a_database_url_is_used(redis_server: RedisServer, raw: redis.Redis) -> None:
    url = redis_server.url.removesuffix("/0") + "/1"
    s = RedisStore(url, key_prefix="t", **SLOW_OK)
    dejacache.configure(store=s)
    ran: list[int] = []

    @dejacache.cache(name="db1.inc")
    def inc(x: int) -> int:
        ran.append(x)
        return x + 1

    assert [inc(i) for i in range(5)] == [inc(i) for i in range(5)]
    assert ran == list(range(5))
    assert all_keys(raw) == set()  # nothing in database 0
    assert s.stats().entries == 5 and s.url.endswith("/1")
    s.close()


# ---------------------------------------------------------------- the short hit path


def test_hit_defers_to_the_general_path_under_a_running_loop(store: RedisStore) -> None:
    import asyncio

    from dejacache.codec import JsonCodec

    store.put("k", rec(JsonCodec().encode({"a": 1}, key="k")))
    assert store.hit("k") is not None and store.hit("k")[0] is not None  # type: ignore[index]

    async def inside() -> Any:
        return store.hit("k")

    item = asyncio.run(inside())
    assert item is not None and item[0] is None and item[3] is None


def test_hit_hands_a_tagged_value_as_its_record(store: RedisStore, raw: redis.Redis) -> None:
    from dejacache.codec import JsonCodec

    value = JsonCodec().encode((1, 2), key="k")  # a tuple: a tagged value
    store.put("k", rec(value))
    item = store.hit("k")
    assert item is not None and item[0] is None
    assert item[3] is not None and item[3].value == value


def test_hit_of_garbage_is_a_miss_and_deletes(store: RedisStore, raw: redis.Redis) -> None:
    raw.set("t:e:{k}", b"garbage")
    assert store.hit("k") is None
    assert raw.exists("t:e:{k}") == 0


def test_hit_sees_another_writer_replace_the_bytes(redis_server: RedisServer) -> None:
    from dejacache.codec import JsonCodec

    codec = JsonCodec()
    a = RedisStore(redis_server.url, key_prefix="t", **SLOW_OK)
    b = RedisStore(redis_server.url, key_prefix="t", **SLOW_OK)
    a.put("k", rec(codec.encode("old", key="k")))
    first = a.hit("k")
    assert first is not None and first[0] is not None
    assert a.hit("k") is first  # the same bytes: the same Hit
    b.put("k", rec(codec.encode("new", key="k")))
    item = a.hit("k")
    assert item is not None and item[0] is not None and bytes(item[0]) == b'"new"'
    a.close()
    b.close()


def test_frozen_and_plain_cache_hits_through_redis(store: RedisStore) -> None:
    dejacache.configure(store=store)
    ran: list[int] = []

    @dejacache.cache(name="short.plain")
    def plain(x: int) -> dict[str, int]:
        ran.append(x)
        return {"x": x}

    @dejacache.cache(name="short.frozen", frozen=True)
    def frozen(x: int) -> dict[str, int]:
        ran.append(-x)
        return {"x": x}

    for _ in range(3):
        assert plain(1) == {"x": 1} and frozen(2) == {"x": 2}
    first, second = plain(1), plain(1)
    assert first == second and first is not second  # each caller its own object
    with pytest.raises(TypeError):
        frozen(2)["x"] = 3  # type: ignore[index]
    assert ran == [1, -2]


def test_key_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="hash tag"):
        RedisStore("redis://127.0.0.1:1/0", key_prefix="a{b}")
