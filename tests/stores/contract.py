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

Every test gets its own ``store`` and may call any method; the fixture is responsible for
isolation (a private prefix, database number, temporary file, ...).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from dejacache.stores import Record, Store, StoreStats


def rec(value: bytes = b"v", *, name: str = "fn", namespace: str = "ns",
        request: bytes = b'{"a":1}', **kw: Any) -> Record:
    return Record(value=value, name=name, namespace=namespace, request=request, **kw)


class StoreContract:
    persistent = False
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

    def test_optional_fields_default(self, store: Any) -> None:
        store.put("k", Record(value=b"x"))
        got = store.get("k")
        assert got is not None
        assert got.value == b"x"
        assert got.usage is None
        assert (got.name, got.namespace) == ("", "")

    def test_unicode_names(self, store: Any) -> None:
        store.put("clé-ü", rec(b"1", name="fn✓", namespace="espaço"))
        got = store.get("clé-ü")
        assert got is not None and (got.name, got.namespace) == ("fn✓", "espaço")
        assert [k for k, _ in store.iterate(name="fn✓", namespace="espaço")] == ["clé-ü"]

    def test_overwrite_replaces(self, store: Any) -> None:
        store.put("k", rec(b"old", request=b'{"v":"old"}'))
        store.put("k", rec(b"new", request=b'{"v":"new"}'))
        got = store.get("k")
        assert got is not None and got.value == b"new"
        items = list(store.iterate())
        assert len(items) == 1
        assert items[0][1].request == b'{"v":"new"}'

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

    def test_iterate_all_returns_requests(self, store: Any) -> None:
        self._fill(store)
        items = dict(store.iterate())
        assert set(items) == {"a1", "a2", "b1"}
        assert items["b1"].request == b'{"x":3}'
        assert items["a2"].value == b"a2"
        assert items["a1"].name == "f" and items["a1"].namespace == "A"

    def test_iterate_filters(self, store: Any) -> None:
        self._fill(store)
        assert {k for k, _ in store.iterate(name="f")} == {"a1", "b1"}
        assert {k for k, _ in store.iterate(namespace="A")} == {"a1", "a2"}
        assert {k for k, _ in store.iterate(name="f", namespace="B")} == {"b1"}
        assert list(store.iterate(name="nobody")) == []

    def test_iterate_empty_store(self, store: Any) -> None:
        assert list(store.iterate()) == []

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

    def test_stats(self, store: Any) -> None:
        empty = store.stats()
        assert isinstance(empty, StoreStats)
        assert empty.entries == 0
        self._fill(store)
        st = store.stats()
        assert st.entries == 3
        assert st.bytes >= len(b"a1a2b1")
        assert isinstance(st.backend, str) and st.backend

    def test_many_entries(self, store: Any) -> None:
        for i in range(600):
            store.put(f"k{i}", rec(str(i).encode(), request=b'{"i":%d}' % i))
        items = dict(store.iterate())
        assert len(items) == 600
        assert items["k599"].value == b"599"
        assert items["k17"].request == b'{"i":17}'
        assert store.stats().entries == 600

    # ------------------------------------------------------------ TTL

    def test_ttl_expiry(self, store: Any) -> None:
        store.put("short", rec(b"s"), ttl=self.ttl)
        store.put("forever", rec(b"f"))
        store.put("long", rec(b"l"), ttl=3600)
        got = store.get("short")
        assert got is not None and got.value == b"s"
        time.sleep(self.ttl_wait)
        assert store.get("short") is None
        assert {k for k, _ in store.iterate()} == {"forever", "long"}
        assert store.get("forever") is not None
        assert store.get("long") is not None

    def test_put_without_ttl_clears_old_ttl(self, store: Any) -> None:
        store.put("k", rec(b"1"), ttl=self.ttl)
        store.put("k", rec(b"2"))
        time.sleep(self.ttl_wait)
        got = store.get("k")
        assert got is not None and got.value == b"2"

    # ------------------------------------------------------------ sizes

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
