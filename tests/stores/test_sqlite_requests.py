"""How the SQLite store keeps a row's request: whole, compressed, or as shared blobs."""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
import zlib

import orjson
import pytest

from dejacache import DejacacheWarning
from dejacache.cassettes._workload import agent_steps
from dejacache.stores._sqlite_file import Warn
from dejacache.stores._sqlite_requests import (
    COMPRESS_OVER,
    OLD_ROW,
    RequestReader,
    add_refs,
    refs_of_rows,
    release,
    stored_request,
)
from dejacache.stores._sqlite_schema import create_tables

PATH = pathlib.Path("c.db")


def canonical(obj: object) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def store_row(conn: sqlite3.Connection, key: str, request: bytes) -> None:
    """What ``SQLiteStore.put`` does with the request column."""
    stored = stored_request(request)
    old = conn.execute(OLD_ROW, (key,)).fetchone()
    conn.execute("INSERT OR REPLACE INTO entries VALUES (?, x'00', 0, NULL, NULL, 'f', 'ns', "
                 "'call', 0, ?, ?)", (key, stored[1], stored[0]))
    add_refs(conn, stored, old)


def read_back(conn: sqlite3.Connection, key: str, reader: RequestReader | None = None) -> bytes:
    z, request = conn.execute("SELECT z, request FROM entries WHERE key=?", (key,)).fetchone()
    return (reader or RequestReader(PATH, Warn())).request(conn, key, z, request)


@pytest.fixture
def conn() -> sqlite3.Connection:
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as c:
        create_tables(c)
        yield c


def test_short_and_unshareable_requests_are_kept_whole() -> None:
    small = canonical({"q": 1})
    assert stored_request(small) == (small, 0, [])
    text = b"not JSON, nothing to share " * (COMPRESS_OVER // 20)
    column, z, blobs = stored_request(text)
    assert (z, blobs) == (1, []) and zlib.decompress(column) == text  # long: compressed


def test_a_conversation_shares_its_messages(conn: sqlite3.Connection) -> None:
    steps = [canonical(req) for req, _ in agent_steps(4)]
    for i, request in enumerate(steps):
        _, z, blobs = stored_request(request)
        assert z == 2 and blobs  # a skeleton and the parts it references
        store_row(conn, f"k{i}", request)
    shared = conn.execute("SELECT count(*), max(n) FROM blobs").fetchone()
    assert shared[1] > 1  # a message stored once, referenced by several rows
    reader = RequestReader(PATH, Warn())
    assert [read_back(conn, f"k{i}", reader) for i in range(4)] == steps
    counts = refs_of_rows(conn.execute("SELECT z, request FROM entries WHERE z >= 2"))
    assert dict(conn.execute("SELECT h, n FROM blobs").fetchall()) == dict(counts)
    release(conn, counts)  # every row's references dropped: nothing is left
    assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (0,)


def test_rewriting_a_row_moves_its_references(conn: sqlite3.Connection) -> None:
    first, second = (canonical(req) for req, _ in list(agent_steps(12))[::11])
    store_row(conn, "k", first)
    store_row(conn, "k", first)  # the same request again: counts unchanged
    once = dict(conn.execute("SELECT h, n FROM blobs").fetchall())
    assert set(once.values()) == {1}
    store_row(conn, "k", second)
    assert read_back(conn, "k") == second
    counts = refs_of_rows(conn.execute("SELECT z, request FROM entries WHERE z >= 2"))
    assert dict(conn.execute("SELECT h, n FROM blobs").fetchall()) == dict(counts)


def test_a_damaged_part_is_shown_as_such_once(conn: sqlite3.Connection) -> None:
    request = canonical(next(iter(agent_steps(1)))[0])
    store_row(conn, "k", request)
    store_row(conn, "j", request)
    conn.execute("UPDATE blobs SET data = x'7b7d' WHERE id = (SELECT min(id) FROM blobs)")
    reader = RequestReader(PATH, Warn())
    with pytest.warns(DejacacheWarning, match="is damaged"):
        shown = read_back(conn, "k", reader)
    assert b"<dejacache: shared part" in shown and shown != request
    assert b"<dejacache: shared part" in read_back(conn, "j", reader)  # warned once
