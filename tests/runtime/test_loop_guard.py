"""The loop guard inside agent sessions: raise, warn once, nudge, escalation, per session."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import dejacache


def make_tools() -> Any:
    calls: list[str] = []

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}")
    def get_cart(user_id: int) -> dict[str, Any]:
        calls.append("get_cart")
        return {"user": user_id, "items": []}

    @dejacache.tool
    def search(q: str) -> list[str]:
        calls.append("search")
        return [q]

    @dejacache.invalidates("cart", key="cart:{user_id}")
    def add_item(user_id: int, sku: str) -> str:
        calls.append("add_item")
        return "ok"

    return calls, get_cart, search, add_item


def test_raise_on_repeat_counts_cache_hits() -> None:
    calls, get_cart, _, _ = make_tools()
    with dejacache.agent_session(tenant="a", loop_guard=dejacache.LoopGuard(max_repeats=3)):
        for _ in range(3):
            get_cart(1)
        with pytest.raises(dejacache.AgentLoopDetected, match="repeat") as exc:
            get_cart(1)
    assert exc.value.pattern == "repeat"
    assert "get_cart" in str(exc.value) and "4 times" in str(exc.value)
    assert calls == ["get_cart"]  # one origin call; the rest were hits, and still traced


def test_nudge_returns_a_structured_result_instead_of_running() -> None:
    calls, _, search, _ = make_tools()
    guard = dejacache.LoopGuard(max_repeats=2, on_loop="nudge", escalate=None)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        search("shoes")
        search("shoes")
        nudge = search("shoes")
    assert calls == ["search", "search"]
    assert isinstance(nudge, dict)
    assert nudge["loop_detected"] == "repeat"
    assert nudge["is_error"] is True
    assert nudge["previous_result"] == ["shoes"]
    assert "already made 2 times" in nudge["message"]
    assert '["shoes"]' in nudge["message"]
    assert "change approach" in nudge["message"]


def test_nudge_escalates_to_raise() -> None:
    _, _, search, _ = make_tools()
    guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=2)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        search("x")
        assert search("x")["loop_detected"] == "repeat"
        assert search("x")["loop_detected"] == "repeat"
        with pytest.raises(dejacache.AgentLoopDetected):
            search("x")


def test_warn_logs_once_per_pattern_and_runs_the_tool(caplog: pytest.LogCaptureFixture) -> None:
    calls, _, search, _ = make_tools()
    guard = dejacache.LoopGuard(max_repeats=1, on_loop="warn")
    with caplog.at_level(logging.WARNING, logger="dejacache.runtime"), dejacache.agent_session(
        tenant="a", loop_guard=guard
    ):
        for _ in range(4):
            assert search("x") == ["x"]
        for _ in range(3):
            assert search("y") == ["y"]
    assert calls == ["search"] * 7
    msgs = [r.getMessage() for r in caplog.records if r.name == "dejacache.runtime"]
    assert len(msgs) == 2  # once for search("x"), once for search("y")
    assert all("loop guard" in m for m in msgs)


def test_depth_budget() -> None:
    _, _, search, _ = make_tools()
    guard = dejacache.LoopGuard(max_depth=5, max_repeats=100)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        for i in range(5):
            search(str(i))
        with pytest.raises(dejacache.AgentLoopDetected, match="depth"):
            search("6")


def test_cycle_between_tools_with_writes() -> None:
    _, get_cart, _, add_item = make_tools()
    guard = dejacache.LoopGuard(max_repeats=10)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        get_cart(1)
        add_item(1, "sku")
        get_cart(1)
        with pytest.raises(dejacache.AgentLoopDetected, match="cycle") as exc:
            add_item(1, "sku")
    assert "get_cart → add_item" in str(exc.value)


def test_cycle_nudge_message() -> None:
    _, _, search, _ = make_tools()

    @dejacache.tool
    def open_page(url: str) -> str:
        return "page"

    guard = dejacache.LoopGuard(on_loop="nudge")
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        search("q")
        open_page("u")
        search("q")
        nudge = open_page("u")
    assert nudge["loop_detected"] == "cycle"
    assert "search -> open_page" in nudge["message"]


def test_no_progress_identical_results_across_writes() -> None:
    _, get_cart, _, _ = make_tools()

    @dejacache.invalidates("cart", key="cart:{user_id}")
    def touch(user_id: int, n: int) -> None:  # changes nothing get_cart can see
        return None

    guard = dejacache.LoopGuard(max_repeats=2, max_cycle=0, on_loop="nudge", escalate=None)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        results = []
        for n in range(3):
            touch(1, n)
            results.append(get_cart(1))
    assert results[:2] == [{"user": 1, "items": []}] * 2
    assert results[2]["loop_detected"] == "no_progress"
    assert "same result 3 times" in results[2]["message"]


def test_guard_state_is_per_session() -> None:
    _, _, search, _ = make_tools()
    guard = dejacache.LoopGuard(max_repeats=2)
    for tenant in ("a", "a", "b"):
        with dejacache.agent_session(tenant=tenant, loop_guard=guard):
            search("x")
            search("x")  # at the limit in each session, never over it
    sess = dejacache.agent_session(tenant="a", loop_guard=guard)
    with sess:
        search("x")
        search("x")
    with sess, pytest.raises(dejacache.AgentLoopDetected):  # re-entered: state continues
        search("x")


def test_no_guard_no_tracing() -> None:
    _, _, search, _ = make_tools()
    with dejacache.agent_session(tenant="a"):
        for _ in range(10):
            search("x")
    for _ in range(10):
        search("x")  # the plain tracer works outside sessions too


async def test_async_tools_are_traced() -> None:
    @dejacache.tool
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return "body"

    @dejacache.tool_cache(resource="page")
    async def cached_fetch(url: str) -> str:
        return "body"

    guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=None)
    async with dejacache.agent_session(tenant="a", loop_guard=guard):
        assert await fetch("u") == "body"
        assert (await fetch("u"))["loop_detected"] == "repeat"
        assert await cached_fetch("u") == "body"
        assert (await cached_fetch("u"))["loop_detected"] == "repeat"


def test_loops_are_counted_in_runtime_stats() -> None:
    _, get_cart, _, _ = make_tools()
    guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=None)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        get_cart(1)
        get_cart(1)
    assert dejacache.runtime_stats().by_tool["get_cart"].loops == 1


def test_nudge_never_returns_none_even_without_a_previous_result() -> None:
    @dejacache.tool
    def act(x: int) -> None:
        return None

    guard = dejacache.LoopGuard(max_depth=1, on_loop="nudge", escalate=None)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        assert act(1) is None
        nudge = act(2)
    assert isinstance(nudge, dict) and "budget of 1" in nudge["message"]


@pytest.mark.parametrize("kw", [{"on_loop": "explode"}, {"max_repeats": 0},
                                {"escalate": -1}, {"cycle_repeats": 1}])
def test_bad_guard_settings(kw: dict[str, Any]) -> None:
    with pytest.raises(dejacache.ConfigurationError):
        dejacache.LoopGuard(**kw)


@pytest.mark.parametrize(("kw", "message"), [
    ({"max_repeats": 0}, "max_repeats must be a whole number >= 1, not 0"),
    ({"max_depth": "50"}, "max_depth must be a whole number >= 1, not '50'"),  # a TypeError
    ({"max_cycle": -1}, "max_cycle must be a whole number >= 0, not -1"),
    ({"cycle_repeats": 1.5}, "cycle_repeats must be a whole number >= 2, not 1.5"),
    ({"escalate": "3"}, "escalate must be a whole number >= 0 or None, not '3'"),
])
def test_a_bad_limit_is_named_with_its_value(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(dejacache.ConfigurationError) as err:
        dejacache.LoopGuard(**kw)
    assert str(err.value) == f"LoopGuard {message}"


def test_a_tool_method_repeats_only_on_the_same_instance_data() -> None:
    # The argument digest holds the instance as a cache key does: the same search on two
    # indexes is two calls, not a loop; on one index, a repeat (its lock is not data).
    import threading

    class Index:
        def __init__(self, name: str) -> None:
            self.name = name
            self.lock = threading.Lock()

        @dejacache.tool
        def search(self, q: str) -> str:
            return f"{self.name}:{q}"

    guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=None)
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        assert [Index("docs").search("x"), Index("code").search("x")] == ["docs:x", "code:x"]
        assert Index("docs").search("x")["loop_detected"] == "repeat"


def test_key_self_false_compares_a_tool_methods_arguments_alone() -> None:
    # An instance that counts its own calls is new data at every call: by default no call
    # repeats; key_self=False (as on @cache) compares the arguments alone.
    class Searcher:
        def __init__(self) -> None:
            self.calls = 0

        @dejacache.tool
        def counted(self, q: str) -> str:
            self.calls += 1
            return q

        @dejacache.tool(key_self=False)
        def search(self, q: str) -> str:
            self.calls += 1
            return q

        @dejacache.invalidates("docs", key_self=False)
        def save(self, q: str) -> str:
            self.calls += 1
            return q

    guard = dejacache.LoopGuard(max_repeats=1, on_loop="nudge", escalate=None)
    s = Searcher()
    with dejacache.agent_session(tenant="a", loop_guard=guard):
        assert [s.counted("x"), s.counted("x")] == ["x", "x"]
        assert s.search("x") == "x"
        assert s.search("x")["loop_detected"] == "repeat"
    @dejacache.tool_cache(resource="docs")
    def read_docs(q: str) -> str:  # what save invalidates (else a warning says nothing is)
        return q

    with dejacache.agent_session(tenant="b", loop_guard=guard):
        assert s.save("x") == "x"
        assert s.save("x")["loop_detected"] == "repeat"


@pytest.mark.parametrize("deco", [lambda: dejacache.tool(key_self="yes"),  # type: ignore[call-overload]
                                  lambda: dejacache.invalidates("r", key_self="yes")])  # type: ignore[arg-type]
def test_key_self_on_tool_and_invalidates_is_checked(deco: Any) -> None:
    with pytest.raises(dejacache.ConfigurationError, match="key_self"):
        deco()(lambda x: x)


def test_a_long_warning_session_keeps_bounded_state(caplog: pytest.LogCaptureFixture) -> None:
    """on_loop="warn" over a long session whose loops have ever new arguments: the
    patterns warned about are not all kept (before: one per loop, forever)."""
    from dejacache._core.loops import MAX_SIGNATURES

    guard = dejacache.LoopGuard(max_repeats=1, max_depth=10**9, on_loop="warn")

    @dejacache.tool
    def look(q: int) -> int:
        return q

    with dejacache.agent_session(tenant="t", loop_guard=guard, max_calls=0) as sess:
        for i in range(MAX_SIGNATURES + 100):
            look(i)
            look(i)  # a repeat: warned once
    assert sess.guard is not None
    assert len(sess.guard._warned) <= MAX_SIGNATURES
    assert len(sess.guard.detector._counts) <= MAX_SIGNATURES
