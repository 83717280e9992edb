"""``agent_session(...).calls``: the session's tool calls, bounded."""

from __future__ import annotations

import asyncio

import pytest

import dejacache
from dejacache.errors import AgentLoopDetected, ScopeError


def test_outcomes_in_order_hit_miss_invalidation_traced() -> None:
    @dejacache.tool_cache(resource="cart", key="cart:{user}")
    def get_cart(user: str) -> list[str]:
        return ["apple"]

    @dejacache.invalidates("cart", key="cart:{user}")
    def add(user: str, item: str) -> None:
        return None

    @dejacache.tool
    def think(note: str) -> str:
        return note

    with dejacache.agent_session(tenant="t1") as sess:
        get_cart("u")
        get_cart("u")
        add("u", "pear")
        get_cart("u")
        think("hm")
    calls = list(sess.calls)
    assert [(c.name, c.outcome) for c in calls] == [
        ("get_cart", "miss"), ("get_cart", "hit"), ("add", "invalidation"),
        ("get_cart", "miss"), ("think", "traced")]
    assert [c.resource for c in calls[:4]] == ["cart"] * 4
    assert calls[0].args_digest == calls[1].args_digest != calls[2].args_digest
    assert [c.index for c in calls] == [0, 1, 2, 3, 4]
    assert all(c.loop is None for c in calls)


def test_loop_verdicts_nudged_and_blocked() -> None:
    @dejacache.tool_cache(resource="search", scope="global")
    def search(q: str) -> str:
        return "nothing"

    with dejacache.agent_session(loop_guard=dejacache.LoopGuard(
            max_repeats=2, on_loop="nudge", escalate=1)) as sess:
        for _ in range(3):
            search("x")
        with pytest.raises(AgentLoopDetected):
            search("x")
    calls = list(sess.calls)
    assert [c.outcome for c in calls] == ["miss", "hit", "nudged", "blocked"]
    assert [c.loop for c in calls] == [None, None, "repeat", "repeat"]


def test_coalesced_and_error() -> None:
    gate = asyncio.Event()

    @dejacache.tool_cache(resource="slow", scope="global")
    async def slow(x: int) -> int:
        await gate.wait()
        return x

    @dejacache.tool
    def broken() -> None:
        raise ValueError("no")

    async def main() -> dejacache.agent_session:
        async with dejacache.agent_session() as sess:
            leader = asyncio.ensure_future(slow(1))
            waiter = asyncio.ensure_future(slow(1))
            for _ in range(3):  # both tasks reach the flight (no timing involved)
                await asyncio.sleep(0)
            gate.set()
            assert await asyncio.gather(leader, waiter) == [1, 1]
            with pytest.raises(ValueError):
                broken()
        return sess

    sess = asyncio.run(main())
    assert [c.outcome for c in sess.calls] == ["miss", "coalesced", "error"]


def test_async_tools_and_tasks_share_the_session_trace() -> None:
    @dejacache.tool_cache(resource="docs", scope="session")
    async def read(doc: str) -> str:
        await asyncio.sleep(0)
        return doc

    async def main() -> list[str]:
        async with dejacache.agent_session(tenant="t") as sess:
            await asyncio.gather(read("a"), read("b"))
            await read("a")
        return sorted(c.outcome for c in sess.calls)

    assert asyncio.run(main()) == ["hit", "miss", "miss"]


def test_the_trace_is_bounded() -> None:
    @dejacache.tool
    def step(i: int) -> int:
        return i

    with dejacache.agent_session(max_calls=5) as sess:
        for i in range(1000):
            step(i)
    assert len(sess.calls) == 5 and [c.index for c in sess.calls] == list(range(995, 1000))
    with dejacache.agent_session(max_calls=0) as off:
        step(1)
    assert list(off.calls) == []
    with pytest.raises(ScopeError, match="max_calls"):
        dejacache.agent_session(max_calls=-1)
