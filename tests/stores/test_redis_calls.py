"""Calls behind the breaker: every failure, on every path (the store's inlined hit paths,
the calls behind the breaker, the async twins, a worker thread for a sync-only store, the
probe), is booked through one method, ``RedisCalls.failed``, where what it cost is worked
out (and where a measure of the event loop's own lateness would be taken into account)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from dejacache.stores import Record
from dejacache.stores.redis import RedisStore
from support_redis import free_port

pytestmark = pytest.mark.redis

# The breaker never opens here: each test counts the failures one call books.
_NEVER_OPEN = {"failures": 1000, "failure_budget": 1000.0, "cooldown": 0.0}


def _refused_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: refused at once


def _booked(store: RedisStore) -> list[tuple[str, float]]:
    """What reaches ``RedisCalls.failed`` from now on: (exception, when the call started)."""
    seen: list[tuple[str, float]] = []
    calls = store._calls
    failed = calls.failed

    def book(exc: BaseException, t0: float) -> None:
        seen.append((type(exc).__name__, t0))
        failed(exc, t0)

    calls.failed = book  # type: ignore[method-assign]
    return seen


SYNC: dict[str, Callable[[RedisStore], Any]] = {
    "get, the hit path": lambda s: s.get("k"),
    "hit, the decorator's short path": lambda s: s.hit("k"),
    "run, the seam's fast path": lambda s: s.run(lambda c: c.get("x")),
    "put, behind the breaker": lambda s: s.put("k", Record(value=b"v")),
    "get_with_ttl": lambda s: s.get_with_ttl("k"),
    "get_counters": lambda s: s.get_counters(["n"]),
    "the probe": lambda s: s._calls.probe(),
}


@pytest.mark.parametrize("call", SYNC.values(), ids=list(SYNC))
def test_every_sync_failure_is_booked_in_one_place(call: Callable[[RedisStore], Any]) -> None:
    store = RedisStore(_refused_url(), **_NEVER_OPEN)  # type: ignore[arg-type]
    seen = _booked(store)
    assert store.breaker.healthy  # so the inlined hit paths are the ones taken
    call(store)
    assert [name for name, _ in seen] == ["ConnectionError"]
    assert store.breaker.failures == 1
    store.close()


ASYNC: dict[str, Callable[[RedisStore], Awaitable[Any]]] = {
    "aget, the hit path": lambda s: s.aget("k"),
    "arun": lambda s: s.arun(lambda c: c.get("x")),
    "aput, behind the breaker": lambda s: s.aput("k", Record(value=b"v")),
    "aget_with_ttl": lambda s: s.aget_with_ttl("k"),
    "aget_counters": lambda s: s.aget_counters(["n"]),
}


@pytest.mark.parametrize("call", ASYNC.values(), ids=list(ASYNC))
@pytest.mark.parametrize("clients", ["url", "sync client only"])
async def test_every_async_failure_is_booked_in_one_place(
        call: Callable[[RedisStore], Awaitable[Any]], clients: str) -> None:
    url = _refused_url()
    client = None
    if clients == "url":  # an asyncio client per loop, built by the store
        store = RedisStore(url, **_NEVER_OPEN)  # type: ignore[arg-type]
    else:  # async calls run the sync client in a worker thread
        client = redis.Redis.from_url(url, socket_connect_timeout=0.05)
        store = RedisStore(client, **_NEVER_OPEN)  # type: ignore[arg-type]
    seen = _booked(store)
    await call(store)
    assert [name for name, _ in seen] == ["ConnectionError"]
    assert store.breaker.failures == 1
    await store.aclose()
    if client is not None:
        client.close()


# A timeout or a lost connection is tried once more before it counts: Redis failing is a
# second failure in a row, not one late reply (a saturated machine) or one pooled
# connection the server had closed.


class Flaky:
    """An op for the seam that fails ``fails`` times with ``exc`` before it reads."""

    def __init__(self, fails: int, exc: Exception) -> None:
        self.fails, self.exc, self.calls = fails, exc, 0

    def __call__(self, client: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.exc
        return client.get("x")

    async def aop(self, client: Any) -> Any:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.exc
        return await client.get("x")


DOUBTFUL = [redis.TimeoutError("Timeout reading from 127.0.0.1"),
            redis.ConnectionError("Connection closed by server.")]


@pytest.mark.parametrize("exc", DOUBTFUL, ids=["timeout", "closed"])
def test_one_timeout_is_tried_again_and_does_not_count(redis_server: Any,
                                                       exc: Exception) -> None:
    store = RedisStore(redis_server.url)
    seen = _booked(store)
    op = Flaky(1, exc)
    assert store.run(op, "down") is None  # the second attempt read (nothing there)
    assert op.calls == 2 and seen == [] and store.breaker.healthy
    op = Flaky(2, exc)
    assert store.run(op, "down") == "down"  # twice in a row: Redis is failing
    assert op.calls == 2 and [n for n, _ in seen] == [type(exc).__name__]
    store.close()


@pytest.mark.parametrize("exc", DOUBTFUL, ids=["timeout", "closed"])
async def test_one_async_timeout_is_tried_again_and_does_not_count(redis_server: Any,
                                                                   exc: Exception) -> None:
    store = RedisStore(redis_server.url)
    seen = _booked(store)
    op = Flaky(1, exc)
    assert await store.arun(op.aop, "down") is None
    assert op.calls == 2 and seen == [] and store.breaker.healthy
    op = Flaky(2, exc)
    assert await store.arun(op.aop, "down") == "down"
    assert op.calls == 2 and [n for n, _ in seen] == [type(exc).__name__]
    await store.aclose()


def test_a_refusal_counts_at_once() -> None:
    store = RedisStore(_refused_url(), **_NEVER_OPEN)  # type: ignore[arg-type]
    seen = _booked(store)
    op = Flaky(0, redis.ConnectionError())
    assert store.run(op, "down") == "down"
    assert op.calls == 1 and [n for n, _ in seen] == ["ConnectionError"]
    store.close()
