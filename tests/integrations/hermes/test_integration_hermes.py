"""hermes-agent's gateway agent-cache cases, ported onto ``AgentPool`` with real ``AIAgent``s.

Each class follows one class of hermes-agent's ``tests/gateway/test_agent_cache.py``: the
gateway kept ``(agent, signature)`` tuples in a dict behind a lock; here the pool does it, and
turns run against the loopback provider. ``on_evict`` is ``AIAgent.release_clients`` (the
gateway's soft release: clients closed, session tool state kept).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("run_agent", reason="hermes-agent runs in .venv-hermes (make test-hermes)")

from conftest import SIGNATURE
from dejacache import AgentPool
from dejacache.runtime import current_session


class Built:
    """The factory: real ``AIAgent``s, counted. It shows the pool ``AIAgent``'s parameters,
    so signature names are checked against them once, at construction."""

    def __init__(self) -> None:
        from run_agent import AIAgent

        self.cls = AIAgent
        self.agents: list[Any] = []
        self.__signature__ = inspect.signature(AIAgent)

    def __call__(self, **config: Any) -> Any:
        agent = self.cls(**config)
        self.agents.append(agent)
        return agent


class Released:
    def __init__(self) -> None:
        self.agents: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, agent: Any) -> None:
        agent.release_clients()
        with self.lock:
            self.agents.append(agent)


@pytest.fixture
def built() -> Built:
    return Built()


@pytest.fixture
def released() -> Released:
    return Released()


@pytest.fixture
def pool(built: Built, released: Released) -> Iterator[AgentPool[Any]]:
    p: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, on_evict=released)
    yield p
    p.close()


def turn(agent: Any, text: str, history: list[Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = agent.run_conversation(text, conversation_history=history)
    assert result.get("final_response"), result
    return result


def chat_bodies(fake: Any, since: int = 0) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests[since:] if r["path"] == "/v1/chat/completions"]


# ------------------------------------------------------------ TestAgentConfigSignature


class TestSignature:
    def test_same_config_same_agent(self, pool: AgentPool[Any], built: Built,
                                    config: dict[str, Any]) -> None:
        a = pool.get("telegram:1", **config)
        assert pool.get("telegram:1", **dict(config)) is a
        assert len(built.agents) == 1

    @pytest.mark.parametrize("change", [
        {"model": "other-model"},
        {"provider": "lmstudio"},
        {"enabled_toolsets": ["todo"]},
        {"ephemeral_system_prompt": "You answer at length."},
        {"user_id": "491827364"},
    ], ids=["model", "provider", "toolsets", "ephemeral-prompt", "user-id"])
    def test_change_rebuilds(self, pool: AgentPool[Any], released: Released,
                             config: dict[str, Any], change: dict[str, Any]) -> None:
        a = pool.get("telegram:1", **config)
        b = pool.get("telegram:1", **{**config, **change})
        assert b is not a
        assert released.agents == [a] and a.client is None  # old clients closed
        for name, value in change.items():
            if name != "user_id":  # kept by hermes' memory provider, not on the agent
                assert getattr(b, name) == value

    def test_tokens_sharing_a_prefix_rebuild(self, pool: AgentPool[Any],
                                             config: dict[str, Any]) -> None:
        a = pool.get("s", **{**config, "api_key": "eyJhbGci.token-for-account-a"})
        b = pool.get("s", **{**config, "api_key": "eyJhbGci.token-for-account-b"})
        assert a is not b
        assert "token-for-account" not in repr(vars(pool))

    def test_cache_busting_config(self, built: Built, config: dict[str, Any]) -> None:
        """hermes' ``cache_keys``: config.yaml edits (context length, compression...) rebuild;
        omitted, ``None`` and ``{}`` agree; key order does not matter. A callable signature
        expresses the gateway's rule and is not passed to ``AIAgent``."""
        def signature(cfg: Any) -> dict[str, Any]:
            return {**{n: cfg.get(n) for n in SIGNATURE}, "cache_keys": cfg.get("cache_keys") or {}}

        def factory(cache_keys: Any = None, **cfg: Any) -> Any:
            return built(**cfg)

        pool: AgentPool[Any] = AgentPool(factory, signature=signature)
        a = pool.get("s", **config)
        assert pool.get("s", **config, cache_keys=None) is a
        assert pool.get("s", **config, cache_keys={}) is a
        keys = {"model.context_length": 200_000, "compression.threshold": 0.5}
        b = pool.get("s", **config, cache_keys=keys)
        assert b is not a
        assert pool.get("s", **config, cache_keys=dict(reversed(keys.items()))) is b
        for edit in ({"model.context_length": 400_000}, {"compression.threshold": 0.75},
                     {"compression.enabled": False}, {"tools.registry_generation": 11}):
            c = pool.get("s", **config, cache_keys={**keys, **edit})
            assert c is not b, edit
            b = pool.get("s", **config, cache_keys=keys)
        pool.close()

    def test_reasoning_is_not_in_the_signature(self, pool: AgentPool[Any], built: Built,
                                               config: dict[str, Any]) -> None:
        a = pool.get("s", **config, reasoning_config={"enabled": True, "effort": "medium"})
        b = pool.get("s", **config, reasoning_config={"enabled": True, "effort": "high"})
        assert a is b and len(built.agents) == 1


# ------------------------------------------------------------ TestAgentCacheLifecycle


class TestLifecycle:
    def test_turns_reuse_one_agent_and_its_frozen_system_prompt(
            self, pool: AgentPool[Any], built: Built, fake: Any,
            config: dict[str, Any]) -> None:
        start = len(fake.requests)
        history: list[Any] | None = None
        seen = []
        for text in ("hello", "and again", "one more"):
            with pool.lease("telegram:1", **config) as agent:
                seen.append(agent)
                history = turn(agent, text, history)["messages"]
                prompt = agent._cached_system_prompt
        assert all(a is seen[0] for a in seen) and len(built.agents) == 1
        bodies = chat_bodies(fake, start)
        assert len(bodies) == 3
        systems = [b["messages"][0] for b in bodies]
        assert systems[0]["role"] == "system"
        assert systems[0] == systems[1] == systems[2]  # byte-identical prefix every turn
        assert prompt in systems[0]["content"]
        # each turn's request extends the previous one: the prefix the provider caches
        for prev, nxt in itertools.pairwise(bodies):
            assert nxt["messages"][: len(prev["messages"])] == prev["messages"]

    def test_model_change_rebuilds_between_turns(self, pool: AgentPool[Any],
                                                 config: dict[str, Any]) -> None:
        with pool.lease("s", **config) as a:
            turn(a, "hi")
        with pool.lease("s", **{**config, "model": "test-model-2"}) as b:
            assert b is not a and b.model == "test-model-2"
            turn(b, "hi again")

    def test_reset_evicts_one_session_and_leaves_others(
            self, pool: AgentPool[Any], released: Released, config: dict[str, Any]) -> None:
        a = pool.get("session-A", **config)
        b = pool.get("session-B", **config)
        assert pool.evict("session-A") is True
        assert "session-A" not in pool and pool.get("session-B", **config) is b
        assert released.agents == [a] and a.client is None and b.client is not None
        fresh = pool.get("session-A", **config)
        assert fresh is not a and fresh.client is not None

    def test_reasoning_config_updated_in_place(self, pool: AgentPool[Any],
                                               config: dict[str, Any]) -> None:
        with pool.lease("s", **config, reasoning_config={"enabled": True, "effort": "low"}) as a:
            turn(a, "hi")
            prompt = a._cached_system_prompt
        with pool.lease("s", **config,
                        reasoning_config={"enabled": True, "effort": "high"}) as b:
            assert b is a and a.reasoning_config == {"enabled": True, "effort": "high"}
            assert a._cached_system_prompt is prompt  # not invalidated by the change
            turn(b, "again")
            assert a._cached_system_prompt is prompt

    def test_callbacks_set_per_message(self, pool: AgentPool[Any],
                                       config: dict[str, Any]) -> None:
        steps: list[str] = []

        def cb(tag: str) -> Any:
            return lambda *a, **k: steps.append(tag)

        cb1, cb2, cb3 = cb("m1"), cb("m1-progress"), cb("m2")
        with pool.lease("s", **config, step_callback=cb1, tool_progress_callback=cb2) as a:
            assert a.step_callback is cb1 and a.tool_progress_callback is cb2
            turn(a, "hi")
        assert "m1" in steps  # hermes calls step_callback each iteration
        assert set(steps) <= {"m1", "m1-progress"}
        steps.clear()
        with pool.lease("s", **config, step_callback=cb3, tool_progress_callback=None) as b:
            assert b is a and a.step_callback is cb3 and a.tool_progress_callback is None
            turn(b, "again")
        assert steps and set(steps) == {"m2"}  # the second message's callbacks only

    def test_requests_are_attributed_to_the_lease_session(
            self, pool: AgentPool[Any], config: dict[str, Any],
            monkeypatch: pytest.MonkeyPatch) -> None:
        """hermes sends each request from a bare thread it starts (``_call``); the lease's
        session reaches it, per session, with several sessions in flight at once."""
        import httpx

        seen: list[tuple[str, str | None, str]] = []
        real = httpx.HTTPTransport.handle_request

        def spy(self: Any, request: Any) -> Any:
            if request.url.path.endswith("/chat/completions"):
                body = request.read().decode()
                sess = current_session()
                tag = next((t for t in ("alpha", "beta", "gamma") if t in body), "?")
                seen.append((tag, sess.session_id if sess else None,
                             threading.current_thread().name))
            return real(self, request)

        monkeypatch.setattr(httpx.HTTPTransport, "handle_request", spy)
        for tag in ("alpha", "beta", "gamma"):  # built up front: turns run concurrently
            pool.get(f"chat:{tag}", **config)
        barrier = threading.Barrier(3, timeout=60)

        def session(tag: str) -> None:
            history = None
            for i in range(2):
                with pool.lease(f"chat:{tag}", **config) as agent:
                    if i == 0:
                        barrier.wait()
                    history = turn(agent, f"{tag} turn {i}", history)["messages"]

        threads = [threading.Thread(target=session, args=(t,)) for t in ("alpha", "beta",
                                                                           "gamma")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(seen) == 6
        assert all(sid == f"chat:{tag}" for tag, sid, _ in seen), seen
        assert all(name != "MainThread" for _, _, name in seen)

    async def test_async_gateway_turns(self, pool: AgentPool[Any],
                                       config: dict[str, Any]) -> None:
        """The gateway's shape: ``async with`` a lease, the sync turn in a worker thread."""
        async def message(key: str, text: str) -> tuple[Any, str | None]:
            async with pool.lease(key, **config) as agent:
                await asyncio.to_thread(turn, agent, text)
                sess = current_session()
                return agent, sess.session_id if sess else None

        first = await asyncio.gather(message("a", "hi"), message("b", "hi"))
        second = await asyncio.gather(message("a", "again"), message("b", "again"))
        assert [s for _, s in first + second] == ["a", "b", "a", "b"]
        assert first[0][0] is second[0][0] and first[1][0] is second[1][0]


# ------------------------------------------------------------ bounded growth, active safety


class TestBounds:
    def test_cap_evicts_lru_and_touch_protects(self, built: Built, released: Released,
                                               config: dict[str, Any]) -> None:
        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, max_size=3,
                                         on_evict=released)
        agents = [pool.get(f"s{i}", **config) for i in range(3)]
        pool.get("s0", **config)  # move s0 to the most recent end
        pool.get("s3", **config)
        assert "s1" not in pool and all(k in pool for k in ("s0", "s2", "s3"))
        assert released.agents == [agents[1]] and agents[1].client is None
        assert agents[0].client is not None and len(pool) == 3
        pool.close()

    def test_idle_ttl(self, built: Built, released: Released,
                      config: dict[str, Any]) -> None:
        now = [100.0]
        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, idle_ttl=60.0,
                                         on_evict=released, clock=lambda: now[0])
        stale = pool.get("stale", **{**config, "session_id": "long-lived"})
        now[0] += 30
        fresh = pool.get("fresh", **config)
        now[0] += 45
        assert pool.sweep() == 1
        assert released.agents == [stale] and stale.client is None and fresh.client
        # The session comes back: a fresh agent for the same session_id (same task state).
        back = pool.get("stale", **{**config, "session_id": "long-lived"})
        assert back is not stale and back.session_id == stale.session_id == "long-lived"
        assert back.client is not None
        pool.close()

    def test_agent_in_a_turn_is_never_released(self, built: Built, released: Released,
                                               fake: Any, config: dict[str, Any]) -> None:
        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, max_size=1,
                                         on_evict=released)
        with pool.lease("active", **config) as active:
            other = pool.get("other", **config)  # over the cap: only idle agents go
            assert pool.evict("active") is True  # a /reset mid-turn: after the turn
            assert active.client is not None
            turn(active, "still working")  # the turn's client is intact
            assert released.agents == [other]
        assert released.agents == [other, active] and active.client is None
        assert len(pool) == 0
        pool.close()

    def test_spillover_with_every_slot_active(self, built: Built, released: Released,
                                              config: dict[str, Any]) -> None:
        cap = 2
        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, max_size=cap,
                                         on_evict=released)
        leases = [pool.lease(f"s{i}", **config) for i in range(cap + 1)]
        agents = [lease.__enter__() for lease in leases]
        assert len(pool) == cap + 1 and released.agents == []  # over the cap, nobody torn down
        assert all(a.client is not None for a in agents)
        for lease in reversed(leases):
            lease.__exit__(None, None, None)
        assert len(pool) == cap and released.agents == [agents[-1]]
        # The evicted session's next message gets a fresh, working agent.
        with pool.lease(f"s{cap}", **config) as again:
            assert again is not agents[-1] and again.client is not None
            turn(again, "back")
        pool.close()

    def test_release_runs_with_the_pool_lock_free(self, built: Built,
                                                  config: dict[str, Any]) -> None:
        """#52197: slow client teardown must not hold the cache lock (or the loop)."""
        started, finish = threading.Event(), threading.Event()

        def slow_release(agent: Any) -> None:
            started.set()
            finish.wait(30)
            agent.release_clients()

        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, on_evict=slow_release)
        pool.get("s1", **config)
        pool.get("s2", **config)
        t = threading.Thread(target=pool.evict, args=("s1",))
        t.start()
        assert started.wait(30)
        assert pool.get("s2", **config) is not None  # the lock is free meanwhile
        assert pool.stats().size == 1
        finish.set()
        t.join(30)
        pool.close()

    async def test_async_release_is_off_the_event_loop(self, built: Built,
                                                       config: dict[str, Any]) -> None:
        loop_thread = threading.current_thread()
        where: list[threading.Thread] = []

        def release(agent: Any) -> None:
            where.append(threading.current_thread())
            agent.release_clients()

        pool: AgentPool[Any] = AgentPool(built, signature=SIGNATURE, max_size=1,
                                         on_evict=release)
        async with pool.lease("a", **config):
            pass
        async with pool.lease("b", **config):
            pass
        await pool.aclose()
        assert len(where) == 2 and loop_thread not in where
