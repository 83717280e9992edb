"""The tables of ``SQLiteStore``'s file, their version, and the upgrades between versions.

2: one rowid table, request last, no secondary index. Older files are caches, not archives:
they are rebuilt empty rather than migrated.
3: adds the ``counters`` table (runtime generation counters). A version 2 file is upgraded
in place: its tool-cache entries were keyed by per-process counters that the new durable
ones would collide with, so they are deleted; everything else is kept. Bumping the version
also makes an older dejacache refuse the file (``IncompatibleStore``) instead of serving
tool entries by its in-memory counters next to a new one.
4: adds the ``blobs`` table; ``entries.z`` 2/3 mark a request stored as a skeleton of blob
references (``_sqlite_requests``). A version 3 file is upgraded in place by creating the
table: its rows keep ``z`` 0/1 and read as before. An older dejacache refuses a version 4
file rather than show skeletons as requests.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA_VERSION", "create_tables", "layout_ok", "read_version", "upgrade"]

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


def create_tables(conn: sqlite3.Connection) -> None:
    for stmt in _SCHEMA:
        conn.execute(stmt)


def read_version(conn: sqlite3.Connection) -> int | None:
    """The schema version the file says it has (None: no schema was ever written)."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='dejacache_meta'"
    ).fetchone()
    if not has_meta:
        return None
    row = conn.execute("SELECT v FROM dejacache_meta WHERE k='schema_version'").fetchone()
    return None if row is None else int(row[0])


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})").fetchall()]


def _v3_layout_ok(conn: sqlite3.Connection) -> bool:
    return (_columns(conn, "entries") == _COLUMNS
            and _columns(conn, "counters") == ["name", "value"])


def layout_ok(conn: sqlite3.Connection) -> bool:
    """Whether the tables are laid out as this version writes them."""
    return _v3_layout_ok(conn) and _columns(conn, "blobs") == _BLOB_COLUMNS


def upgrade(conn: sqlite3.Connection, found: int | None) -> bool:
    """Bring a file at version ``found`` (not newer than ours) to ``SCHEMA_VERSION``, inside
    the caller's write transaction. False when a file labelled current had another layout
    and was rebuilt empty (the caller says so)."""
    # Version 2 had no counters table; its entries table is still good. Drop only the
    # tool-cache entries, keyed by counters that restarted at 0 in every process: the
    # durable counters start at 0 too and would reach them.
    if found == 2 and not _v3_layout_ok(conn) and _columns(conn, "entries") == _COLUMNS:
        conn.execute("DELETE FROM entries WHERE kind='tool'")
        conn.execute(_SCHEMA[2])  # the counters table
        found = 3
    if found == 3 and _v3_layout_ok(conn):
        # Version 3 stored every request whole (z 0/1); those rows stay readable as they
        # are, and new rows share their parts through the new table.
        conn.execute(_SCHEMA[3])  # the blobs table
        found = SCHEMA_VERSION
    stale = found is not None and found < SCHEMA_VERSION
    recognised = True
    if found == SCHEMA_VERSION and not layout_ok(conn):
        # Labelled current but laid out otherwise (a damaged or hand-edited file): a cache
        # can be rebuilt, a half-working one only fails later, call by call.
        stale = True
        recognised = False
    if stale:
        conn.execute("DROP INDEX IF EXISTS entries_name")
        for table in _OLD_TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    create_tables(conn)
    conn.execute("INSERT OR REPLACE INTO dejacache_meta VALUES ('schema_version', ?)",
                 (str(SCHEMA_VERSION),))
    return recognised
