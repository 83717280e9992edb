"""The shared call path: modes, replay-miss explanations, damaged entries, failing stores."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import dejacache
from dejacache import _engine
from dejacache.errors import ReplayMiss
from dejacache.stores._base import Record


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    # warn_once is process-wide by design; each test here wants to see its own warning.
    _engine._WARNED.clear()
    yield
    _engine._WARNED.clear()


@pytest.fixture
def store() -> dejacache.MemoryStore:
    s = dejacache.MemoryStore()
    dejacache.configure(store=s, cache_key="eng")
    return s


class Live:
    """A decorated 'LLM call' that counts live invocations."""

    def __init__(self, name: str = "llm.chat") -> None:
        self.calls: list[dict[str, Any]] = []

        @dejacache.cache(name=name)
        def chat(model: str, messages: list[dict[str, str]], temperature: float = 0.0) -> Any:
            self.calls.append({"model": model, "messages": messages})
            return {"answer": f"{model}:{messages[-1]['content']}", "n": len(self.calls)}

        self.chat = chat


MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


# ------------------------------------------------------------------------------ modes


def test_auto_serves_hits_and_stores_misses(store: dejacache.MemoryStore) -> None:
    live = Live()
    a = live.chat("m", MSGS)
    b = live.chat("m", MSGS)
    assert a == b and len(live.calls) == 1
    assert len(list(store.iterate())) == 1


def test_record_always_runs_and_overwrites(store: dejacache.MemoryStore) -> None:
    live = Live()
    live.chat("m", MSGS)
    with dejacache.scope(mode="record"):
        assert live.chat("m", MSGS)["n"] == 2
        assert live.chat("m", MSGS)["n"] == 3
    assert len(list(store.iterate())) == 1
    assert live.chat("m", MSGS)["n"] == 3  # auto now serves the newest recording


def test_off_runs_live_and_touches_nothing(store: dejacache.MemoryStore) -> None:
    live = Live()
    live.chat("m", MSGS)
    with dejacache.scope(mode="off"):
        assert live.chat("m", MSGS)["n"] == 2
        assert live.chat("m", [{"role": "user", "content": "new"}])["n"] == 3
    assert len(list(store.iterate())) == 1


def test_replay_serves_and_never_writes(store: dejacache.MemoryStore) -> None:
    live = Live()
    live.chat("m", MSGS)
    with dejacache.scope(mode="replay"):
        assert live.chat("m", MSGS)["n"] == 1
        with pytest.raises(ReplayMiss):
            live.chat("m", [*MSGS, {"role": "user", "content": "more"}])
    assert len(live.calls) == 1
    assert len(list(store.iterate())) == 1


def test_env_mode_replay(store: dejacache.MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_MODE", "replay")
    dejacache.configure(mode=None)  # re-read the environment
    live = Live()
    with pytest.raises(ReplayMiss):
        live.chat("m", MSGS)
    assert live.calls == []


async def test_async_modes(store: dejacache.MemoryStore) -> None:
    calls: list[int] = []

    @dejacache.cache(name="llm.achat")
    async def achat(q: str) -> dict[str, Any]:
        calls.append(1)
        return {"q": q, "n": len(calls)}

    await achat("a")
    with dejacache.scope(mode="replay"):
        assert (await achat("a"))["n"] == 1
        with pytest.raises(ReplayMiss):
            await achat("b")
    with dejacache.scope(mode="record"):
        assert (await achat("a"))["n"] == 2
    with dejacache.scope(mode="off"):
        assert (await achat("zzz"))["n"] == 3
    assert len(calls) == 3


# ------------------------------------------------------------------------------ replay miss


def test_replay_miss_explains_itself(store: dejacache.MemoryStore) -> None:
    live = Live()
    other = Live("llm.other")
    live.chat("gpt-4o", MSGS, temperature=0.2)
    other.chat("gpt-4o", [{"role": "user", "content": "bye"}])  # another name: never nearest
    changed = [MSGS[0], {"role": "user", "content": "hello"}]
    with dejacache.scope(mode="replay"), pytest.raises(ReplayMiss) as info:
        live.chat("gpt-4o", changed, temperature=0.2)
    err = info.value
    text = str(err)
    assert isinstance(err, AssertionError)
    assert err.name == "llm.chat" and "llm.chat" in text
    assert err.key and err.key in text
    assert "'eng'" in text  # the namespace
    assert "hello" in text  # the canonical call itself
    assert "messages[1].content: 'hi' -> 'hello'" in text
    assert err.diff == ["messages[1].content: 'hi' -> 'hello'"]
    assert "bye" not in text
    assert "DEJACACHE_MODE=record" in text


def test_replay_miss_nearest_of_several(store: dejacache.MemoryStore) -> None:
    live = Live()
    for content in ("alpha", "beta", "gamma"):
        live.chat("m", [{"role": "user", "content": content}])
    with dejacache.scope(mode="replay"), pytest.raises(ReplayMiss) as info:
        live.chat("m2", [{"role": "user", "content": "beta"}])
    assert info.value.diff == ["model: 'm' -> 'm2'"]


def test_replay_miss_with_nothing_recorded(store: dejacache.MemoryStore) -> None:
    live = Live()
    with dejacache.scope(mode="replay"), pytest.raises(ReplayMiss) as info:
        live.chat("m", MSGS)
    assert "no call of llm.chat is recorded" in str(info.value)
    assert info.value.diff == []


def test_replay_miss_field_added_and_removed(store: dejacache.MemoryStore) -> None:
    calls: list[Any] = []

    @dejacache.cache(name="tool.search")
    def search(**params: Any) -> int:
        calls.append(params)
        return 1

    search(q="x", limit=5)
    with dejacache.scope(mode="replay"), pytest.raises(ReplayMiss) as info:
        search(q="x", page=2)
    assert info.value.diff == ["limit: removed (was 5)", "page: added 2"]


# ------------------------------------------------------------------------------ damaged entries


def test_damaged_entry_is_a_miss_deleted_with_a_warning(store: dejacache.MemoryStore) -> None:
    live = Live()
    live.chat("m", MSGS)
    (key, rec), = store.iterate()
    # MemoryStore checks values as they are put: the damage is refused there, loudly.
    with pytest.warns(dejacache.DejacacheWarning, match="damaged"):
        store.put(key, Record(value=rec.value[:-3] + b"xyz", name=rec.name,
                              request=rec.request))
    assert live.chat("m", MSGS)["n"] == 2  # ran again
    assert len(live.calls) == 2
    assert live.chat("m", MSGS)["n"] == 2  # and the fresh value was stored


def test_damaged_entry_in_replay_is_a_replay_miss(store: dejacache.MemoryStore) -> None:
    live = Live()
    live.chat("m", MSGS)
    (key, rec), = store.iterate()
    store.put(key, Record(value=b"garbage", name=rec.name, request=rec.request))
    with dejacache.scope(mode="replay"), pytest.warns(dejacache.DejacacheWarning), \
            pytest.raises(ReplayMiss):
        live.chat("m", MSGS)


def test_refused_class_is_a_miss_but_the_entry_is_kept(store: dejacache.MemoryStore) -> None:
    from dejacache.codec import blob_from_tree

    @dejacache.cache(name="mk")
    def mk() -> int:
        return 5

    key = mk.cache_key()  # type: ignore[attr-defined]
    tree = {"\x00dataclass": ["not_imported_anywhere_mod:Thing", {"x": 1}]}
    store.put(key, Record(value=blob_from_tree(tree, False, key=key), name="mk"))
    warns = pytest.warns(dejacache.DejacacheWarning, match="cannot use")
    with dejacache.scope(mode="replay"), warns, pytest.raises(ReplayMiss):
        mk()
    assert store.get(key) is not None  # importing the module later may make it usable


# ------------------------------------------------------------------------------ failing stores


class BrokenStore(dejacache.MemoryStore):
    def __init__(self, *, reads: bool = True, writes: bool = True) -> None:
        super().__init__()
        self.url = "broken://"
        self.fail_reads, self.fail_writes = reads, writes

    def get(self, key: str) -> Record | None:
        if self.fail_reads:
            raise OSError("disk on fire")
        return super().get(key)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        if self.fail_writes:
            raise OSError("read-only")
        super().put(key, record, ttl=ttl)


def test_failing_reads_and_writes_fail_open() -> None:
    dejacache.configure(store=BrokenStore())
    live = Live()
    with pytest.warns(dejacache.DejacacheWarning) as caught:
        assert live.chat("m", MSGS)["n"] == 1
        assert live.chat("m", MSGS)["n"] == 2
    messages = [str(w.message) for w in caught]
    assert any("read from broken://" in m for m in messages)
    assert any("write to broken://" in m for m in messages)
    assert len(messages) == 2  # one warning each, not one per call
    s = dejacache.stats().total
    assert (s.misses, s.stores) == (2, 0)


async def test_failing_store_async_fails_open() -> None:
    dejacache.configure(store=BrokenStore())

    @dejacache.cache
    async def f() -> int:
        return 3

    with pytest.warns(dejacache.DejacacheWarning):
        assert await f() == 3


# ------------------------------------------------------------------------------ engine API


@pytest.mark.parametrize("error", [False, True])
def test_an_unkept_answer_is_a_miss_not_stored_and_an_error_only_when_it_says_so(
    tmp_path: Any, error: bool,
) -> None:
    # A cassette keeping every exception would have kept the Unkept as a failure to replay.
    def fn() -> int:
        raise _engine.Unkept({"whole": "answer"}, error=error)

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record", record_errors=(Exception,)):
        eff = dejacache.scope().effective()
        with pytest.raises(_engine.Unkept) as got:
            _engine.call_sync(eff, "unkept.fn", "call", "k1", b"{}", fn)
        assert got.value.value == {"whole": "answer"}
    assert not path.exists() or "unkept.fn" not in path.read_text()
    s = dejacache.stats().by_name["unkept.fn"]
    assert (s.misses, s.stores, s.errors) == (1, 0, int(error))


def test_call_sync_and_call_async_directly(store: dejacache.MemoryStore) -> None:
    eff = dejacache.scope(cache_key="direct").effective()
    n: list[int] = []

    def fn() -> int:
        n.append(1)
        return 10

    assert _engine.call_sync(eff, "direct.fn", "call", "k1", b"{}", fn) == 10
    assert _engine.call_sync(eff, "direct.fn", "call", "k1", b"{}", fn) == 10
    assert len(n) == 1

    async def afn() -> int:
        n.append(2)
        return 20

    async def main() -> None:
        assert await _engine.call_async(eff, "direct.fn", "call", "k2", b"{}", afn) == 20
        assert await _engine.call_async(eff, "direct.fn", "call", "k2", b"{}", afn) == 20

    asyncio.run(main())
    assert n == [1, 2]


def test_usage_recorded_on_the_record(store: dejacache.MemoryStore) -> None:
    @dejacache.cache(name="u")
    def f() -> dict[str, Any]:
        return {"usage": {"input_tokens": 3, "output_tokens": 4}}

    f()
    (_, rec), = store.iterate()
    assert dict(rec.usage or {}) == {"input_tokens": 3, "output_tokens": 4}
    assert rec.duration >= 0 and rec.created > 0
    assert rec.request == b"{}"


class StaleFirstRead(dejacache.MemoryStore):
    """The first read from the thread named 'late' answers 'miss' only after `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.reading = threading.Event()
        self.stale_done = False

    def get(self, key: str) -> Record | None:
        if threading.current_thread().name == "late" and not self.stale_done:
            self.stale_done = True
            self.reading.set()
            assert self.release.wait(10)
            return None  # read before the leader stored; returns after it left
        return super().get(key)


def test_miss_racing_a_finished_leader_does_not_call_twice() -> None:
    store = StaleFirstRead()
    dejacache.configure(store=store)
    calls: list[int] = []

    @dejacache.cache
    def f() -> int:
        calls.append(1)
        return 5

    late_result: list[int] = []
    late = threading.Thread(target=lambda: late_result.append(f()), name="late")
    late.start()
    assert store.reading.wait(10)
    assert f() == 5  # the leader runs, stores and leaves while 'late' holds a stale miss
    store.release.set()
    late.join(10)
    assert late_result == [5]
    assert calls == [1]


# ------------------------------------------------------------------------------ store features


class _Probed(dejacache.MemoryStore):
    """A store that counts how often its optional features are asked about."""

    probes = 0

    @property
    def sequenced(self) -> bool:
        type(self).probes += 1
        return False


def test_store_features_are_read_once_per_effective() -> None:
    s = _Probed()
    eff = dejacache.scope(store=s, cache_key="feat").effective()
    for i in range(20):
        assert _engine.call_sync(eff, "feat.fn", "call", f"k{i % 3}", b"{}", lambda: 1) == 1
    assert _Probed.probes == 1  # not once per call: Effective.features keeps the answer


def test_the_engine_and_the_tool_cache_share_one_single_flight() -> None:
    from dejacache import _flights
    from dejacache.runtime.singleflight import SingleFlight

    assert SingleFlight is _flights.SingleFlight
    assert isinstance(_engine._FLIGHTS, SingleFlight)


# ------------------------------------------------------------------------------ call sites


def test_a_call_site_serves_a_hit_without_a_driver_and_hands_a_miss_to_the_flow(
        store: dejacache.MemoryStore) -> None:
    eff = dejacache.scope(cache_key="site").effective()
    assert _engine.call_sync(eff, "site.fn", "call", "k1", b"{}", lambda: 7) == 7
    site = _engine.CallSite(eff, "site.fn")
    assert site.first("k1") == 7
    assert asyncio.run(site.afirst("k1")) == 7
    # A miss: the call's flow carries on from that lookup's answer (it runs and stores,
    # with no second lookup).
    assert site.first("k2") is _engine.MISS
    d = _engine.SyncDriver(eff, "site.fn", "call")
    flow = d.looked(d.flow("k2", b"{}"))
    run, value = d.advance(flow, _engine.MISS)
    assert run is not None and value is None
    assert d.advance(flow, d.ran(8))[1] == 8
    assert site.first("k2") == 8


def test_a_call_site_does_not_look_up_when_the_flow_would_not(
        store: dejacache.MemoryStore) -> None:
    eff = dejacache.scope(cache_key="site", mode="record").effective()
    site = _engine.CallSite(eff, "site.fn")
    assert site.first("k1") is _engine.NOT_LOOKED
    assert asyncio.run(site.afirst("k1")) is _engine.NOT_LOOKED


def test_a_call_site_reads_a_cassettes_plain_answers_as_get_would(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime

    from dejacache.cassettes import format as fmt
    from dejacache.cassettes.document import load_document
    from dejacache.scope import current
    from dejacache.stores._base import NOT_SHARED

    @dejacache.cache(name="site.plain")
    def f(x: int) -> Any:
        return {"x": x} if x else datetime.date(2020, 1, 2)

    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)  # read through the byte index
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        f(1)
        f(0)
    doc = load_document(path.read_bytes(), path)
    keys = [e["key"] for e in doc["entries"]]
    with dejacache.cassette(path, mode="replay"):
        site = _engine.CallSite(current(), "site.plain")
        assert site.plain is not None
        assert site.first(keys[0]) == {"x": 1}
        assert asyncio.run(site.afirst(keys[1])) == datetime.date(2020, 1, 2)
        assert site.first(keys[0]) is _engine.MISS  # used up
        # JSON the file's checksum vouched for, yet not JSON: read as get's blob, which the
        # codec calls damaged (a warning and a miss), as the general path does.
        site.plain = lambda key: (b'{"x": ', 0.0, None, None, NOT_SHARED)
        with pytest.warns(dejacache.DejacacheWarning, match="stored JSON is invalid"):
            assert site.first(keys[0]) is _engine.MISS
