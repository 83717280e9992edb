"""A flight never outlives its leader: a leader coroutine closed outside its loop (by hand or
by the garbage collector, its loop gone), or a leader thread interrupted between starting its
flight and taking charge of it, leaves nothing a later call could join and wait on forever.

Every scenario runs in a thread joined with a timeout (or under ``asyncio.wait_for``), so a
regression fails in seconds instead of hanging the run."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

import dejacache
from dejacache import _engine
from dejacache._flights import SingleFlight

LIMIT = 5.0


def _within(fn: Callable[[], Any], limit: float = LIMIT) -> Any:
    """``fn()`` in a thread: its value, or a failure when it has not returned in ``limit``."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # handed to the test thread
            out.append(("err", exc))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        pytest.fail(f"still waiting after {limit}s: a call joined a flight nobody will land")
    kind, value = out[0]
    if kind == "err":
        raise value
    return value


async def _gate_forever() -> int:
    await asyncio.get_running_loop().create_future()  # nobody ever sets it
    return 0  # pragma: no cover


async def _one() -> int:
    return 1


def _leader_pending(sf: SingleFlight[int], loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any]:
    """A leader of ``k`` suspended in ``loop``, which is left stopped (not closed)."""
    task = loop.create_task(sf.arun("k", _gate_forever))
    loop.run_until_complete(asyncio.sleep(0))
    assert len(sf) == 1
    return task


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("where", ["outside any loop", "while another loop runs"])
def test_a_leader_closed_outside_its_loop_lands_its_flight(where: str) -> None:
    sf: SingleFlight[int] = SingleFlight()
    loop = asyncio.new_event_loop()
    try:
        task = _leader_pending(sf, loop)
        coro = task.get_coro()
        assert coro is not None
        if where == "outside any loop":
            coro.close()
        else:
            async def close_it() -> None:
                coro.close()

            asyncio.run(close_it())
        assert len(sf) == 0
        # the same loop again: the next call leads rather than wait on the closed leader
        got = _within(lambda: loop.run_until_complete(asyncio.wait_for(sf.arun("k", _one), 3)))
        assert got == (1, True)
    finally:
        loop.close()


def test_a_follower_of_a_closed_leader_runs_the_call_itself() -> None:
    sf: SingleFlight[int] = SingleFlight()
    loop = asyncio.new_event_loop()
    try:
        leader = _leader_pending(sf, loop)
        follower = loop.create_task(sf.arun("k", _one))
        loop.run_until_complete(asyncio.sleep(0))
        assert not follower.done()
        coro = leader.get_coro()
        assert coro is not None
        coro.close()  # outside the loop: the follower wakes when the loop runs again
        got = _within(lambda: loop.run_until_complete(asyncio.wait_for(follower, 3)))
        assert got == (1, True)  # its own run, not the closed leader's (absent) value
        assert len(sf) == 0
    finally:
        loop.close()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_leader_left_in_a_closed_loop_is_collected_with_its_flight() -> None:
    sf: SingleFlight[int] = SingleFlight()

    def abandon() -> None:
        loop = asyncio.new_event_loop()
        _leader_pending(sf, loop)
        loop.close()  # the leader is still pending: nothing will ever resume it

    abandon()

    async def later() -> tuple[int, bool]:
        gc.collect()  # the pending leader's coroutine is closed here, in another loop
        return await asyncio.wait_for(sf.arun("k", _one), 3)

    assert _within(lambda: asyncio.run(later())) == (1, True)
    assert len(sf) == 0


def test_asyncio_run_twice_each_run_leads_its_own_flight() -> None:
    sf: SingleFlight[int] = SingleFlight()

    async def once() -> tuple[int, bool]:
        return await asyncio.wait_for(sf.arun("k", _one), 3)

    assert _within(lambda: asyncio.run(once())) == (1, True)
    assert _within(lambda: asyncio.run(once())) == (1, True)
    assert len(sf) == 0


def test_flights_of_two_loops_never_meet() -> None:
    sf: SingleFlight[int] = SingleFlight()
    first = asyncio.new_event_loop()
    try:
        _leader_pending(sf, first)

        async def other() -> tuple[int, bool]:
            return await asyncio.wait_for(sf.arun("k", _one), 3)

        assert _within(lambda: asyncio.run(other())) == (1, True)
        assert len(sf) == 1  # the first loop's leader is still in flight
    finally:
        for task in asyncio.all_tasks(first):
            task.cancel()
        first.run_until_complete(asyncio.sleep(0))
        first.close()
    assert len(sf) == 0


# ---------------------------------------------------------------- through @cache


@pytest.fixture
def store() -> Iterator[dejacache.MemoryStore]:
    s = dejacache.MemoryStore()
    dejacache.configure(store=s, cache_key="flights")
    yield s


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cache_a_leader_left_in_a_closed_loop_leaves_no_flight(
        store: dejacache.MemoryStore) -> None:
    calls: list[str] = []
    hold = True

    @dejacache.cache(name="flights.slow")
    async def slow(q: str) -> str:
        calls.append(q)
        if hold:
            await asyncio.get_running_loop().create_future()
        return q.upper()

    before = len(_engine._FLIGHTS)

    def abandon() -> None:
        loop = asyncio.new_event_loop()
        leader = loop.create_task(slow("a"))
        loop.run_until_complete(asyncio.sleep(0))
        assert len(_engine._FLIGHTS) == before + 1 and not leader.done()
        loop.close()  # the leader is still pending: nothing will ever resume it

    abandon()
    hold = False

    async def later() -> str:
        gc.collect()
        return await asyncio.wait_for(slow("a"), 3)

    assert _within(lambda: asyncio.run(later())) == "A"
    assert calls == ["a", "a"]
    assert len(_engine._FLIGHTS) == before


def test_cache_a_follower_of_a_leader_closed_in_another_loop_runs_the_call(
        store: dejacache.MemoryStore) -> None:
    calls: list[str] = []

    @dejacache.cache(name="flights.follow")
    async def slow(q: str) -> str:
        calls.append(q)
        if len(calls) == 1:
            await asyncio.get_running_loop().create_future()
        return q.upper()

    loop = asyncio.new_event_loop()
    try:
        leader = loop.create_task(slow("a"))
        loop.run_until_complete(asyncio.sleep(0))
        follower = loop.create_task(slow("a"))
        loop.run_until_complete(asyncio.sleep(0))
        assert calls == ["a"] and not follower.done()
        coro = leader.get_coro()
        assert coro is not None

        async def close_it() -> None:
            coro.close()  # its cleanup runs in this loop's context, not its own

        asyncio.run(close_it())
        # the follower's own run: not the leader's value, nor an error from its cleanup
        got = _within(lambda: loop.run_until_complete(asyncio.wait_for(follower, 3)))
        assert got == "A"
        assert calls == ["a", "a"]
    finally:
        loop.close()


# ---------------------------------------------------------------- threads


def _interrupt_after(join: Callable[..., Any]) -> Callable[[], None]:
    """Arm this thread: KeyboardInterrupt (as a signal handler would raise it) at the first
    line the caller of ``join`` runs after ``join`` returned: between starting a flight and
    taking charge of it."""
    code = join.__code__
    armed: list[FrameType] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and armed and frame is armed[0]:
            raise KeyboardInterrupt
        return local

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is code and not armed and frame.f_back:
            armed.append(frame.f_back)
            frame.f_back.f_trace = local
        return None

    def arm() -> None:
        sys.settrace(on_call)

    return arm


def _interrupted(fn: Callable[[], Any], arm: Callable[[], None]) -> None:
    def target() -> None:
        arm()
        try:
            fn()
        except KeyboardInterrupt:
            return
        finally:
            sys.settrace(None)
        raise AssertionError("not interrupted")

    _within(target)


def test_a_thread_leader_interrupted_right_after_joining_lands_its_flight() -> None:
    sf: SingleFlight[int] = SingleFlight()
    _interrupted(lambda: sf.run("k", lambda: 1), _interrupt_after(SingleFlight.join))
    assert len(sf) == 0
    assert _within(lambda: sf.run("k", lambda: 2)) == (2, True)


def test_cache_thread_leader_interrupted_right_after_joining_lands_its_flight(
        store: dejacache.MemoryStore) -> None:
    calls: list[str] = []

    @dejacache.cache(name="flights.sync")
    def work(q: str) -> str:
        calls.append(q)
        return q.upper()

    before = len(_engine._FLIGHTS)
    _interrupted(lambda: work("a"), _interrupt_after(SingleFlight.join))
    assert len(_engine._FLIGHTS) == before
    assert _within(lambda: work("a")) == "A"
    assert calls == ["a"]


# ------------------------------------------------------------ a leader calling itself again


def test_cache_a_call_retrying_by_calling_itself_runs_as_live(
    store: dejacache.MemoryStore,
) -> None:
    # ``fetch(x)`` retrying through ``fetch(x)``: the inner call has the outer's key, in the
    # outer's thread, while the outer leads its flight. Waiting for that flight waits for
    # itself; live, it is one more call.
    tries: list[int] = []
    flights = len(_engine._FLIGHTS)  # (another test's abandoned leader may still hold one)

    @dejacache.cache(name="retrying")
    def fetch(x: int) -> str:
        tries.append(x)
        if len(tries) < 3:
            return fetch(x)
        return f"got {x} on try {len(tries)}"

    assert _within(lambda: fetch(7)) == "got 7 on try 3"
    assert _within(lambda: fetch(7)) == "got 7 on try 3" and len(tries) == 3  # then a hit
    assert len(_engine._FLIGHTS) == flights


def test_cache_a_coroutine_retrying_by_awaiting_itself_runs_as_live(
    store: dejacache.MemoryStore,
) -> None:
    tries: list[int] = []
    flights = len(_engine._FLIGHTS)

    @dejacache.cache(name="aretrying")
    async def fetch(x: int) -> str:
        tries.append(x)
        if len(tries) < 3:
            return await fetch(x)
        return f"got {x} on try {len(tries)}"

    async def twice() -> tuple[str, str]:
        return (await asyncio.wait_for(fetch(7), LIMIT), await asyncio.wait_for(fetch(7), LIMIT))

    assert asyncio.run(twice()) == ("got 7 on try 3", "got 7 on try 3") and len(tries) == 3
    assert len(_engine._FLIGHTS) == flights


def test_single_flight_a_leader_joining_its_own_key_runs_again() -> None:
    sf: SingleFlight[str] = SingleFlight()
    depth: list[int] = []

    def call() -> str:
        depth.append(1)
        return sf.run("k", call)[0] if len(depth) < 2 else "inner"

    async def acall() -> str:
        depth.append(1)
        return (await sf.arun("k", acall))[0] if len(depth) < 4 else "ainner"

    assert _within(lambda: sf.run("k", call)) == ("inner", True)
    assert _within(lambda: asyncio.run(sf.arun("k", acall))) == ("ainner", True)
    assert len(sf) == 0
