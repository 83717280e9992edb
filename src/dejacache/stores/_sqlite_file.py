"""One SQLite file opened by the book, for ``SQLiteStore``: connections, locking, failures.

A connection per thread, reopened after ``fork``; no SQLite busy handler but short jittered
retries for up to ``timeout`` seconds; ``BEGIN IMMEDIATE`` for writes; WAL and
``synchronous=NORMAL``. A corrupt or truncated file is moved aside and a fresh one started;
a file that cannot be written (read-only directory, full disk) keeps serving reads, and one
that cannot be read either serves nothing. Each condition warns once per store. The layout
inside the file is ``_sqlite_schema``'s; what is stored in it is ``sqlite.py``'s.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import sqlite3
import threading
import time
import urllib.parse
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._paths import make_dir
from ..errors import DejacacheWarning, IncompatibleStore, StoreError
from ._sqlite_schema import SCHEMA_VERSION, create_tables, layout_ok, read_version, upgrade

__all__ = ["SQLiteFile", "Warn", "is_busy"]

T = TypeVar("T")

_WRITE_RETRY_S = 60.0  # after a full disk / read-only failure, try writing again this late

# The write-ahead log's bounds. SQLite restarts the log from its start only when a writer
# finds every frame copied back and no reader still using one: with a few processes reading
# all the time that moment never comes, and the log grew without bound (4 processes plus
# ``dejacache stats``/``clear``: 405 MB in 30 s over a 10 MB database, freed only when every
# process exited). So every ``_WAL_EVERY`` writes a writing process looks at the log's size
# (a ``stat``: ~3 us beside a ~45 us put, so not at every write, which cost 10%) and, past
# ``WAL_LIMIT`` bytes, checkpoints it with ``TRUNCATE`` (which waits up to ``_WAL_WAIT_MS``
# for the readers of the moment to move on, holding off new writers meanwhile); when they do
# not, it tries again ``_WAL_RETRY_S`` later, not at every write (each try may hold this
# writer for ``_WAL_WAIT_MS``). A put writes a few pages of log (~24 KB for a 4 KB value),
# so a writer takes the log at most a few hundred KB past the limit. Looking every half
# second instead let it grow by whatever was written in that time: ~4 MB past a 256 KiB
# limit with a put every 0.3 ms.
# ``journal_size_limit`` cuts a log restarted the ordinary way back to ``_WAL_KEEP`` bytes.
WAL_LIMIT = 16 * 2**20
_WAL_KEEP = 4 * 2**20
_WAL_RETRY_S = 0.5
_WAL_EVERY = 16
_WAL_WAIT_MS = 200

_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
# Conditions where the file can still be read but not written (or not created at all).
_NO_WRITE_CODES = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL,
                   sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PERM}
_CORRUPT_MARKERS = ("not a database", "malformed", "file is encrypted")
_NO_WRITE_MARKERS = ("readonly", "read-only", "disk is full", "unable to open", "disk i/o")


def is_busy(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY_CODES


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


class Warn:
    """One warning per condition per store: a broken cache must not flood the test log."""

    def __init__(self) -> None:
        self.done: set[str] = set()

    def once(self, tag: str, message: str) -> None:
        if tag not in self.done:
            self.done.add(tag)
            warnings.warn(message, DejacacheWarning, stacklevel=4)


# ---------------------------------------------------------------- fork safety

# SQLite forbids using a connection opened before fork() in the child. The child drops the
# parent's connections without closing them (closing could release locks the parent holds
# on the same file) and each thread opens its own on next use.
_FILES: weakref.WeakSet[SQLiteFile] = weakref.WeakSet()
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    for f in list(_FILES):
        f.forget_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


class SQLiteFile:
    """The file at ``path``, opened (created, upgraded, recovered) on construction.

    ``local.conn`` is the calling thread's connection once it has one (the hit paths read
    it directly and call :meth:`conn` when it is missing); :meth:`transact` runs a write,
    :meth:`query` a read, each recovering from what the file does to them.
    """

    def __init__(self, path: pathlib.Path, *, url: str, timeout: float, readonly: bool,
                 pragmas: Mapping[str, int | str]) -> None:
        self.path = path
        self.url = url
        self.timeout = timeout
        self.readonly = readonly
        self.pragmas = pragmas
        self.local = threading.local()
        self.warn = Warn()
        self.writable = not readonly
        self.retry_writes_at = 0.0
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._uri: str | None = None  # set when the file is opened read-only
        self._empty = False  # nothing to read and nothing can be created: an empty store
        self._recovering = threading.Lock()
        self._wal = pathlib.Path(f"{path}-wal")
        self._wal_writes = 0  # writes since this process last looked at the log's size
        self._wal_retry_at = 0.0  # readers held the last cut off: not tried before this
        #: Checkpoints that cut the log back (``stats`` shows them).
        self.wal_truncations = 0
        _FILES.add(self)
        self._open_checked()

    # ---------------------------------------------------------------- connections

    def _connect(self) -> sqlite3.Connection:
        if self._empty:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            create_tables(conn)
            return conn
        if self._uri is None:
            make_dir(self.path.parent)
            conn = sqlite3.connect(self.path, timeout=0, isolation_level=None,
                                   check_same_thread=False)
            # Remember which file this thread opened: if it turns out corrupt, only that
            # file may be moved aside, never a fresh one another thread or process created.
            with contextlib.suppress(OSError):
                self.local.ino = self.path.stat().st_ino
        else:
            conn = sqlite3.connect(self._uri, uri=True, timeout=0,
                                   isolation_level=None, check_same_thread=False)
        try:
            # No SQLite busy handler: it sleeps 1, 2, 5, 10 ms... and a writer that keeps
            # losing the race starves (measured, 2 processes at 10% writes: one made ~55% as
            # many writes as the other, total ops/s ~10% lower). ``retry`` waits instead,
            # with short jittered sleeps, for up to ``timeout`` seconds.
            conn.execute("PRAGMA busy_timeout=0")
            if self._uri is None:
                # WAL: readers never block the writer and vice versa (many workers, one file).
                self.retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                # NORMAL is durable across application crashes in WAL mode; only power loss
                # can roll back the last commits, which for a cache costs a re-run.
                conn.execute("PRAGMA synchronous=NORMAL")
                # A log restarted from its start is cut back to this size (see WAL_LIMIT).
                conn.execute(f"PRAGMA journal_size_limit={_WAL_KEEP}")
            for k, v in self.pragmas.items():
                conn.execute(f"PRAGMA {k}={v}")
        except BaseException:
            conn.close()
            raise
        return conn

    def conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        try:
            return self.local.conn  # type: ignore[no-any-return]
        except AttributeError:
            pass
        conn = self._connect()
        self.local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def forget_connections(self) -> None:
        """In a forked child: abandon (never close) the parent's connections."""
        _INHERITED.extend(self._all)
        self._all = []
        self.local = threading.local()
        # another parent thread may have held these at fork time
        self._lock = threading.Lock()
        self._recovering = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                with contextlib.suppress(sqlite3.Error):
                    c.close()
            self._all.clear()
            # Every thread sees a fresh local and reconnects on its next call.
            self.local = threading.local()

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
            self.close()
            if kind == "nowrite":
                self._open_readonly(exc)
            else:
                raise StoreError(f"cannot open SQLite store: {exc}", backend=self.url) from exc

    def _schema_version(self, conn: sqlite3.Connection) -> int | None:
        return self.retry(lambda: read_version(conn))

    def _check_version(self, found: int | None) -> None:
        if found is not None and found > SCHEMA_VERSION:
            self.close()
            raise IncompatibleStore(backend=self.url, found=found,
                                    supported=SCHEMA_VERSION)

    def _init_schema(self) -> None:
        conn = self.conn()
        found = self._schema_version(conn)  # a plain read: the common case writes nothing
        self._check_version(found)
        if found == SCHEMA_VERSION and layout_ok(conn):
            return

        def create(conn: sqlite3.Connection) -> None:
            found = read_version(conn)  # another process may have won the race
            self._check_version(found)
            if not upgrade(conn, found):
                self.warn.once("layout", f"dejacache: {self.path} had an unrecognised table "
                               "layout; rebuilt it empty")

        self.transact(create)

    def _open_readonly(self, exc: BaseException | None) -> None:
        """Read what is there without writing anything, not even the WAL index.

        ``mode=ro`` works while another process keeps the ``-shm`` file; in a read-only
        directory without one, only ``immutable=1`` can read a WAL database (measured with
        ``chattr +i``).
        """
        self.writable = False
        self.retry_writes_at = float("inf")
        if exc is not None:
            self.warn.once("readonly", f"dejacache: cannot write {self.path} ({exc}); reads "
                           "keep working, new results are not stored")
        if not self.path.exists():
            self._empty = True
            return
        quoted = urllib.parse.quote(str(self.path.resolve()))
        last: BaseException | None = None
        for params in ("mode=ro", "immutable=1"):
            self._uri = f"file:{quoted}?{params}"
            try:
                found = self._schema_version(self.conn())
                self._check_version(found)
                if found is not None:
                    return
                self.close()  # no schema was ever written: nothing to read
                break
            except sqlite3.Error as err:
                self.close()
                last = err
        self._uri = None
        self._empty = True
        if last is not None:
            self.warn.once("unreadable", f"dejacache: cannot read {self.path} ({last}); "
                           "serving nothing from it")

    # ---------------------------------------------------------------- locking

    def retry(self, op: Callable[[], T]) -> T:
        """``op()``, retried while another connection holds the lock (up to ``timeout``)."""
        deadline: float | None = None
        delay = 50e-6
        while True:
            try:
                return op()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.timeout
                elif now >= deadline:
                    raise
            # Jitter so two processes that collided do not collide again in lockstep.
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2e-3)

    def transact(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction, retried whole if busy."""
        conn = self.conn()

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

        result = self.retry(once)
        self._wal_writes += 1  # (threads racing here lose a count, never a look for long)
        if self._wal_writes >= _WAL_EVERY:
            self.bound_wal(conn)
        return result

    def bound_wal(self, conn: sqlite3.Connection) -> bool:
        """Checkpoint the log back to nothing when it has grown past ``WAL_LIMIT`` (see
        there); True when it was cut. Readers of the moment get ``_WAL_WAIT_MS`` to move
        on; when they do not, this process tries again ``_WAL_RETRY_S`` later."""
        if self._wal_retry_at and time.monotonic() < self._wal_retry_at:
            return False
        self._wal_writes = 0
        try:
            if self._wal.stat().st_size <= WAL_LIMIT:
                return False
        except OSError:  # no log (yet, or another process just cut it)
            return False
        busy, log = self._truncate(conn)
        if busy:
            if log != -1:  # readers held it off
                self._wal_retry_at = time.monotonic() + _WAL_RETRY_S
            return False
        self._wal_retry_at = 0.0
        self.wal_truncations += 1
        return True

    @staticmethod
    def _truncate(conn: sqlite3.Connection) -> tuple[int, int]:
        """``PRAGMA wal_checkpoint(TRUNCATE)``'s ``(busy, frames in the log)``. A log of -1:
        the checkpoint could not start, another connection's being under way (a writer's
        automatic one, after each commit while the log is long), which SQLite says at once,
        without a busy wait: tried again a few times over ``_WAL_WAIT_MS``. Backing off half
        a second instead left the log to writers checkpointing it only in part: 4 processes
        took it to 124 MB in 30 s (``benchmarks/load_sqlite_wal.py``)."""
        deadline = time.monotonic() + _WAL_WAIT_MS / 1000
        pause = 0.001
        while True:
            try:
                conn.execute(f"PRAGMA busy_timeout={_WAL_WAIT_MS}")
                try:
                    busy, log, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    conn.execute("PRAGMA busy_timeout=0")
            except sqlite3.Error:
                return 1, 0
            if not busy or log != -1 or time.monotonic() + pause > deadline:
                return busy, log
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def write(self, body: Callable[[sqlite3.Connection], int], key: str = "") -> int:
        """Run a write transaction; a failure that must not reach the caller returns 0."""
        if not self.can_write():
            return 0
        try:
            return self.transact(body)
        except (sqlite3.Error, OSError) as exc:
            self.write_failed(exc, key)
            return 0

    def query(self, sql: str, params: Any = ()) -> list[Any]:
        try:
            return self.conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            return self.read_slow(exc, sql, params)

    def read_slow(self, exc: sqlite3.Error, sql: str, params: Any, key: str = "") -> list[Any]:
        """The exception branch of every read: wait out a lock, recover a corrupt file."""
        try:
            if not is_busy(exc):
                raise exc
            return self.retry(lambda: self.conn().execute(sql, params).fetchall())
        except sqlite3.Error as err:
            self.read_failed(err, key)
            return []

    def can_write(self) -> bool:
        return self.writable and time.monotonic() >= self.retry_writes_at

    # ---------------------------------------------------------------- failures

    def _move_aside(self, exc: BaseException) -> bool:
        """Rename the damaged file (and its -wal/-shm); False when that is impossible."""
        failed = getattr(self.local, "ino", None)
        self.close()
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
                self.warn.once("unreadable", f"dejacache: {self.path} is unreadable ({exc}) "
                               f"and cannot be moved aside ({err}); serving nothing from it")
                return False
            self.warn.once("corrupt", f"dejacache: {self.path} was unreadable ({exc}); moved "
                           f"it to {target.name} and started a fresh cache")
        return True

    def _recover(self, exc: BaseException) -> None:
        """A corrupt page met after opening: move the file aside and start fresh."""
        with self._recovering:
            if self._uri is not None:  # opened read-only: nothing may be moved or created
                self.close()
                self._uri, self._empty = None, True
                self.warn.once("unreadable", f"dejacache: {self.path} is unreadable ({exc}); "
                               "serving nothing from it")
            elif self._move_aside(exc):
                self._open_checked()

    def read_failed(self, exc: sqlite3.Error, key: str = "") -> None:
        kind = _classify(exc)
        if kind == "corrupt":
            self._recover(exc)
            return
        if kind == "nowrite":
            self.warn.once("read", f"dejacache: cannot read {self.path} ({exc}); treating "
                           "entries as missing")
            return
        raise StoreError(f"read failed: {exc}", backend=self.url, key=key) from exc

    def write_failed(self, exc: BaseException, key: str = "") -> None:
        kind = _classify(exc)
        if kind == "corrupt":
            self._recover(exc)
            return
        if kind == "nowrite":
            self.retry_writes_at = time.monotonic() + _WRITE_RETRY_S
            self.warn.once("readonly", f"dejacache: cannot write {self.path} ({exc}); reads "
                           "keep working, new results are not stored")
            return
        raise StoreError(f"write failed: {exc}", backend=self.url, key=key) from exc
