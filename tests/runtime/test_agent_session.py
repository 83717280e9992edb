"""agent_session: a contextvar, carried by asyncio tasks and explicit propagation only."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import dejacache
from dejacache.runtime import current_session


def test_sync_and_nested() -> None:
    assert current_session() is None
    with dejacache.agent_session(tenant="a", session_id="s") as outer:
        assert current_session() is outer
        with dejacache.agent_session(tenant="b") as inner:
            assert current_session() is inner
            assert inner.session_id and inner.session_id != "s"
        assert current_session() is outer
    assert current_session() is None


async def test_async_and_tasks_inherit() -> None:
    async def in_task() -> object:
        await asyncio.sleep(0)
        return current_session()

    async with dejacache.agent_session(tenant="a") as sess:
        seen = await asyncio.gather(asyncio.to_thread(current_session),
                                    asyncio.create_task(in_task()))
        assert all(s is sess for s in seen)
    assert current_session() is None


async def test_concurrent_tasks_see_their_own_session() -> None:
    async def turn(tenant: str) -> str | None:
        async with dejacache.agent_session(tenant=tenant):
            await asyncio.sleep(0.01)
            s = current_session()
            return s.tenant if s else None

    assert await asyncio.gather(*(turn(t) for t in "abcde")) == list("abcde")


def test_threads_do_not_inherit_but_propagation_carries() -> None:
    seen: list[object] = []
    with dejacache.agent_session(tenant="a") as sess:
        t = threading.Thread(target=lambda: seen.append(current_session()))
        t.start()
        t.join(5)
        with ThreadPoolExecutor(1) as pool:
            seen.append(pool.submit(current_session).result(5))
            seen.append(dejacache.wrap_executor(pool).submit(current_session).result(5))
    assert seen == [None, None, sess]


def test_session_is_not_a_test_facing_block() -> None:
    scope_mod = importlib.import_module("dejacache.scope")
    with dejacache.agent_session(tenant="a"):
        assert scope_mod.OPEN_BLOCKS == []


@pytest.mark.parametrize("kw", [{"tenant": ""}, {"tenant": 42}, {"session_id": ""},
                                {"loop_guard": object()}])
def test_bad_arguments(kw: dict[str, object]) -> None:
    with pytest.raises(dejacache.ScopeError):
        dejacache.agent_session(**kw)  # type: ignore[arg-type]


def test_repr_names_tenant_and_session() -> None:
    s = dejacache.agent_session(tenant="acme", session_id="s1")
    assert "acme" in repr(s) and "s1" in repr(s)


def test_one_session_object_entered_from_several_threads() -> None:
    sess = dejacache.agent_session(tenant="a")
    outer = dejacache.agent_session(tenant="outer")
    inside = threading.Barrier(2, timeout=5)
    after: list[object] = []

    def worker() -> None:
        with outer:
            with sess:
                inside.wait()  # both threads are inside before either leaves
                inside.wait()
            after.append(current_session())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert after == [outer, outer]


def test_one_session_object_entered_and_left_by_threads_at_once_never_fails() -> None:
    # Each exit looks for its own token among the object's and takes it out; without one
    # lock around look and take, another thread's exit took one in between (IndexError, or
    # RuntimeError resetting a token twice): 5 runs of 5 on this box failed that way.
    sess = dejacache.agent_session(tenant="a")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(20000):
                with sess:
                    pass
        except BaseException as e:  # (reported below)
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between look and take, as under load
    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and current_session() is None
    assert not sess._tokens  # every exit took one entry out
