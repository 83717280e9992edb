"""scope(...): block overrides in sync code, tasks, generators and threads; no call escapes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import pathlib
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import dejacache
from dejacache.scope import Block, current, decorate_with_block


@pytest.fixture
def store() -> dejacache.MemoryStore:
    s = dejacache.MemoryStore()
    dejacache.configure(store=s, cache_key="base")
    return s


class Counter:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.lock = threading.Lock()

        @dejacache.cache(name="scope.fn")
        def fn(x: int) -> int:
            with self.lock:
                self.calls.append(x)
            return x + 100

        self.fn = fn


def test_scope_overrides_and_restores(store: dejacache.MemoryStore) -> None:
    other = dejacache.MemoryStore()
    with dejacache.scope(cache_key="blk", mode="record", store=other) as s:
        assert isinstance(s, dejacache.scope)
        eff = current()
        assert (eff.namespace, eff.mode, eff.store) == ("blk", "record", other)
    eff = current()
    assert (eff.namespace, eff.mode, eff.store) == ("base", "auto", store)


def test_scope_store_url() -> None:
    with dejacache.scope(store="memory://"):
        assert isinstance(current().store, dejacache.MemoryStore)
        assert current().source == "memory://"


def test_nested_scopes_and_exception_exit(store: dejacache.MemoryStore) -> None:
    with pytest.raises(RuntimeError), dejacache.scope(cache_key="a"), dejacache.scope(
        cache_key="b"
    ):
        assert current().namespace == "b"
        raise RuntimeError
    assert current().namespace == "base"


def test_scope_cache_key_none_disables_caching(store: dejacache.MemoryStore) -> None:
    c = Counter()
    with dejacache.scope(cache_key=None):
        c.fn(1)
        c.fn(1)
    assert c.calls == [1, 1]
    assert list(store.iterate()) == []


def test_replay_scope_serves_recorded_and_refuses_new(store: dejacache.MemoryStore) -> None:
    c = Counter()
    with dejacache.scope(cache_key="rec"):
        c.fn(1)
    with dejacache.scope(cache_key="rec", mode="replay"):
        assert c.fn(1) == 101
        with pytest.raises(dejacache.ReplayMiss):
            c.fn(2)
    assert c.calls == [1]


async def test_scope_in_asyncio_tasks(store: dejacache.MemoryStore) -> None:
    seen: dict[str, str | None] = {}

    async def task(name: str) -> None:
        with dejacache.scope(cache_key=name):
            await asyncio.sleep(0.01)
            seen[name] = current().namespace

    async def outer_sees() -> str | None:
        await asyncio.sleep(0.005)
        return current().namespace

    with dejacache.scope(cache_key="outer"):
        r = await asyncio.gather(task("t1"), task("t2"), outer_sees())
    assert seen == {"t1": "t1", "t2": "t2"}
    assert r[2] == "outer"
    assert current().namespace == "base"


async def test_async_with_scope() -> None:
    async with dejacache.scope(cache_key="aw"):
        assert current().namespace == "aw"
    assert current().namespace != "aw"


def test_decorator_form_sync_and_generator(store: dejacache.MemoryStore) -> None:
    @dejacache.scope(cache_key="deco")
    def plain() -> str | None:
        return current().namespace

    @dejacache.scope(cache_key="gen")
    def gen() -> Iterator[str | None]:
        yield current().namespace
        yield current().namespace
        return None

    assert plain() == "deco"
    it = gen()
    assert next(it) == "gen"
    # Between steps the caller's own context is untouched.
    assert current().namespace == "base"
    assert next(it) == "gen"
    assert list(it) == []
    assert current().namespace == "base"


async def test_decorator_form_async_and_async_generator() -> None:
    @dejacache.scope(cache_key="co")
    async def co() -> str | None:
        await asyncio.sleep(0)
        return current().namespace

    @dejacache.scope(cache_key="ag")
    async def ag() -> AsyncIterator[str | None]:
        yield current().namespace
        await asyncio.sleep(0)
        yield current().namespace

    assert await co() == "co"
    assert [x async for x in ag()] == ["ag", "ag"]


async def test_one_decorated_scope_entered_by_interleaved_tasks() -> None:
    # Regression: two tasks in one shared scope object exiting out of order used to reset
    # each other's tokens and drop the task's own outer scope.
    release = asyncio.Event()

    @dejacache.scope(cache_key="shared")
    async def step(wait: bool) -> str | None:
        if wait:
            await release.wait()
        else:
            await asyncio.sleep(0.01)
        return current().namespace

    async def runner(outer: str, wait: bool) -> tuple[str | None, str | None]:
        with dejacache.scope(cache_key=outer):
            inner = await step(wait)
            after = current().namespace
        return inner, after

    t1 = asyncio.create_task(runner("o1", False))
    t2 = asyncio.create_task(runner("o2", True))
    r1 = await t1  # t1 entered first and leaves first, while t2 is still inside
    release.set()
    r2 = await t2
    assert r1 == ("shared", "o1")
    assert r2 == ("shared", "o2")


def test_run_in_thread_carries_the_scope(store: dejacache.MemoryStore) -> None:
    c = Counter()
    blk = dejacache.scope(cache_key="thr")
    assert blk.run_in_thread(lambda: current().namespace) == "thr"
    assert blk.run_in_thread(c.fn, 4) == 104
    with dejacache.scope(cache_key="thr", mode="replay"):
        assert c.fn(4) == 104
    with pytest.raises(ZeroDivisionError):
        blk.run_in_thread(lambda: 1 / 0)


def test_wrap_executor_and_propagate(store: dejacache.MemoryStore) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        wrapped = dejacache.wrap_executor(pool)
        with dejacache.scope(cache_key="pool"):
            assert wrapped.submit(lambda: current().namespace).result(5) == "pool"
            assert list(wrapped.map(lambda _: current().namespace, range(3))) == ["pool"] * 3
            bound = dejacache.propagate(lambda: current().namespace)
        # propagate binds the context of the moment it was called.
        assert pool.submit(bound).result(5) == "pool"
        # Without a scope the wrapper carries the global settings.
        assert wrapped.submit(lambda: current().namespace).result(5) == "base"


async def test_run_in_executor_with_wrapped_executor() -> None:
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(1) as pool, dejacache.scope(cache_key="ex"):
        got = await loop.run_in_executor(dejacache.wrap_executor(pool), lambda: current().namespace)
        via_to_thread = await asyncio.to_thread(lambda: current().namespace)
    assert got == via_to_thread == "ex"


# ------------------------------------------------------------------------------ bare threads


def _in_bare_thread(fn: Any) -> Any:
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:
            box.append(("err", exc))

    t = threading.Thread(target=target)
    t.start()
    t.join(10)
    assert not t.is_alive()
    return box[0]


def test_bare_thread_in_replay_scope_never_runs_live(store: dejacache.MemoryStore) -> None:
    c = Counter()
    with dejacache.scope(cache_key="bare"):
        c.fn(1)
    with dejacache.scope(cache_key="bare", mode="replay"):
        assert _in_bare_thread(lambda: c.fn(1)) == ("ok", 101)  # served from the block
        status, exc = _in_bare_thread(lambda: c.fn(2))
        assert status == "err" and isinstance(exc, dejacache.ReplayMiss)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:  # an unwrapped pool
            assert pool.submit(c.fn, 1).result(5) == 101
            with pytest.raises(dejacache.ReplayMiss):
                pool.submit(c.fn, 3).result(5)
    assert c.calls == [1]


def test_bare_thread_with_two_blocks_active_fails_closed(store: dejacache.MemoryStore) -> None:
    c = Counter()
    c.fn(1)  # recorded under the global namespace: still must not be served or run
    entered = threading.Barrier(3, timeout=10)
    done = threading.Event()

    def hold(ns: str) -> None:
        with dejacache.scope(cache_key=ns, mode="auto"):
            entered.wait()
            done.wait(10)

    holders = [threading.Thread(target=hold, args=(n,)) for n in ("x", "y")]
    for t in holders:
        t.start()
    try:
        entered.wait()
        status, exc = _in_bare_thread(lambda: c.fn(2))
        assert status == "err"
        assert isinstance(exc, dejacache.ReplayMiss)
        assert "2 dejacache blocks" in str(exc) and "propagate" in str(exc)
    finally:
        done.set()
        for t in holders:
            t.join(10)
    assert c.calls == [1]
    # Once they are gone a bare thread falls back to the global settings again.
    assert _in_bare_thread(lambda: c.fn(2)) == ("ok", 102)


def test_bare_thread_inside_nested_blocks_uses_the_innermost(
    store: dejacache.MemoryStore,
) -> None:
    # Regression: nested blocks in one thread used to count as two and fail closed.
    c = Counter()
    with dejacache.scope(cache_key="inner"):
        c.fn(5)
    with dejacache.scope(cache_key="outer", mode="auto"), dejacache.scope(
        cache_key="inner", mode="replay"
    ):
        assert _in_bare_thread(lambda: current().namespace) == ("ok", "inner")
        assert _in_bare_thread(lambda: c.fn(5)) == ("ok", 105)
        status, exc = _in_bare_thread(lambda: c.fn(6))
        assert status == "err" and isinstance(exc, dejacache.ReplayMiss)
        assert "blocks active" not in str(exc)  # a plain miss in the inner block
    assert c.calls == [5]


async def test_bare_thread_with_sibling_task_blocks_fails_closed(
    store: dejacache.MemoryStore,
) -> None:
    c = Counter()
    both_in = asyncio.Event()
    called = asyncio.Event()  # both blocks stay open until the bare thread has called
    inside: list[str] = []
    results: list[Any] = []

    async def task(ns: str) -> None:
        with dejacache.scope(cache_key=ns):
            inside.append(ns)
            if len(inside) == 2:
                both_in.set()
            await both_in.wait()
            if ns == "s1":
                results.append(await asyncio.to_thread(_in_bare_thread, lambda: c.fn(7)))
                called.set()
            await called.wait()

    await asyncio.wait_for(asyncio.gather(task("s1"), task("s2")), 10)
    (status, exc), = results
    assert status == "err" and isinstance(exc, dejacache.ReplayMiss)
    assert c.calls == []


async def test_bare_thread_async_call_in_replay_scope(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache(name="scope.afn")
    async def afn(x: int) -> int:
        calls.append(x)
        return x

    with dejacache.scope(cache_key="abare", mode="replay"):
        status, exc = _in_bare_thread(lambda: asyncio.run(afn(9)))
    assert status == "err" and isinstance(exc, dejacache.ReplayMiss)
    assert calls == []


def test_main_thread_without_scope_uses_global_settings(store: dejacache.MemoryStore) -> None:
    def other() -> None:
        with dejacache.scope(cache_key="elsewhere"):
            ready.set()
            stop.wait(10)

    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(target=other)
    t.start()
    try:
        ready.wait(10)
        assert current().namespace == "base"
    finally:
        stop.set()
        t.join(10)


def test_decorated_generator_closed_early_cleans_up_inside_the_block() -> None:
    seen: list[str | None] = []

    @dejacache.scope(cache_key="gen-close")
    def gen() -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            seen.append(current().namespace)

    g = gen()
    assert next(g) == 1
    g.close()
    assert seen == ["gen-close"]


async def test_run_in_executor_carries_each_submitters_block(
    store: dejacache.MemoryStore,
) -> None:
    # langwatch-scenario's scenario.run: each scenario in its own ThreadPoolExecutor via
    # loop.run_in_executor, two scenarios in asyncio.gather, each in its own block.
    c = Counter()
    with dejacache.scope(cache_key="s1"):
        c.fn(1)
    with dejacache.scope(cache_key="s2"):
        c.fn(2)
    both_in = asyncio.Event()
    inside: list[str] = []

    async def scenario(ns: str, x: int) -> Any:
        with dejacache.scope(cache_key=ns, mode="replay"):
            inside.append(ns)
            if len(inside) == 2:
                both_in.set()
            await both_in.wait()
            loop = asyncio.get_running_loop()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return await loop.run_in_executor(
                    pool, lambda: (current().namespace, c.fn(x)))

    got = await asyncio.wait_for(asyncio.gather(scenario("s1", 1), scenario("s2", 2)), 10)
    assert got == [("s1", 101), ("s2", 102)]
    assert c.calls == [1, 2]  # both replayed, none live


def test_a_shared_executor_never_mixes_two_blocks(store: dejacache.MemoryStore) -> None:
    # One worker thread serves tasks submitted from two blocks: each task sees its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with dejacache.scope(cache_key="a"):
            first = pool.submit(lambda: current().namespace).result(10)
        with dejacache.scope(cache_key="b"):
            second = pool.submit(lambda: current().namespace).result(10)
        third = pool.submit(lambda: current().namespace).result(10)
    assert (first, second, third) == ("a", "b", "base")


def test_executor_carry_is_installed_only_while_a_block_is_open() -> None:
    from dejacache import _threads

    assert not _threads.patched()
    with dejacache.scope(cache_key="x"):
        assert _threads.patched()
        with dejacache.scope(cache_key="y"):
            assert _threads.patched()
        assert _threads.patched()
    assert not _threads.patched()


@dejacache.cache(name="scope.lookup")
def lookup(request: dict[str, Any]) -> int:
    return len(request)


def test_a_volatile_path_that_never_matched_warns_at_exit(store: dejacache.MemoryStore) -> None:
    typo = (r"volatile path 'request\.nonexistent_root\.x' from scope\("
            r".*never matched: calls keyed under it had 'request'")
    with pytest.warns(dejacache.DejacacheWarning, match=typo), \
            dejacache.scope(volatile=["request.meta.run", "request.nonexistent_root.x"]):
        lookup({"meta": {"run": 1}})
        lookup({"meta": {"run": 2}})


def test_volatile_paths_that_matched_or_were_never_tried_stay_quiet(
        store: dejacache.MemoryStore) -> None:
    # (the suite runs with -W error: any warning fails the test)
    with dejacache.scope(volatile=["request.meta.run"]):
        lookup({"other": 1})
        lookup({"meta": {"run": 1}})  # matched once: enough
    with dejacache.scope(volatile=["request.nonexistent_root.x"]):
        pass  # no call at all
    with dejacache.scope(volatile=["request.nonexistent_root.x"]):
        Counter().fn(1)  # no call had a ``request``: the path was never tried
    # matched in a nested block: counts for the outer one too
    with dejacache.scope(volatile=["request.meta.run"]), \
            dejacache.scope(volatile=["request.meta.other"]):
        lookup({"meta": {"run": 1, "other": 2}})


# ------------------------------------------------------------- blocks opened in other threads


class _Held:
    """A block held open in a thread of its own until released (Events, no sleeps)."""

    def __init__(self, block: Any) -> None:
        self.block = block
        self.entered = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with self.block:
            self.entered.set()
            self.release.wait(10)

    def __enter__(self) -> _Held:
        self.thread.start()
        assert self.entered.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_a_block_opened_in_another_thread_starts_from_its_own_settings(
    store: dejacache.MemoryStore,
) -> None:
    # A test's block is open in one thread; a service thread opens a block of its own. It
    # must start from that thread's settings (here the global ones), never from the
    # test's block: not its namespace, mode, volatile items or store.
    c = Counter()
    test_store = dejacache.MemoryStore()
    service_store = dejacache.MemoryStore()
    glob = dejacache.scope().effective()

    def service() -> Any:
        with dejacache.scope(cache_key="svc", store=service_store):
            eff = current()
            return eff.namespace, eff.mode, eff.volatile == glob.volatile, c.fn(1)

    with _Held(dejacache.scope(cache_key="test", mode="replay", store=test_store,
                               volatile=["trace_id"])):
        got = _in_bare_thread(service)
    assert got == ("ok", ("svc", "auto", True, 101))
    assert [r.namespace for _, r in service_store.iterate()] == ["svc"]
    assert list(test_store.iterate()) == []


def test_a_service_threads_scope_calls_stay_out_of_a_tests_cassette(
    store: dejacache.MemoryStore, tmp_path: Any,
) -> None:
    c = Counter()
    path = tmp_path / "test.json"

    def service() -> int:
        with dejacache.scope(cache_key="svc"):
            return c.fn(2)

    with dejacache.cassette(path, mode="record") as tape:
        assert _in_bare_thread(service) == ("ok", 102)
        c.fn(3)  # the test's own call
    assert tape.counters.recorded == 1
    entries = __import__("orjson").loads(path.read_bytes())["entries"]
    assert [e["request"]["x"] for e in entries] == [3]
    assert [r.namespace for _, r in store.iterate()] == ["svc"]  # the global store's


def test_a_block_of_its_own_works_while_two_are_open_elsewhere(
    store: dejacache.MemoryStore, tmp_path: Any,
) -> None:
    # With two blocks open in other threads a bare thread's calls are refused (they cannot
    # be attributed), but a block the thread opens itself is its own, in every mode.
    c = Counter()
    path = tmp_path / "own.json"

    def own() -> Any:
        with dejacache.scope(cache_key="own", mode="record"):
            first = c.fn(4)
        with dejacache.cassette(path, mode="record"):
            second = c.fn(5)
        return first, second

    with _Held(dejacache.scope(cache_key="x")), _Held(dejacache.scope(cache_key="y")):
        status, exc = _in_bare_thread(lambda: c.fn(6))
        assert status == "err" and isinstance(exc, dejacache.ReplayMiss)  # still refused
        assert _in_bare_thread(own) == ("ok", (104, 105))
    assert c.calls == [4, 5]
    with dejacache.cassette(path, mode="replay"):  # its recording replays on its own
        assert c.fn(5) == 105
    assert c.calls == [4, 5]


def test_a_cassette_opened_in_another_thread_records_under_its_own_settings(
    store: dejacache.MemoryStore, tmp_path: Any,
) -> None:
    c = Counter()
    path = tmp_path / "worker.json"

    def worker() -> Any:
        with dejacache.cassette(path, mode="auto") as tape:
            return current().namespace, tape.mode, c.fn(7)

    with _Held(dejacache.cassette(tmp_path / "test.json", mode="replay", cache_key="suite-a",
                                  volatile=["x"])):
        assert _in_bare_thread(worker) == ("ok", ("base", "auto", 107))
    with dejacache.cassette(path, mode="replay"):  # no other block open now
        assert c.fn(7) == 107
    assert c.calls == [7]


# ----------------------------------------------------- recordings still open when a block exits


def _words() -> Any:
    calls: list[str] = []

    @dejacache.cache(name="scope.words")
    def words(text: str) -> Iterator[str]:
        calls.append(text)
        yield from text.split()

    return words, calls


def test_a_cached_generator_left_open_at_scope_exit_is_named_then(
    store: dejacache.MemoryStore,
) -> None:
    words, calls = _words()
    warns = pytest.warns(dejacache.DejacacheWarning,
                         match=r"scope.words generator was still being read when its scope "
                               r"block exited; it was not recorded")
    with warns, dejacache.scope(mode="auto", store=store):
        it = words("one two three")
        assert next(it) == "one"
    assert list(it) == ["two", "three"]  # read on after the block: no second warning
    assert len(store) == 0
    with dejacache.scope(mode="auto", store=store):
        assert list(words("one two three")) == ["one", "two", "three"]  # read whole: stored
        assert list(words("one two three")) == ["one", "two", "three"]
    assert calls == ["one two three"] * 2 and len(store) == 1


def test_a_cached_generator_read_across_a_decorated_generators_steps_is_recorded(
    store: dejacache.MemoryStore,
) -> None:
    # The decorator form re-enters the scope around every step: a pause, not an exit.
    words, calls = _words()

    @dejacache.scope(cache_key="steps")
    def agent() -> Iterator[str]:
        yield from words("a b c")

    class Wrapper(Block[None]):
        """A block that enters a scope of its own (as the scenario drop-in does)."""

        def __enter__(self) -> None:
            self.inner = dejacache.scope(cache_key="wrapped")
            self.inner.__enter__()

        def __exit__(self, *exc: Any) -> None:
            self.inner.__exit__(*exc)

    def inner() -> Iterator[str]:
        yield from words("d e")

    wrapped = decorate_with_block(Wrapper(), inner)
    for _ in range(2):
        assert list(agent()) == ["a", "b", "c"]
        assert list(wrapped()) == ["d", "e"]
    assert calls == ["a b c", "d e"]


_BARE_THREAD = """
import _thread, json, sys
import dejacache

calls = []

@dejacache.cache
def f(x):
    calls.append(x)
    return x

if sys.argv[1] == "record":
    with dejacache.cassette("c.json", mode="record"):
        f(1)
    raise SystemExit
done, box = _thread.allocate_lock(), []
done.acquire()

def worker():
    try:
        box.append(f(1))
    finally:
        done.release()

with dejacache.cassette("c.json", mode="replay"):
    loaded = "threading" in sys.modules
    _thread.start_new_thread(worker, ())
    with done:
        pass
print(json.dumps([loaded, box, calls]))
"""


def test_a_bare_thread_that_is_first_to_need_the_main_thread_is_still_routed(
    tmp_path: pathlib.Path,
) -> None:
    """A thread started with ``_thread`` carries no scope: its call goes to the block open
    in the main thread. Telling the main thread apart must not load ``threading`` from that
    thread (the module would name it main, and the call would run live in a replay)."""
    def run(what: str) -> str:
        out = subprocess.run([sys.executable, "-c", _BARE_THREAD, what], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    run("record")
    assert json.loads(run("replay")) == [False, [1], []]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_child_forked_from_a_worker_thread_takes_that_thread_as_its_main_one() -> None:
    import os

    scope_mod = importlib.import_module("dejacache.scope")

    seen: list[object] = []

    def work() -> None:
        seen.append(scope_mod._off_main_thread())
        pid = os.fork()
        if pid == 0:
            os._exit(0 if not scope_mod._off_main_thread() else 1)
        seen.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    t = threading.Thread(target=work)
    t.start()
    t.join(30)
    assert seen == [True, 0]
    assert not scope_mod._off_main_thread()
