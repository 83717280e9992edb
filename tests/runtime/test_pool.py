"""AgentPool: reuse by signature, bounds, release exactly once, turns per session, sessions."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import dejacache
from dejacache import AgentPool, PoolError
from dejacache.runtime import _lease_threads, current_session

SECRET = "sk-live-0123456789abcdef-DO-NOT-KEEP"


class Agent:
    """A stand-in agent: remembers how it was built, accepts per-message attributes. Its
    parameters are named, so the pool knows every config name it can be given."""

    made = 0

    def __init__(self, model: str = "m", api_key: str | None = None, toolsets: Any = None,
                 system_prompt: str | None = None, cache_keys: Any = None,
                 reasoning_config: Any = None, callback: Any = None) -> None:
        Agent.made += 1
        self.n = Agent.made
        self.model = model
        self.has_key = api_key is not None  # the key itself is not kept
        self.toolsets, self.system_prompt, self.cache_keys = toolsets, system_prompt, cache_keys
        self.reasoning_config = reasoning_config
        self.callback = callback
        self.closed = 0

    def __repr__(self) -> str:
        return f"Agent#{self.n}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Releases:
    """on_evict recorder that also checks no agent is released while leased."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.released: list[Agent] = []
        self.leased: set[int] = set()
        self.violations: list[str] = []
        self.threads: list[str] = []

    def __call__(self, agent: Agent) -> None:
        with self.lock:
            if id(agent) in self.leased:
                self.violations.append(f"{agent!r} released while leased")
            agent.closed += 1
            self.released.append(agent)
            self.threads.append(threading.current_thread().name)


@pytest.fixture
def rel() -> Releases:
    return Releases()


def make(rel: Releases | None = None, **kw: Any) -> AgentPool[Agent]:
    kw.setdefault("signature", ("model", "api_key", "toolsets", "system_prompt"))
    return AgentPool(Agent, on_evict=rel, **kw)


# ---------------------------------------------------------------- signature and reuse


def test_same_config_same_agent_and_changes_rebuild(rel: Releases) -> None:
    pool = make(rel)
    a = pool.get("s1", model="m1", api_key="k", toolsets=["web"])
    assert pool.get("s1", model="m1", api_key="k", toolsets=["web"]) is a
    for change in ({"model": "m2"}, {"api_key": "k2"}, {"toolsets": ["web", "fs"]},
                   {"system_prompt": "edited"}):
        cfg = {"model": "m1", "api_key": "k", "toolsets": ["web"], **change}
        b = pool.get("s1", **cfg)
        assert b is not a, change
        assert rel.released[-1] is a and a.closed == 1
        a = pool.get("s1", model="m1", api_key="k", toolsets=["web"])
    st = pool.stats()
    assert st.hits == 1 and st.builds == 1 and st.rebuilds == 8
    assert st.evicted == {"replaced": 8} and len(pool) == 1


def test_names_outside_signature_go_to_factory_then_are_set_in_place(rel: Releases) -> None:
    pool = make(rel)
    cb1, cb2 = (lambda: 1), (lambda: 2)
    a = pool.get("s", model="m", reasoning_config={"effort": "low"}, callback=cb1)
    assert a.reasoning_config == {"effort": "low"} and a.callback is cb1
    b = pool.get("s", model="m", reasoning_config={"effort": "high"}, callback=cb2)
    assert b is a and a.reasoning_config == {"effort": "high"} and a.callback is cb2
    assert rel.released == [] and Agent.made == a.n


def test_unknown_outside_name_is_an_error_not_a_silent_attribute() -> None:
    class Strict:
        __slots__ = ("model",)

        def __init__(self, model: str, **_: Any) -> None:
            self.model = model

    released: list[Strict] = []
    pool = AgentPool(Strict, signature=("model",), on_evict=released.append)
    with pytest.raises(PoolError, match=r"'temperature'.*add it to signature="):
        pool.get("s", model="m", temperature=0.2)
    assert len(pool) == 0 and len(released) == 1  # built, refused, released once


def test_missing_and_none_agree_and_dict_order_does_not_matter() -> None:
    pool = make(signature=("model", "cache_keys"))
    a = pool.get("s", model="m")
    assert pool.get("s", model="m", cache_keys=None) is a
    b = pool.get("s", model="m", cache_keys={"x": 1, "y": 2})
    assert b is not a
    assert pool.get("s", model="m", cache_keys={"y": 2, "x": 1}) is b
    assert pool.get("s", model="m", cache_keys={"y": 2, "x": 3}) is not b


def test_tokens_sharing_a_prefix_differ() -> None:
    pool = make()
    a = pool.get("s", api_key="eyJhbGci.token-for-account-a")
    assert pool.get("s", api_key="eyJhbGci.token-for-account-b") is not a


def _reachable_strings(root: object, skip: set[int]) -> Iterator[str]:
    seen: set[int] = set(skip)
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            yield obj
            continue
        if isinstance(obj, (type, type(threading))):  # classes and modules: not pool state
            continue
        stack.extend(gc.get_referents(obj))


def test_secret_values_are_digested_and_never_kept() -> None:
    pool = make()
    agent = pool.get("s", model="m", api_key=SECRET)
    assert agent.has_key
    skip = {id(agent), id(Agent), id(pool.factory)}
    found = [s for s in _reachable_strings(pool, skip) if "DO-NOT-KEEP" in s]
    assert found == []
    digests = [s.digest for s in pool._slots.values()]
    assert len(digests) == 1 and len(digests[0]) == 32


def test_callable_signature_names_it_reads_are_inside() -> None:
    def sig(cfg: Any) -> dict[str, Any]:
        return {"model": cfg["model"], "prompt": cfg.get("system_prompt")}

    pool = make(signature=sig)
    a = pool.get("s", model="m", system_prompt="p", callback=None)
    assert pool.get("s", model="m", system_prompt="p", callback=print) is a
    assert a.callback is print
    assert pool.get("s", model="m", system_prompt="p2", callback=print) is not a


class Explicit:
    """A factory whose parameters are known: the config names it can ever be given."""

    def __init__(self, model: str, system_prompt: str = "", reasoning: Any = None) -> None:
        self.model, self.system_prompt, self.reasoning = model, system_prompt, reasoning


def test_a_signature_name_the_factory_never_takes_is_refused_at_construction() -> None:
    with pytest.raises(dejacache.ConfigurationError, match=r"'modle'") as info:
        AgentPool(Explicit, signature=("modle", "system_prompt"))
    msg = str(info.value)
    assert "model, system_prompt, reasoning" in msg  # what the factory does take
    pool = AgentPool(Explicit, signature=("model", "system_prompt"))
    a = pool.get("s", model="gpt-4.1", system_prompt="p", reasoning="low")
    assert pool.get("s", model="gpt-4.1", system_prompt="p", reasoning="high") is a
    b = pool.get("s", model="gpt-5", system_prompt="p")  # a real model change rebuilds
    assert b is not a and b.model == "gpt-5"


def test_a_signature_name_a_keyword_factory_is_not_given_is_refused_at_the_turn() -> None:
    """A factory taking ``**config`` could be given any name, so the pool checks a turn's
    config: a signature name it lacks, while a name outside the signature would be set on a
    reused agent, is a typo or a value not passed, and taking it as "no value" would set a
    new model on the old agent instead of rebuilding it."""
    built: list[dict[str, Any]] = []

    def factory(**config: Any) -> Agent:
        built.append(config)
        return Agent(**config)

    pool = AgentPool(factory, signature=("modle", "system_prompt"))
    with pytest.raises(dejacache.ConfigurationError, match=r"'modle'") as info:
        pool.get("s", model="gpt-4.1", system_prompt="p")
    assert "(model)" in str(info.value)  # the name a reuse would have set in place
    with pytest.raises(dejacache.ConfigurationError, match=r"'modle'"), \
            pool.lease("s", model="gpt-4.1", system_prompt="p"):
        pass
    assert built == [] and len(pool) == 0
    pool = AgentPool(factory, signature=("model", "system_prompt", "user_id"))
    a = pool.get("s", model="gpt-4.1", system_prompt="p")  # all inside: user_id left out
    with pytest.raises(dejacache.ConfigurationError, match=r"'user_id'.*\(callback\)"):
        pool.get("s", model="gpt-4.1", system_prompt="p", callback=print)
    assert pool.get("s", model="gpt-4.1", system_prompt="p", user_id=None,
                    callback=print) is a  # None: supplied, no value
    assert pool.get("s", model="gpt-5", system_prompt="p") is not a


def test_a_callable_signature_reading_a_name_the_factory_never_takes_is_refused() -> None:
    pool = AgentPool(Explicit, signature=lambda cfg: (cfg.get("modle"), cfg["system_prompt"]))
    with pytest.raises(dejacache.ConfigurationError, match=r"'modle'"):
        pool.get("s", model="gpt-4.1", system_prompt="p")
    assert len(pool) == 0


def test_bad_arguments() -> None:
    for kw in ({"max_size": 0}, {"max_size": 2.5}, {"idle_ttl": 0}, {"idle_ttl": float("nan")},
               {"idle_ttl": float("inf")}, {"idle_ttl": "an hour"}, {"concurrent": "maybe"},
               {"signature": [""]}, {"on_evict": 3}):
        with pytest.raises(dejacache.ConfigurationError):
            AgentPool(Agent, **kw)

    async def aclose(agent: Any) -> None:
        return None

    assert AgentPool(Agent, idle_ttl="90m").idle_ttl == 5400.0
    with pytest.raises(dejacache.ConfigurationError, match="plain callable"):
        AgentPool(Agent, on_evict=aclose)
    with pytest.raises(dejacache.ConfigurationError):
        AgentPool(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- bounds


def test_lru_bound_and_touch(rel: Releases) -> None:
    pool = make(rel, max_size=3)
    agents = {k: pool.get(k) for k in ("s0", "s1", "s2")}
    pool.get("s0")  # s0 is now the most recently used: s1 goes first
    pool.get("s3")
    assert "s1" not in pool and all(k in pool for k in ("s0", "s2", "s3"))
    assert rel.released == [agents["s1"]] and len(pool) == 3
    assert pool.stats().evicted == {"lru": 1}


def test_idle_ttl_on_a_monotonic_clock(rel: Releases) -> None:
    clock = Clock()
    pool = make(rel, idle_ttl=60.0, clock=clock)
    stale, fresh = pool.get("stale"), None
    clock.now += 30
    fresh = pool.get("fresh")
    clock.now += 31
    assert pool.sweep() == 1
    assert rel.released == [stale] and "fresh" in pool
    clock.now += 60
    pool.get("other")  # every turn applies the bounds too
    assert rel.released == [stale, fresh]
    assert pool.stats().evicted == {"idle": 2}


def test_leased_agent_is_never_released_and_bound_restored_when_turn_ends(
        rel: Releases) -> None:
    clock = Clock()
    pool = make(rel, max_size=2, idle_ttl=10.0, clock=clock)
    with pool.lease("busy") as busy:
        rel.leased.add(id(busy))
        clock.now += 100  # past the TTL while in a turn
        assert pool.sweep() == 0
        other = pool.get("other")
        third = pool.get("third")  # over the bound: only idle agents can go
        assert rel.released == [other] and "busy" in pool and len(pool) == 2
        rel.leased.discard(id(busy))
    assert len(pool) == 2 and "busy" in pool and rel.violations == []
    clock.now += 100
    assert pool.sweep() == 2
    assert rel.released == [other, third, busy]  # least recently used first


def test_a_turn_ending_over_the_bound_releases_then(rel: Releases) -> None:
    pool = make(rel, max_size=1)
    with pool.lease("busy") as busy:
        other = pool.get("other")  # not leased: it is the one idle agent over the bound
        assert rel.released == [other] and len(pool) == 1
    assert rel.released == [other] and "busy" in pool and busy.closed == 0


def test_all_leased_over_bound_then_released_as_turns_end(rel: Releases) -> None:
    pool = make(rel, max_size=2)
    leases = [pool.lease(f"s{i}") for i in range(4)]
    agents = [lease.__enter__() for lease in leases]
    rel.leased.update(id(a) for a in agents)
    assert len(pool) == 4 and rel.released == []
    for lease, agent in reversed(list(zip(leases, agents, strict=True))):
        rel.leased.discard(id(agent))
        lease.__exit__(None, None, None)
    # s3 ends first with the pool at 4 of 2: the only idle agent is s3's, so it goes; then
    # s2's. Released as each turn ended, never during it.
    assert len(pool) == 2 and rel.violations == []
    assert rel.released == [agents[3], agents[2]]


def test_evict_one_session_leaves_others_and_waits_for_a_turn(rel: Releases) -> None:
    pool = make(rel)
    a, b = pool.get("A"), pool.get("B")
    assert pool.evict("A") is True and pool.evict("A") is False
    assert "A" not in pool and "B" in pool and rel.released == [a]
    with pool.lease("B") as leased:
        assert leased is b
        assert pool.evict("B") is True and "B" not in pool
        assert rel.released == [a]  # not while leased
    assert rel.released == [a, b]
    assert pool.get("B") is not b


def test_clear_and_close(rel: Releases) -> None:
    pool = make(rel)
    agents = [pool.get(f"s{i}") for i in range(3)]
    lease = pool.lease("busy")
    busy = lease.__enter__()
    assert pool.clear() == 4 and len(pool) == 1 and len(rel.released) == 3
    lease.__exit__(None, None, None)
    assert len(pool) == 0 and rel.released[-1] is busy
    pool.close()
    with pytest.raises(PoolError, match="closed"):
        pool.get("s0")
    assert sorted(a.closed for a in [*agents, busy]) == [1, 1, 1, 1]


def test_on_evict_errors_are_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    def boom(agent: Agent) -> None:
        raise RuntimeError("close failed")

    pool = AgentPool(Agent, signature=("model",), on_evict=boom, max_size=1)
    pool.get("a")
    with caplog.at_level(logging.ERROR, logger="dejacache.runtime"):
        b = pool.get("b")  # evicting `a` fails in on_evict; this turn is still served
    assert isinstance(b, Agent)
    assert pool.stats().release_errors == 1 and pool.stats().released == 1
    assert "on_evict failed" in caplog.text


def test_factory_failure_keeps_the_old_agent(rel: Releases) -> None:
    def factory(model: str) -> Agent:
        if model == "bad":
            raise ValueError("no such model")
        return Agent(model)

    pool = AgentPool(factory, signature=("model",), on_evict=rel)
    a = pool.get("s", model="good")
    with pytest.raises(ValueError):
        pool.get("s", model="bad")
    assert pool.get("s", model="good") is a and rel.released == []
    with pytest.raises(ValueError), pool.lease("new", model="bad"):
        pass
    assert "new" not in pool and pool.stats().leased == 0


# ---------------------------------------------------------------- turns per session


def test_turns_of_one_session_are_serialised_others_never_wait() -> None:
    pool = make()
    inside = threading.Event()
    let_go = threading.Event()
    order: list[str] = []

    def first() -> None:
        with pool.lease("s"):
            order.append("first in")
            inside.set()
            let_go.wait(10)
            order.append("first out")

    def second() -> None:
        with pool.lease("s"):
            order.append("second in")

    t1 = threading.Thread(target=first)
    t1.start()
    assert inside.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    with pool.lease("other") as other:  # another session: straight in
        assert isinstance(other, Agent)
    while pool.stats().waiting != 1:  # second is queued behind first
        threading.Event().wait(0.001)
    let_go.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first in", "first out", "second in"]


def test_refuse_mode_fails_fast() -> None:
    pool = make(concurrent="refuse")
    box: list[BaseException] = []
    go = threading.Event()

    def other_caller() -> None:  # started before the lease: a separate caller
        go.wait(5)
        try:
            pool.get("s")
        except PoolError as exc:
            box.append(exc)

    t = threading.Thread(target=other_caller)
    t.start()
    with pool.lease("s"):
        go.set()
        t.join(5)
        assert isinstance(box[-1], PoolError) and "refuses" in str(box[-1])
        assert pool.get("other") is not None
    assert pool.stats().refused == 1


def test_nested_lease_of_the_same_session_is_refused() -> None:
    pool = make()
    with pool.lease("s"), pytest.raises(PoolError, match="already leased"):
        pool.get("s")
    with pool.lease("s"), pool.lease("t"):
        pass


async def test_async_turns_serialised_cancellation_safe_and_other_sessions_free() -> None:
    pool = make()
    gate = asyncio.Event()
    order: list[str] = []

    async def turn(name: str, key: str, hold: bool = False) -> None:
        async with pool.lease(key):
            order.append(name)
            if hold:
                await gate.wait()

    first = asyncio.create_task(turn("first", "s", hold=True))
    while "first" not in order:
        await asyncio.sleep(0)
    cancelled = asyncio.create_task(turn("cancelled", "s"))
    second = asyncio.create_task(turn("second", "s"))
    await asyncio.wait_for(turn("other", "o"), 5)  # not blocked by session s
    while pool.stats().waiting != 2:
        await asyncio.sleep(0)
    cancelled.cancel()
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert order == ["first", "other", "second"]
    assert pool.stats().leased == 0 and pool.stats().waiting == 0


async def test_async_factory_and_on_evict_run_off_the_loop(rel: Releases) -> None:
    loop_thread = threading.current_thread().name
    built_in: list[str] = []

    def factory(**kw: Any) -> Agent:
        built_in.append(threading.current_thread().name)
        return Agent(**kw)

    pool = AgentPool(factory, signature=("model",), on_evict=rel, max_size=1)
    async with pool.lease("a"):
        pass
    async with pool.lease("b"):
        pass
    pool.evict("b")  # a sync call made on the loop hands the release off too
    await pool.aclose()
    assert loop_thread not in built_in
    assert len(rel.released) == 2 and loop_thread not in rel.threads
    assert all(t.startswith("dejacache-pool-release") for t in rel.threads)


async def test_async_factory_coroutine() -> None:
    async def factory(model: str) -> Agent:
        await asyncio.sleep(0)
        return Agent(model)

    pool = AgentPool(factory, signature=("model",))
    async with pool.lease("s", model="m") as a:
        assert a.model == "m"
    with pytest.raises(PoolError, match="async"):
        pool.get("t", model="m")


class SlowBuild:
    """A sync factory that blocks in its thread until the test lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()
        self.built: list[Agent] = []

    def __call__(self, model: str = "m") -> Agent:
        self.started.set()
        assert self.gate.wait(10)
        agent = Agent(model)
        self.built.append(agent)
        return agent


def _asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    # "Task was destroyed but it is pending", an exception in a callback of a closed loop...
    return [r.getMessage() for r in caplog.records
            if r.name == "asyncio" or r.levelno >= logging.ERROR]


async def test_an_agent_built_for_a_cancelled_turn_is_released_once(
    rel: Releases, caplog: pytest.LogCaptureFixture,
) -> None:
    build = SlowBuild()
    released = threading.Event()

    def on_evict(agent: Agent) -> None:
        rel(agent)
        released.set()

    pool = AgentPool(build, signature=("model",), on_evict=on_evict)
    turn = asyncio.create_task(pool.lease("s").__aenter__())
    await asyncio.to_thread(build.started.wait, 5)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    build.gate.set()
    assert await asyncio.to_thread(released.wait, 5)
    orphan, = build.built
    assert rel.released == [orphan] and orphan.closed == 1
    assert len(pool) == 0 and pool.stats().leased == 0
    async with pool.lease("s") as again:  # the session is free, and builds anew
        assert again is not orphan
    assert _asyncio_errors(caplog) == []


def test_an_agent_built_while_asyncio_run_ended_is_released_once(
    rel: Releases, caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio.run cancels the tasks left when its coroutine returns and closes the loop: the
    # agent the factory's thread finishes afterwards has no loop to hand it back to.
    build = SlowBuild()
    cut = threading.Event()
    pool = AgentPool(build, signature=("model",), on_evict=rel)

    async def turn() -> None:
        try:
            async with pool.lease("s"):
                pytest.fail("the turn was cut while its agent was built")
        except asyncio.CancelledError:
            cut.set()
            raise

    tasks: list[asyncio.Task[None]] = []

    async def main() -> None:
        tasks.append(asyncio.create_task(turn()))
        await asyncio.to_thread(build.started.wait, 5)  # then return, the turn still open

    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert cut.wait(5)
    finally:
        build.gate.set()  # asyncio.run waits for its executor's threads before it returns
    runner.join(10)
    assert not runner.is_alive() and errors == []
    assert rel.released == build.built and len(build.built) == 1
    assert build.built[0].closed == 1 and rel.threads != []
    assert pool.stats().released == 1 and len(pool) == 0
    gc.collect()
    assert _asyncio_errors(caplog) == []


# ---------------------------------------------------------------- the lease's session


def test_lease_session_reaches_bare_threads_and_executor_tasks() -> None:
    pool = make()
    seen: dict[str, Any] = {}
    with ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: None).result(5)  # a worker started before any lease
        with pool.lease("chat:42"):
            sess = current_session()
            assert sess is not None and sess.session_id == "chat:42" and sess.tenant is None
            t = threading.Thread(target=lambda: seen.update(bare=current_session()))
            t.start()
            t.join(5)
            seen["task"] = ex.submit(current_session).result(5)
            with ThreadPoolExecutor(1) as fresh:  # worker spawned inside the lease
                seen["fresh"] = fresh.submit(current_session).result(5)
                late = fresh
                assert _lease_threads.patched()
            fresh_after = ThreadPoolExecutor(1)
            fresh_after.submit(lambda: None).result(5)
        assert not _lease_threads.patched()
        seen["after"] = fresh_after.submit(current_session).result(5)
        fresh_after.shutdown()
        t = threading.Thread(target=lambda: seen.update(outside=current_session()))
        t.start()
        t.join(5)
    del late
    assert seen["bare"] is sess and seen["task"] is sess and seen["fresh"] is sess
    # A worker spawned during a lease does not keep that session for later tasks.
    assert seen["after"] is None and seen["outside"] is None
    assert current_session() is None


async def test_concurrent_async_leases_each_see_their_own_session() -> None:
    pool = make()

    async def turn(key: str) -> tuple[str, str]:
        async with pool.lease(key):
            await asyncio.sleep(0)
            box: list[Any] = []
            t = threading.Thread(target=lambda: box.append(current_session()))
            t.start()
            await asyncio.to_thread(t.join, 5)
            return key, box[0].session_id

    got = await asyncio.gather(*(turn(f"s{i}") for i in range(20)))
    assert all(k == sid for k, sid in got)


# ---------------------------------------------------------------- churn (bounded soak)


async def test_churn_releases_each_evicted_agent_once_and_never_a_leased_one(
        rel: Releases) -> None:
    pool = AgentPool(Agent, signature=("model",), on_evict=rel, max_size=16)
    built: list[Agent] = []

    async def session(i: int) -> None:
        for turn in range(3):
            # every 7th session switches model on its last turn: a rebuild
            model = "m2" if i % 7 == 0 and turn == 2 else "m"
            async with pool.lease(f"s{i % 300}", model=model) as agent:
                with rel.lock:
                    rel.leased.add(id(agent))
                    built.append(agent)
                await asyncio.sleep(0)
                with rel.lock:
                    rel.leased.discard(id(agent))

    sem = asyncio.Semaphore(100)

    async def bounded(i: int) -> None:
        async with sem:
            await session(i)

    await asyncio.gather(*(bounded(i) for i in range(1500)))
    await pool.aclose()
    unique = {id(a): a for a in built}
    assert rel.violations == []
    assert len(rel.released) == len(unique)  # all released by close, each once
    assert all(a.closed == 1 for a in unique.values())
    st = pool.stats()
    assert st.size == 0 and st.released == len(unique)
    assert st.builds + st.rebuilds == len(unique)


# ---------------------------------------------------------------- the caller's tenant


def test_a_lease_runs_under_the_callers_tenant_and_loop_guard() -> None:
    """A ``scope="tenant"`` tool called in a lease is cached for the caller's tenant (before:
    the lease opened a session without it, and the tool raised ``ScopeError``); the
    caller's loop guard watches the turn's calls too."""
    pool = make()
    runs: list[str] = []

    @dejacache.tool_cache(resource="orders", scope="tenant")
    def orders() -> str:
        who = current_session()
        assert who is not None and who.tenant is not None
        runs.append(who.tenant)
        return f"orders of {who.tenant}"

    @dejacache.tool_cache(resource="notes", scope="session")
    def notes() -> str:
        who = current_session()
        assert who is not None
        return f"notes of {who.tenant}/{who.session_id}"

    guard = dejacache.LoopGuard(max_repeats=2, on_loop="raise")
    with dejacache.agent_session(tenant="acme", session_id="http-1", loop_guard=guard):
        with pool.lease("chat:42") as agent:
            sess = current_session()
            assert sess is not None and (sess.tenant, sess.session_id) == ("acme", "chat:42")
            assert orders() == "orders of acme" and orders() == "orders of acme"
            assert notes() == "notes of acme/chat:42"
            with pytest.raises(dejacache.AgentLoopDetected):
                orders()
        assert current_session() is not None and current_session().session_id == "http-1"
        with pool.lease("http-1") as again:  # the caller's own session: continued
            assert current_session() is not None and current_session().session_id == "http-1"
    assert runs == ["acme"] and again is not agent


def test_a_lease_never_serves_one_tenants_agent_or_cached_results_to_another() -> None:
    """Two tenants whose sessions share a key (chat 42 of two customers' bots): tenant b's
    lease gets an agent of its own, built for it, and its tool calls never see tenant a's
    cached results. Before: the agent built for tenant a was reused for tenant b."""
    rel = Releases()
    pool = make(rel)
    runs: list[str] = []

    @dejacache.tool_cache(resource="profile", scope="tenant")
    def profile() -> str:
        who = current_session()
        assert who is not None and who.tenant is not None
        runs.append(who.tenant)
        return f"profile of {who.tenant}"

    with dejacache.agent_session(tenant="a"), pool.lease("chat:42", model="m") as agent_a:
        assert profile() == "profile of a"
    with dejacache.agent_session(tenant="b"), pool.lease("chat:42", model="m") as agent_b:
        assert profile() == "profile of b"
    assert agent_b is not agent_a and rel.released == [agent_a]  # replaced, closed once
    with dejacache.agent_session(tenant="b"), pool.lease("chat:42", model="m") as again:
        assert profile() == "profile of b"
    assert again is agent_b and runs == ["a", "b"]
    with pool.lease("chat:42", model="m") as untenanted:  # no tenant is not tenant b
        pass
    assert untenanted is not agent_b
    assert pool.stats().rebuilds == 2


def test_a_bare_thread_a_tenants_lease_starts_never_takes_the_tenant() -> None:
    """A thread the agent starts may outlive the turn (a worker started lazily) and run
    another tenant's work later: it gets the conversation's name for its requests, never
    the tenant, so a tenant-scoped tool there refuses instead of serving tenant a's
    entries. Executor tasks carry their submitter's context per task: the tenant's."""
    pool = make()

    @dejacache.tool_cache(resource="profile", scope="tenant")
    def profile() -> str:
        return "p"

    from dejacache.runtime._conversation import conversation

    seen: dict[str, Any] = {}

    def bare() -> None:
        seen["session"] = current_session()
        seen["conversation"] = conversation()
        try:
            profile()
        except dejacache.ScopeError:
            seen["refused"] = True
        grandchild = threading.Thread(target=lambda: seen.update(grand=conversation()))
        grandchild.start()
        grandchild.join(5)

    with dejacache.agent_session(tenant="a"), pool.lease("chat:42"):
        mine = conversation()
        t = threading.Thread(target=bare)
        t.start()
        t.join(5)
        with ThreadPoolExecutor(1) as ex:
            task = ex.submit(lambda: (current_session(), profile())).result(5)
    assert mine == "a/chat:42"
    assert seen == {"session": None, "conversation": mine, "refused": True, "grand": mine}
    assert task[0] is not None and task[0].tenant == "a" and task[1] == "p"


def test_a_signature_callable_is_the_whole_signature_however_lossy() -> None:
    """By design: what a callable signature returns decides reuse, and the names it read
    are never set on the agent (a prompt's per-message clock left out keeps the agent's
    built prompt). A callable returning only the model's family keeps the agent built for
    the family's first model; returning the model rebuilds on a change."""
    family = make(signature=lambda c: {"family": c["model"].split("-")[0]})
    a = family.get("s", model="gpt-4.1")
    b = family.get("s", model="gpt-4.1-mini")
    assert b is a and b.model == "gpt-4.1"  # declared: the family is the signature
    assert family.get("s", model="claude-3") is not a
    exact = make(signature=lambda c: {"model": c["model"]})
    c = exact.get("s", model="gpt-4.1")
    assert exact.get("s", model="gpt-4.1-mini") is not c
