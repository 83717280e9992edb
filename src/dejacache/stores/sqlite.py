"""The embedded default store: one SQLite file, safe across threads and processes.

Done by the book (diskcache, hishel): WAL, ``synchronous=NORMAL``, a bounded busy wait,
``BEGIN IMMEDIATE`` for writes, one connection per thread, reopened after ``fork``, and the
schema version kept in the file. A corrupt or truncated file is moved aside and a fresh store
starts; a read-only directory or a full disk keeps reads working and drops writes with one
warning.

Layout (measured with a throwaway benchmark against a plain "SELECT value by key" table):
one rowid table, the canonical request as the last column. The hit path reads only the small
columns in front of it, so a hit costs ~1.1-1.2x the plain lookup at 20 KB and 200 KB
requests. Requests share their messages (issue 12: 10k calls of a growing 20 KB conversation
took 1.03x the raw JSON): a request is stored as a skeleton whose messages, tool schemas and
long strings live once each in ``blobs`` under a hash of their content (``_sqlite_blobs``),
reference-counted by the rows using them, so a delete removes its orphans in the same
transaction and a write touches a few WAL pages rather than the whole request. Hits never
read ``blobs``; only ``iterate`` (miss reports, diffs, the CLI) puts requests back together,
checking each blob against its hash.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import pathlib
import random
import re
import sqlite3
import threading
import time
import urllib.parse
import warnings
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from .._core.durations import Duration, seconds
from .._frozen import shared_size
from .._paths import default_cache_dir
from ..codec import checked_plain_body
from ..errors import DejacacheWarning, IncompatibleStore, StoreError
from . import _sqlite_blobs as blobs
from ._base import NOT_SHARED, BaseStore, Record, StoreStats

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

T = TypeVar("T")

# 2: one rowid table, request last, no secondary index. Older files are caches, not
# archives: they are rebuilt empty rather than migrated.
# 3: adds the ``counters`` table (runtime generation counters, issue 8 item 5). A version 2
# file is upgraded in place: its tool-cache entries were keyed by per-process counters that
# the new durable ones would collide with, so they are deleted; everything else is kept.
# Bumping the version also makes an older dejacache refuse the file (IncompatibleStore)
# instead of serving tool entries by its in-memory counters next to a new one.
# 4: adds the ``blobs`` table; ``entries.z`` 2/3 mark a request stored as a skeleton of blob
# references (issue 12 item 3). A version 3 file is upgraded in place by creating the table:
# its rows keep ``z`` 0/1 and read as before. An older dejacache refuses a version 4 file
# rather than show skeletons as requests.
SCHEMA_VERSION = 4

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
    # A rowid table with the (large) request as the last column. The hit path reads the
    # small columns in front of it and never walks the request's overflow pages; with the
    # request in the middle of a WITHOUT ROWID row, a 200 KB hit cost 2.2x a plain SELECT.
    # One table and no secondary index keep a write at ~2 WAL frames (a separate requests
    # table plus a (namespace, name) index took 8, and WAL checkpoints, each with two
    # fsyncs, came 4x as often: half the two-process throughput). Requests under 4 KB are
    # stored whole for that reason; longer ones are cut into ``blobs`` (a 20 KB one dirties
    # ~10 pages instead of ~7: see _sqlite_blobs.PACK_OVER).
    """CREATE TABLE IF NOT EXISTS entries (
        key TEXT PRIMARY KEY NOT NULL,
        value BLOB NOT NULL,
        duration REAL NOT NULL,
        usage BLOB,
        expires REAL,
        name TEXT NOT NULL,
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL,
        created REAL NOT NULL,
        z INTEGER NOT NULL,
        request BLOB NOT NULL
    )""",
    # Generation counters of the runtime tool cache (see runtime/generations.py). They live
    # in the same file as the entries whose keys embed them, so they outlive a process
    # exactly as long as those entries do, and every process sharing the file sees one
    # value. Never cleared with the entries: a counter that went back to a value already
    # used would make old entries reachable again.
    """CREATE TABLE IF NOT EXISTS counters (
        name TEXT PRIMARY KEY NOT NULL,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # Shared parts of requests (see _sqlite_blobs): ``n`` counts the entries whose skeleton
    # references the blob. A rowid table, so blobs land in creation order: the messages one
    # request references were mostly written by the few requests before it, and bumping
    # their counts dirties a few adjacent pages, not one page per message (a WITHOUT ROWID
    # table keyed by the hash would scatter them). ``data`` last: a count update leaves its
    # overflow pages alone.
    """CREATE TABLE IF NOT EXISTS blobs (
        id INTEGER PRIMARY KEY,
        h TEXT NOT NULL UNIQUE,
        n INTEGER NOT NULL,
        z INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
)
_OLD_TABLES = ("entries", "requests", "counters", "blobs")
_BLOB_COLUMNS = ["id", "h", "n", "z", "data"]
_COLUMNS = ["key", "value", "duration", "usage", "expires", "name", "namespace", "kind",
            "created", "z", "request"]

_GET = "SELECT value, duration, usage, expires, name, namespace, kind, created FROM entries " \
       "WHERE key=?"
_HIT = "SELECT value, duration, usage, expires, kind FROM entries WHERE key=?"
_PUT = "INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?,?,?,?,?,?)"
# iterate() pages over the small columns first, then reads full rows by key: sorting whole
# rows would drag every request through the sorter.
_ITER_KEYS = "SELECT key, created FROM entries"
_ITER_ROW = ("SELECT value, duration, usage, expires, name, namespace, kind, created, z, "
             "request FROM entries WHERE key=?")
# The row a write replaces: its skeleton (z 2/3) to release its blobs; a whole request is
# not read at all.
_OLD = "SELECT z, CASE WHEN z >= 2 THEN request END FROM entries WHERE key=?"
_ADD_BLOB = ("INSERT INTO blobs (h, n, z, data) VALUES (?, 1, ?, ?) "
             "ON CONFLICT(h) DO UPDATE SET n = n + 1")
_RELEASE = "UPDATE blobs SET n = n - ? WHERE h=?"
_DROP_UNUSED = "DELETE FROM blobs WHERE h=? AND n <= 0"
_BLOB = "SELECT z, data FROM blobs WHERE h=?"
_BLOB_CACHE_BYTES = 8 << 20  # at most this much of checked blobs kept by one iterate()
# An atomic increment: the UPDATE runs inside BEGIN IMMEDIATE, so no other writer can
# interleave between it and the SELECT that reads the new value back (no RETURNING: that
# needs SQLite 3.35, and Python 3.11 builds link older ones).
_INCR = ("INSERT INTO counters (name, value) VALUES (?, 1) "
         "ON CONFLICT(name) DO UPDATE SET value = value + 1")
_COUNTER = "SELECT value FROM counters WHERE name=?"

# Requests, skeletons and blobs above this size are stored zlib-compressed (level 1: ~3.5x
# smaller JSON for about 6 us per KB, paid on the miss path only; hits never read them).
_COMPRESS_OVER = 32 * 1024
_PAGE = 256  # rows per iterate() query, so a huge store is never loaded at once
_WRITE_RETRY_S = 60.0  # after a full disk / read-only failure, try writing again this late
_PRAGMA_NAME = re.compile(r"[a-z_]+")
_PRAGMA_VALUE = re.compile(r"-?\d+|[A-Za-z_]+")

_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
# Conditions where the file can still be read but not written (or not created at all).
_NO_WRITE_CODES = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL,
                   sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PERM}
_CORRUPT_MARKERS = ("not a database", "malformed", "file is encrypted")
_NO_WRITE_MARKERS = ("readonly", "read-only", "disk is full", "unable to open", "disk i/o")


def _is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY_CODES


def _usage(raw: bytes | None) -> dict[str, int] | None:
    """The ``usage`` column, or None when it is damaged: it only feeds statistics, and a bad
    one must fail neither a hit nor ``dejacache stats`` (issue 8: a raw JSONDecodeError)."""
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


def _refs(z: int, skeleton: bytes) -> set[str]:
    """The blobs a stored skeleton (``z`` 2, or 3 when compressed) references."""
    return blobs.refs(zlib.decompress(skeleton) if z == 3 else skeleton)


def _release(conn: sqlite3.Connection, counts: Mapping[str, int]) -> None:
    """Drop ``counts[h]`` references to each blob, and the blobs nothing references now
    (inside the caller's write transaction, so no other writer sees them half-counted)."""
    if counts:
        conn.executemany(_RELEASE, [(n, h) for h, n in counts.items()])
        conn.executemany(_DROP_UNUSED, [(h,) for h in counts])


def _classify(exc: BaseException) -> str:
    """``corrupt``, ``nowrite`` or ``other`` for an sqlite3/OS error."""
    if isinstance(exc, OSError):
        return "nowrite"
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        primary = code & 0xFF
        if primary in _CORRUPT_CODES:
            return "corrupt"
        if primary in _NO_WRITE_CODES:
            return "nowrite"
        return "other"
    text = str(exc).lower()
    if any(m in text for m in _CORRUPT_MARKERS):
        return "corrupt"
    if any(m in text for m in _NO_WRITE_MARKERS):
        return "nowrite"
    return "other"


# ---------------------------------------------------------------- fork safety

# SQLite forbids using a connection opened before fork() in the child. The child drops the
# parent's connections without closing them (closing could release locks the parent holds
# on the same file) and each thread opens its own on next use.
_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forget_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Seen:
    """Blobs read and checked during one ``iterate()``: a conversation's system prompt and
    early messages are shared by every later request, and are read and hashed once."""

    __slots__ = ("blobs", "size")

    def __init__(self) -> None:
        self.blobs: dict[bytes, bytes] = {}  # hash (ASCII) -> JSON
        self.size = 0

    def add(self, h: bytes, data: bytes) -> None:
        if self.size + len(data) > _BLOB_CACHE_BYTES:
            self.blobs.clear()
            self.size = 0
        self.blobs[h] = data
        self.size += len(data)


class _Warn:
    """One warning per condition per store: a broken cache must not flood the test log."""

    def __init__(self) -> None:
        self.done: set[str] = set()

    def once(self, tag: str, message: str) -> None:
        if tag not in self.done:
            self.done.add(tag)
            warnings.warn(message, DejacacheWarning, stacklevel=4)


# ``hit``'s answer for what only the general path (``get`` and the codec) may handle.
_GENERAL = (None, 0.0, None, None, NOT_SHARED)
_KNOWN_MAX_BYTES = 16 << 20


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
        # A subclass that reads or writes its own way has not promised that ``hit`` agrees
        # with its ``get``: its hits take the general path.
        if (cls.get is not SQLiteStore.get or cls.put is not SQLiteStore.put
                or cls.hit is not SQLiteStore.hit):
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
        # key -> (stored bytes checked, their body, the immutable value a frozen hit made
        # from them or NOT_SHARED, the bytes counted): see ``hit`` and ``share``
        self._known: dict[str, tuple[Any, memoryview, Any, int]] = {}
        self._known_bytes = 0
        self._known_lock = threading.Lock()  # its writers; hits read it without
        self.url = f"sqlite:///{self.path}"
        self.timeout = seconds(timeout, "SQLiteStore timeout", zero=True)
        self.readonly = readonly
        self.pragmas = dict(pragmas or {})
        for k, v in self.pragmas.items():
            if not _PRAGMA_NAME.fullmatch(k) or not _PRAGMA_VALUE.fullmatch(str(v)):
                raise StoreError(f"invalid pragma {k}={v!r}", backend=self.url)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._warn = _Warn()
        self._uri: str | None = None  # set when the file is opened read-only
        self._empty = False  # nothing to read and nothing can be created: an empty store
        self._recovering = threading.Lock()
        self.writable = not readonly
        self._retry_writes_at = 0.0
        _STORES.add(self)
        self._open_checked()

    def __reduce__(self) -> tuple[object, ...]:
        # Another process gets its own connections to the same file (spawn, pickling).
        return (_reopen, (str(self.path), self.timeout, self.readonly, self.pragmas))

    # ---------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        if self._empty:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            for stmt in _SCHEMA:
                conn.execute(stmt)
            return conn
        if self._uri is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None,
                                   check_same_thread=False)
            # Remember which file this thread opened: if it turns out corrupt, only that
            # file may be moved aside, never a fresh one another thread or process created.
            with contextlib.suppress(OSError):
                self._local.ino = self.path.stat().st_ino
        else:
            conn = sqlite3.connect(self._uri, uri=True, timeout=0,
                                   isolation_level=None, check_same_thread=False)
        try:
            # No SQLite busy handler: it sleeps 1, 2, 5, 10 ms... and a writer that keeps
            # losing the race starves (measured, 2 processes at 10% writes: one made ~55% as
            # many writes as the other, total ops/s ~10% lower). ``_retry`` waits instead,
            # with short jittered sleeps, for up to ``timeout`` seconds.
            conn.execute("PRAGMA busy_timeout=0")
            if self._uri is None:
                # WAL: readers never block the writer and vice versa (many workers, one file).
                self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                # NORMAL is durable across application crashes in WAL mode; only power loss
                # can roll back the last commits, which for a cache costs a re-run.
                conn.execute("PRAGMA synchronous=NORMAL")
            for k, v in self.pragmas.items():
                conn.execute(f"PRAGMA {k}={v}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _conn(self) -> sqlite3.Connection:
        try:
            return self._local.conn  # type: ignore[no-any-return]
        except AttributeError:
            pass
        conn = self._connect()
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def _forget_connections(self) -> None:
        """In a forked child: abandon (never close) the parent's connections."""
        _INHERITED.extend(self._all)
        self._all = []
        self._local = threading.local()
        # another parent thread may have held these at fork time
        self._lock = threading.Lock()
        self._recovering = threading.Lock()

    def _close_all(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(sqlite3.Error):
                    c.close()
            self._all.clear()
            # Every thread sees a fresh local and reconnects on its next call.
            self._local = threading.local()

    # ---------------------------------------------------------------- opening

    def _open_checked(self) -> None:
        if self.readonly:
            self._open_readonly(None)
            return
        try:
            self._init_schema()
        except (sqlite3.Error, OSError) as exc:
            kind = _classify(exc)
            if kind == "corrupt":
                if self._move_aside(exc):
                    self._init_schema()
                return
            self._close_all()
            if kind == "nowrite":
                self._open_readonly(exc)
            else:
                raise StoreError(f"cannot open SQLite store: {exc}", backend=self.url) from exc

    def _schema_version(self, conn: sqlite3.Connection) -> int | None:
        return self._retry(lambda: self._read_version(conn))

    @staticmethod
    def _read_version(conn: sqlite3.Connection) -> int | None:
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='dejacache_meta'"
        ).fetchone()
        if not has_meta:
            return None
        row = conn.execute("SELECT v FROM dejacache_meta WHERE k='schema_version'").fetchone()
        return None if row is None else int(row[0])

    @staticmethod
    def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]

    def _v3_layout_ok(self, conn: sqlite3.Connection) -> bool:
        return (self._columns(conn, "entries") == _COLUMNS
                and self._columns(conn, "counters") == ["name", "value"])

    def _layout_ok(self, conn: sqlite3.Connection) -> bool:
        return self._v3_layout_ok(conn) and self._columns(conn, "blobs") == _BLOB_COLUMNS

    def _check_version(self, found: int | None) -> None:
        if found is not None and found > SCHEMA_VERSION:
            self._close_all()
            raise IncompatibleStore(backend=self.url, found=found, supported=SCHEMA_VERSION)

    def _init_schema(self) -> None:
        conn = self._conn()
        found = self._schema_version(conn)  # a plain read: the common case writes nothing
        self._check_version(found)
        if found == SCHEMA_VERSION and self._layout_ok(conn):
            return

        def create(conn: sqlite3.Connection) -> None:
            found = self._read_version(conn)  # another process may have won the race
            self._check_version(found)
            # Version 2 had no counters table; its entries table is still good. Drop only
            # the tool-cache entries, keyed by counters that restarted at 0 in every
            # process: the durable counters start at 0 too and would reach them.
            if (found == 2 and not self._v3_layout_ok(conn)
                    and self._columns(conn, "entries") == _COLUMNS):
                conn.execute("DELETE FROM entries WHERE kind='tool'")
                conn.execute(_SCHEMA[2])  # the counters table
                found = 3
            if found == 3 and self._v3_layout_ok(conn):
                # Version 3 stored every request whole (z 0/1); those rows stay readable as
                # they are, and new rows share their parts through the new table.
                conn.execute(_SCHEMA[3])  # the blobs table
                found = SCHEMA_VERSION
            stale = found is not None and found < SCHEMA_VERSION
            if found == SCHEMA_VERSION and not self._layout_ok(conn):
                # Labelled current but laid out otherwise (a damaged or hand-edited file):
                # a cache can be rebuilt, a half-working one only fails later, call by call.
                stale = True
                self._warn.once("layout", f"dejacache: {self.path} had an unrecognised table "
                                "layout; rebuilt it empty")
            if stale:
                conn.execute("DROP INDEX IF EXISTS entries_name")
                for table in _OLD_TABLES:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            for stmt in _SCHEMA:
                conn.execute(stmt)
            conn.execute("INSERT OR REPLACE INTO dejacache_meta VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))

        self._transact(create)

    # ---------------------------------------------------------------- locking

    def _retry(self, op: Callable[[], T]) -> T:
        """``op()``, retried while another connection holds the lock (up to ``timeout``)."""
        deadline: float | None = None
        delay = 50e-6
        while True:
            try:
                return op()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.timeout
                elif now >= deadline:
                    raise
            # Jitter so two processes that collided do not collide again in lockstep.
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2e-3)

    def _transact(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction, retried whole if busy."""
        conn = self._conn()

        def once() -> T:
            conn.execute("BEGIN IMMEDIATE")  # take the write lock up front: no deadlock
            try:
                result = body(conn)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._retry(once)

    def _query(self, sql: str, params: Any = ()) -> list[Any]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            return self._read_slow(exc, sql, params)

    def _read_slow(self, exc: sqlite3.Error, sql: str, params: Any, key: str = "") -> list[Any]:
        """The exception branch of every read: wait out a lock, recover a corrupt file."""
        try:
            if not _is_busy(exc):
                raise exc
            return self._retry(lambda: self._conn().execute(sql, params).fetchall())
        except sqlite3.Error as err:
            self._read_failed(err, key)
            return []

    def _open_readonly(self, exc: BaseException | None) -> None:
        """Read what is there without writing anything, not even the WAL index.

        ``mode=ro`` works while another process keeps the ``-shm`` file; in a read-only
        directory without one, only ``immutable=1`` can read a WAL database (measured with
        ``chattr +i``).
        """
        self.writable = False
        self._retry_writes_at = float("inf")
        if exc is not None:
            self._warn.once("readonly", f"dejacache: cannot write {self.path} ({exc}); reads "
                            "keep working, new results are not stored")
        if not self.path.exists():
            self._empty = True
            return
        quoted = urllib.parse.quote(str(self.path.resolve()))
        last: BaseException | None = None
        for params in ("mode=ro", "immutable=1"):
            self._uri = f"file:{quoted}?{params}"
            try:
                found = self._schema_version(self._conn())
                self._check_version(found)
                if found is not None:
                    return
                self._close_all()  # no schema was ever written: nothing to read
                break
            except sqlite3.Error as err:
                self._close_all()
                last = err
        self._uri = None
        self._empty = True
        if last is not None:
            self._warn.once("unreadable", f"dejacache: cannot read {self.path} ({last}); "
                            "serving nothing from it")

    # ---------------------------------------------------------------- failures

    def _move_aside(self, exc: BaseException) -> bool:
        """Rename the damaged file (and its -wal/-shm); False when that is impossible."""
        failed = getattr(self._local, "ino", None)
        self._close_all()
        try:
            current: int | None = self.path.stat().st_ino
        except OSError:
            current = None
        # Another thread or process may already have replaced the file with a fresh one.
        if failed is None or current == failed:
            now = time.time()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            try:
                for suffix in ("", "-wal", "-shm"):
                    p = pathlib.Path(str(self.path) + suffix)
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(p, pathlib.Path(str(target) + suffix))
            except OSError as err:  # a read-only directory: serve nothing rather than fail
                self._uri, self._empty, self.writable = None, True, False
                self._warn.once("unreadable", f"dejacache: {self.path} is unreadable ({exc}) "
                                f"and cannot be moved aside ({err}); serving nothing from it")
                return False
            self._warn.once("corrupt", f"dejacache: {self.path} was unreadable ({exc}); moved "
                            f"it to {target.name} and started a fresh cache")
        return True

    def _recover(self, exc: BaseException) -> None:
        """A corrupt page met after opening: move the file aside and start fresh."""
        with self._recovering:
            if self._uri is not None:  # opened read-only: nothing may be moved or created
                self._close_all()
                self._uri, self._empty = None, True
                self._warn.once("unreadable", f"dejacache: {self.path} is unreadable ({exc}); "
                                "serving nothing from it")
            elif self._move_aside(exc):
                self._open_checked()

    def _read_failed(self, exc: sqlite3.Error, key: str = "") -> None:
        kind = _classify(exc)
        if kind == "corrupt":
            self._recover(exc)
            return
        if kind == "nowrite":
            self._warn.once("read", f"dejacache: cannot read {self.path} ({exc}); treating "
                            "entries as missing")
            return
        raise StoreError(f"read failed: {exc}", backend=self.url, key=key) from exc

    def _write_failed(self, exc: BaseException, key: str = "") -> None:
        kind = _classify(exc)
        if kind == "corrupt":
            self._recover(exc)
            return
        if kind == "nowrite":
            self._retry_writes_at = time.monotonic() + _WRITE_RETRY_S
            self._warn.once("readonly", f"dejacache: cannot write {self.path} ({exc}); reads "
                            "keep working, new results are not stored")
            return
        raise StoreError(f"write failed: {exc}", backend=self.url, key=key) from exc

    def _can_write(self) -> bool:
        return self.writable and time.monotonic() >= self._retry_writes_at

    # ---------------------------------------------------------------- Store protocol

    def get(self, key: str) -> Record | None:
        # The hit path (issue 12: a 2 KB hit was 1.74x a bare SELECT + loads). The thread's
        # connection is read straight from the thread-local (its first use, or the first
        # after a fork or close, raises AttributeError and opens it); the one-off cursor is
        # dropped at once, which resets the statement: a kept cursor would hold its read
        # snapshot open and keep later reads from seeing other processes' writes.
        try:
            row = self._local.conn.execute(_GET, (key,)).fetchone()
        except AttributeError:
            row = self._get_opening(key)
        except sqlite3.Error as exc:
            rows = self._read_slow(exc, _GET, (key,), key)
            row = rows[0] if rows else None
        if row is None:
            return None
        value, duration, usage, expires, name, namespace, kind, created = row
        if expires is not None and time.time() >= expires:
            return None
        return Record(value, name, namespace, kind, b"", duration, _hit_usage(usage), created)

    def hit(self, key: str) -> tuple[Any, ...] | None:
        """:meth:`get` for the decorator's short path (the ``Hit`` layout of ``stores._base``;
        issue 12: a 2 KB hit was 1.93x key + SELECT + loads). It reads the five columns a
        hit needs, builds no ``Record``, and checks the value's checksum itself, so the hit
        is one ``orjson.loads`` of the body. Anything else (no connection in this thread
        yet, a failing read, a tagged, recorded-error or damaged value) answers ``_GENERAL``
        and :meth:`get` handles it on the general path.

        Bytes this process has checked before are remembered (``_known``): a row holding
        exactly those bytes again needs one comparison instead of the checksum and slicing
        (0.5 µs of a 2 KB hit), and serves the immutable value a ``frozen`` hit made from
        them (:meth:`share`). Another process may replace a row at any time: only equal bytes
        count, so a changed row is checked afresh."""
        try:
            row = self._local.conn.execute(_HIT, (key,)).fetchone()
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
            return (known[1], duration, _parsed_usage(usage) if usage else None, None,
                    known[2])
        body = checked_plain_body(value, key)
        if body is None:
            return _GENERAL
        self._remember(key, body, NOT_SHARED, len(value))
        return (body, duration, _parsed_usage(usage) if usage else None, None, NOT_SHARED)

    def share(self, key: str, item: tuple[Any, ...], value: Any) -> None:
        """Keep ``value``, the immutable form of the body :meth:`hit` just returned in
        ``item``, for later ``@cache(frozen=True)`` hits of this process on the same bytes:
        such a hit costs the SELECT and one comparison, not a decode and a freeze (7 µs for
        a 1.2 KB chat completion). Nothing is kept once the row was written or removed here
        since that hit (:meth:`_forget` dropped what the hit remembered)."""
        body = item[0]
        if not (isinstance(body, memoryview) and type(body.obj) is bytes):
            return
        size = shared_size(value, len(body)) + len(body.obj)
        with self._known_lock:
            known = self._known.get(key)
            if known is not None and known[1] is body:
                self._keep(key, body, value, size)

    def _remember(self, key: str, body: memoryview, shared: Any, size: int) -> None:
        with self._known_lock:
            self._keep(key, body, shared, size)

    def _keep(self, key: str, body: memoryview, shared: Any, size: int) -> None:
        # Under _known_lock. Bounded by emptying it when its estimate passes
        # _KNOWN_MAX_BYTES.
        self._drop_known(key)
        if self._known_bytes + size > _KNOWN_MAX_BYTES:
            self._drop_known("")
        self._known[key] = (body.obj, body, shared, size)
        self._known_bytes += size

    def _forget(self, key: str = "") -> None:
        """Drop what :meth:`hit` remembers of ``key`` (of every key when empty), once its
        row has been written or removed here: a remembered value never outlives its row in
        this process. Another process's writes need nothing: only equal bytes are ever
        matched, and the value made from them cannot be changed, so it is still theirs."""
        with self._known_lock:
            self._drop_known(key)

    def _drop_known(self, key: str) -> None:
        if not key:
            self._known.clear()
            self._known_bytes = 0
            return
        old = self._known.pop(key, None)
        if old is not None:
            self._known_bytes -= old[3]

    def _get_opening(self, key: str) -> tuple[Any, ...] | None:
        """:meth:`get` in a thread that has no connection yet."""
        try:
            return self._conn().execute(_GET, (key,)).fetchone()  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            rows = self._read_slow(exc, _GET, (key,), key)
            return rows[0] if rows else None

    def _write(self, body: Callable[[sqlite3.Connection], int], key: str = "") -> int:
        """Run a write transaction; a failure that must not reach the caller returns 0."""
        if not self._can_write():
            return 0
        try:
            return self._transact(body)
        except (sqlite3.Error, OSError) as exc:
            self._write_failed(exc, key)
            return 0

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        if not self._can_write():
            return False
        now = time.time()
        # Cut the request before taking the write lock: the lock is held for SQL only.
        packed = blobs.pack(record.request)
        added: list[tuple[str, int, bytes]] = []
        if packed is None:
            request, z = record.request, 0
            if len(request) > _COMPRESS_OVER:
                request, z = zlib.compress(request, 1), 1
        else:
            request, z = packed.skeleton, 2
            if len(request) > _COMPRESS_OVER:
                request, z = zlib.compress(request, 1), 3
            for h, data in packed.blobs.items():
                added.append((h, 1, zlib.compress(data, 1)) if len(data) > _COMPRESS_OVER
                             else (h, 0, data))
        row = (key, record.value, record.duration,
               orjson.dumps(dict(record.usage)) if record.usage else None,
               now + ttl if ttl is not None else None,
               record.name, record.namespace, record.kind, record.created or now, z, request)

        def body(conn: sqlite3.Connection) -> int:
            old = conn.execute(_OLD, (key,)).fetchone()
            conn.execute(_PUT, row)
            if old is not None and old[0] == z and old[1] == request:
                return 1  # the same request again: its blobs stay as they are
            if added:  # take the new references before dropping the old ones
                conn.executemany(_ADD_BLOB, added)
            if old is not None and old[1] is not None:
                _release(conn, collections.Counter(_refs(old[0], old[1])))
            return 1

        stored = self._write(body, key) > 0
        self._forget(key)
        return stored

    def delete(self, key: str) -> bool:
        return self._remove("key=?", (key,), key) > 0

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
        seen = _Seen()  # blobs already read and checked by this iteration
        while True:
            conds = list(where)
            args: list[object] = list(params)
            if after is not None:
                conds.append("(created < ? OR (created = ? AND key > ?))")
                args += [after[0], after[0], after[1]]
            sql = _ITER_KEYS + (" WHERE " + " AND ".join(conds) if conds else "")
            page = self._query(sql + f" ORDER BY created DESC, key LIMIT {_PAGE}", args)
            now = time.time()
            for key, _ in page:
                row = self._read_entry(key, seen)
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

    def _read_entry(self, key: str, seen: _Seen) -> tuple[Any, ...] | None:
        """One row with its request put back together. Row and blobs are read in one read
        transaction: a writer in another process may delete both between two statements,
        and a blob missing for that reason must not be reported as damage."""

        def once() -> tuple[Any, ...] | None:
            conn = self._conn()
            conn.execute("BEGIN")
            try:
                row = conn.execute(_ITER_ROW, (key,)).fetchone()
                if row is not None:
                    *head, z, request = row
                    row = (*head, self._request(conn, key, z, request, seen))
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")  # only reads: ends the snapshot
            return row  # type: ignore[no-any-return]

        try:
            return self._retry(once)
        except sqlite3.Error as exc:
            self._read_failed(exc, key)
            return None

    def _request(self, conn: sqlite3.Connection, key: str, z: int, request: bytes,
                 seen: _Seen) -> bytes:
        try:
            if z == 0:
                return request
            if z == 1:
                return zlib.decompress(request)
            skeleton = zlib.decompress(request) if z == 3 else request
            known = seen.blobs.get

            def resolve(h: bytes) -> bytes:
                data = known(h)
                return data if data is not None else self._blob(conn, h, seen)

            return blobs.splice(skeleton, resolve)
        except (zlib.error, ValueError) as exc:
            # The request only explains a call (miss reports, diffs): the entry stays
            # usable, it just cannot be shown.
            self._warn.once("request", f"dejacache: {self.path}: the stored request of key "
                            f"{key} is damaged ({exc}); it is left out of reports")
            return b""

    def _blob(self, conn: sqlite3.Connection, hb: bytes, seen: _Seen) -> bytes:
        """A blob's JSON, checked against its hash. A damaged or missing one reads as a
        placeholder string and warns once: it only ever feeds a report (the request of a
        miss, a diff), never a response, and the rest of the request is still worth
        showing."""
        h = hb.decode("ascii")
        row = conn.execute(_BLOB, (h,)).fetchone()
        problem, data = "missing", b""
        if row is not None:
            try:
                data = zlib.decompress(row[1]) if row[0] else bytes(row[1])
                problem = "" if blobs.blob_hash(data) == h else "damaged"
            except zlib.error:
                problem = "damaged"
        if problem:
            self._warn.once("blob", f"dejacache: {self.path}: the shared request part "
                            f"@ref:{h} is {problem} (edited by hand, or a damaged file); "
                            "requests are shown without it. Responses are not affected.")
            return orjson.dumps(f"<dejacache: shared part {h} is {problem}>")
        seen.add(hb, data)
        return data

    def _remove(self, where: str, args: tuple[Any, ...], key: str = "") -> int:
        """Delete the entries matching ``where`` and release the blobs they referenced
        (``key``: the one key removed, named by a write error)."""

        def body(conn: sqlite3.Connection) -> int:
            counts: collections.Counter[str] = collections.Counter()
            for z, skeleton in conn.execute(
                    f"SELECT z, request FROM entries WHERE z >= 2 AND ({where})", args):
                counts.update(_refs(z, skeleton))
            n: int = conn.execute(f"DELETE FROM entries WHERE {where}", args).rowcount
            _release(conn, counts)
            return n

        try:
            return self._write(body, key)
        finally:
            self._forget(key)

    def clear(self, namespace: str | None = None) -> int:
        if namespace is None:
            def body(conn: sqlite3.Connection) -> int:
                n: int = conn.execute("DELETE FROM entries").rowcount
                conn.execute("DELETE FROM blobs")
                return n

            try:
                return self._write(body)
            finally:
                self._forget()
        return self._remove("namespace=?", (namespace,))

    def purge_expired(self) -> int:
        """Delete entries whose TTL has passed (reads already skip them); returns the count."""
        return self._remove("expires IS NOT NULL AND expires <= ?", (time.time(),))

    def prune_blobs(self) -> int:
        """Recount every blob's references from the stored skeletons, fix counts that
        differ and delete blobs nothing references; returns how many were deleted.

        Counts are kept in every write's transaction, so this finds nothing to do unless the
        file was edited by other means. O(store): a maintenance command, not a hot path.
        """

        def body(conn: sqlite3.Connection) -> int:
            counts: collections.Counter[str] = collections.Counter()
            for z, skeleton in conn.execute("SELECT z, request FROM entries WHERE z >= 2"):
                counts.update(_refs(z, skeleton))
            wrong = [(counts.get(h, 0), h) for h, n in conn.execute("SELECT h, n FROM blobs")
                     if counts.get(h, 0) != n]
            conn.executemany("UPDATE blobs SET n = ? WHERE h=?", wrong)
            n: int = conn.execute("DELETE FROM blobs WHERE n <= 0").rowcount
            return n

        return self._write(body)

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
        if not self._can_write():
            return None

        def body(conn: sqlite3.Connection) -> list[int]:
            out = []
            for name in counters:
                conn.execute(_INCR, (name,))
                out.append(int(conn.execute(_COUNTER, (name,)).fetchone()[0]))
            return out

        try:
            return self._transact(body)
        except (sqlite3.Error, OSError) as exc:
            with contextlib.suppress(StoreError):
                self._write_failed(exc, counters[0])
            return None

    def get_counters(self, counters: Sequence[str]) -> list[int] | None:
        """Current values (0 for a counter never incremented) in one indexed SELECT; None
        when they cannot be read, never zeros: a zero read by mistake could revive entries
        that an increment made unreachable."""
        if not counters:
            return []
        names = list(counters)
        sql = _counters_sql(len(names))
        try:
            row = self._conn().execute(sql, names).fetchone()
        except sqlite3.Error as exc:
            try:
                if not _is_busy(exc):
                    raise
                row = self._retry(lambda: self._conn().execute(sql, names).fetchone())
            except sqlite3.Error as err:
                with contextlib.suppress(StoreError):
                    self._read_failed(err, names[0])
                return None
        return [0 if v is None else int(v) for v in row]

    async def aincr(self, counter: str) -> int | None:
        return self.incr(counter)

    async def aincr_many(self, counters: Sequence[str]) -> list[int] | None:
        return self.incr_many(counters)

    async def aget_counters(self, counters: Sequence[str]) -> list[int] | None:
        return self.get_counters(counters)

    def stats(self) -> StoreStats:
        rows = self._query(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(value) + LENGTH(request)), 0) FROM entries "
            "WHERE expires IS NULL OR expires > ?", (time.time(),)
        )
        n, size = rows[0] if rows else (0, 0)
        shared = self._query("SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM blobs")
        n_blobs, blob_bytes = shared[0] if shared else (0, 0)
        size += blob_bytes
        file_bytes = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                file_bytes += os.stat(str(self.path) + suffix).st_size
        return StoreStats(backend=self.url, entries=n, bytes=size,
                          extra={"file_bytes": file_bytes, "writable": self._can_write(),
                                 "blobs": n_blobs, "blob_bytes": blob_bytes,
                                 "schema_version": SCHEMA_VERSION})

    def close(self) -> None:
        self._close_all()


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
