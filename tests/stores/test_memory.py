"""MemoryStore: the LRU bounds (count and bytes) and the monotonic TTL clock."""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any

import pytest

from dejacache.errors import ConfigurationError, DejacacheWarning
from dejacache.stores import MemoryStore, Record


def sized(n: int, tag: bytes = b"") -> Record:
    """A record whose ``size`` is exactly ``n`` bytes (value only, no request)."""
    return Record(value=(tag + b"x" * n)[:n])


def test_evicts_least_recently_used_by_count() -> None:
    s = MemoryStore(maxsize=3)
    for k in "abc":
        s.put(k, sized(1))
    assert s.get("a") is not None  # a is now the most recently used
    s.put("d", sized(1))
    assert s.get("b") is None  # b was the least recently used
    assert {k for k, _ in s.iterate()} == {"a", "c", "d"}
    s.put("e", sized(1))
    assert s.get("c") is None
    assert len(s) == 3
    assert s.stats().extra["evictions"] == 2


def test_overwrite_refreshes_recency() -> None:
    s = MemoryStore(maxsize=2)
    s.put("a", sized(1))
    s.put("b", sized(1))
    s.put("a", sized(1, b"2"))
    s.put("c", sized(1))
    assert s.get("b") is None
    got = s.get("a")
    assert got is not None and got.value == b"2"


def test_byte_bound() -> None:
    s = MemoryStore(maxsize=1000, max_bytes=100)
    for i in range(4):
        s.put(f"k{i}", sized(30))
    # 4 x 30 > 100: the oldest goes
    assert s.get("k0") is None
    assert s.stats().bytes == 90
    s.put("big", sized(80))  # needs 80 of 100: evicts until it fits
    assert s.stats().bytes <= 100
    assert s.get("big") is not None
    assert [k for k, _ in s.iterate()] == ["big"]


def test_request_bytes_count_towards_the_bound() -> None:
    s = MemoryStore(max_bytes=100)
    s.put("a", Record(value=b"v" * 10, request=b"r" * 60))
    s.put("b", Record(value=b"v" * 10, request=b"r" * 60))
    assert s.get("a") is None
    assert s.stats().bytes == 70


def test_oversize_value_is_never_cached_and_evicts_nothing() -> None:
    s = MemoryStore(max_bytes=100)
    s.put("small", sized(50))
    s.put("huge", sized(101))
    assert s.get("huge") is None
    assert s.get("small") is not None
    assert s.stats().extra["evictions"] == 0


def test_oversize_overwrite_drops_the_old_value() -> None:
    # Serving the previous answer after a newer one was recorded would be a wrong answer.
    s = MemoryStore(max_bytes=100)
    s.put("k", sized(10, b"old"))
    s.put("k", sized(500, b"new"))
    assert s.get("k") is None
    assert s.stats().bytes == 0


def test_ttl_uses_the_monotonic_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    s = MemoryStore()
    s.put("k", sized(1), ttl=10)
    wall = time.time()
    # a wall-clock jump (NTP, suspend, a test freezing time) changes nothing
    monkeypatch.setattr(time, "time", lambda: wall + 86_400)
    assert s.get("k") is not None
    now[0] += 9.9
    assert s.get("k") is not None
    now[0] += 0.2
    assert s.get("k") is None
    assert s.stats().entries == 0  # the expired entry was dropped on read


def test_stats_and_clear() -> None:
    s = MemoryStore(maxsize=10, max_bytes=1000)
    s.put("a", Record(value=b"12345", namespace="A"))
    s.put("b", Record(value=b"123", namespace="B"))
    st = s.stats()
    assert (st.entries, st.bytes, st.backend) == (2, 8, "memory://")
    assert st.extra["maxsize"] == 10 and st.extra["max_bytes"] == 1000
    assert s.clear("A") == 1
    assert s.stats().bytes == 3
    assert s.clear() == 1
    assert s.stats().bytes == 0


def test_bounds_hold_under_threads() -> None:
    s = MemoryStore(maxsize=50, max_bytes=2000)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            for _ in range(3000):
                k = f"k{rnd.randrange(200)}"
                op = rnd.random()
                if op < 0.5:
                    s.put(k, sized(rnd.randrange(1, 120)), ttl=rnd.choice([None, 0.001, 60]))
                elif op < 0.9:
                    s.get(k)
                elif op < 0.97:
                    s.delete(k)
                else:
                    list(s.iterate())
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    st = s.stats()
    assert st.entries <= 50
    assert st.bytes <= 2000
    # the byte counter matches what is actually held (no drift from racing updates)
    held = sum(e[2] for e in s._data.values())  # the bytes each entry counts
    assert st.bytes == held


# ------------------------------------------------------------------------------ checked on put


def test_json_values_are_checked_when_put_and_damaged_ones_are_not_kept() -> None:
    """Hits skip the checksum (``checked_on_put``), so it is checked on the way in: a
    damaged value, or one bound to another key, is never stored, and never leaves the old
    value behind either."""
    from dejacache.codec import JsonCodec

    codec = JsonCodec()
    s = MemoryStore()
    good = codec.encode({"a": 1}, key="k1")
    s.put("k1", Record(value=good))
    assert s.get("k1") is not None
    damaged = good[:-2] + b"2}"
    with pytest.warns(DejacacheWarning, match="damaged value for key k1"):
        s.put("k1", Record(value=damaged))
    assert s.get("k1") is None
    with pytest.warns(DejacacheWarning, match="k2"):
        s.put("k2", Record(value=good))  # k1's value copied under k2
    assert s.get("k2") is None
    s.put("k3", Record(value=b"another codec's bytes"))  # only their codec can judge them
    assert s.get("k3") is not None
    assert MemoryStore.checked_on_put is True

    class Overriding(MemoryStore):
        def get(self, key: str) -> Record | None:
            return super().get(key)

    assert Overriding.checked_on_put is False  # its hits take the general, checked path
    assert Overriding.short_hits is False


def test_a_shared_value_belongs_to_the_entry_it_was_made_from() -> None:
    """``share`` keeps a ``frozen`` hit's value with the entry ``hit`` returned, counted in
    the byte budget, and never with an entry that replaced it meanwhile."""
    from dejacache.codec import JsonCodec
    from dejacache.stores._base import NOT_SHARED

    codec = JsonCodec()
    s = MemoryStore()
    s.put("k", Record(value=codec.encode({"a": 1}, key="k")))
    item = s.hit("k")
    assert item is not None and item[4] is NOT_SHARED
    before = s.stats().bytes
    s.share("k", item, "shared one")
    again = s.hit("k")
    assert again is not None and again[4] == "shared one"
    assert s.stats().bytes > before
    s.put("k", Record(value=codec.encode({"a": 2}, key="k")))  # replaced
    s.share("k", again, "stale")  # made from the old entry: not kept
    latest = s.hit("k")
    assert latest is not None and latest[4] is NOT_SHARED
    assert s.stats().bytes == sum(e[2] for e in s._data.values())


def test_reads_without_the_lock_stay_consistent_under_concurrent_writes() -> None:
    s = MemoryStore(maxsize=50)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            s.put(f"k{i % 80}", sized(4, str(i % 80).encode()), ttl=None if i % 3 else 0.0)
            if i % 7 == 0:
                s.delete(f"k{(i * 3) % 80}")
            i += 1

    def reader() -> None:
        try:
            for j in range(20_000):
                rec = s.get(f"k{j % 80}")
                assert rec is None or rec.value.startswith(str(j % 80).encode())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    threads[1].join()
    stop.set()
    threads[0].join()
    assert not errors
    assert len(s) <= 50


@pytest.mark.parametrize(("kw", "bad"), [
    ({"maxsize": "5"}, "maxsize must be an int >= 1, not '5'"),
    ({"maxsize": 0}, "maxsize must be an int >= 1, not 0"),
    ({"maxsize": -5}, "maxsize must be an int >= 1, not -5"),
    ({"maxsize": True}, "maxsize must be an int >= 1, not True"),
    ({"maxsize": None}, "maxsize must be an int >= 1, not None"),
    ({"max_bytes": -1}, "max_bytes must be an int >= 1, not -1"),
    ({"max_bytes": 1.5}, "max_bytes must be an int >= 1, not 1.5"),
])
def test_a_bound_that_is_not_a_positive_int_is_refused_naming_it(kw: dict[str, Any],
                                                                 bad: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^MemoryStore {re.escape(bad)}$"):
        MemoryStore(**kw)
