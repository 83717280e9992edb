"""Single-flight: one origin call per identical concurrent miss; crashes and cancellations
hand over or release waiters (every wait here has a timeout, so a hang fails the test)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import dejacache
from dejacache.runtime.singleflight import SingleFlight

N = 8


def _in_threads(fn: Any, n: int = N) -> list[Any]:
    with ThreadPoolExecutor(n) as pool:
        futs = [pool.submit(dejacache.propagate(fn)) for _ in range(n)]
        out = []
        for f in futs:
            try:
                out.append(f.result(timeout=10))
            except Exception as exc:
                out.append(exc)
        return out


def test_threads_one_origin_call_everyone_gets_the_result() -> None:
    calls = []
    gate = threading.Barrier(N, timeout=5)

    @dejacache.tool_cache(resource="slow")
    def slow() -> dict[str, int]:
        calls.append(1)
        time.sleep(0.2)
        return {"v": 1}

    def call() -> Any:
        gate.wait()
        return slow()

    with dejacache.agent_session(tenant="acme"):
        results = _in_threads(call)
    assert results == [{"v": 1}] * N
    assert len(calls) == 1
    assert len({id(r) for r in results}) == N  # each caller owns its copy
    st = dejacache.runtime_stats().by_tool["slow"]
    assert st.misses == 1 and st.coalesced + st.hits == N - 1


def test_threads_every_waiter_gets_the_exception() -> None:
    calls = []
    gate = threading.Barrier(N, timeout=5)

    @dejacache.tool_cache(resource="bad")
    def bad() -> int:
        calls.append(1)
        time.sleep(0.2)
        raise ValueError("origin failed")

    def call() -> Any:
        gate.wait()
        return bad()

    with dejacache.agent_session(tenant="acme"):
        results = _in_threads(call)
    assert all(isinstance(r, ValueError) for r in results)
    assert len(calls) == 1


def test_flights_are_per_tenant() -> None:
    calls: list[str] = []
    gate = threading.Barrier(4, timeout=5)

    @dejacache.tool_cache(resource="who")
    def who() -> str:
        from dejacache.runtime import current_session

        s = current_session()
        assert s is not None and s.tenant is not None
        calls.append(s.tenant)
        time.sleep(0.1)
        return s.tenant

    def run(tenant: str) -> str:
        with dejacache.agent_session(tenant=tenant):
            gate.wait()
            return who()

    with ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(run, t) for t in ("a", "a", "b", "b")]
        assert [f.result(timeout=10) for f in futs] == ["a", "a", "b", "b"]
    assert sorted(calls) == ["a", "b"]


def test_thread_leader_interrupted_hands_over() -> None:
    sf: SingleFlight[int] = SingleFlight()
    started = threading.Event()
    release = threading.Event()
    results: list[Any] = []

    class Interrupt(BaseException):
        pass

    def leader_fn() -> int:
        started.set()
        assert release.wait(5)
        raise Interrupt

    def leader() -> None:
        try:
            sf.run("k", leader_fn)
        except Interrupt:
            results.append("leader interrupted")

    def waiter() -> None:
        results.append(sf.run("k", lambda: 42))

    t1 = threading.Thread(target=leader)
    t1.start()
    assert started.wait(5)
    t2 = threading.Thread(target=waiter)
    t2.start()
    time.sleep(0.05)  # the waiter is now parked on the leader's flight
    release.set()
    t1.join(5)
    t2.join(5)
    assert not t2.is_alive(), "waiter hung after the leader was interrupted"
    assert sorted(map(str, results)) == ["(42, True)", "leader interrupted"]
    assert len(sf) == 0


async def test_asyncio_one_origin_call() -> None:
    calls = []

    @dejacache.tool_cache(resource="aslow")
    async def slow(x: int) -> dict[str, int]:
        calls.append(x)
        await asyncio.sleep(0.05)
        return {"x": x}

    async with dejacache.agent_session(tenant="acme"):
        results = await asyncio.wait_for(asyncio.gather(*(slow(1) for _ in range(N))), 5)
    assert results == [{"x": 1}] * N
    assert calls == [1]


async def test_asyncio_waiters_get_the_exception() -> None:
    calls = []

    @dejacache.tool_cache(resource="abad")
    async def bad() -> int:
        calls.append(1)
        await asyncio.sleep(0.02)
        raise KeyError("nope")

    async with dejacache.agent_session(tenant="acme"):
        results = await asyncio.wait_for(
            asyncio.gather(*(bad() for _ in range(N)), return_exceptions=True), 5)
    assert all(isinstance(r, KeyError) for r in results)
    assert calls == [1]


async def test_asyncio_cancelled_leader_hands_over_to_a_waiter() -> None:
    calls = []
    first = asyncio.Event()

    @dejacache.tool_cache(resource="acancel")
    async def tool() -> str:
        calls.append(1)
        if len(calls) == 1:
            first.set()
            await asyncio.sleep(10)  # the first leader is cancelled while here
        return "done"

    async with dejacache.agent_session(tenant="acme"):
        leader = asyncio.create_task(tool())
        await asyncio.wait_for(first.wait(), 5)
        waiters = [asyncio.create_task(tool()) for _ in range(3)]
        await asyncio.sleep(0.01)
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == ["done"] * 3
    assert len(calls) == 2  # the cancelled leader, then exactly one new leader


async def test_asyncio_leader_cancelled_after_the_tool_returned_keeps_its_result(
        tmp_path: Any) -> None:
    """The leader is cancelled while it stores what the tool returned (a SQLite store: the
    counters' read and the write await a thread): the waiters get that result and it is
    stored, instead of the tool running again (before: the flight was abandoned, a waiter
    led a second run, and nothing was cached)."""
    store = dejacache.SQLiteStore(tmp_path / "c.db")
    calls = []
    leader: asyncio.Task[str] | None = None

    @dejacache.tool_cache(resource="apaid", store=store)
    async def tool() -> str:
        calls.append(1)
        await asyncio.sleep(0.05)
        if len(calls) == 1:
            assert leader is not None
            # lands on the leader's next await: after this return, while it stores
            asyncio.get_running_loop().call_soon(leader.cancel)
        return f"run {len(calls)}"

    async with dejacache.agent_session(tenant="acme"):
        leader = asyncio.create_task(tool())
        await asyncio.sleep(0.01)
        waiters = [asyncio.create_task(tool()) for _ in range(3)]
        with pytest.raises(asyncio.CancelledError):
            await leader
        assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == ["run 1"] * 3
        assert await asyncio.wait_for(tool(), 5) == "run 1"  # and it was stored
    assert len(calls) == 1
    store.close()


async def test_asyncio_cancelled_waiter_does_not_cancel_the_leader() -> None:
    calls = []

    @dejacache.tool_cache(resource="await")
    async def tool() -> str:
        calls.append(1)
        await asyncio.sleep(0.05)
        return "done"

    async with dejacache.agent_session(tenant="acme"):
        leader = asyncio.create_task(tool())
        await asyncio.sleep(0)
        waiter = asyncio.create_task(tool())
        await asyncio.sleep(0.01)
        waiter.cancel()
        assert await asyncio.wait_for(leader, 5) == "done"
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await tool() == "done"  # now a hit
    assert calls == [1]


async def test_asyncio_singleflight_unit_abandoned_state_cleared() -> None:
    sf: SingleFlight[int] = SingleFlight()

    async def never() -> int:
        await asyncio.sleep(10)
        return 1

    t = asyncio.create_task(sf.arun("k", never))
    await asyncio.sleep(0)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert len(sf) == 0

    async def one() -> int:
        return 1

    assert await asyncio.wait_for(sf.arun("k", one), 5) == (1, True)
