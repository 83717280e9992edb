"""The embedded default store: one SQLite file, safe across threads and processes.

Done by the book (diskcache, hishel): WAL, ``synchronous=NORMAL``, ``busy_timeout``,
``BEGIN IMMEDIATE`` for writes, one connection per thread, reopened after ``fork``, and the
schema version kept in the file. A corrupt file is moved aside and a fresh store starts; a
read-only directory or a full disk keeps reads working and drops writes with one warning.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import orjson

from ..errors import IncompatibleStore, StoreError
from ._base import BaseStore, Record, StoreStats

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    value BLOB NOT NULL,
    request BLOB NOT NULL,
    duration REAL NOT NULL,
    usage BLOB,
    created REAL NOT NULL,
    expires REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_name ON entries (name, namespace);
"""

_CORRUPT_MARKERS = ("not a database", "malformed", "file is encrypted", "disk image")
_WRITE_FAILURE_MARKERS = ("readonly", "read-only", "disk is full", "unable to open", "disk I/O")


class _Warn:
    def __init__(self) -> None:
        self.done: set[str] = set()

    def once(self, tag: str, message: str) -> None:
        if tag not in self.done:
            self.done.add(tag)
            from .._engine import DejacacheWarning

            warnings.warn(message, DejacacheWarning, stacklevel=4)


class SQLiteStore(BaseStore):
    """Key → Record in one SQLite file (default ``<project>/.dejacache/cache.db``).

    TTLs are stored as wall-clock expiry times: the file outlives processes and reboots, so
    no monotonic clock can span it.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, timeout: float = 30.0
    ) -> None:
        if path is None:
            from ..config import default_cache_dir

            d = default_cache_dir()
            if d is None:
                raise StoreError("DEJACACHE_DIR is empty: persistence is disabled",
                                 backend="sqlite")
            path = d / "cache.db"
        self.path = pathlib.Path(path)
        self.url = f"sqlite:///{self.path}"
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._warn = _Warn()
        self.writable = True
        self._open_checked()

    # ---------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        # WAL: readers never block the writer and vice versa (many test workers, one file).
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across application crashes in WAL mode; only power loss can roll
        # back the last transactions, which for a cache costs a re-run, never a wrong answer.
        conn.execute("PRAGMA synchronous=NORMAL")
        # Wait for a competing writer instead of failing with 'database is locked'.
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        return conn

    def _conn(self) -> sqlite3.Connection:
        loc = self._local
        conn: sqlite3.Connection | None = getattr(loc, "conn", None)
        if conn is None or loc.pid != os.getpid():
            # After fork the parent's connection must not be used (SQLite forbids it).
            conn = self._connect()
            loc.conn, loc.pid = conn, os.getpid()
            with self._lock:
                self._all.append(conn)
        return conn

    def _open_checked(self) -> None:
        try:
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            if self._is_corrupt(exc):
                self._move_aside(exc)
                self._init_schema()
            elif self._is_write_failure(exc):
                self._degrade(exc)
            else:
                raise StoreError(f"cannot open SQLite store: {exc}", backend=self.url) from exc

    def _init_schema(self) -> None:
        conn = self._conn()
        with self._write(conn):
            for stmt in _SCHEMA.strip().split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            row = conn.execute("SELECT v FROM dejacache_meta WHERE k='schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO dejacache_meta VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise IncompatibleStore(backend=self.url, found=int(row[0]),
                                        supported=SCHEMA_VERSION)

    class _Tx:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no deadlock
            return self.conn

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            if exc_type is None:
                self.conn.execute("COMMIT")
            else:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")

    def _write(self, conn: sqlite3.Connection) -> SQLiteStore._Tx:
        return SQLiteStore._Tx(conn)

    @staticmethod
    def _is_corrupt(exc: BaseException) -> bool:
        return any(m in str(exc).lower() for m in _CORRUPT_MARKERS)

    @staticmethod
    def _is_write_failure(exc: BaseException) -> bool:
        return any(m.lower() in str(exc).lower() for m in _WRITE_FAILURE_MARKERS)

    def _close_all(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(sqlite3.Error):
                    c.close()
            self._all.clear()
        self._local = threading.local()

    def _move_aside(self, exc: BaseException) -> None:
        self._close_all()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            p = pathlib.Path(str(self.path) + suffix)
            if p.exists():
                os.replace(p, pathlib.Path(str(target) + suffix))
        self._warn.once("corrupt", f"dejacache: {self.path} was unreadable ({exc}); moved it to "
                        f"{target.name} and started a fresh cache")

    def _degrade(self, exc: BaseException) -> None:
        self.writable = False
        self._warn.once("readonly", f"dejacache: cannot write {self.path} ({exc}); reads keep "
                        "working, new results are not stored")

    # ---------------------------------------------------------------- Store protocol

    def get(self, key: str) -> Record | None:
        try:
            row = self._conn().execute(
                "SELECT value, name, namespace, kind, duration, usage, expires FROM entries "
                "WHERE key=?", (key,)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            if self._is_corrupt(exc):
                self._move_aside(exc)
                self._open_checked()
                return None
            if self._is_write_failure(exc):
                return None
            raise StoreError(f"read failed: {exc}", backend=self.url, key=key) from exc
        if row is None:
            return None
        value, name, namespace, kind, duration, usage, expires = row
        if expires is not None and time.time() >= expires:
            return None
        return Record(value=value, name=name, namespace=namespace, kind=kind, duration=duration,
                      usage=orjson.loads(usage) if usage else None)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        if not self.writable:
            return
        expires = time.time() + ttl if ttl is not None else None
        row = (key, record.name, record.namespace, record.kind, record.value, record.request,
               record.duration, orjson.dumps(record.usage) if record.usage else None,
               record.created or time.time(), expires)
        try:
            conn = self._conn()
            with self._write(conn):
                conn.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?)", row)
        except sqlite3.DatabaseError as exc:
            if self._is_corrupt(exc):
                self._move_aside(exc)
                self._open_checked()
            elif self._is_write_failure(exc):
                self._degrade(exc)
            else:
                raise StoreError(f"write failed: {exc}", backend=self.url, key=key) from exc

    def delete(self, key: str) -> bool:
        if not self.writable:
            return False
        conn = self._conn()
        try:
            with self._write(conn):
                cur = conn.execute("DELETE FROM entries WHERE key=?", (key,))
        except sqlite3.DatabaseError as exc:
            if self._is_write_failure(exc):
                self._degrade(exc)
                return False
            raise StoreError(f"delete failed: {exc}", backend=self.url, key=key) from exc
        return cur.rowcount > 0

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        sql = ("SELECT key, value, name, namespace, kind, request, duration, usage, created, "
               "expires FROM entries")
        where, params = [], []
        if name is not None:
            where.append("name=?")
            params.append(name)
        if namespace is not None:
            where.append("namespace=?")
            params.append(namespace)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC"
        now = time.time()
        for row in self._conn().execute(sql, params).fetchall():
            key, value, nm, ns, kind, request, duration, usage, created, expires = row
            if expires is not None and now >= expires:
                continue
            yield key, Record(value=value, name=nm, namespace=ns, kind=kind, request=request,
                              duration=duration, usage=orjson.loads(usage) if usage else None,
                              created=created)

    def clear(self, namespace: str | None = None) -> int:
        if not self.writable:
            return 0
        conn = self._conn()
        with self._write(conn):
            if namespace is None:
                cur = conn.execute("DELETE FROM entries")
            else:
                cur = conn.execute("DELETE FROM entries WHERE namespace=?", (namespace,))
        return cur.rowcount

    def stats(self) -> StoreStats:
        n, size = self._conn().execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(value) + LENGTH(request)), 0) FROM entries"
        ).fetchone()
        return StoreStats(backend=self.url, entries=n, bytes=size,
                          extra={"file_bytes": self.path.stat().st_size if self.path.exists()
                                 else 0, "writable": self.writable})

    def close(self) -> None:
        self._close_all()
