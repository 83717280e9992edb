"""The behaviour every ``Store`` must have, written once and run against each tier.

How to run it against a new store (e.g. ``RedisStore``, ``TieredStore``): in a test module
under ``tests/stores/`` (``tests/`` is on ``pythonpath``, so the import is plain), subclass
``StoreContract`` in a class whose name starts with ``Test`` and provide a ``store`` fixture
that yields a fresh, empty store and cleans up after itself::

    import pytest
    from contract import StoreContract

    from dejacache.stores.redis import RedisStore


    @pytest.mark.redis
    class TestRedisStore(StoreContract):
        persistent = True  # entries survive close() + reopen()

        @pytest.fixture
        def store(self, redis_server):
            s = RedisStore(redis_server.url, prefix="contract-test:")
            yield s
            s.clear()
            s.close()

        def reopen(self, store):  # only called when persistent is True
            return RedisStore(store.url, prefix="contract-test:")

Class attributes a subclass may set:

- ``persistent`` (default False): run the persistence test; then ``reopen(store)`` must
  return a new store instance over the same data (the old one has been closed).
- ``ttl`` / ``ttl_wait`` (seconds): the TTL given to ``put`` and how long the expiry test
  sleeps; raise them for a store whose clock has coarse resolution.

A store that offers the decorator's short path (``short_hits = True``, ``hit`` and ``share``:
``MemoryStore``, ``SQLiteStore``) runs the "short path" tests too; for the others they
skip, saying so.

A *sequenced* store (``sequenced = True``: the ``Cassette``) replays recordings by occurrence
instead of answering by key: subclass ``SequencedStoreContract`` instead, whose ``reopen``
is "the next block over the saved file". The tests of ``StoreContract`` it cannot honour are
skipped for it, each with the reason (marked ``@random_access``); ``SequencedStoreContract``
adds what such a store guarantees instead.

Every test gets its own ``store`` and may call any method; the fixture is responsible for
isolation (a private prefix, database number, temporary file, ...).
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
import pytest

from dejacache.codec import JsonCodec
from dejacache.stores import Record, Store, StoreStats
from dejacache.stores._base import NOT_SHARED, Hit

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def rec(value: bytes = b"v", *, name: str = "fn", namespace: str = "ns",
        request: bytes = b'{"a":1}', **kw: Any) -> Record:
    return Record(value=value, name=name, namespace=namespace, request=request, **kw)


def blob(value: Any, key: str) -> bytes:
    """What the engine stores for ``value`` under ``key`` (the JSON codec's bytes)."""
    return JsonCodec().encode(value, key=key)


def within_ttl(ttl: float, write_then_read: Callable[[], T]) -> T:
    """``write_then_read()`` (a put with ``ttl``, then a read), done again until it took
    less than ``ttl``: only then must the read find the entry (a loaded machine once kept a
    test from running for longer than a TTL, and the entry had rightly expired)."""
    for _ in range(20):
        t0 = time.monotonic()
        out = write_then_read()
        if time.monotonic() - t0 < ttl:
            return out
    pytest.fail(f"no put and read within {ttl} s in 20 tries")


def random_access(reason: str) -> Callable[[F], F]:
    """Mark a test that assumes a store answering by key (a put readable at once, values as
    opaque bytes): a sequenced store skips it, giving ``reason``."""

    def mark(test: F) -> F:
        if inspect.iscoroutinefunction(test):
            @functools.wraps(test)
            async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                if self.sequenced:
                    pytest.skip(f"sequenced store: {reason}")
                return await test(self, *args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(test)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.sequenced:
                pytest.skip(f"sequenced store: {reason}")
            return test(self, *args, **kwargs)

        return run  # type: ignore[return-value]

    return mark


# Why a sequenced store (a cassette) skips a test: what it does instead.
LATER = ("what put records is served by the next block over the saved file, not by this "
         "one (SequencedStoreContract.test_recordings_replay_in_the_next_block)")
CODEC = ("values are the codec's output, held as JSON in a diffable file, not opaque bytes "
         "(SequencedStoreContract tests the same with codec values)")
OCCURRENCES = ("a second put of a key is its next occurrence, not a replacement "
               "(SequencedStoreContract.test_recordings_replay_in_the_next_block)")
NO_DELETE = ("delete forgets nothing: a cassette is changed by re-recording, not call by "
             "call (SequencedStoreContract.test_delete_forgets_nothing)")
NO_NAMESPACE_CLEAR = ("clear drops everything this block would use, whatever the namespace "
                      "(SequencedStoreContract.test_clear_drops_what_this_block_would_use)")
NO_TTL = ("recordings do not expire: a TTL is ignored "
          "(SequencedStoreContract.test_recordings_do_not_expire)")


class StoreContract:
    persistent = False
    sequenced = False
    ttl = 0.3
    ttl_wait = 0.6

    def reopen(self, store: Any) -> Any:
        raise NotImplementedError("persistent stores must implement reopen(store)")

    # ------------------------------------------------------------ basics

    def test_is_a_store(self, store: Any) -> None:
        assert isinstance(store, Store)
        assert isinstance(store.url, str) and store.url

    def test_missing_key_is_none(self, store: Any) -> None:
        assert store.get("nope") is None
        assert store.delete("nope") is False

    @random_access(LATER)
    def test_put_get_round_trip(self, store: Any) -> None:
        r = rec(b"\x00\xffbinary", name="pkg.fn", namespace="suite-v1", kind="http",
                duration=1.25, usage={"prompt_tokens": 12, "completion_tokens": 3},
                created=1_700_000_000.5)
        assert store.put("k1", r) is not False  # False only when nothing was kept
        got = store.get("k1")
        assert got is not None
        assert got.value == r.value
        assert (got.name, got.namespace, got.kind) == ("pkg.fn", "suite-v1", "http")
        assert got.duration == pytest.approx(1.25)
        assert dict(got.usage or {}) == {"prompt_tokens": 12, "completion_tokens": 3}
        assert got.request in (b"", r.request)  # the hit path may leave it out

    @random_access(CODEC)
    def test_optional_fields_default(self, store: Any) -> None:
        store.put("k", Record(value=b"x"))
        got = store.get("k")
        assert got is not None
        assert got.value == b"x"
        assert got.usage is None
        assert (got.name, got.namespace) == ("", "")

    @random_access(LATER)
    def test_unicode_names(self, store: Any) -> None:
        store.put("clé-ü", rec(b"1", name="fn✓", namespace="espaço"))
        got = store.get("clé-ü")
        assert got is not None and (got.name, got.namespace) == ("fn✓", "espaço")
        assert [k for k, _ in store.iterate(name="fn✓", namespace="espaço")] == ["clé-ü"]

    @random_access(OCCURRENCES)
    def test_overwrite_replaces(self, store: Any) -> None:
        store.put("k", rec(b"old", request=b'{"v":"old"}'))
        store.put("k", rec(b"new", request=b'{"v":"new"}'))
        got = store.get("k")
        assert got is not None and got.value == b"new"
        items = list(store.iterate())
        assert len(items) == 1
        assert items[0][1].request == b'{"v":"new"}'

    @random_access(NO_DELETE)
    def test_delete(self, store: Any) -> None:
        store.put("a", rec(b"1"))
        store.put("b", rec(b"2"))
        assert store.delete("a") is True
        assert store.get("a") is None
        assert store.delete("a") is False
        got = store.get("b")
        assert got is not None and got.value == b"2"

    # ------------------------------------------------------------ iterate / clear / stats

    def _fill(self, store: Any) -> None:
        store.put("a1", rec(b"a1", name="f", namespace="A", request=b'{"x":1}'))
        store.put("a2", rec(b"a2", name="g", namespace="A", request=b'{"x":2}'))
        store.put("b1", rec(b"b1", name="f", namespace="B", request=b'{"x":3}'))

    @random_access(CODEC)
    def test_iterate_all_returns_requests(self, store: Any) -> None:
        self._fill(store)
        items = dict(store.iterate())
        assert set(items) == {"a1", "a2", "b1"}
        assert items["b1"].request == b'{"x":3}'
        assert items["a2"].value == b"a2"
        assert items["a1"].name == "f" and items["a1"].namespace == "A"

    @random_access(CODEC)
    def test_iterate_filters(self, store: Any) -> None:
        self._fill(store)
        assert {k for k, _ in store.iterate(name="f")} == {"a1", "b1"}
        assert {k for k, _ in store.iterate(namespace="A")} == {"a1", "a2"}
        assert {k for k, _ in store.iterate(name="f", namespace="B")} == {"b1"}
        assert list(store.iterate(name="nobody")) == []

    def test_iterate_empty_store(self, store: Any) -> None:
        assert list(store.iterate()) == []

    @random_access(NO_NAMESPACE_CLEAR)
    def test_clear_namespace_then_all(self, store: Any) -> None:
        self._fill(store)
        assert store.clear(namespace="A") == 2
        assert store.get("a1") is None and store.get("a2") is None
        got = store.get("b1")
        assert got is not None and got.value == b"b1"
        assert store.clear(namespace="nothing-here") == 0
        assert store.clear() == 1
        assert store.get("b1") is None
        assert list(store.iterate()) == []

    @random_access(CODEC)
    def test_stats(self, store: Any) -> None:
        empty = store.stats()
        assert isinstance(empty, StoreStats)
        assert empty.entries == 0
        self._fill(store)
        st = store.stats()
        assert st.entries == 3
        assert st.bytes >= len(b"a1a2b1")
        assert isinstance(st.backend, str) and st.backend

    @random_access(CODEC)
    def test_many_entries(self, store: Any) -> None:
        for i in range(600):
            store.put(f"k{i}", rec(str(i).encode(), request=b'{"i":%d}' % i))
        items = dict(store.iterate())
        assert len(items) == 600
        assert items["k599"].value == b"599"
        assert items["k17"].request == b'{"i":17}'
        assert store.stats().entries == 600

    # ------------------------------------------------------------ TTL

    @random_access(NO_TTL)
    def test_ttl_expiry(self, store: Any) -> None:
        store.put("forever", rec(b"f"))
        store.put("long", rec(b"l"), ttl=3600)
        got = within_ttl(self.ttl, lambda: (store.put("short", rec(b"s"), ttl=self.ttl),
                                            store.get("short"))[1])
        assert got is not None and got.value == b"s"
        time.sleep(self.ttl_wait)
        assert store.get("short") is None
        assert {k for k, _ in store.iterate()} == {"forever", "long"}
        assert store.get("forever") is not None
        assert store.get("long") is not None

    @random_access(NO_TTL)
    def test_put_without_ttl_clears_old_ttl(self, store: Any) -> None:
        store.put("k", rec(b"1"), ttl=self.ttl)
        store.put("k", rec(b"2"))
        time.sleep(self.ttl_wait)
        got = store.get("k")
        assert got is not None and got.value == b"2"

    # ------------------------------------------------------------ sizes

    @random_access(CODEC)
    def test_large_values(self, store: Any) -> None:
        value = os.urandom(3 * 1024 * 1024)  # incompressible, 3 MiB
        request = b'{"messages":"' + b"lorem ipsum " * 40_000 + b'"}'  # ~480 KB
        store.put("big", rec(value, request=request))
        got = store.get("big")
        assert got is not None and got.value == value
        items = dict(store.iterate())
        assert items["big"].request == request
        assert items["big"].value == value

    # ------------------------------------------------------------ concurrency

    @random_access(LATER)
    def test_threads_do_not_lose_writes(self, store: Any) -> None:
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(100):
                    store.put(f"t{t}-{i}", rec(f"{t}:{i}".encode()))
                    got = store.get(f"t{t}-{i // 2}")
                    assert got is not None and got.value == f"{t}:{i // 2}".encode()
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        for t in range(4):
            for i in range(100):
                got = store.get(f"t{t}-{i}")
                assert got is not None and got.value == f"{t}:{i}".encode()

    # ------------------------------------------------------------ async twins

    @random_access(LATER)
    async def test_async_twins(self, store: Any) -> None:
        assert await store.aget("k") is None
        await store.aput("k", rec(b"async"))
        got = await store.aget("k")
        assert got is not None and got.value == b"async"
        assert store.get("k") is not None  # same data as the sync face
        await store.aput("t", rec(b"t"), ttl=self.ttl)
        assert await store.adelete("k") is True
        assert await store.adelete("k") is False
        assert await store.aget("k") is None

    # ------------------------------------------------------------ persistence

    @random_access(NO_DELETE)
    def test_persistence_across_reopen(self, store: Any) -> None:
        if not self.persistent:
            pytest.skip("not a persistent store")
        store.put("kept", rec(b"still here", request=b'{"q":1}', usage={"total_tokens": 5}))
        store.put("gone", rec(b"x"))
        store.delete("gone")
        store.close()
        again = self.reopen(store)
        try:
            got = again.get("kept")
            assert got is not None and got.value == b"still here"
            assert dict(got.usage or {}) == {"total_tokens": 5}
            assert again.get("gone") is None
            assert dict(again.iterate())["kept"].request == b'{"q":1}'
        finally:
            again.close()

    # ------------------------------------------------------------ the short path: hit / share

    def short(self, store: Any) -> Any:
        """``store``, if it offers the decorator's short path (else the test skips)."""
        if getattr(store, "short_hits", False) is not True:
            pytest.skip("no short path (short_hits): every hit takes the general path")
        return store

    def warm_hit(self, store: Any, key: str) -> Hit | None:
        # A store may answer its first read in a thread the general way (SQLite opens the
        # thread's connection on the general path): read once through get first.
        store.get(key)
        return store.hit(key)  # type: ignore[no-any-return]

    def test_short_hits_promise_hit_and_share(self, store: Any) -> None:
        s = self.short(store)
        assert callable(s.hit) and callable(s.share)

    def test_hit_hands_out_a_plain_tuple(self, store: Any) -> None:
        s = self.short(store)
        assert s.hit("missing") is None
        s.put("k", rec(blob({"a": [1, 2]}, "k"), duration=0.5, usage={"total_tokens": 7}))
        item = self.warm_hit(s, "k")
        # exact: CPython specialises subscripts of exact tuples only (the hit path's reads)
        assert type(item) is tuple and len(item) == 5
        assert item[0] is not None and orjson.loads(item[0]) == {"a": [1, 2]}
        assert item[1] == pytest.approx(0.5)
        assert dict(item[2] or {}) == {"total_tokens": 7}
        assert item[3] is None or item[3].value == blob({"a": [1, 2]}, "k")
        assert item[4] is NOT_SHARED

    def test_hit_agrees_with_get(self, store: Any) -> None:
        s = self.short(store)
        s.put("k", rec(blob("old", "k")))
        s.put("k", rec(blob("new", "k")))
        item = self.warm_hit(s, "k")
        assert item is not None and item[0] is not None
        assert orjson.loads(item[0]) == "new"
        got = s.get("k")
        assert got is not None and JsonCodec().decode(got.value, key="k") == "new"
        assert s.delete("k") is True
        assert s.hit("k") is None
        s.put("k", rec(blob(1, "k")))
        s.clear()
        assert s.hit("k") is None

    def test_hit_misses_an_expired_entry(self, store: Any) -> None:
        s = self.short(store)
        assert within_ttl(self.ttl, lambda: (s.put("k", rec(blob(1, "k")), ttl=self.ttl),
                                             self.warm_hit(s, "k"))[1]) is not None
        time.sleep(self.ttl_wait)
        assert s.hit("k") is None

    @pytest.mark.parametrize("case", ["damaged", "other key", "tagged", "error", "not ours"])
    def test_hit_gives_no_body_it_cannot_vouch_for(self, store: Any, case: str) -> None:
        """A body is handed out only for a plain JSON value checked against its key: the
        general path decodes (and reports) everything else. A store may also refuse damaged
        bytes when they are put (then the key misses)."""
        s = self.short(store)
        value = {
            "damaged": blob({"a": 1}, "k")[:-1] + b"2",
            "other key": blob({"a": 1}, "other"),
            "tagged": blob((1, 2), "k"),
            "error": blob({"a": 1}, "k"),
            "not ours": b"plain bytes",
        }[case]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a store may warn that it refused the value
            s.put("k", rec(value, kind="error" if case == "error" else "call"))
        item = self.warm_hit(s, "k")
        assert item is None or item[0] is None

    def test_share_keeps_a_value_with_the_entry_it_was_made_from(self, store: Any) -> None:
        s = self.short(store)
        value = blob({"a": [1]}, "k")
        s.put("k", rec(value))
        item = self.warm_hit(s, "k")
        assert item is not None and item[4] is NOT_SHARED
        s.share("k", item, "kept")
        kept = s.hit("k")
        assert kept is not None and kept[4] == "kept"
        assert kept[0] is not None and orjson.loads(kept[0]) == {"a": [1]}
        s.put("k", rec(value))  # the same bytes, written again: a new entry
        again = self.warm_hit(s, "k")
        assert again is not None and again[4] is NOT_SHARED
        s.share("k", kept, "stale")  # made from the replaced entry: not kept
        latest = s.hit("k")
        assert latest is not None and latest[4] is NOT_SHARED
        s.delete("k")
        s.share("k", latest, "late")  # the entry is gone: nothing kept
        assert s.hit("k") is None


class SequencedStoreContract(StoreContract):
    """What a sequenced store (``sequenced = True``) guarantees instead of the
    ``@random_access`` tests: ``get`` replays the recordings the store held when it was
    opened, each once, the n-th ``get`` of a key answering with its n-th recording; what
    ``put`` records is served by the next block (``reopen``: save, close, open again), in
    the order it was recorded. Values are the codec's output."""

    sequenced = True
    persistent = True

    def test_is_sequenced(self, store: Any) -> None:
        assert store.sequenced is True

    def test_recordings_replay_in_the_next_block(self, store: Any) -> None:
        values = [blob({"n": n}, "k") for n in range(3)]
        store.put("k", rec(values[0], name="pkg.fn", namespace="suite-v1", kind="http",
                           duration=1.25, usage={"prompt_tokens": 12, "completion_tokens": 3}))
        store.put("k", rec(values[1]))
        store.put("k", rec(values[2]))
        assert store.get("k") is None  # not served by the block that recorded it
        again = self.reopen(store)
        try:
            first = again.get("k")
            assert first is not None and first.value == values[0]
            assert (first.name, first.namespace, first.kind) == ("pkg.fn", "suite-v1", "http")
            assert first.duration == pytest.approx(1.25)
            assert dict(first.usage or {}) == {"prompt_tokens": 12, "completion_tokens": 3}
            assert first.request in (b"", b'{"a":1}')
            got = [again.get("k"), again.get("k")]
            assert [g.value if g else None for g in got] == values[1:]
            assert again.get("k") is None  # each recording once
            assert again.get("other") is None
        finally:
            again.close()

    def test_each_block_replays_from_the_start(self, store: Any) -> None:
        store.put("k", rec(blob(1, "k")))
        one = self.reopen(store)
        assert one.get("k") is not None and one.get("k") is None
        two = self.reopen(one)
        try:
            got = two.get("k")
            assert got is not None and got.value == blob(1, "k")
        finally:
            two.close()

    def test_optional_fields_default(self, store: Any) -> None:
        store.put("k", Record(value=blob("x", "k")))
        again = self.reopen(store)
        try:
            got = again.get("k")
            assert got is not None and got.value == blob("x", "k")
            assert got.usage is None
            assert (got.name, got.namespace) == ("", "")
        finally:
            again.close()

    def test_unicode_names(self, store: Any) -> None:
        store.put("clé-ü", rec(blob(1, "clé-ü"), name="fn✓", namespace="espaço"))
        assert [k for k, _ in store.iterate(name="fn✓", namespace="espaço")] == ["clé-ü"]
        again = self.reopen(store)
        try:
            got = again.get("clé-ü")
            assert got is not None and (got.name, got.namespace) == ("fn✓", "espaço")
        finally:
            again.close()

    def test_delete_forgets_nothing(self, store: Any) -> None:
        store.put("k", rec(blob(1, "k")))
        assert store.delete("k") is False
        again = self.reopen(store)
        try:
            assert again.delete("k") is False
            got = again.get("k")
            assert got is not None and got.value == blob(1, "k")
        finally:
            again.close()

    def _fill(self, store: Any) -> None:
        store.put("a1", rec(blob("a1", "a1"), name="f", namespace="A", request=b'{"x":1}'))
        store.put("a2", rec(blob("a2", "a2"), name="g", namespace="A", request=b'{"x":2}'))
        store.put("b1", rec(blob("b1", "b1"), name="f", namespace="B", request=b'{"x":3}'))

    def test_iterate_lists_recordings_with_their_requests(self, store: Any) -> None:
        """Old and new recordings, with requests (what miss reports compare with); the
        values are not read."""
        self._fill(store)
        again = self.reopen(store)
        try:
            again.put("c1", rec(blob("c1", "c1"), name="h", namespace="C",
                                request=b'{"x":4}'))
            items = dict(again.iterate())
            assert set(items) == {"a1", "a2", "b1", "c1"}
            assert items["b1"].request == b'{"x":3}' and items["c1"].request == b'{"x":4}'
            assert items["a1"].name == "f" and items["a1"].namespace == "A"
            assert {k for k, _ in again.iterate(name="f")} == {"a1", "b1"}
            assert {k for k, _ in again.iterate(namespace="A")} == {"a1", "a2"}
            assert {k for k, _ in again.iterate(name="f", namespace="B")} == {"b1"}
            assert list(again.iterate(name="nobody")) == []
        finally:
            again.close()

    def test_clear_drops_what_this_block_would_use(self, store: Any) -> None:
        """``clear`` makes this block use none of the recordings and drops the ones it made;
        the recordings stay for the next block."""
        self._fill(store)
        again = self.reopen(store)
        again.put("c1", rec(blob("c1", "c1")))
        assert again.clear() == 4
        assert again.get("a1") is None
        # the file's recordings are still listed (they stay in it); this block's are gone
        assert {k for k, _ in again.iterate()} == {"a1", "a2", "b1"}
        third = self.reopen(again)
        try:
            got = third.get("a1")
            assert got is not None and got.value == blob("a1", "a1")
            assert third.get("c1") is None
        finally:
            third.close()

    def test_stats_counts_recordings(self, store: Any) -> None:
        empty = store.stats()
        assert isinstance(empty, StoreStats)
        assert empty.entries == 0
        self._fill(store)
        assert store.stats().entries == 3
        again = self.reopen(store)
        try:
            st = again.stats()
            assert st.entries == 3 and st.bytes > 0
            assert isinstance(st.backend, str) and st.backend
        finally:
            again.close()

    def test_many_entries(self, store: Any) -> None:
        for i in range(600):
            store.put(f"k{i}", rec(blob(i, f"k{i}"), request=b'{"i":%d}' % i))
        again = self.reopen(store)
        try:
            assert again.stats().entries == 600
            items = dict(again.iterate())
            assert len(items) == 600 and items["k17"].request == b'{"i":17}'
            got = again.get("k599")
            assert got is not None and got.value == blob(599, "k599")
        finally:
            again.close()

    def test_large_values(self, store: Any) -> None:
        value = os.urandom(1536 * 1024).hex()  # 3 MiB of incompressible text
        request = b'{"messages":"' + b"lorem ipsum " * 40_000 + b'"}'  # ~480 KB
        store.put("big", rec(blob(value, "big"), request=request))
        again = self.reopen(store)
        try:
            got = again.get("big")
            assert got is not None and got.value == blob(value, "big")
            assert dict(again.iterate())["big"].request == request
        finally:
            again.close()

    def test_threads_do_not_lose_recordings(self, store: Any) -> None:
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(100):
                    store.put(f"t{t}", rec(blob(i, f"t{t}")))
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        again = self.reopen(store)
        try:
            for t in range(4):  # each thread's recordings, in the order it made them
                got = [again.get(f"t{t}") for _ in range(100)]
                assert [g.value if g else None for g in got] == [
                    blob(i, f"t{t}") for i in range(100)]
        finally:
            again.close()

    def test_recordings_do_not_expire(self, store: Any) -> None:
        store.put("k", rec(blob(1, "k")), ttl=self.ttl)
        time.sleep(self.ttl_wait)
        again = self.reopen(store)
        try:
            assert again.get("k") is not None
        finally:
            again.close()

    async def test_async_twins_replay_in_the_next_block(self, store: Any) -> None:
        assert await store.aget("k") is None
        await store.aput("k", rec(blob("async", "k")))
        assert await store.aget("k") is None
        assert await store.adelete("k") is False
        again = self.reopen(store)
        try:
            got = await again.aget("k")
            assert got is not None and got.value == blob("async", "k")
        finally:
            again.close()
