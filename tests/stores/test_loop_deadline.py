"""``_loop_deadline.within``: a timeout for an awaited Redis call that counts the time Redis
had to answer, not the time the event loop was too busy to read the answer, and still
bounds a silent server."""

from __future__ import annotations

import asyncio
import time

import pytest
from stalls import Stopwatch

from dejacache.stores._loop_deadline import MAX_LATE, within
from support_redis import RedisServer

pytest.importorskip("redis")
import redis
import redis.asyncio

pytestmark = pytest.mark.redis

# A server-side wait: the reply leaves Redis this long after the request arrives.
_BUSY = """
local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1e6 + tonumber(t[2]) + tonumber(ARGV[1])
repeat t = redis.call('TIME') until tonumber(t[1]) * 1e6 + tonumber(t[2]) >= stop
return 'done'
"""


async def _client(server: RedisServer) -> redis.asyncio.Redis:
    client = redis.asyncio.Redis.from_url(server.url, socket_timeout=10)
    await client.ping()  # connected: a call below sends its request at its first step
    return client


def _busy(client: redis.asyncio.Redis, seconds: float) -> object:
    return client.eval(_BUSY, 0, int(seconds * 1e6))


async def test_a_reply_that_came_while_the_loop_was_busy_is_no_timeout(
        redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    # Deadlines leave Redis room to be scheduled: on the 2-core box under a load of ~19 a
    # 20 ms script once answered past a 50 ms deadline, which is a timeout and no bug.
    call = asyncio.ensure_future(within(_busy(client, 0.02), 0.3))
    await asyncio.sleep(0.005)  # the request is out; Redis answers 20 ms later
    time.sleep(0.6)  # and the loop is busy well past the 300 ms deadline
    assert await call == b"done"
    await client.aclose()


async def test_a_request_the_busy_loop_had_not_sent_yet_gets_its_time(
        redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    # The loop is held before the call's first step, then Redis takes 30 ms: the call was
    # waiting on the loop for 600 ms, on Redis for 30 (deadline 300 ms).
    call = asyncio.ensure_future(within(_busy(client, 0.03), 0.3))
    time.sleep(0.6)
    assert await call == b"done"
    await client.aclose()


async def test_a_silent_server_still_times_out_on_time(redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    with Stopwatch() as watch, pytest.raises(redis.TimeoutError, match="within 50 ms"):
        await within(_busy(client, 3.0), 0.05)
    # Not the 3 s the server takes. (Time the loop's thread waited for a core is given
    # back to the call, MAX_LATE at most: on a loaded machine it is not part of the bound.)
    assert watch.took < 1.0
    await client.aclose()


async def test_a_loop_late_at_every_step_still_gives_up(redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    stop = False

    async def hog() -> None:  # 10 ms of work between every other task's steps
        while not stop:
            time.sleep(0.01)
            await asyncio.sleep(0)

    hogging = asyncio.ensure_future(hog())
    try:
        with Stopwatch() as watch, pytest.raises(redis.TimeoutError):
            await within(_busy(client, 3.0), 0.05)
    finally:
        stop = True
        await hogging
    assert watch.took < 0.05 + MAX_LATE + 0.5
    await client.aclose()


async def test_a_cancel_from_outside_stays_a_cancel(redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    call = asyncio.ensure_future(within(_busy(client, 0.5), 0.2))
    await asyncio.sleep(0.02)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await client.aclose()


async def test_the_deadline_leaves_nothing_behind(redis_server: RedisServer) -> None:
    client = await _client(redis_server)
    task = asyncio.current_task()
    assert task is not None
    for _ in range(3):
        assert await within(client.ping(), 1.0)
    # A paused server, not a slow one: a reply due 0.2 s later came in time once the call
    # had been given back the 0.15 s its loop waited for a core, as it should be.
    redis_server.pause()
    try:
        with pytest.raises(redis.TimeoutError):
            await within(client.ping(), 0.05)
    finally:
        redis_server.resume()
    assert task.cancelling() == 0  # its own cancel was taken back
    await asyncio.sleep(0.1)  # no timer of a finished call cancels this task later
    await client.aclose()
