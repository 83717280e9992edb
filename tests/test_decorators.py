"""@cache on every kind of callable: forms, generators, exceptions, single-flight, TTL."""

from __future__ import annotations

import asyncio
import datetime
import functools
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import pytest

import dejacache
from dejacache.stores._base import Record


@pytest.fixture
def store() -> dejacache.MemoryStore:
    s = dejacache.MemoryStore()
    dejacache.configure(store=s)
    return s


# ------------------------------------------------------------------------------ forms


def test_bare_and_called_forms(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    def a(x: int) -> int:
        calls.append(x)
        return x

    @dejacache.cache()
    def b(x: int) -> int:
        calls.append(-x)
        return -x

    @dejacache.cache(name="custom.name", ttl=60)
    def c(x: int) -> int:
        calls.append(x * 10)
        return x * 10

    for _ in range(2):
        assert (a(1), b(1), c(1)) == (1, -1, 10)
    assert calls == [1, -1, 10]
    assert a.__name__ == "a"  # functools.wraps
    assert a.cache_name == f"{__name__}.test_bare_and_called_forms.<locals>.a"  # type: ignore[attr-defined]
    assert c.cache_name == "custom.name"  # type: ignore[attr-defined]
    assert {r.name for _, r in store.iterate()} == {a.cache_name, b.cache_name, "custom.name"}  # type: ignore[attr-defined]


def test_kwargs_and_positional_spellings_share_an_entry(store: dejacache.MemoryStore) -> None:
    calls: list[Any] = []

    @dejacache.cache
    def f(a: int, b: int = 2, **extra: Any) -> int:
        calls.append((a, b, extra))
        return a + b

    f(1)
    f(1, 2)
    f(a=1, b=2)
    f(b=2, a=1)
    assert len(calls) == 1
    f(1, temperature=0.5)
    f(1, temperature=0.7)
    assert len(calls) == 3


def test_ignore_argument(store: dejacache.MemoryStore) -> None:
    calls: list[Any] = []

    @dejacache.cache(ignore=["client", "timeout"])
    def f(query: str, client: Any, timeout: float = 1.0) -> str:
        calls.append(query)
        return query.upper()

    assert f("q", object()) == f("q", object(), timeout=9) == "Q"
    assert calls == ["q"]


def test_closures_of_one_factory_answer_for_themselves(store: dejacache.MemoryStore) -> None:
    # make(1) and make(2) have one name and one signature: make(2)'s call was served
    # make(1)'s answer. What a closure was made with is part of its calls.
    def make(n: int) -> Any:
        @dejacache.cache
        def f(x: int) -> tuple[int, int]:
            return (n, x)

        return f

    one, two = make(1), make(2)
    assert (one(5), two(5), one(5), make(2)(5)) == ((1, 5), (2, 5), (1, 5), (2, 5))
    assert one.cache_key(5) != two.cache_key(5)  # type: ignore[attr-defined]
    assert one.explain(5).arguments == {"x": 5, "<captured>": {"n": 1}}  # type: ignore[attr-defined]


def test_a_closure_still_hits_whatever_state_it_keeps(store: dejacache.MemoryStore) -> None:
    # A list it appends to, a counter it assigns (nonlocal) and a client are its state,
    # not what it was made with: keyed, every call would have missed.
    calls: list[int] = []
    count = 0
    client = object()
    model = "m1"

    @dejacache.cache
    def f(x: int) -> str:
        nonlocal count
        count += 1
        calls.append(x)
        return f"{model}:{x}:{client is not None}"

    assert f(1) == f(1) == "m1:1:True"
    assert (calls, count) == ([1], 1)
    model = "m2"  # the enclosing function rebinds what f reads: a new call
    assert f(1) == "m2:1:True"
    assert calls == [1, 1]


def test_ignore_may_name_a_captured_variable(store: dejacache.MemoryStore) -> None:
    calls: list[str] = []

    def make(run_dir: str) -> Any:
        @dejacache.cache(ignore=["run_dir"])
        def f(q: str) -> str:
            calls.append(f"{run_dir}/{q}")
            return q.upper()

        return f

    assert make("/tmp/a")("q") == make("/tmp/b")("q") == "Q"
    assert calls == ["/tmp/a/q"]
    with pytest.raises(dejacache.ConfigurationError, match="run_dirr"):
        dejacache.cache(ignore=["run_dirr"])(make("/tmp/c").__wrapped__)


def test_methods_key_their_instance(store: dejacache.MemoryStore) -> None:
    calls: list[Any] = []

    class Svc:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @dejacache.cache
        def lookup(self, x: int) -> str:
            calls.append((self.tag, x))
            return f"{self.tag}{x}"

        @classmethod
        @dejacache.cache
        def build(cls, x: int) -> int:
            calls.append(("cls", x))
            return x

    assert Svc("a").lookup(1) == "a1"
    assert Svc("b").lookup(1) == "b1"  # another instance's data: another question
    assert Svc("a").lookup(1) == "a1"  # the same data: a hit
    assert Svc.build(3) == Svc.build(3) == 3  # the class, by its qualified name
    assert calls == [("a", 1), ("b", 1), ("cls", 3)]


class _Assistant:
    """Two instances with different models answer differently: the instance matters."""

    LIVE: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, model: str, client: Any = None) -> None:
        self.model = model
        self.client = client  # (not data: never keyable)

    def _answer(self, q: str) -> str:
        self.LIVE.append((self.model, q))
        return f"{self.model}: {q}"


class _KeyedByMethod(_Assistant):
    def __dejacache_key__(self) -> dict[str, str]:
        return {"model": self.model}

    @dejacache.cache
    def ask(self, q: str) -> str:
        return self._answer(q)


class _KeyedByNames(_Assistant):
    __dejacache_key__ = ("model",)

    @dejacache.cache
    def ask(self, q: str) -> str:
        return self._answer(q)

    @dejacache.cache
    async def aask(self, q: str) -> str:
        return self._answer(q)

    @dejacache.cache
    def stream(self, q: str) -> Iterator[str]:
        yield self._answer(q)


@pytest.mark.parametrize("cls", [_KeyedByMethod, _KeyedByNames])
def test_a_class_that_says_how_to_key_it_brings_its_instance_into_the_key(
    store: dejacache.MemoryStore, cls: type[_KeyedByMethod],
) -> None:
    # The instance's own data is the key's, not its identity: a new instance with the same
    # model hits, one with another model runs, whatever the call's spelling.
    _Assistant.LIVE.clear()
    assert cls("gpt-4o").ask("hi") == "gpt-4o: hi"
    assert cls("gpt-4o-mini").ask("hi") == "gpt-4o-mini: hi"
    assert cls("gpt-4o", client=object()).ask(q="hi") == "gpt-4o: hi"
    assert cls.ask(cls("gpt-4o-mini"), "hi") == "gpt-4o-mini: hi"
    assert _Assistant.LIVE == [("gpt-4o", "hi"), ("gpt-4o-mini", "hi")]
    assert cls.ask.explain(cls("o3"), "hi").arguments == {  # type: ignore[attr-defined]
        "q": "hi", "self": {"model": "o3"}}


async def test_every_wrapper_keys_the_instance_its_class_says(
    store: dejacache.MemoryStore,
) -> None:
    _Assistant.LIVE.clear()
    for model in ("a", "b", "a"):
        assert await _KeyedByNames(model).aask("q") == f"{model}: q"
        assert list(_KeyedByNames(model).stream("q")) == [f"{model}: q"]
    assert _Assistant.LIVE == [("a", "q"), ("a", "q"), ("b", "q"), ("b", "q")]


def test_key_self_keys_a_dataclass_or_model_instance_by_its_data(
    store: dejacache.MemoryStore,
) -> None:
    import dataclasses

    pydantic = pytest.importorskip("pydantic")
    live: list[str] = []

    @dataclasses.dataclass
    class Agent:
        model: str
        temperature: float = 0.0

        @dejacache.cache(key_self=True)
        def ask(self, q: str) -> str:
            live.append(f"{self.model}/{self.temperature}")
            return self.model

    class Settings(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        model: str

        @dejacache.cache(key_self=True)
        def ask(self, q: str) -> str:
            live.append(self.model)
            return self.model

    for _ in range(2):
        Agent("a").ask("q"), Agent("a", 0.5).ask("q"), Agent("b").ask("q")
        Settings(model="a").ask("q"), Settings(model="b").ask("q")
    assert live == ["a/0.0", "a/0.5", "b/0.0", "a", "b"]


def test_key_self_true_refuses_an_attribute_it_cannot_key_and_names_it(
    store: dejacache.MemoryStore,
) -> None:
    class Plain:
        def __init__(self) -> None:
            self.model = "m"
            self.lock = threading.Lock()

        @dejacache.cache(key_self=True)
        def ask(self, q: str) -> str:
            return q

        @dejacache.cache(key_self=True, volatile=["self.lock"])
        def masked(self, q: str) -> str:
            return q

    with pytest.raises(dejacache.ConfigurationError, match=(
            r"key_self=True on .*Plain\.ask: attribute 'lock' of .*Plain \(_thread\.lock\) "
            r"cannot be keyed; .*__dejacache_key__, mask it \(volatile=\['self\.lock'\]\)")):
        Plain().ask("q")
    assert Plain().masked("q") == "q"  # a masked attribute is not asked about

    class Typo:
        __dejacache_key__ = ("modle",)

        @dejacache.cache
        def ask(self, q: str) -> str:
            return q

    with pytest.raises(dejacache.UnhashableArgument,
                       match=r"no attribute 'modle', which Typo.__dejacache_key__ names"):
        Typo().ask("q")


def test_key_self_false_leaves_the_instance_out_whatever_its_class_says(
    store: dejacache.MemoryStore,
) -> None:
    class Shared(_Assistant):
        __dejacache_key__ = ("model",)

        @dejacache.cache(key_self=False)
        def ask(self, q: str) -> str:
            return self._answer(q)

    _Assistant.LIVE.clear()
    assert Shared("a").ask("q") == Shared("b").ask("q") == "a: q"
    assert _Assistant.LIVE == [("a", "q")]


def test_key_self_is_refused_where_it_cannot_mean_anything() -> None:
    def plain(self: Any, q: str) -> str:  # not defined in a class: self is an argument
        return q

    with pytest.raises(dejacache.ConfigurationError, match=r"key_self=True on .*plain: it is "
                                                           r"not a method"):
        dejacache.cache(key_self=True)(plain)
    with pytest.raises(dejacache.ConfigurationError, match="not a method"):
        class S:
            @staticmethod
            @dejacache.cache(key_self=True)
            def f(q: str) -> str:
                return q
    with pytest.raises(dejacache.ConfigurationError, match=r"contradicts ignore=\['self'\]"):
        class Ignoring:
            @dejacache.cache(key_self=True, ignore=["self"])
            def f(self, q: str) -> str:
                return q
    with pytest.raises(dejacache.ConfigurationError, match="True, False or None, not 'yes'"):
        class Y:
            @dejacache.cache(key_self="yes")  # type: ignore[call-overload]
            def f(self, q: str) -> str:
                return q


def test_partial_and_callable_objects(store: dejacache.MemoryStore) -> None:
    calls: list[Any] = []

    def base(unit: str, value: int) -> str:
        calls.append((unit, value))
        return f"{value}{unit}"

    km = dejacache.cache(functools.partial(base, "km"))
    mi = dejacache.cache(functools.partial(base, "mi"))
    assert km(3) == km(3) == "3km"
    assert km.cache_name == mi.cache_name  # type: ignore[attr-defined]
    assert mi(3) == "3mi"  # the frozen argument keeps them apart
    assert calls == [("km", 3), ("mi", 3)]

    class Tool:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self, q: str) -> str:
            self.n += 1
            return q * 2

    tool = Tool()
    cached = dejacache.cache(tool)
    assert cached("ab") == cached(q="ab") == "abab"
    assert tool.n == 1
    assert cached.cache_name.endswith("Tool")  # type: ignore[attr-defined]


async def test_async_callable_object(store: dejacache.MemoryStore) -> None:
    class ATool:
        n = 0

        async def __call__(self, q: str) -> str:
            ATool.n += 1
            return q

    cached = dejacache.cache(ATool())
    assert await cached("x") == await cached("x") == "x"
    assert ATool.n == 1


def test_falsy_and_none_results_are_cached(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    def f(x: int) -> Any:
        calls.append(x)
        return [None, 0, "", [], {}, False][x]

    for x in range(6):
        assert f(x) == f(x)
    assert calls == list(range(6))


def test_results_are_independent_copies(store: dejacache.MemoryStore) -> None:
    @dejacache.cache
    def f() -> dict[str, list[int]]:
        return {"a": [1]}

    f()
    first = f()
    first["a"].append(2)
    assert f() == {"a": [1]}


# ------------------------------------------------------------------------------ async


async def test_async_function(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    async def f(x: int) -> dict[str, Any]:
        calls.append(x)
        await asyncio.sleep(0)
        return {"x": x, "t": (1, 2)}

    assert await f(1) == await f(1) == {"x": 1, "t": (1, 2)}
    assert calls == [1]


# ------------------------------------------------------------------------------ generators


def test_generator_items_replayed_in_order(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    def gen(n: int) -> Iterator[Any]:
        calls.append(n)
        for i in range(n):
            yield {"chunk": i, "t": (i,)}
        return "done"

    def drain(g: Iterator[Any]) -> tuple[list[Any], Any]:
        out = []
        while True:
            try:
                out.append(next(g))
            except StopIteration as stop:
                return out, stop.value

    live = drain(gen(3))
    replayed = drain(gen(3))
    assert live == replayed == ([{"chunk": i, "t": (i,)} for i in range(3)], "done")
    assert calls == [3]
    s = dejacache.stats().total
    assert (s.hits, s.misses, s.stores) == (1, 1, 1)


def test_abandoned_generator_stores_nothing(store: dejacache.MemoryStore) -> None:
    cleaned: list[bool] = []

    @dejacache.cache
    def gen() -> Iterator[int]:
        try:
            yield 1
            yield 2
        finally:
            cleaned.append(True)

    g = gen()
    assert next(g) == 1
    g.close()
    assert cleaned == [True]  # the generator's own cleanup ran at once
    assert list(store.iterate()) == []
    assert list(gen()) == [1, 2]
    assert len(list(store.iterate())) == 1


def test_generator_error_stores_nothing(store: dejacache.MemoryStore) -> None:
    @dejacache.cache
    def gen() -> Iterator[int]:
        yield 1
        raise ValueError("half-way")

    with pytest.raises(ValueError):
        list(gen())
    assert list(store.iterate()) == []
    assert dejacache.stats().total.errors == 1


async def test_async_generator(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    async def agen(n: int) -> AsyncIterator[str]:
        calls.append(n)
        for i in range(n):
            await asyncio.sleep(0)
            yield f"tok{i}"

    assert [x async for x in agen(3)] == ["tok0", "tok1", "tok2"]
    assert [x async for x in agen(3)] == ["tok0", "tok1", "tok2"]
    assert calls == [3]
    s = dejacache.stats().total
    assert (s.hits, s.misses, s.stores) == (1, 1, 1)


async def test_abandoned_async_generator_stores_nothing(store: dejacache.MemoryStore) -> None:
    cleaned: list[bool] = []

    @dejacache.cache
    async def agen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            cleaned.append(True)

    g = agen()
    assert await g.__anext__() == 1
    await g.aclose()  # type: ignore[attr-defined]
    assert cleaned == [True]
    assert list(store.iterate()) == []


def test_generator_replay_mode(store: dejacache.MemoryStore) -> None:
    @dejacache.cache
    def gen(n: int) -> Iterator[int]:
        yield from range(n)

    assert list(gen(2)) == [0, 1]
    with dejacache.scope(mode="replay"):
        assert list(gen(2)) == [0, 1]
        with pytest.raises(dejacache.ReplayMiss):
            list(gen(5))


# ------------------------------------------------------------------------------ exceptions


def test_exceptions_are_not_cached(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    def f(x: int) -> int:
        calls.append(x)
        if len(calls) == 1:
            raise ConnectionError("flaky")
        return x

    with pytest.raises(ConnectionError):
        f(1)
    assert f(1) == 1
    assert f(1) == 1
    assert calls == [1, 1]
    s = dejacache.stats().total
    assert (s.errors, s.stores, s.hits) == (1, 1, 1)


async def test_async_exceptions_are_not_cached(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    async def f() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError
        return 7

    with pytest.raises(ConnectionError):
        await f()
    assert await f() == await f() == 7
    assert len(calls) == 2


# ------------------------------------------------------------------------------ single-flight


def test_threads_single_flight(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []
    gate = threading.Barrier(8, timeout=10)

    @dejacache.cache
    def slow(x: int) -> int:
        calls.append(x)
        time.sleep(0.2)
        return x * 2

    results: list[int] = []

    def worker() -> None:
        gate.wait()
        results.append(slow(21))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert results == [42] * 8
    assert calls == [21]


def test_threads_crashed_leader_fails_waiters(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []
    gate = threading.Barrier(4, timeout=10)

    @dejacache.cache
    def boom() -> int:
        calls.append(1)
        time.sleep(0.2)
        raise RuntimeError("leader crashed")

    errors: list[BaseException] = []

    def worker() -> None:
        gate.wait()
        try:
            boom()
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 4
    assert len(calls) < 4  # waiters got the leader's exception instead of running
    assert list(store.iterate()) == []


async def test_asyncio_gather_single_flight(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    async def slow(x: int) -> int:
        calls.append(x)
        await asyncio.sleep(0.05)
        return x + 1

    results = await asyncio.wait_for(asyncio.gather(*(slow(1) for _ in range(10))), 10)
    assert results == [2] * 10
    assert calls == [1]


async def test_asyncio_crashed_leader_fails_waiters(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    async def boom() -> int:
        calls.append(1)
        await asyncio.sleep(0.05)
        raise KeyError("leader crashed")

    results = await asyncio.wait_for(
        asyncio.gather(*(boom() for _ in range(5)), return_exceptions=True), 10
    )
    assert all(isinstance(r, KeyError) for r in results)
    assert calls == [1]


async def test_asyncio_cancelled_leader_hands_over(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []
    started = asyncio.Event()

    @dejacache.cache
    async def slow() -> str:
        calls.append(1)
        started.set()
        await asyncio.sleep(0.1)
        return "value"

    leader = asyncio.create_task(slow())
    await asyncio.wait_for(started.wait(), 5)
    waiters = [asyncio.create_task(slow()) for _ in range(3)]
    await asyncio.sleep(0.01)
    leader.cancel()
    results = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert results == ["value"] * 3
    assert len(calls) == 2  # the cancelled leader, then one waiter that took over
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_asyncio_cancelled_waiter_does_not_cancel_leader(
    store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache
    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "v"

    leader = asyncio.create_task(slow())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(slow())
    await asyncio.sleep(0.01)
    waiter.cancel()
    assert await asyncio.wait_for(leader, 5) == "v"


# ------------------------------------------------------------------------------ TTL and stats


def test_ttl_expires(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache(ttl=0.05)
    def f() -> int:
        calls.append(1)
        return len(calls)

    assert f() == f() == 1
    time.sleep(0.08)
    assert f() == 2


@pytest.mark.parametrize("ttl", ["1h", "90s", "1h30m", datetime.timedelta(minutes=5), 3600])
def test_ttl_takes_durations_and_every_write_stores(store: dejacache.MemoryStore,
                                                    ttl: Any) -> None:
    calls: list[int] = []

    @dejacache.cache(ttl=ttl)
    def f() -> int:
        calls.append(1)
        return len(calls)

    assert f() == f() == 1  # stored on the first call (-W error: no warning either)
    assert calls == [1] and len(list(store.iterate())) == 1


@pytest.mark.parametrize("ttl", ["soon", "1 hour", "h", "-5m", 0, -1, float("nan"),
                                 float("inf"), True, [60]])
def test_a_ttl_that_is_no_duration_is_refused_at_decoration(ttl: Any) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=r"ttl") as info:
        dejacache.cache(ttl=ttl)
    assert repr(ttl) in str(info.value)


def test_stats_count_hits_misses_stores_and_time_saved(store: dejacache.MemoryStore) -> None:
    @dejacache.cache(name="stats.slow")
    def slow(x: int) -> int:
        time.sleep(0.03)
        return x

    slow(1)
    slow(1)
    slow(1)
    slow(2)
    snap = dejacache.stats()
    s = snap.by_name["stats.slow"]
    assert (s.hits, s.misses, s.stores, s.errors) == (2, 2, 2, 0)
    assert 0.05 <= s.time_saved < 1.0  # two hits, each worth the recorded ~30 ms
    assert snap.total.hits == 2
    assert snap.hit_rate == 0.5
    dejacache.reset_stats()
    assert dejacache.stats().total.hits == 0


def test_stats_time_saved_comes_from_the_record(store: dejacache.MemoryStore) -> None:
    @dejacache.cache(name="stats.rec")
    def f() -> int:
        return 1

    key = f.cache_key()  # type: ignore[attr-defined]
    blob = dejacache.JsonCodec().encode(1, key=key, namespace="default")
    store.put(key, Record(value=blob, name="stats.rec", duration=2.5))
    f()
    assert dejacache.stats().by_name["stats.rec"].time_saved == 2.5


def test_stats_tokens_from_openai_and_anthropic_shapes(store: dejacache.MemoryStore) -> None:
    @dejacache.cache(name="llm.openai")
    def openai_like(q: str) -> dict[str, Any]:
        return {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                         "total_tokens": 15}}

    @dejacache.cache(name="llm.anthropic")
    def anthropic_like(q: str) -> dict[str, Any]:
        return {"content": [], "usage": {"input_tokens": 7, "output_tokens": 3,
                                         "cache_read_input_tokens": 100}}

    for _ in range(3):
        openai_like("q")
        anthropic_like("q")
    by = dejacache.stats().by_name
    assert by["llm.openai"].tokens_saved == 30
    assert by["llm.anthropic"].tokens_saved == 220


def test_off_mode_and_stats(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache
    def f() -> int:
        calls.append(1)
        return 1

    dejacache.configure(mode="off")
    f()
    f()
    assert len(calls) == 2
    assert list(store.iterate()) == []
    assert dejacache.stats().total.misses == 0  # off: not counted at all


def test_generator_over_a_plain_value_of_the_same_name_is_a_miss(
    store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache(name="refactored")
    def before() -> int:
        return 5

    before()

    @dejacache.cache(name="refactored")
    def after() -> Iterator[int]:
        yield 1

    assert list(after()) == [1]
    assert list(after()) == [1]


def test_hit_path_skips_volatile_walk_but_stays_sound(
    memory_store: dejacache.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hits use the key built without the volatile walk; misses walk and re-key. Bytes seen
    for the first time are walked once (a raw form is a key only once shown to be its own
    full form), then taken as they are."""
    from dejacache import keys

    walks = []
    real = keys._clean

    def counting(obj: object, names: object) -> bool:
        if isinstance(obj, dict) and "req" in obj:  # root of a key, not the walk's recursion
            walks.append(1)
        return real(obj, names)  # type: ignore[arg-type]

    monkeypatch.setattr(keys, "_clean", counting)
    calls = []

    @dejacache.cache
    def ask(req: dict) -> str:
        calls.append(req)
        return f"answer {req['q']}"

    assert ask({"q": 1, "metadata": {"trace_id": "a"}}) == "answer 1"  # miss: walked
    walks.clear()
    assert ask({"q": 1, "metadata": {"trace_id": "b"}}) == "answer 1"  # fast miss, full hit
    assert ask({"q": 1, "metadata": {}}) == "answer 1"  # fast key == stored key
    assert len(calls) == 1
    assert len(walks) == 2  # the first sight of each
    walks.clear()
    assert ask({"q": 1, "metadata": {}}) == "answer 1"  # seen: no walk
    assert walks == []
    assert ask({"q": 2, "metadata": {"trace_id": "a"}}) == "answer 2"  # different call: runs
    assert len(calls) == 2


def test_a_function_of_a_trace_id_answers_each_trace_its_own(
    memory_store: dejacache.MemoryStore,
) -> None:
    """``trace_id`` was volatile wherever it appeared: ``fetch_trace("def")`` was served
    the answer of ``fetch_trace("abc")``."""
    calls = []

    @dejacache.cache
    def fetch_trace(trace_id: str, metadata: dict[str, str] | None = None) -> str:
        calls.append(trace_id)
        return f"spans of {trace_id}"

    assert fetch_trace("abc") == "spans of abc"
    assert fetch_trace("def") == "spans of def"
    assert fetch_trace("abc", {"trace_id": "run-2"}) == "spans of abc"  # telemetry: a hit
    assert calls == ["abc", "def", "abc"]
    assert fetch_trace("abc", {"trace_id": "run-3"}) == "spans of abc"
    assert calls == ["abc", "def", "abc"]


def test_inputs_mutated_by_the_call_do_not_change_its_key(
    memory_store: dejacache.MemoryStore,
) -> None:
    """The key is taken before the call runs: an agent that appends to the messages it was
    given still hits next time with the same (original) messages."""
    calls = []

    @dejacache.cache
    def step(messages: list[dict]) -> str:
        calls.append(1)
        messages.append({"role": "assistant", "content": "done"})  # mutates its input
        return "done"

    assert step([{"role": "user", "content": "hi"}]) == "done"
    assert step([{"role": "user", "content": "hi"}]) == "done"
    assert len(calls) == 1


def test_callers_mutating_results_cannot_corrupt_the_cache(
    memory_store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache
    def fetch(q: str) -> dict:
        return {"q": q, "items": [1, 2]}

    live = fetch("a")
    live["items"].append("mutated after the miss")
    hit = fetch("a")
    assert hit == {"q": "a", "items": [1, 2]}
    hit["items"].clear()
    assert fetch("a") == {"q": "a", "items": [1, 2]}


def test_volatile_patterns_and_paths_on_the_decorator(store: dejacache.MemoryStore) -> None:
    import re

    calls: list[str] = []

    @dejacache.cache(volatile=[re.compile(r"\d\d:\d\d:\d\d"), "messages[*].id"])
    def ask(messages: list[dict[str, Any]]) -> str:
        calls.append(messages[0]["content"])
        return "answer"

    assert ask([{"content": "now 12:04:31, plan", "id": "a1"}]) == "answer"
    assert ask([{"content": "now 12:05:02, plan", "id": "b2"}]) == "answer"  # a hit
    assert ask([{"content": "now 12:05:02, book", "id": "b2"}]) == "answer"  # other text
    assert calls == ["now 12:04:31, plan", "now 12:05:02, book"]
    stored = [orjson_loads(r.request) for _, r in store.iterate(name=None)]
    assert {"messages": [{"content": "now <volatile>, plan"}]} in stored


def orjson_loads(raw: Any) -> Any:
    import orjson

    return orjson.loads(raw)


def test_a_volatile_path_that_can_never_match_is_an_error(store: dejacache.MemoryStore) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=r"body\.messages.*can never match"):
        @dejacache.cache(volatile=["body.messages"])
        def f(messages: list[Any]) -> int:
            return 1

    @dejacache.cache(volatile=["body.messages"])  # **kwargs may carry it: allowed
    def g(**kwargs: Any) -> int:
        return 1

    with pytest.raises(dejacache.ConfigurationError, match="malformed"):
        dejacache.configure(volatile=["messages[x]"])
    with pytest.raises(dejacache.ConfigurationError, match="malformed"):
        dejacache.scope(volatile=["a..b"])


def test_memory_hits_return_fresh_values_of_every_kind(
    memory_store: dejacache.MemoryStore,
) -> None:
    """The in-memory hit path (checksum checked on put, not per hit) still rebuilds tagged
    values and hands every caller its own copy."""
    calls: list[int] = []

    @dejacache.cache
    def make(n: int) -> dict[str, Any]:
        calls.append(n)
        return {"pair": (n, n + 1), "items": [n], "nothing": None}

    first = make(1)
    second = make(1)
    assert calls == [1]
    assert second == first == {"pair": (1, 2), "items": [1], "nothing": None}
    second["items"].append("mine")
    assert make(1)["items"] == [1]
    assert make(1) is not make(1)


def test_plain_memory_hits_are_fresh_counted_and_follow_configuration_changes() -> None:
    """The short path (a per-function plan, one ``orjson.loads`` of the
    stored body) hands out fresh copies, counts hits, and is rebuilt whenever the settings
    or a scope change: another store misses, record mode calls live, off bypasses."""
    calls: list[str] = []

    @dejacache.cache(name="plain.short")
    def ask(q: str) -> dict[str, Any]:
        calls.append(q)
        return {"answer": q, "refusal": None, "items": [1, 2.5, -0.0]}

    a, b = dejacache.MemoryStore(), dejacache.MemoryStore()
    dejacache.reset_stats()
    dejacache.configure(store=a, mode="auto")
    first = ask("x")
    hit = ask("x")
    assert calls == ["x"] and hit == first and hit is not ask("x")
    hit["items"].append("mine")
    assert ask("x")["items"] == [1, 2.5, -0.0]
    assert dejacache.stats().by_name["plain.short"].hits == 3
    dejacache.configure(store=b)
    ask("x")
    assert calls == ["x", "x"]  # a new store: the old plan's store is not consulted
    with dejacache.scope(store=a):
        ask("x")
        assert calls == ["x", "x"]
        with dejacache.scope(mode="record"):
            ask("x")
            assert calls == ["x", "x", "x"]
        with dejacache.scope(mode="off"):
            ask("x")
            assert calls == ["x", "x", "x", "x"]
    with dejacache.scope(cache_key="other", store=a):
        ask("x")  # another namespace: another key
        assert calls == ["x", "x", "x", "x", "x"]
    s = dejacache.stats().by_name["plain.short"]
    assert (s.hits, s.misses) == (4, 4)  # mode off is not a cached call: not counted


def test_settings_changes_reach_the_warm_hit_path_at_once(store: dejacache.MemoryStore) -> None:
    """The hot path reads the global settings from one cached slot: every
    ``configure``, scope and ``config.reset`` still takes effect on the very next call."""
    from dejacache import config

    calls: list[int] = []

    @dejacache.cache(name="warm")
    def f(x: int) -> dict[str, int]:
        calls.append(x)
        return {"x": x}

    f(1)
    f(1)
    assert calls == [1]
    dejacache.configure(mode="off")
    f(1)
    assert calls == [1, 1]
    dejacache.configure(mode="auto", cache_key="elsewhere")
    f(1)
    f(1)
    assert calls == [1, 1, 1]
    dejacache.configure(cache_key=None)
    f(1)
    assert calls == [1, 1, 1, 1]
    config.reset()
    dejacache.configure(store=dejacache.MemoryStore())
    f(1)
    assert calls == [1, 1, 1, 1, 1]
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
        with pytest.raises(dejacache.ReplayMiss):
            f(1)
        # A worker thread carrying no scope is routed to the open block, not the globals.
        box: list[BaseException] = []

        def bare() -> None:
            try:
                f(1)
            except BaseException as exc:
                box.append(exc)

        t = threading.Thread(target=bare)
        t.start()
        t.join(30)
        assert len(box) == 1 and isinstance(box[0], dejacache.ReplayMiss)
    f(1)  # the globals again: a hit
    assert calls == [1, 1, 1, 1, 1]


# ------------------------------------------------------------ frozen=True


def test_frozen_hits_share_one_read_only_value(memory_store: dejacache.MemoryStore) -> None:
    """No caller gets an object another caller can change: every hit reads one shared
    value through its own read-only view, and changing it in place is refused."""
    calls: list[str] = []

    @dejacache.cache(frozen=True)
    def ask(q: str) -> dict[str, Any]:
        calls.append(q)
        return {"q": q, "items": [1, {"deep": [2]}]}

    live = ask("a")
    first, second = ask("a"), ask("a")
    assert calls == ["a"]
    assert live == first == {"q": "a", "items": [1, {"deep": [2]}]}
    assert first is not second and first._node is second._node
    for change in (lambda: first.__setitem__("q", "b"), lambda: first["items"].append(3),
                   lambda: first["items"][1]["deep"].clear(), lambda: live["items"].pop()):
        with pytest.raises(dejacache.ReadOnlyResult):
            change()
    mine = __import__("copy").deepcopy(first)
    mine["items"].append("mine")
    assert ask("a") == {"q": "a", "items": [1, {"deep": [2]}]}
    assert isinstance(first, Mapping) and isinstance(first["items"], Sequence)


def test_frozen_and_fresh_callers_of_one_entry_stay_apart(
    memory_store: dejacache.MemoryStore,
) -> None:
    def body(q: str) -> dict[str, Any]:
        return {"items": [q]}

    frozen = dejacache.cache(name="shared.name", frozen=True)(body)
    fresh = dejacache.cache(name="shared.name")(body)
    frozen("x")
    assert frozen("x")._node is frozen("x")._node
    mine = fresh("x")
    mine["items"].append("mine")  # the plain decorator still hands out fresh copies
    assert type(mine) is dict and frozen("x") == {"items": ["x"]} == fresh("x")


def test_a_frozen_value_never_outlives_its_entry(memory_store: dejacache.MemoryStore) -> None:
    answer = ["first"]

    @dejacache.cache(frozen=True, ttl=60)
    def ask() -> dict[str, str]:
        return {"answer": answer[0]}

    ask()
    assert ask() == {"answer": "first"}
    answer[0] = "second"
    with dejacache.scope(mode="record"):
        assert ask() == {"answer": "second"}  # re-recorded: a new entry
    assert ask() == {"answer": "second"}
    memory_store.clear()
    answer[0] = "third"
    assert ask() == {"answer": "third"}


def test_frozen_values_count_against_the_memory_budget() -> None:
    store = dejacache.MemoryStore(max_bytes=20_000)

    @dejacache.cache(frozen=True)
    def make(n: int) -> dict[str, Any]:
        return {"n": n, "text": "x" * 1000}

    with dejacache.scope(store=store):
        for n in range(40):
            make(n)
            make(n)  # the first hit keeps the frozen value
    held = sum(e[2] for e in store._data.values())
    assert store.stats().bytes == held <= 20_000
    assert store.evictions > 0


def test_frozen_tagged_values_and_misses(memory_store: dejacache.MemoryStore) -> None:
    """Values the codec tags (tuples, dates) and misses come back read-only too."""
    import datetime

    @dejacache.cache(frozen=True)
    def make(n: int) -> dict[str, Any]:
        return {"pair": (n, [n]), "when": datetime.date(2026, 1, n)}

    for got in (make(1), make(1)):
        assert got == {"pair": (1, [1]), "when": datetime.date(2026, 1, 1)}
        with pytest.raises(dejacache.ReadOnlyResult):
            got["pair"][1].append(2)


async def test_frozen_async_functions(memory_store: dejacache.MemoryStore) -> None:
    @dejacache.cache(frozen=True)
    async def ask(q: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"q": [q]}

    await ask("a")
    one, two = await ask("a"), await ask("a")
    assert one._node is two._node and one == {"q": ["a"]}
    with pytest.raises(dejacache.ReadOnlyResult):
        one["q"].append("b")


def test_frozen_hits_from_many_threads_get_the_one_value(
    memory_store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache(frozen=True)
    def ask(q: int) -> dict[str, Any]:
        return {"q": q, "items": list(range(q))}

    for q in range(8):
        ask(q)
    seen: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(200):
                for q in range(8):
                    got = ask(q)
                    assert got == {"q": q, "items": list(range(q))}
                    seen.append((q, id(got._node)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Threads racing on a key's first hit may each make a copy; only one is kept.
    for q in range(8):
        assert len({i for k, i in seen if k == q}) <= len(threads)
        assert ask(q)._node is ask(q)._node


def test_frozen_is_checked_and_refused_on_generators() -> None:
    with pytest.raises(dejacache.ConfigurationError, match="frozen must be True or False"):
        dejacache.cache(frozen="yes")  # type: ignore[call-overload]
    with pytest.raises(dejacache.ConfigurationError, match="generator"):
        @dejacache.cache(frozen=True)
        def gen() -> Iterator[int]:
            yield 1


def test_ignore_names_a_parameter_or_is_refused() -> None:
    """A misspelt ``ignore=`` name kept the argument in the key without a word."""
    with pytest.raises(dejacache.ConfigurationError,
                       match=r"ignore= on .*f names 'verbos', which is not one of its "
                             r"parameters \(x, verbose\); did you mean 'verbose'\?"):
        @dejacache.cache(ignore=["verbos"])
        def f(x: int, verbose: bool = False) -> int:
            return x

    @dejacache.cache(ignore=["anything"])  # (**kwargs may carry any name)
    def g(x: int, **kw: Any) -> int:
        return x


def test_ignore_takes_one_name_as_a_string() -> None:
    """``ignore="verbose"`` is that one name (as ``volatile=`` takes one), not its letters."""
    @dejacache.cache(ignore="verbose")  # type: ignore[call-overload]
    def f(x: int, verbose: bool = False) -> int:
        return x

    assert f.cache_key(1, verbose=True) == f.cache_key(1, verbose=False)  # type: ignore[attr-defined]
    assert f.cache_key(1) != f.cache_key(2)  # type: ignore[attr-defined]
