"""The demo agent: run 2 is served entirely from the store and answers the same."""

from __future__ import annotations

import pathlib

import pytest

import dejacache
from dejacache._demo.agent import run_agent
from dejacache._demo.printer import make_printer
from dejacache._demo.travel import QUESTIONS, SCHEMAS, SYSTEM, TravelWorld
from dejacache.demo import (
    DEMO_NAMESPACE,
    MODEL_NAME,
    SDK_MODEL_NAME,
    cached_agent,
    play,
    run_demo,
)

FAST = 0.01  # latency scale: ~2 ms model calls keep the test well under a second


def test_second_run_makes_no_calls_and_answers_the_same(tmp_path: pathlib.Path) -> None:
    store = dejacache.SQLiteStore(tmp_path / "demo.db")
    res = play(scale=FAST, store=store, out=make_printer(plain=True))
    assert res.first.model_calls == 6 and res.first.tool_calls == 4
    assert res.second.model_calls == 0 and res.second.tool_calls == 0
    assert res.second.run.answers == res.first.run.answers
    assert all("cheapest" in a for a in res.first.run.answers)
    assert res.entries == 10 and res.hits == 10
    assert res.tokens > 0 and res.model_seconds > 0
    assert res.location == str(tmp_path / "demo.db")


def test_rerun_starts_live_again_and_keeps_other_namespaces(tmp_path: pathlib.Path) -> None:
    store = dejacache.SQLiteStore(tmp_path / "demo.db")
    with dejacache.scope(cache_key="mine", store=store):
        dejacache.cache(name="user.fn")(lambda x: x + 1)(1)
    play(scale=FAST, store=store, out=make_printer(plain=True))
    again = play(scale=FAST, store=store, out=make_printer(plain=True))
    assert again.first.model_calls == 6  # the demo cleared only its own namespace
    assert [r.name for _, r in store.iterate(namespace="mine")] == ["user.fn"]


def test_run_demo_prints_steps_speedup_and_savings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEJACACHE_DEMO_LATENCY", str(FAST))
    assert run_demo(plain=True) == 0
    out = capsys.readouterr().out
    assert "run 1: live, recording" in out and "run 2: replay from the store" in out
    assert out.count(" live ") == 10 and out.count(" stored ") == 10
    assert "speed-up:" in out and "same answers: yes" in out
    # the default store: SQLite under DEJACACHE_DIR (set per test by conftest)
    assert "cache.db" in out
    assert "[bold]" not in out  # markup stripped in plain mode


def test_rich_output_when_available(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rich")
    assert run_demo(scale=FAST, plain=False, store=dejacache.MemoryStore()) == 0
    out = capsys.readouterr().out
    assert "run 2: replay from the store" in out and "what was saved" in out


def test_live_without_key_explains(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert run_demo(live=True, plain=True) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().out


def test_agent_loop_accepts_sdk_style_objects() -> None:
    """A real SDK returns objects with model_dump(); the loop must not care."""
    world = TravelWorld(scale=0)

    class Completion:
        def __init__(self, data: dict[str, object]) -> None:
            self.data = data

        def model_dump(self) -> dict[str, object]:
            return self.data

    run = run_agent(lambda m, t: Completion(world.chat(m, t)), world.tools(), SCHEMAS,
                    QUESTIONS[:1], system=SYSTEM)
    assert world.model_calls == 3 and world.tool_calls == 2
    assert len(run.answers) == 1 and "Berlin" in run.answers[0]


def test_model_requests_are_snapshots() -> None:
    """The conversation grows after each call; a stored request must not grow with it."""
    world = TravelWorld(scale=0)
    seen: list[list[dict[str, object]]] = []

    def model(messages: list[dict[str, object]], tools: list[dict[str, object]]) -> object:
        seen.append(messages)
        return world.chat(messages, tools)

    run_agent(model, world.tools(), SCHEMAS, QUESTIONS[:1], system=SYSTEM)
    assert [len(m) for m in seen] == [2, 4, 6]


def test_demo_entries_carry_usage_for_token_savings(tmp_path: pathlib.Path) -> None:
    store = dejacache.MemoryStore()
    play(scale=FAST, store=store, out=make_printer(plain=True))
    models = [r for _, r in store.iterate(namespace=DEMO_NAMESPACE)
              if r.name in (MODEL_NAME, SDK_MODEL_NAME)]
    assert len(models) == 6 and all(r.usage and r.usage["total_tokens"] > 0 for r in models)


class _DroppingStore(dejacache.MemoryStore):
    """Reads work, writes vanish: like a read-only directory or a full disk."""

    def put(self, key: str, record: dejacache.Record, *, ttl: float | None = None) -> None:
        return None


def test_store_that_drops_writes_is_reported_not_blamed_on_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_demo(scale=FAST, plain=True, store=_DroppingStore()) == 1
    out = capsys.readouterr().out
    assert "the store did not keep run 1" in out and "kept 0" in out
    assert "run 2" not in out


def test_agent_is_swappable() -> None:
    """play(agent=...) takes another model/tools pair; counting and replay still hold."""
    made: list[str] = []

    def sdk_like_agent(world: TravelWorld) -> tuple[object, dict[str, object]]:
        model, tools = cached_agent(world)
        made.append("agent")

        class Completion(dict):  # type: ignore[type-arg]
            def model_dump(self) -> dict[str, object]:
                return dict(self)

        return (lambda m, t: Completion(model(m, t))), tools

    res = play(scale=FAST, store=dejacache.MemoryStore(), out=make_printer(plain=True),
               agent=sdk_like_agent)  # type: ignore[arg-type]
    assert made == ["agent", "agent"]
    assert res.first.model_calls == 6 and res.second.model_calls == 0
    assert res.first.run.answers == res.second.run.answers
