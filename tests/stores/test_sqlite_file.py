"""``SQLiteFile`` alone: opening, transactions, lock retries and failures, without a store."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3

import pytest

from dejacache import DejacacheWarning
from dejacache.errors import IncompatibleStore, StoreError
from dejacache.stores._sqlite_file import SQLiteFile, is_busy
from dejacache.stores._sqlite_schema import SCHEMA_VERSION, read_version


def open_file(path: pathlib.Path, *, timeout: float = 5.0, readonly: bool = False,
              pragmas: dict[str, int | str] | None = None) -> SQLiteFile:
    return SQLiteFile(path, url=f"sqlite:///{path}", timeout=timeout, readonly=readonly,
                      pragmas=pragmas or {})


def test_a_new_file_is_created_in_wal_mode_with_the_schema(tmp_path: pathlib.Path) -> None:
    f = open_file(tmp_path / "sub" / "c.db", pragmas={"cache_size": -2048})
    conn = f.conn()
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA cache_size").fetchone() == (-2048,)
    assert read_version(conn) == SCHEMA_VERSION
    assert f.conn() is conn and f.local.conn is conn  # one connection per thread
    assert f.writable and f.can_write()
    f.close()
    assert f.conn() is not conn  # reopened after close
    f.close()


def test_a_transaction_is_all_or_nothing(tmp_path: pathlib.Path) -> None:
    f = open_file(tmp_path / "c.db")

    def half(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO counters VALUES ('a', 1)")
        raise RuntimeError("stopped half way")

    with pytest.raises(RuntimeError):
        f.transact(half)
    assert f.query("SELECT * FROM counters") == []
    assert f.write(lambda conn: conn.execute(
        "INSERT INTO counters VALUES ('a', 1)").rowcount) == 1
    assert f.query("SELECT * FROM counters") == [("a", 1)]
    f.close()


def test_a_held_lock_is_waited_for_then_reported(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    f = open_file(path, timeout=0.0)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=0)) as other:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as info:
            f.transact(lambda conn: conn.execute("INSERT INTO counters VALUES ('a', 1)"))
        assert is_busy(info.value)
        with pytest.raises(StoreError, match="locked"):
            f.write(lambda conn: 1, key="the-key")
        other.execute("ROLLBACK")
    assert f.write(lambda conn: 1) == 1
    f.close()


def test_a_corrupt_file_is_moved_aside(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    path.write_bytes(os.urandom(8192))
    with pytest.warns(DejacacheWarning, match="moved it to c.db.corrupt-"):
        f = open_file(path)
    assert read_version(f.conn()) == SCHEMA_VERSION
    assert len(list(tmp_path.glob("c.db.corrupt-*"))) == 1
    f.close()


def test_a_newer_schema_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    open_file(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE dejacache_meta SET v='99' WHERE k='schema_version'")
    with pytest.raises(IncompatibleStore):
        open_file(path)


def test_read_only_opens_without_writing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    w = open_file(path)
    w.write(lambda conn: conn.execute("INSERT INTO counters VALUES ('a', 1)").rowcount)
    w.close()
    f = open_file(path, readonly=True)
    assert not f.writable and not f.can_write()
    assert f.query("SELECT * FROM counters") == [("a", 1)]
    assert f.write(lambda conn: 1) == 0  # dropped, silently
    f.close()
    missing = open_file(tmp_path / "missing.db", readonly=True)
    assert missing.query("SELECT * FROM counters") == []  # nothing to read: empty
    assert not (tmp_path / "missing.db").exists()
    missing.close()


def test_a_write_failure_warns_once_and_pauses_writes(tmp_path: pathlib.Path) -> None:
    f = open_file(tmp_path / "c.db")
    with pytest.warns(DejacacheWarning, match="cannot write"):
        f.write_failed(OSError(28, "No space left on device"))
    assert not f.can_write() and f.writable
    f.write_failed(OSError(28, "No space left on device"))  # no second warning
    f.retry_writes_at = 0.0
    assert f.can_write()
    with pytest.raises(StoreError, match="write failed"):
        f.write_failed(sqlite3.IntegrityError("constraint failed"), "k")
    f.close()


def test_the_log_stays_bounded_under_readers_that_never_stop(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a reader always in the log, SQLite never restarts it from its start on its own:
    it grew without bound (4 processes and the CLI: 405 MB in 30 s). Past ``WAL_LIMIT`` a
    writer checkpoints it back to nothing after the write that crossed it. (Looked at only
    every 20 ms, the log grew ~4 MB past the limit between two looks, and on a busy box past
    the 6 MiB this asserted.) The retry after readers held a cut off is short here, so a busy
    box's held-off cuts add a few writes each, not 20 ms of them."""
    import multiprocessing
    import time

    from dejacache.stores import Record, SQLiteStore, _sqlite_file

    monkeypatch.setattr(_sqlite_file, "WAL_LIMIT", 256 * 1024)
    monkeypatch.setattr(_sqlite_file, "_WAL_RETRY_S", 0.001)
    path = tmp_path / "c.db"
    store = SQLiteStore(path)
    for i in range(50):
        store.put(f"k{i}", Record(value=b"x" * 4000, name="n"))
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    readers = [ctx.Process(target=_read_forever, args=(str(path), stop)) for _ in range(3)]
    for r in readers:
        r.start()
    wal = pathlib.Path(f"{path}-wal")
    largest = 0
    try:
        time.sleep(1.0)  # the readers are reading
        for i in range(3000):  # ~12 MB of log without the bound
            store.put(f"k{i % 50}", Record(value=os.urandom(2000).hex().encode(), name="n"))
            if i % 100 == 0:
                largest = max(largest, wal.stat().st_size)
    finally:
        stop.set()
        for r in readers:
            r.join(10)
    print(f"\nlargest log seen: {largest / 2**20:.1f} MB; cut back "
          f"{store.stats().extra.get('wal_truncations')} times")
    # Without the bound the log reached ~12 MB; with it, the limit and a few writes.
    assert largest < 2 * 2**20
    store.close()


def _read_forever(path: str, stop: object) -> None:
    """A process reading the store back to back until ``stop`` is set."""
    from dejacache.stores import SQLiteStore

    store = SQLiteStore(path)
    while not stop.is_set():  # type: ignore[attr-defined]
        for i in range(50):
            store.get(f"k{i}")
    store.close()


def test_a_cut_refused_for_another_checkpoint_is_tried_again_at_the_next_look(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite refuses a checkpoint at once, with no busy wait, while another connection's is
    under way (a writer's automatic one, after each commit of a long log). Backing off half a
    second then, as after readers that would not move on, left four processes' log at 124 MB
    (``benchmarks/load_sqlite_wal.py``): the next look tries again."""
    import threading
    import time

    from dejacache.stores import _sqlite_file

    monkeypatch.setattr(_sqlite_file, "WAL_LIMIT", 0)
    monkeypatch.setattr(_sqlite_file, "_WAL_WAIT_MS", 50)
    path = tmp_path / "c.db"
    f = open_file(path)
    f.transact(lambda c: c.execute("CREATE TABLE t (x)"))
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()  # a snapshot older than the next write
    f.transact(lambda c: c.execute("INSERT INTO t VALUES (1)"))
    other = sqlite3.connect(path, timeout=30, check_same_thread=False)

    def full() -> None:  # waits for the reader, holding the checkpoint lock meanwhile
        while other.execute("PRAGMA wal_checkpoint(FULL)").fetchone() == (1, -1, -1):
            pass  # (the probe below held the lock for a moment)

    waiting = threading.Thread(target=full)
    waiting.start()
    probe = sqlite3.connect(path)
    while probe.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone() != (1, -1, -1):
        time.sleep(0.001)  # (leaves the lock free for the thread to take)
    try:
        assert f.bound_wal(f.conn()) is False
    finally:
        reader.execute("COMMIT")
        waiting.join(30)
    assert f.bound_wal(f.conn()) is True  # at once: no half-second back-off
    assert os.path.getsize(f"{path}-wal") == 0
    for c in (reader, other, probe):
        c.close()
    f.close()
