"""SQLiteStore hardening: damaged files, newer schemas, read-only and full disks, locks, fork."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import pathlib
import pickle
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import dejacache
from dejacache import DejacacheWarning
from dejacache.errors import IncompatibleStore, StoreError
from dejacache.stores import Record, SQLiteStore
from dejacache.stores.sqlite import SCHEMA_VERSION
from fs_support import immutable


def rec(value: bytes, request: bytes = b'{"q":1}', **kw: Any) -> Record:
    return Record(value=value, name="fn", namespace="ns", request=request, **kw)


def filled(path: pathlib.Path, n: int = 300) -> dict[str, bytes]:
    """A real, closed store file with ``n`` ~2 KB entries; returns what it holds."""
    store = SQLiteStore(path)
    data = {f"key-{i:04d}": (b"value %d " % i) * 200 for i in range(n)}
    for k, v in data.items():
        store.put(k, rec(v, request=b'{"i":"%s"}' % k.encode()))
    store.close()
    return data


def corrupt_copies(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".corrupt-"))


def assert_works(store: SQLiteStore) -> None:
    store.put("fresh", rec(b"ok"))
    got = store.get("fresh")
    assert got is not None and got.value == b"ok"


# ---------------------------------------------------------------- damaged files


def test_garbage_file_is_moved_aside(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.warns(DejacacheWarning, match="moved it to cache.db.corrupt-") as caught:
        store = SQLiteStore(path)
        assert store.get("anything") is None
        assert_works(store)
    assert len(caught) == 1
    (aside,) = corrupt_copies(path)
    assert aside.read_bytes()[:16] != b"SQLite format 3\x00"
    assert aside.stat().st_size == 64 * 1024
    store.close()


def test_truncated_file_is_moved_aside(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    filled(path)
    size = path.stat().st_size
    assert size > 200_000 and not (tmp_path / "cache.db-wal").exists()
    with open(path, "r+b") as f:  # cut mid-page, as a crash or a full disk would
        f.truncate(size // 2 + 123)
    with pytest.warns(DejacacheWarning, match="unreadable") as caught:
        store = SQLiteStore(path)
        for i in range(0, 300, 7):  # whether found at open or on a read, it is handled
            assert store.get(f"key-{i:04d}") is None
        assert_works(store)
    assert len(caught) == 1
    assert len(corrupt_copies(path)) == 1
    assert store.stats().entries == 1
    store.close()


def test_corruption_found_after_open_is_recovered(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    data = filled(path)
    store = SQLiteStore(path)  # opens cleanly: the schema pages are intact
    page = 4096
    with open(path, "r+b") as f:  # then the data pages are overwritten under it
        f.seek(6 * page)
        f.write(os.urandom(path.stat().st_size - 6 * page))
    with pytest.warns(DejacacheWarning, match="unreadable") as caught:
        for k in data:
            got = store.get(k)
            if got is None:
                break
        else:
            pytest.fail("the damaged pages were never read")
        assert store.get(next(iter(data))) is None  # a fresh store now
        assert_works(store)
    assert len(caught) == 1
    assert len(corrupt_copies(path)) == 1
    store.close()


def test_decorator_gives_correct_results_over_a_corrupt_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"definitely not sqlite " * 1000)
    calls: list[int] = []

    @dejacache.cache
    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    with pytest.warns(DejacacheWarning) as caught:
        dejacache.configure(store=SQLiteStore(path))
        assert double(21) == 42
        assert double(21) == 42
        assert double(5) == 10
    assert len(caught) == 1
    assert calls == [21, 5]  # the fresh store stores and serves


def test_decorator_over_a_truncated_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    filled(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 3 + 17)
    calls: list[int] = []

    @dejacache.cache
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    with pytest.warns(DejacacheWarning):
        dejacache.configure(store=SQLiteStore(path))
        assert [square(3), square(3), square(4)] == [9, 9, 16]
    assert calls == [3, 4]


# ---------------------------------------------------------------- schema versions


def _set_version(path: pathlib.Path, version: int) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE dejacache_meta SET v=? WHERE k='schema_version'", (str(version),))


def test_newer_schema_is_refused_and_left_alone(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    filled(path, n=3)
    _set_version(path, 99)
    before = path.read_bytes()
    for kwargs in ({}, {"readonly": True}):
        with pytest.raises(IncompatibleStore) as info:
            SQLiteStore(path, **kwargs)
        assert info.value.found == 99
        assert info.value.supported == SCHEMA_VERSION
        msg = str(info.value)
        assert "99" in msg and str(SCHEMA_VERSION) in msg and str(path) in msg
    assert path.read_bytes() == before
    assert corrupt_copies(path) == []


def test_older_schema_is_rebuilt(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        db.execute("INSERT INTO dejacache_meta VALUES ('schema_version', '1')")
        db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, name TEXT, value BLOB)")
        db.execute("CREATE INDEX entries_name ON entries (name)")
        db.execute("INSERT INTO entries VALUES ('old', 'fn', x'00')")
    store = SQLiteStore(path)
    assert store.get("old") is None
    assert_works(store)
    assert store.stats().extra["schema_version"] == SCHEMA_VERSION
    store.close()


# ---------------------------------------------------------------- full disk


def test_full_disk_keeps_reads_and_drops_writes(tmp_path: pathlib.Path) -> None:
    # SQLITE_FULL for real: the file may not grow past 12 pages (48 KB).
    store = SQLiteStore(tmp_path / "cache.db", pragmas={"max_page_count": 12})
    store.put("small", rec(b"fits"))
    store.put("kept", rec(b"fits too"))
    with pytest.warns(DejacacheWarning, match="cannot write") as caught:
        store.put("big", rec(os.urandom(200_000)))
        store.put("big2", rec(os.urandom(200_000)))
        store.put("tiny", rec(b"t"))  # dropped too: no retry storm against a full disk
        assert store.delete("small") is False
    assert len(caught) == 1
    got = store.get("kept")  # reads keep working
    assert got is not None and got.value == b"fits too"
    # but not of a row a dropped delete was meant to remove (test_a_write_the_file_refused_...)
    assert store.get("small") is None
    assert store.get("big") is None and store.get("tiny") is None
    assert store.stats().extra["writable"] is False
    store.close()


def test_full_disk_through_the_decorator(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db", pragmas={"max_page_count": 12})
    dejacache.configure(store=store)
    calls: list[int] = []

    @dejacache.cache
    def blob(n: int) -> str:
        calls.append(n)
        return "z" * n

    assert blob(10) == "z" * 10  # stored
    with pytest.warns(DejacacheWarning) as caught:
        assert blob(300_000) == "z" * 300_000  # not storable: the caller still gets it
        assert blob(300_000) == "z" * 300_000
    assert len(caught) == 1
    assert blob(10) == "z" * 10  # still served from the file
    assert calls == [10, 300_000, 300_000]


def test_writes_resume_after_the_retry_delay(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db", pragmas={"max_page_count": 12})
    with pytest.warns(DejacacheWarning):
        store.put("big", rec(os.urandom(200_000)))
    store.put("later", rec(b"x"))
    assert store.get("later") is None
    store._db.retry_writes_at = 0.0  # as if the retry delay had passed (and space was freed)
    store.put("later", rec(b"x"))
    assert store.get("later") is not None
    store.close()


# ---------------------------------------------------------------- read-only


@pytest.mark.parametrize("file_too", [False, True], ids=["dir", "dir+file"])
def test_read_only_directory(tmp_path: pathlib.Path, file_too: bool) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "cache.db"
    data = filled(path, n=20)
    before = path.read_bytes()
    with immutable(d, *([path] if file_too else [])):
        with pytest.warns(DejacacheWarning, match="cannot write") as caught:
            store = SQLiteStore(path)
            for k, v in data.items():
                got = store.get(k)
                assert got is not None and got.value == v
            assert store.put("new", rec(b"dropped")) is False  # not counted as stored
            assert store.get("new") is None
            assert store.delete("key-0001") is False
            assert store.clear() == 0
            assert len(dict(store.iterate())) == 20
            assert store.stats().entries == 20
        assert len(caught) == 1
        store.close()
    assert path.read_bytes() == before
    assert sorted(p.name for p in d.iterdir()) == ["cache.db"]


def test_read_only_directory_through_the_decorator(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "ro"
    path = d / "cache.db"
    calls: list[int] = []

    @dejacache.cache
    def inc(x: int) -> int:
        calls.append(x)
        return x + 1

    writable = SQLiteStore(path)
    dejacache.configure(store=writable)
    assert inc(1) == 2  # recorded while writable
    writable.close()  # the last connection: SQLite removes -wal and -shm
    with immutable(d):
        with pytest.warns(DejacacheWarning) as caught:
            dejacache.configure(store=SQLiteStore(path))
            dejacache.reset_stats()
            assert inc(1) == 2  # served from the read-only file
            assert inc(7) == 8  # computed, not stored
            assert inc(7) == 8
        assert len(caught) == 1
    assert calls == [1, 7, 7]
    total = dejacache.stats().total  # the writes that failed are not counted as stored
    assert (total.hits, total.misses, total.stores) == (1, 2, 0)


def test_uncreatable_directory_is_an_empty_store(tmp_path: pathlib.Path) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    with immutable(parent):
        with pytest.warns(DejacacheWarning) as caught:
            store = SQLiteStore(parent / "sub" / "cache.db")
            store.put("k", rec(b"v"))
            assert store.get("k") is None
            assert list(store.iterate()) == []
            assert store.stats().entries == 0
        assert len(caught) == 1
        store.close()


def test_corrupt_file_in_a_read_only_directory(tmp_path: pathlib.Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "cache.db"
    path.write_bytes(os.urandom(16 * 1024))
    with immutable(d), pytest.warns(DejacacheWarning, match="cannot be moved aside") as caught:
        store = SQLiteStore(path)
        assert store.get("k") is None
        store.put("k", rec(b"v"))  # nowhere to put it: dropped
        assert store.get("k") is None
        assert store.stats().entries == 0
    assert len(caught) == 1
    store.close()


def test_readonly_option_reads_and_never_writes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    data = filled(path, n=5)
    before = path.read_bytes()
    store = SQLiteStore(path, readonly=True)  # asked for: no warning (-W error would raise)
    assert store.get("key-0003") is not None
    assert store.get("key-0003").value == data["key-0003"]  # type: ignore[union-attr]
    store.put("x", rec(b"x"))
    assert store.get("x") is None
    assert store.delete("key-0003") is False
    store.close()
    assert path.read_bytes() == before


# ---------------------------------------------------------------- locking


class _WriteLock:
    """Another connection holding the file's write lock until :meth:`release` (not until a
    time: a loaded machine once kept a test from running for longer than such a time)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO dejacache_meta VALUES ('holder', 'x')")
        self.released = threading.Event()  # set before the lock goes

    def release(self) -> None:
        self.released.set()
        self.conn.execute("COMMIT")
        self.conn.close()

    def release_after(self, seconds: float) -> threading.Thread:
        def later() -> None:
            time.sleep(seconds)
            self.release()

        t = threading.Thread(target=later)
        t.start()
        return t


def test_a_writer_waits_for_a_competing_writer(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db", timeout=5.0)
    store.put("before", rec(b"b"))
    lock = _WriteLock(store.path)
    got = store.get("before")  # WAL: reads are not blocked by the writer, who holds on
    assert got is not None and got.value == b"b" and not lock.released.is_set()
    releasing = lock.release_after(0.3)
    t0 = time.monotonic()
    store.put("k", rec(b"v"))
    assert lock.released.is_set()  # the put waited for the other writer
    assert time.monotonic() - t0 >= 0.25
    releasing.join()
    assert store.get("k") is not None
    store.close()


def test_lock_timeout_is_a_store_error_not_a_hang(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db", timeout=0.2)
    lock = _WriteLock(store.path)
    with pytest.raises(StoreError, match="locked") as info:
        store.put("k", rec(b"v"))
    assert str(store.path) in str(info.value)
    lock.release()
    store.put("k", rec(b"v"))
    assert store.get("k") is not None
    store.close()


# ---------------------------------------------------------------- fork and pickling


def _child(store: SQLiteStore, parent_conn: sqlite3.Connection) -> None:
    assert store._db.conn() is not parent_conn  # never the parent's connection
    got = store.get("parent")
    assert got is not None and got.value == b"from parent"
    store.put("child", rec(b"from child"))

    def in_thread() -> None:
        store.put("child-thread", rec(b"from child thread"))

    t = threading.Thread(target=in_thread)
    t.start()
    t.join()


def test_forked_child_reopens_connections(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    store.put("parent", rec(b"from parent"))
    parent_conn = store._db.conn()
    # connections open in other threads too at fork time
    t = threading.Thread(target=lambda: store.get("parent"))
    t.start()
    t.join()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_child, args=(store, parent_conn)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    got = store.get("child")
    assert got is not None and got.value == b"from child"
    assert store.get("child-thread") is not None
    store.put("parent-after", rec(b"still fine"))  # the parent's connection still works
    assert store._db.conn() is parent_conn
    assert store.get("parent-after") is not None
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store.close()


def test_pickled_store_reopens_the_same_file(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db", timeout=5.0)
    store.put("k", rec(b"v"))
    clone = pickle.loads(pickle.dumps(store))
    assert clone is not store and clone.path == store.path and clone.timeout == 5.0
    got = clone.get("k")
    assert got is not None and got.value == b"v"
    clone.close()
    store.close()


# ---------------------------------------------------------------- details


def test_iterate_pages_newest_first(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    for i in range(700):
        store.put(f"k{i:03d}", Record(value=b"%d" % i, name="fn" if i % 2 else "other",
                                      created=1000.0 + i // 3))  # ties in created, too
    keys = [k for k, _ in store.iterate()]
    assert len(keys) == len(set(keys)) == 700
    created = [r.created for _, r in store.iterate()]
    assert created == sorted(created, reverse=True)
    assert len(list(store.iterate(name="fn"))) == 350
    store.close()


def test_large_requests_are_compressed(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    request = b'{"messages":"' + b"the same agent turn again " * 20_000 + b'"}'
    whole = b'{"messages": "' + b"the same agent turn again " * 20_000 + b'"}'  # not canonical
    store.put("k", rec(b"v", request=request))
    store.put("whole", rec(b"v", request=whole))
    store.put("small", rec(b"v", request=b'{"a":1}'))
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        # the long string is a shared part of the request: compressed in ``blobs``
        z, n = db.execute("SELECT z, LENGTH(request) FROM entries WHERE key='k'").fetchone()
        assert z == 2 and n < 100
        z, n = db.execute("SELECT z, LENGTH(data) FROM blobs").fetchone()
        assert z == 1 and n < len(request) // 10
        # a request stored whole is compressed in its row
        z, n = db.execute("SELECT z, LENGTH(request) FROM entries WHERE key='whole'").fetchone()
        assert z == 1 and n < len(request) // 10
        assert db.execute("SELECT z FROM entries WHERE key='small'").fetchone() == (0,)
    items = dict(store.iterate())
    assert items["k"].request == request
    assert items["whole"].request == whole
    assert items["small"].request == b'{"a":1}'
    store.close()


def test_purge_expired(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    store.put("old", rec(b"1"), ttl=0.05)
    store.put("keep", rec(b"2"), ttl=3600)
    store.put("forever", rec(b"3"))
    time.sleep(0.1)
    assert store.purge_expired() == 1
    assert {k for k, _ in store.iterate()} == {"keep", "forever"}
    store.close()


def test_default_path_and_disabled_persistence(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore()
    assert store.path == tmp_path / ".dejacache" / "cache.db"
    assert store.url == f"sqlite:///{store.path}"
    store.close()
    monkeypatch.setenv("DEJACACHE_DIR", "")
    with pytest.raises(StoreError, match="persistence is disabled"):
        SQLiteStore()


def test_pragmas_are_validated(tmp_path: pathlib.Path) -> None:
    with pytest.raises(StoreError, match="invalid pragma"):
        SQLiteStore(tmp_path / "c.db", pragmas={"cache_size; DROP TABLE entries": 1})
    store = SQLiteStore(tmp_path / "c.db", pragmas={"cache_size": -4096})
    assert store._db.conn().execute("PRAGMA cache_size").fetchone() == (-4096,)
    store.close()


def test_close_then_reuse_reconnects(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    store.put("k", rec(b"v"))
    store.close()
    got = store.get("k")
    assert got is not None and got.value == b"v"
    store.close()


def test_file_labelled_current_but_laid_out_otherwise_is_rebuilt(tmp_path: pathlib.Path) -> None:
    """A file claiming the current schema version with other columns (a damaged or hand-made
    file) is rebuilt with one warning, instead of failing call by call."""
    path = tmp_path / "cache.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    conn.execute("INSERT INTO dejacache_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB)")
    conn.commit()
    conn.close()
    with pytest.warns(dejacache.DejacacheWarning, match="unrecognised table layout"):
        store = SQLiteStore(path)
    store.put("k", Record(value=b"v", name="n"))
    got = store.get("k")
    assert got is not None and got.value == b"v"
    store.close()


# ---------------------------------------------------------------- generation counters


def test_counters_start_at_zero_and_increment_atomically(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    assert store.get_counters([]) == [] and store.incr_many([]) == []
    assert store.get_counters(["a", "b"]) == [0, 0]
    assert store.incr("a") == 1 and store.incr("a") == 2
    assert store.incr_many(["a", "b", "c"]) == [3, 1, 1]
    assert store.get_counters(["c", "a", "nope", "b"]) == [1, 3, 0, 1]
    store.put("k", rec(b"v"))
    store.clear()  # entries go, counters stay: going back to 0 would revive old keys
    assert store.get("k") is None and store.get_counters(["a"]) == [3]
    store.close()
    assert SQLiteStore(tmp_path / "cache.db").get_counters(["a", "b"]) == [3, 1]


async def test_async_counter_twins(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "cache.db")
    assert await store.aincr("a") == 1
    assert await store.aincr_many(["a", "b"]) == [2, 1]
    assert await store.aget_counters(["a", "b"]) == [2, 1]
    store.close()


async def test_async_increments_wait_for_a_lock_off_the_event_loop(
        tmp_path: pathlib.Path) -> None:
    """An async ``@invalidates`` over a file another connection is writing: its increments
    wait for the lock in a worker thread, and the event loop runs on meanwhile (before:
    inline, the loop stood still until the lock went, up to ``timeout``)."""
    store = SQLiteStore(tmp_path / "cache.db")
    assert await store.aincr("a") == 1  # the file and its tables exist
    lock = _WriteLock(store.path)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick = asyncio.create_task(ticker())
    releasing = lock.release_after(0.5)
    try:
        assert await store.aincr_many(["a", "b"]) == [2, 1]
        assert await store.aincr("a") == 3
    finally:
        tick.cancel()
        releasing.join()
    assert ticks >= 10  # ~50 while the lock was held; 0 or 1 when the loop was stalled
    store.close()


def _incr_many_times(path: str, proc: int, n: int, out: Any) -> None:
    store = SQLiteStore(path)
    got: list[int] = []
    lock = threading.Lock()

    def thread() -> None:
        mine = [store.incr("shared") for _ in range(n)]
        with lock:
            got.extend(v for v in mine if v is not None)

    threads = [threading.Thread(target=thread) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(got)


def test_increments_from_two_processes_are_never_lost_or_repeated(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "cache.db"
    SQLiteStore(path).close()
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as separate apps are
    out = ctx.Queue()
    procs = [ctx.Process(target=_incr_many_times, args=(str(path), i, 250, out))
             for i in range(2)]
    for p in procs:
        p.start()
    values = sorted(v for _ in procs for v in out.get(timeout=120))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert values == list(range(1, 1001))  # 2 processes x 2 threads x 250, each value once
    assert SQLiteStore(path).get_counters(["shared"]) == [1000]


def test_unreadable_counters_read_as_none_never_as_zeros(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    store.incr("a")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE counters")
    store.close()
    assert store.get_counters(["a"]) is None
    assert store.incr("a") is None
    store.close()


def test_read_only_store_reads_counters_and_cannot_bump_them(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    writer = SQLiteStore(path)
    writer.incr_many(["a", "a"])
    writer.close()
    store = SQLiteStore(path, readonly=True)
    assert store.get_counters(["a", "b"]) == [2, 0]
    assert store.incr("a") is None  # None: "not bumped", so readers stop trusting the cache
    store.close()


def test_version_2_file_keeps_its_calls_and_drops_its_tool_entries(
    tmp_path: pathlib.Path,
) -> None:
    """Upgrading in place: version 2 tool entries were keyed by per-process counters that
    restarted at 0, the very values the new file counters start from."""
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    store.put("call", rec(b"llm answer"))
    store.put("tool", Record(value=b"cart", name="get_cart", namespace="rt1/t/acme", kind="tool"))
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE counters")
        db.execute("UPDATE dejacache_meta SET v='2' WHERE k='schema_version'")
    store = SQLiteStore(path)
    got = store.get("call")
    assert got is not None and got.value == b"llm answer"
    assert store.get("tool") is None
    assert store.incr("a") == 1
    assert store.stats().extra["schema_version"] == SCHEMA_VERSION == 4
    store.close()


# ---------------------------------------------------------------- layering

_LAYERING_PROBE = """
import importlib.util, json, sys, types, warnings

# The dejacache package without its __init__ (which imports every face): only what
# dejacache.stores pulls in itself gets imported below.
spec = importlib.util.find_spec("dejacache")
pkg = types.ModuleType("dejacache")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["dejacache"] = pkg

import sqlite3
from dejacache.stores.sqlite import SCHEMA_VERSION, SQLiteStore

# A file claiming the current schema with another layout: the store warns while rebuilding.
db = sqlite3.connect(sys.argv[1] + "/cache.db")
db.execute("CREATE TABLE dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
db.execute("INSERT INTO dejacache_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY)")
db.commit()
db.close()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    store = SQLiteStore()  # the default path (DEJACACHE_DIR), without dejacache.config
store.close()
print(json.dumps({
    "imported": sorted(m for m in ("dejacache._engine", "dejacache.config", "dejacache.scope",
                                   "dejacache.runtime") if m in sys.modules),
    "warnings": [[type(w.message).__module__, type(w.message).__name__] for w in caught],
}))
"""


def test_stores_import_neither_the_engine_nor_config(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "DEJACACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _LAYERING_PROBE, str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["imported"] == []  # old code: ['dejacache._engine', 'dejacache.config', ...]
    assert got["warnings"] == [["dejacache.errors", "DejacacheWarning"]]


def test_dejacache_warning_is_one_class_everywhere() -> None:
    from dejacache import _engine, errors

    assert dejacache.DejacacheWarning is errors.DejacacheWarning is _engine.DejacacheWarning


# ---------------------------------------------------------------- the hit path


def test_each_hit_gets_its_own_usage(tmp_path: pathlib.Path) -> None:
    """Hits reuse the parse of a ``usage`` column they saw before; never the same dict."""
    store = SQLiteStore(tmp_path / "c.db")
    store.put("k", rec(b"v", usage={"total_tokens": 7, "prompt_tokens": 5}))
    first = store.get("k")
    assert first is not None and first.usage == {"total_tokens": 7, "prompt_tokens": 5}
    first.usage["total_tokens"] = 999  # type: ignore[index]
    again = store.get("k")
    assert again is not None and again.usage == {"total_tokens": 7, "prompt_tokens": 5}
    assert again.usage is not first.usage
    with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as db, db:
        db.execute("UPDATE entries SET usage=? WHERE key='k'", (b'{"total_tokens": "x"',))
    damaged = store.get("k")  # a damaged usage fails neither the hit nor the stats
    assert damaged is not None and damaged.value == b"v" and damaged.usage is None
    store.close()


def test_first_get_in_a_thread_opens_its_own_connection(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    store.put("k", rec(b"v"))
    got: list[Record | None] = []
    conns: list[object] = []

    def reader() -> None:
        got.append(store.get("k"))
        got.append(store.get("missing"))
        conns.append(store._db.local.conn)

    t = threading.Thread(target=reader)
    t.start()
    t.join()
    assert got[0] is not None and got[0].value == b"v" and got[1] is None
    assert conns[0] is not store._db.conn()  # one connection per thread
    store.close()
    assert store.get("k") is not None  # closed: the next hit reopens
    store.close()


# ------------------------------------------------- the decorator's short path (SQLiteStore.hit)


def _json_blob(value: Any, key: str) -> bytes:
    return dejacache.JsonCodec().encode(value, key=key)


def test_hit_hands_over_a_checked_plain_body(tmp_path: pathlib.Path) -> None:
    import orjson

    store = SQLiteStore(tmp_path / "c.db")
    store.put("k", rec(_json_blob({"a": [1, 2]}, "k"), duration=0.5,
                       usage={"total_tokens": 7}))
    assert store.hit("k") is not None  # the first read in a thread may answer the general way
    item = store.hit("k")
    assert item is not None
    body, duration, usage, record, shared = item[:5]
    assert orjson.loads(body) == {"a": [1, 2]}
    assert (duration, usage, record) == (0.5, {"total_tokens": 7}, None)
    assert shared is dejacache.stores._base.NOT_SHARED
    assert store.hit("missing") is None
    store.close()


@pytest.mark.parametrize("case", ["damaged", "other key", "tagged", "error", "not ours"])
def test_hit_leaves_what_it_cannot_vouch_for_to_the_general_path(
    tmp_path: pathlib.Path, case: str
) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    value = {
        "damaged": _json_blob({"a": 1}, "k")[:-1] + b"2",
        "other key": _json_blob({"a": 1}, "other"),
        "tagged": _json_blob((1, 2), "k"),
        "error": _json_blob({"a": 1}, "k"),
        "not ours": b"plain bytes",
    }[case]
    store.put("k", rec(value, kind="error" if case == "error" else "call"))
    store.get("k")  # opens this thread's connection
    item = store.hit("k")
    assert item is not None and item[0] is None and item[3] is None  # body and record
    store.close()


def test_expired_entries_miss_on_the_short_path(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    store.put("k", rec(_json_blob(1, "k")), ttl=60)
    store.get("k")
    assert store.hit("k") is not None
    with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as db, db:
        db.execute("UPDATE entries SET expires=? WHERE key='k'", (time.time() - 1,))
    assert store.hit("k") is None
    store.close()


def test_a_subclass_with_its_own_get_gets_no_short_path(tmp_path: pathlib.Path) -> None:
    class Audited(SQLiteStore):
        def get(self, key: str) -> Record | None:
            return super().get(key)

    assert SQLiteStore.short_hits is True
    assert Audited.short_hits is False


def test_damaged_value_through_the_decorator_is_reported_and_recomputed(
    tmp_path: pathlib.Path,
) -> None:
    store = SQLiteStore(tmp_path / "c.db")
    calls: list[int] = []

    @dejacache.cache(name="fetch")
    def fetch(q: int) -> dict[str, Any]:
        calls.append(q)
        return {"q": q, "n": len(calls)}

    with dejacache.scope(store=store):
        assert fetch(1) == {"q": 1, "n": 1}
        assert fetch(1) == {"q": 1, "n": 1}  # a short-path hit
        with contextlib.closing(sqlite3.connect(tmp_path / "c.db")) as db, db:
            db.execute("UPDATE entries SET value = CAST(substr(value, 1, length(value) - 1) "
                       "|| 'X' AS BLOB)")
        with pytest.warns(DejacacheWarning, match="damaged"):
            assert fetch(1) == {"q": 1, "n": 2}  # never the damaged bytes: run again
        assert fetch(1) == {"q": 1, "n": 2}
    assert len(calls) == 2
    store.close()


def test_frozen_hits_follow_a_row_another_process_replaced(tmp_path: pathlib.Path) -> None:
    """A frozen hit reuses the value it made while the row holds the same bytes, and only
    then: another process (here another store on the file) may replace the row at any time."""
    path = tmp_path / "c.db"
    store, other = SQLiteStore(path), SQLiteStore(path)
    answer = ["first"]

    @dejacache.cache(name="ask", frozen=True)
    def ask(q: str) -> dict[str, Any]:
        return {"answer": answer[0], "items": [q]}

    with dejacache.scope(store=store):
        ask("x")
        one, two = ask("x"), ask("x")
        assert one == {"answer": "first", "items": ["x"]}
        assert one._node is two._node  # one shared value, a read-only view per hit
        key = ask.cache_key("x")
    with dejacache.scope(store=other, mode="record"):
        answer[0] = "second"
        ask("x")  # the other process re-records the row
    with dejacache.scope(store=store):
        assert ask("x") == {"answer": "second", "items": ["x"]}
    assert store.get(key) is not None
    store.close()
    other.close()


@pytest.mark.parametrize("drop", ["clear", "clear namespace", "delete", "put"])
def test_a_kept_frozen_value_never_outlives_its_row(tmp_path: pathlib.Path, drop: str) -> None:
    """The value a frozen hit keeps for a row's bytes goes with the row: after a clear, a
    delete or an overwrite, the same bytes written again are decoded afresh."""
    from dejacache.codec import JsonCodec
    from dejacache.stores._base import NOT_SHARED

    store = SQLiteStore(tmp_path / "c.db")
    value = JsonCodec().encode({"a": [1]}, key="k")
    store.put("k", rec(value))
    item = store.hit("k")
    assert item is not None and item[4] is NOT_SHARED
    store.share("k", item, "kept")
    kept = store.hit("k")
    assert kept is not None and kept[4] == "kept"
    if drop == "clear":
        store.clear()
    elif drop == "clear namespace":
        store.clear("ns")
    elif drop == "delete":
        store.delete("k")
    store.put("k", rec(value))  # the same bytes again
    again = store.hit("k")
    assert again is not None and again[4] is NOT_SHARED
    store.delete("k")  # removed between a hit and its share: the share keeps nothing
    store.share("k", again, "late")
    store.put("k", rec(value))
    latest = store.hit("k")
    assert latest is not None and latest[4] is NOT_SHARED
    store.close()


def test_an_unknown_pragma_is_refused_with_the_closest_name(tmp_path: pathlib.Path) -> None:
    # SQLite ignores a pragma it does not know: the store would run on its defaults unsaid.
    with pytest.raises(StoreError, match=r"unknown pragma 'jornal_mode'.*'journal_mode'"):
        SQLiteStore(tmp_path / "c.db", pragmas={"jornal_mode": "wal"})
    SQLiteStore(tmp_path / "c.db", pragmas={"journal_mode": "wal", "cache_size": -2000})


def test_a_write_the_file_refused_never_lets_the_old_value_be_read(
    tmp_path: pathlib.Path,
) -> None:
    """A full disk drops writes (one warning, reads keep working): the entry a dropped
    put or delete was meant to replace is a miss from then on in this process, and is
    deleted for every process once the file takes writes again."""
    path = tmp_path / "cache.db"
    setup = SQLiteStore(path)
    setup.put("k", rec(b"old"))
    setup.put("j", rec(b"old"))
    setup.close()
    full = SQLiteStore(path, pragmas={"max_page_count": 1})  # no write that grows the file
    with pytest.warns(DejacacheWarning, match="cannot write"):
        assert full.put("k", rec(b"new" * 100_000)) is False
    assert full.delete("j") is False  # (writes are not tried again for a while)
    for key in ("k", "j"):
        assert full.get(key) is None and full.hit(key) is None
    # The disk has room again.
    full._db.conn().execute("PRAGMA max_page_count = 1073741823")
    full._db.retry_writes_at = 0.0
    assert full.get("k") is None  # its old row is deleted first
    other = SQLiteStore(path)
    assert other.get("k") is None and other.get("j") is None
    full.put("k", rec(b"newer"))
    assert (got := other.get("k")) is not None and got.value == b"newer"
    assert (got := full.get("k")) is not None and got.value == b"newer"
    other.close()
    full.close()
