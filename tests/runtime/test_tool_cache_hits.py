"""The tool cache's hit path (the target: a warm hit within 2x of ``@cache``'s): the store's
short ``hit`` read, remembered key heads and in-process counters, the fast argument digest.
Each shortcut must keep what the long way guaranteed."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import dejacache
from dejacache.runtime import generations
from dejacache.stores.memory import MemoryStore


def _counted(calls: list[int], value: Any = None) -> Any:
    def tool(user_id: int) -> Any:
        calls.append(user_id)
        return {"user": user_id, "n": len(calls)} if value is None else value

    return tool


@pytest.mark.parametrize("make_store", [MemoryStore, "sqlite"])
def test_hit_after_invalidation_misses(make_store: Any, tmp_path: Path) -> None:
    store = (dejacache.SQLiteStore(tmp_path / "c.db") if make_store == "sqlite"
             else make_store())
    calls: list[int] = []
    get = dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)(
        _counted(calls))

    @dejacache.invalidates("cart", key="cart:{user_id}", store=store)
    def update(user_id: int) -> None:
        return None

    @dejacache.invalidates("cart", store=store)
    def wipe() -> None:
        return None

    with dejacache.agent_session(tenant="a"):
        assert get(1) == get(1) == {"user": 1, "n": 1}  # the second is a hit
        get(2)
        update(1)
        assert get(1) == {"user": 1, "n": 3}  # never the entry from before the write
        assert get(2) == {"user": 2, "n": 2}  # another entity stays cached
        assert get(1) == {"user": 1, "n": 3}
        wipe()
        get(1)
        get(2)
    assert calls == [1, 2, 1, 1, 2]
    st = dejacache.runtime_stats().by_tool["tool"]
    assert (st.hits, st.misses) == (3, 5)
    store.close()


def test_hit_after_invalidation_misses_async() -> None:
    calls: list[int] = []
    store = MemoryStore()

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)
    async def get(user_id: int) -> dict[str, int]:
        calls.append(user_id)
        return {"user": user_id, "n": len(calls)}

    @dejacache.invalidates("cart", key="cart:{user_id}", store=store)
    async def update(user_id: int) -> None:
        return None

    async def main() -> None:
        with dejacache.agent_session(tenant="a"):
            assert await get(1) == await get(1) == {"user": 1, "n": 1}
            await update(1)
            assert await get(1) == {"user": 1, "n": 2}
            assert await get(1) == {"user": 1, "n": 2}
        with dejacache.agent_session(tenant="b"):
            assert await get(1) == {"user": 1, "n": 3}  # another tenant never shares

    asyncio.run(main())
    assert calls == [1, 1, 1]


def test_other_tenant_misses_and_session_scope_is_per_session() -> None:
    calls: list[int] = []
    store = MemoryStore()
    get = dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)(
        _counted(calls))
    per_session = dejacache.tool_cache(resource="s", scope="session", store=store,
                                       name="per_session")(_counted([]))
    for tenant in ("a", "b", "a"):
        with dejacache.agent_session(tenant=tenant, session_id="same"):
            get(1)
            get(1)
    assert calls == [1, 1]
    with dejacache.agent_session(tenant="a", session_id="s1"):
        assert per_session(1)["n"] == 1
        assert per_session(1)["n"] == 1
    with dejacache.agent_session(tenant="a", session_id="s2"):
        assert per_session(1)["n"] == 2
    # The key heads remembered per prefix keep tenants apart in the store's keys too.
    assert {k.split("/")[2] for k, _ in store.iterate() if k.startswith("rt1/t/")} == {"a", "b"}


def test_every_hit_is_a_fresh_copy() -> None:
    get = dejacache.tool_cache(store=MemoryStore())(_counted([]))
    with dejacache.agent_session(tenant="a"):
        first = get(1)
        first["n"] = 99
        second = get(1)
        assert second == {"user": 1, "n": 1}
        second["n"] = 98
        assert get(1) == {"user": 1, "n": 1}


def _damage(path: Path) -> None:
    with sqlite3.connect(path) as db:
        (key, value), = db.execute("SELECT key, value FROM entries").fetchall()
        db.execute("UPDATE entries SET value = ? WHERE key = ?",
                   (value[:-2] + b"9}", key))
    db.close()


def test_damaged_sqlite_value_is_reported_and_recomputed(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = dejacache.SQLiteStore(path)
    calls: list[int] = []
    get = dejacache.tool_cache(store=store)(_counted(calls))
    with dejacache.agent_session(tenant="a"):
        assert get(1) == {"user": 1, "n": 1}
        assert get(1) == {"user": 1, "n": 1}
        _damage(path)
        with pytest.warns(dejacache.DejacacheWarning, match="damaged entry for tool"):
            assert get(1) == {"user": 1, "n": 2}  # never the damaged bytes
        assert get(1) == {"user": 1, "n": 2}  # stored again, served again
    assert calls == [1, 1]
    store.close()


def test_counter_bumped_through_another_store_object_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    reader_store = dejacache.SQLiteStore(path)
    writer_store = dejacache.SQLiteStore(path)  # another process's view of the same file
    calls: list[int] = []
    get = dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=reader_store)(
        _counted(calls))
    with dejacache.agent_session(tenant="a"):
        get(1)
        get(1)
        assert calls == [1]
        writer_store.incr_many(["gen/cart/rt1/t/a/e/cart%3A1"])  # no dejacache state
        get(1)
        assert calls == [1, 1]
        get(1)
        assert calls == [1, 1]
    reader_store.close()
    writer_store.close()


def test_nested_credential_argument_hits_under_the_full_digest() -> None:
    """The fast form of ``{"api_key": ...}`` inside an argument is not its stored (masked)
    form: the fast lookup misses, the full one hits, and the loop guard and the trace see
    one digest for both calls."""
    calls: list[int] = []

    @dejacache.tool_cache(store=MemoryStore())
    def search(options: dict[str, Any]) -> int:
        calls.append(1)
        return 7

    guard = dejacache.LoopGuard(max_repeats=10, on_loop="raise")
    with dejacache.agent_session(tenant="a", loop_guard=guard) as sess:
        for _ in range(3):
            assert search({"q": "x", "api_key": "sk-live-1234567890abcdef"}) == 7
    assert calls == [1]
    assert [c.outcome for c in sess.calls] == ["miss", "hit", "hit"]
    assert len({c.args_digest for c in sess.calls}) == 1


def test_loop_guard_counts_hits_and_trace_says_hit() -> None:
    get = dejacache.tool_cache(store=MemoryStore())(_counted([]))
    guard = dejacache.LoopGuard(max_repeats=2, on_loop="raise")
    with dejacache.agent_session(tenant="a", loop_guard=guard) as sess:
        get(1)
        get(1)
        with pytest.raises(dejacache.AgentLoopDetected):
            get(1)  # a hit still counts as a repeat
    assert [c.outcome for c in sess.calls] == ["miss", "hit", "blocked"]


class _FailingHits(MemoryStore):
    def hit(self, key: str) -> Any:
        raise OSError("disk gone")

    def get(self, key: str) -> Any:
        raise OSError("disk gone")


_FailingHits.short_hits = True  # pretend to offer the short path, then fail on it


def test_store_errors_fail_open_on_the_short_path() -> None:
    calls: list[int] = []
    get = dejacache.tool_cache(store=_FailingHits())(_counted(calls))
    with dejacache.agent_session(tenant="a"), pytest.warns(dejacache.DejacacheWarning,
                                                           match="read failed"):
        assert get(1) == {"user": 1, "n": 1}
        assert get(1) == {"user": 1, "n": 2}
    assert calls == [1, 1]


def test_local_counter_memo_follows_every_bump() -> None:
    """Counters reused while ``LocalGenerations.version`` stays: any bump, from any tool or
    thread, and a reset, make the next call read them again."""
    gens = generations.local_generations()
    store = MemoryStore()
    calls: list[int] = []
    get = dejacache.tool_cache(resource="r", store=store)(_counted(calls))
    with dejacache.agent_session(tenant="a"):
        get(1)
        v = gens.version
        gens.bump(["gen/unrelated"])
        assert gens.version == v + 1
        get(1)  # unrelated counter: still a hit
        gens.bump(["gen/r/rt1/t/a/R"])
        get(1)
        assert calls == [1, 1]
        generations.reset()  # back to zeros: the first entry's key again, by design
        assert gens.version > v + 2


def test_traces_are_the_frozen_dataclass_they_were() -> None:
    import dataclasses

    from dejacache.runtime.session import ToolCallTrace

    get = dejacache.tool_cache(store=MemoryStore())(_counted([]))
    with dejacache.agent_session(tenant="a") as sess:
        get(1)
        get(1)
    miss, hit = sess.calls
    assert hit == ToolCallTrace(1, "tool", "tool", miss.args_digest, "hit")
    assert hash(hit) == hash(ToolCallTrace(1, "tool", "tool", miss.args_digest, "hit", None))
    assert (miss.index, miss.outcome, miss.loop) == (0, "miss", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.outcome = "miss"  # type: ignore[misc]


def test_entities_remembered_by_value_keep_equal_but_different_values_apart() -> None:
    """A one-field template's entity is remembered by the argument's value when it is an
    exact int or str. ``1``, ``"1"`` and ``True`` (``True == 1``) are three entries of one
    entity, ``cart:1``: a write naming any of them invalidates all three, in its own tenant
    only, and ``2`` stays cached."""
    store = MemoryStore()
    calls: list[Any] = []

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=store)
    def get(user_id: Any) -> Any:
        calls.append(user_id)
        return {"user": str(user_id), "n": len(calls)}

    @dejacache.invalidates("cart", key="cart:{user_id}", store=store)
    def update(user_id: Any) -> None:
        return None

    with dejacache.agent_session(tenant="a"):
        one, text, yes = get(1), get("1"), get(True)  # (True == 1: not dict keys)
        assert (get(1), get("1"), get(True)) == (one, text, yes)  # all hits
        assert len(calls) == 3 and yes["user"] == "True"
        two = get(2)
        update(True)  # entity cart:1 (it was cart:True, and 1 and "1" stayed cached)
        assert get(1) != one and get("1") != text and get(True) != yes
        assert get(2) == two
        one, text = get(1), get("1")
        update(1)  # entity cart:1: both spellings of it miss
        assert get(1) != one and get("1") != text
        n = len(calls)
        with dejacache.agent_session(tenant="b"):
            get(1)
            update(1)  # tenant b's write leaves tenant a's entries cached
        assert len(calls) == n + 1
    with dejacache.agent_session(tenant="a"):
        get(1)
        get(user_id=1)  # by keyword: the long way, the same entity and entry
        assert len(calls) == n + 1
    with pytest.raises(dejacache.ScopeError):
        get(1)  # the remembered entity never stands in for a missing session


def test_remembered_key_heads_stay_small_over_many_entities() -> None:
    tc_fn = dejacache.tool_cache(resource="cart", key="cart:{user_id}", store=MemoryStore())(
        _counted([]))
    tc = tc_fn.tool_cache
    most = 0
    with dejacache.agent_session(tenant="acme"):
        for i in range(3000):
            tc_fn(i)
            most = max(most, len(tc._heads), len(tc._by_value))
    assert most <= 1024
