"""The embedded default store: one SQLite file, safe across threads and processes.

Done by the book (diskcache, hishel): WAL, ``synchronous=NORMAL``, a bounded busy wait,
``BEGIN IMMEDIATE`` for writes, one connection per thread, reopened after ``fork``, and the
schema version kept in the file. A corrupt or truncated file is moved aside and a fresh store
starts; a read-only directory or a full disk keeps reads working and drops writes with one
warning. That is ``_sqlite_file``; the tables and their upgrades are ``_sqlite_schema``.

Layout (measured with a throwaway benchmark against a plain "SELECT value by key" table):
one rowid table, the canonical request as the last column. The hit path reads only the small
columns in front of it, so a hit costs ~1.1-1.2x the plain lookup at 20 KB and 200 KB
requests. Requests share their messages (10k calls of a growing 20 KB conversation took
1.03x the raw JSON when each row kept its whole request): a request is stored as a skeleton
whose messages, tool schemas and long strings live once each in ``blobs`` under a hash of
their content, reference-counted by the rows using them, so a delete removes its orphans in
the same transaction and a write touches a few WAL pages rather than the whole request
(``_sqlite_requests``). Hits never read ``blobs``; only ``iterate`` (miss reports, diffs, the
CLI) puts requests back together, checking each blob against its hash.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from .._core.durations import Duration, seconds
from .._frozen import shared_size
from .._paths import default_cache_dir
from ..codec import checked_plain_body
from ..errors import StoreError
from ._base import NOT_SHARED, BaseStore, Hit, Record, StoreStats, off_loop
from ._lost import MAX_KEYS, LostWrites
from ._short import keeps_short_path
from ._sqlite_file import SQLiteFile, is_busy
from ._sqlite_requests import (
    OLD_ROW,
    RequestReader,
    add_refs,
    refs_of_rows,
    release,
    stored_request,
)
from ._sqlite_schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_GET = "SELECT value, duration, usage, expires, name, namespace, kind, created FROM entries " \
       "WHERE key=?"
_HIT = "SELECT value, duration, usage, expires, kind FROM entries WHERE key=?"
_PUT = "INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)"
# iterate() pages over the small columns first, then reads full rows by key: sorting whole
# rows would drag every request through the sorter.
_ITER_KEYS = "SELECT key, created FROM entries"
_ITER_ROW = ("SELECT value, duration, usage, expires, name, namespace, kind, created, z, "
             "request FROM entries WHERE key=?")
# An atomic increment: the UPDATE runs inside BEGIN IMMEDIATE, so no other writer can
# interleave between it and the SELECT that reads the new value back (no RETURNING: that
# needs SQLite 3.35, and Python 3.11 builds link older ones).
_INCR = ("INSERT INTO counters (name, value) VALUES (?, 1) "
         "ON CONFLICT(name) DO UPDATE SET value = value + 1")
_COUNTER = "SELECT value FROM counters WHERE name=?"

_PAGE = 256  # rows per iterate() query, so a huge store is never loaded at once
_PRAGMA_NAME = re.compile(r"[a-z_]+")
_PRAGMA_VALUE = re.compile(r"-?\d+|[A-Za-z_]+")


def _check_pragmas(pragmas: Mapping[str, int | str], url: str) -> None:
    """Refuse a pragma SQLite does not know: it ignores one silently, so a misspelt
    ``jornal_mode`` left the store on its defaults with no word."""
    for k, v in pragmas.items():
        if not _PRAGMA_NAME.fullmatch(k) or not _PRAGMA_VALUE.fullmatch(str(v)):
            raise StoreError(f"invalid pragma {k}={v!r}", backend=url)
    if not pragmas:
        return
    known = _known_pragmas()
    for k in pragmas:
        if known and k not in known:
            from .._suggest import did_you_mean

            raise StoreError(f"unknown pragma {k!r} in SQLiteStore(pragmas=...)"
                             f"{did_you_mean(k, sorted(known))}", backend=url)


@functools.cache
def _known_pragmas() -> frozenset[str]:
    """The pragmas this SQLite build knows (``PRAGMA pragma_list``, ~0.1 ms once). A build
    without the list (compiled without introspection) answers nothing, and every name passes."""
    con = sqlite3.connect(":memory:")
    try:
        names = frozenset(r[0] for r in con.execute("PRAGMA pragma_list"))
    finally:
        con.close()
    return names


def _usage(raw: bytes | None) -> dict[str, int] | None:
    """The ``usage`` column, or None when it is damaged: it only feeds statistics, and a bad
    one must fail neither a hit nor ``dejacache stats`` (it once raised a raw
    JSONDecodeError)."""
    if not raw:
        return None
    try:
        usage = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(usage) is not dict:
        return None
    return {k: v for k, v in usage.items() if type(v) is int} or None


# ``usage`` columns already parsed, by their bytes: a hit on a key hit before reuses the
# parse (orjson.loads plus the check above cost 1.1 us of a 2 KB hit; a lookup and a copy,
# 0.1). Bounded by emptying it when full; every hit still gets its own dict.
_USAGES: dict[bytes, dict[str, int] | None] = {}
_USAGES_MAX = 4096


def _parsed_usage(raw: bytes) -> dict[str, int] | None:
    """The parse of a ``usage`` column, shared: read it, never change it."""
    try:
        return _USAGES[raw]
    except KeyError:
        pass
    usage = _usage(raw)
    if len(_USAGES) >= _USAGES_MAX:
        _USAGES.clear()
    _USAGES[raw] = usage
    return usage


def _hit_usage(raw: bytes | None) -> dict[str, int] | None:
    usage = _parsed_usage(raw) if raw else None
    return None if usage is None else dict(usage)


# ``hit``'s answer for what only the general path (``get`` and the codec) may handle.
_GENERAL: Hit = (None, 0.0, None, None, NOT_SHARED)
_KNOWN_MAX_BYTES = 16 << 20


class _KnownBytes:
    """What :meth:`SQLiteStore.hit` remembers of the bytes this process has checked: key ->
    (the stored bytes, the ``Hit`` made for them, the bytes counted, the ``usage`` column
    it was made with). The ``Hit`` carries the body and, once a frozen hit made it, the
    immutable value (``share``). Hits read ``entries`` without the lock; writers take it.
    Bounded by emptying it when its estimate passes ``_KNOWN_MAX_BYTES``."""

    __slots__ = ("entries", "lock", "size")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Any, Hit, int, bytes | None]] = {}
        self.size = 0
        self.lock = threading.Lock()

    def remember(self, key: str, hit: Hit, usage: bytes | None, size: int) -> None:
        """``hit`` was made for ``key`` from checked bytes (its body views them)."""
        with self.lock:
            self._keep(key, hit, usage, size)

    def share(self, key: str, body: memoryview, value: Any, size: int) -> None:
        """Keep ``value`` with ``body`` while ``key`` still remembers that very body."""
        with self.lock:
            known = self.entries.get(key)
            if known is not None and known[1][0] is body:
                self._keep(key, (*known[1][:4], value), known[3], size)

    def forget(self, key: str = "") -> None:
        """Drop ``key`` (every key when empty)."""
        with self.lock:
            self._drop(key)

    def _keep(self, key: str, hit: Hit, usage: bytes | None, size: int) -> None:
        self._drop(key)
        if self.size + size > _KNOWN_MAX_BYTES:
            self._drop("")
        body = hit[0]
        assert isinstance(body, memoryview)
        self.entries[key] = (body.obj, hit, size, usage)
        self.size += size

    def _drop(self, key: str) -> None:
        if not key:
            self.entries.clear()
            self.size = 0
            return
        old = self.entries.pop(key, None)
        if old is not None:
            self.size -= old[2]


class SQLiteStore(BaseStore):
    """Key → Record in one SQLite file (default ``<project>/.dejacache/cache.db``).

    TTLs are stored as wall-clock expiry times: the file outlives processes and reboots, so
    no monotonic clock can span it. ``readonly=True`` opens an existing file for reading
    only (a shared, committed cache) and drops writes silently. ``pragmas`` adds
    ``PRAGMA name=value`` statements run on every new connection (e.g. ``cache_size``).
    No ``mmap_size`` by default: no measurable gain on hits here, and a file truncated by
    another process would turn a read into SIGBUS instead of an error we can recover from.
    """

    short_hits = True  # see :meth:`hit`
    # The async twins run in a worker thread: a write waits for another connection's lock
    # for up to ``timeout`` (a 1 s lock held elsewhere stalled the event loop for 0.95 s when
    # they ran inline), and the first use opens the file. The hop costs ~45 µs against ~6 µs
    # for an inline read, small beside the HTTP calls the async paths store.
    blocking = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not keeps_short_path(cls, SQLiteStore):
            cls.short_hits = False

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: Duration = 30.0,
        readonly: bool = False,
        pragmas: Mapping[str, int | str] | None = None,
    ) -> None:
        if path is None:
            d = default_cache_dir()
            if d is None:
                raise StoreError("DEJACACHE_DIR is empty: persistence is disabled",
                                 backend="sqlite")
            path = d / "cache.db"
        self.path = pathlib.Path(path)
        self._memo = _KnownBytes()
        self._known = self._memo.entries  # read by hit() without the lock
        self.url = f"sqlite:///{self.path}"
        self.timeout = seconds(timeout, "SQLiteStore timeout", zero=True)
        self.readonly = readonly
        self.pragmas = dict(pragmas or {})
        _check_pragmas(self.pragmas, self.url)
        self._db = SQLiteFile(self.path, url=self.url, timeout=self.timeout,
                              readonly=readonly, pragmas=self.pragmas)
        # Writes the file refused (a full disk, a read-only file): their keys read as
        # misses until their rows are deleted, once it takes writes again (see _lost).
        self._lost = LostWrites()
        self._lost_keys = self._lost.keys  # the reads' one check: empty

    def __reduce__(self) -> tuple[object, ...]:
        # Another process gets its own connections to the same file (spawn, pickling).
        return (_reopen, (str(self.path), self.timeout, self.readonly, self.pragmas))

    @property
    def writable(self) -> bool:
        """False once the file turned out read-only (writes are dropped, reads work)."""
        return self._db.writable

    # ---------------------------------------------------------------- Store protocol

    def get(self, key: str) -> Record | None:
        # The hit path (a 2 KB hit was 1.74x a bare SELECT + loads before this shape). The
        # thread's connection is read straight from the thread-local (its first use, or the
        # first after a fork or close, raises AttributeError and opens it); the one-off
        # cursor is dropped at once, which resets the statement: a kept cursor would hold its
        # read snapshot open and keep later reads from seeing other processes' writes.
        if self._lost_keys and self._still_lost(key):
            return None
        db = self._db
        try:
            row = db.local.conn.execute(_GET, (key,)).fetchone()
        except AttributeError:
            row = self._get_opening(key)
        except sqlite3.Error as exc:
            rows = db.read_slow(exc, _GET, (key,), key)
            row = rows[0] if rows else None
        if row is None:
            return None
        value, duration, usage, expires, name, namespace, kind, created = row
        if expires is not None and time.time() >= expires:
            return None
        return Record(value, name, namespace, kind, b"", duration, _hit_usage(usage), created)

    def _get_opening(self, key: str) -> tuple[Any, ...] | None:
        """:meth:`get` in a thread that has no connection yet."""
        try:
            return self._db.conn().execute(_GET, (key,)).fetchone()  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            rows = self._db.read_slow(exc, _GET, (key,), key)
            return rows[0] if rows else None

    def hit(self, key: str) -> Hit | None:
        """:meth:`get` for the decorator's short path (a ``Hit``, see ``stores._base``; a 2 KB
        hit through ``get`` was 1.93x key + SELECT + loads). It reads the five columns a hit
        needs, builds no ``Record``, and checks the value's checksum itself, so the hit is
        one ``orjson.loads`` of the body. Anything else (no connection in this thread yet, a
        failing read, a tagged, recorded-error or damaged value) answers ``_GENERAL`` and
        :meth:`get` handles it on the general path.

        Bytes this process has checked before are remembered (``_KnownBytes``): a row
        holding exactly those bytes again needs one comparison instead of the checksum and
        slicing (0.5 µs of a 2 KB hit), and serves the immutable value a ``frozen`` hit made
        from them (:meth:`share`); with the same ``duration`` and ``usage`` too, the ``Hit``
        made last time is handed out again (no usage lookup, no tuple). Another process may
        replace a row at any time: only equal bytes count, so a changed row is checked
        afresh."""
        if self._lost_keys and self._still_lost(key):
            return None
        try:
            row = self._db.local.conn.execute(_HIT, (key,)).fetchone()
        except (AttributeError, sqlite3.Error):
            return _GENERAL
        if row is None:
            return None
        value, duration, usage, expires, kind = row
        if expires is not None and time.time() >= expires:
            return None
        if kind == "error":
            return _GENERAL
        known = self._known.get(key)
        if known is not None and known[0] == value:
            hit: Hit = known[1]
            if known[3] == usage and hit[1] == duration:
                return hit  # the row as this process read it last: its Hit again
            return (hit[0], duration, _parsed_usage(usage) if usage else None, None, hit[4])
        body = checked_plain_body(value, key)
        if body is None:
            return _GENERAL
        hit = (body, duration, _parsed_usage(usage) if usage else None, None, NOT_SHARED)
        self._memo.remember(key, hit, usage, len(value))
        return hit

    def share(self, key: str, item: Hit, value: Any) -> None:
        """Keep ``value``, the immutable form of the body :meth:`hit` just returned in
        ``item``, for later ``@cache(frozen=True)`` hits of this process on the same bytes:
        such a hit costs the SELECT and one comparison, not a decode and a freeze (7 µs for
        a 1.2 KB chat completion). Nothing is kept once the row was written or removed here
        since that hit (:meth:`_forget` dropped what the hit remembered)."""
        body = item[0]
        if not (isinstance(body, memoryview) and type(body.obj) is bytes):
            return
        self._memo.share(key, body, value, shared_size(value, len(body)) + len(body.obj))

    def _forget(self, key: str = "") -> None:
        """Drop what :meth:`hit` remembers of ``key`` (of every key when empty), once its
        row has been written or removed here: a remembered value never outlives its row in
        this process. Another process's writes need nothing: only equal bytes are ever
        matched, and the value made from them cannot be changed, so it is still theirs."""
        self._memo.forget(key)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        if not self._db.can_write():
            return False
        now = time.time()
        stored = stored_request(record.request)
        row = (key, record.value, record.duration,
               orjson.dumps(dict(record.usage)) if record.usage else None,
               now + ttl if ttl is not None else None,
               record.name, record.namespace, record.kind, record.created or now,
               stored[1], stored[0])

        def body(conn: sqlite3.Connection) -> int:
            old = conn.execute(OLD_ROW, (key,)).fetchone()
            conn.execute(_PUT, row)
            add_refs(conn, stored, old)
            return 1

        kept = False
        try:
            kept = self._db.write(body, key) > 0
        finally:  # (a lock held past ``timeout`` raises: the old row stays all the same)
            self._forget(key)
            self._wrote(key, kept)
        return kept

    def delete(self, key: str) -> bool:
        removed = -1
        try:
            removed = self._remove("key=?", (key,), key)
        finally:
            self._wrote(key, removed >= 0)
        return removed > 0

    # ---------------------------------------------------------------- lost writes

    def _wrote(self, key: str, landed: bool) -> None:
        """Book a write of ``key``: one the file refused is lost (``_lost``). A store
        opened ``readonly`` drops writes by design: its file is the truth, nothing is lost."""
        if landed:
            self._lost.landed(key)
        elif not self.readonly and self._lost.lost(key):
            self._db.warn.once("lost", f"dejacache: more than {MAX_KEYS} writes to "
                               f"{self.path} were dropped; this process reads no entry from "
                               "it until clear()")

    def _still_lost(self, key: str) -> bool:
        """Whether ``key``'s row may be one a dropped write replaced; the dropped writes'
        rows are deleted first when the file takes writes again."""
        lost = self._lost
        if not lost.unsure(key):
            return False
        while self._db.can_write() and (keys := lost.batch()) is not None:
            marks = ",".join("?" * len(keys))
            try:
                if self._remove(f"key IN ({marks})", tuple(keys)) < 0:
                    break
            except StoreError:  # locked past ``timeout``: a read does not fail for it
                break
            lost.settled(keys)
        return lost.unsure(key)

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        """Newest first, with ``request`` filled; read in pages so memory stays bounded."""
        where, params = [], []
        if name is not None:
            where.append("name=?")
            params.append(name)
        if namespace is not None:
            where.append("namespace=?")
            params.append(namespace)
        after: tuple[float, str] | None = None
        reader = RequestReader(self.path, self._db.warn)  # blobs read so far
        while True:
            conds = list(where)
            args: list[object] = list(params)
            if after is not None:
                conds.append("(created < ? OR (created = ? AND key > ?))")
                args += [after[0], after[0], after[1]]
            sql = _ITER_KEYS + (" WHERE " + " AND ".join(conds) if conds else "")
            page = self._db.query(sql + f" ORDER BY created DESC, key LIMIT {_PAGE}", args)
            now = time.time()
            for key, _ in page:
                row = self._read_entry(key, reader)
                if row is None:
                    continue  # deleted since the page was read
                value, duration, usage, expires, nm, ns, kind, created, request = row
                if expires is not None and now >= expires:
                    continue
                yield key, Record(value, nm, ns, kind, request, duration, _usage(usage),
                                  created)
            if len(page) < _PAGE:
                return
            after = (page[-1][1], page[-1][0])

    def _read_entry(self, key: str, reader: RequestReader) -> tuple[Any, ...] | None:
        """One row with its request put back together. Row and blobs are read in one read
        transaction: a writer in another process may delete both between two statements,
        and a blob missing for that reason must not be reported as damage."""
        db = self._db

        def once() -> tuple[Any, ...] | None:
            conn = db.conn()
            conn.execute("BEGIN")
            try:
                row = conn.execute(_ITER_ROW, (key,)).fetchone()
                if row is not None:
                    *head, z, request = row
                    row = (*head, reader.request(conn, key, z, request))
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")  # only reads: ends the snapshot
            return row  # type: ignore[no-any-return]

        try:
            return db.retry(once)
        except sqlite3.Error as exc:
            db.read_failed(exc, key)
            return None

    def _remove(self, where: str, args: tuple[Any, ...], key: str = "") -> int:
        """Delete the entries matching ``where`` and release the blobs they referenced
        (``key``: the one key removed, named by a write error); how many, -1 when the file
        refused the write."""

        def body(conn: sqlite3.Connection) -> int:
            counts = refs_of_rows(conn.execute(
                f"SELECT z, request FROM entries WHERE z >= 2 AND ({where})", args))
            n: int = conn.execute(f"DELETE FROM entries WHERE {where}", args).rowcount
            release(conn, counts)
            return n + 1  # (write() answers 0 for a refused write)

        try:
            return self._db.write(body, key) - 1
        finally:
            self._forget(key)

    def clear(self, namespace: str | None = None) -> int:
        if namespace is None:
            def body(conn: sqlite3.Connection) -> int:
                n: int = conn.execute("DELETE FROM entries").rowcount
                conn.execute("DELETE FROM blobs")
                return n + 1  # (write() answers 0 for a refused write)

            try:
                n = self._db.write(body) - 1
            finally:
                self._forget()
            if n >= 0:
                self._lost.cleared()  # no row is left
            return max(n, 0)
        return max(self._remove("namespace=?", (namespace,)), 0)

    def purge_expired(self) -> int:
        """Delete entries whose TTL has passed (reads already skip them); returns the count."""
        return max(self._remove("expires IS NOT NULL AND expires <= ?", (time.time(),)), 0)

    def prune_blobs(self) -> int:
        """Recount every blob's references from the stored skeletons, fix counts that
        differ and delete blobs nothing references; returns how many were deleted.

        Counts are kept in every write's transaction, so this finds nothing to do unless the
        file was edited by other means. O(store): a maintenance command, not a hot path.
        """

        def body(conn: sqlite3.Connection) -> int:
            counts = refs_of_rows(
                conn.execute("SELECT z, request FROM entries WHERE z >= 2"))
            wrong = [(counts.get(h, 0), h) for h, n in conn.execute("SELECT h, n FROM blobs")
                     if counts.get(h, 0) != n]
            conn.executemany("UPDATE blobs SET n = ? WHERE h=?", wrong)
            n: int = conn.execute("DELETE FROM blobs WHERE n <= 0").rowcount
            return n

        return self._db.write(body)

    # ---------------------------------------------------------------- counters

    def incr(self, counter: str) -> int | None:
        """Increment a counter; its new value, or None when the file cannot be written."""
        out = self.incr_many([counter])
        return None if out is None else out[0]

    def incr_many(self, counters: Sequence[str]) -> list[int] | None:
        """Increment several counters in one transaction (all or none); the new values,
        or None when the file cannot be written (the caller then cannot prove freshness)."""
        if not counters:
            return []
        db = self._db
        if not db.can_write():
            return None

        def body(conn: sqlite3.Connection) -> list[int]:
            out = []
            for name in counters:
                conn.execute(_INCR, (name,))
                out.append(int(conn.execute(_COUNTER, (name,)).fetchone()[0]))
            return out

        try:
            return db.transact(body)
        except (sqlite3.Error, OSError) as exc:
            with contextlib.suppress(StoreError):
                db.write_failed(exc, counters[0])
            return None

    def get_counters(self, counters: Sequence[str]) -> list[int] | None:
        """Current values (0 for a counter never incremented) in one indexed SELECT; None
        when they cannot be read, never zeros: a zero read by mistake could revive entries
        that an increment made unreachable."""
        if not counters:
            return []
        names = list(counters)
        sql = _counters_sql(len(names))
        db = self._db
        try:
            row = db.conn().execute(sql, names).fetchone()
        except sqlite3.Error as exc:
            try:
                if not is_busy(exc):
                    raise
                row = db.retry(lambda: db.conn().execute(sql, names).fetchone())
            except sqlite3.Error as err:
                with contextlib.suppress(StoreError):
                    db.read_failed(err, names[0])
                return None
        return [0 if v is None else int(v) for v in row]

    # Increments write: in a worker thread, as ``aput`` (inline, an async ``@invalidates``
    # held the event loop for as long as another connection held the write lock: 0 ticks
    # of a 10 ms timer in 0.5 s). Reads stay inline, as a hit's: WAL readers never wait
    # for a writer, and a tool call reads the counters on every call.

    async def aincr(self, counter: str) -> int | None:
        return await off_loop(self.incr, counter)

    async def aincr_many(self, counters: Sequence[str]) -> list[int] | None:
        return await off_loop(self.incr_many, counters)

    async def aget_counters(self, counters: Sequence[str]) -> list[int] | None:
        return self.get_counters(counters)

    def stats(self) -> StoreStats:
        rows = self._db.query(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(value) + LENGTH(request)), 0) FROM entries "
            "WHERE expires IS NULL OR expires > ?", (time.time(),)
        )
        n, size = rows[0] if rows else (0, 0)
        shared = self._db.query("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM blobs")
        n_blobs, blob_bytes = shared[0] if shared else (0, 0)
        size += blob_bytes
        file_bytes = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                file_bytes += os.stat(str(self.path) + suffix).st_size
        return StoreStats(backend=self.url, entries=n, bytes=size,
                          extra={"file_bytes": file_bytes, "writable": self._db.can_write(),
                                 "blobs": n_blobs, "blob_bytes": blob_bytes,
                                 "schema_version": SCHEMA_VERSION,
                                 "wal_truncations": self._db.wal_truncations})

    def close(self) -> None:
        self._db.close()


@functools.lru_cache(maxsize=16)
def _counters_sql(n: int) -> str:
    # One row of scalar subqueries, each a primary-key lookup: 5.6 us for 4 counters where
    # ``WHERE name IN (?,?,?,?)`` took 9.0 us (it builds an ephemeral table for the list).
    # One statement per list length (a tool reads 2 or 4), so each stays prepared in the
    # connection's statement cache.
    return "SELECT " + ", ".join(["(SELECT value FROM counters WHERE name=?)"] * n)


def _reopen(path: str, timeout: float, readonly: bool,
            pragmas: Mapping[str, int | str]) -> SQLiteStore:
    return SQLiteStore(path, timeout=timeout, readonly=readonly, pragmas=pragmas)
