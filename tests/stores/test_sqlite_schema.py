"""The SQLite store's tables and their upgrades, on bare connections."""

from __future__ import annotations

import contextlib
import sqlite3

from dejacache.stores._sqlite_schema import (
    SCHEMA_VERSION,
    create_tables,
    layout_ok,
    read_version,
    upgrade,
)


def memory() -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(":memory:", isolation_level=None))


def test_a_new_file_gets_the_current_tables() -> None:
    with memory() as conn:
        assert read_version(conn) is None
        assert upgrade(conn, None) is True
        assert read_version(conn) == SCHEMA_VERSION and layout_ok(conn)


def test_version_2_keeps_its_calls_and_drops_its_tool_entries() -> None:
    with memory() as conn:
        create_tables(conn)
        conn.execute("DROP TABLE counters")
        conn.execute("DROP TABLE blobs")
        for key, kind in (("call", "call"), ("tool", "tool")):
            conn.execute("INSERT INTO entries VALUES (?, x'00', 0, NULL, NULL, 'f', 'ns', ?, "
                         "0, 0, x'')", (key, kind))
        assert not layout_ok(conn)
        assert upgrade(conn, 2) is True
        assert layout_ok(conn)
        assert conn.execute("SELECT key FROM entries").fetchall() == [("call",)]


def test_version_3_gains_the_blobs_table_and_keeps_its_rows() -> None:
    with memory() as conn:
        create_tables(conn)
        conn.execute("DROP TABLE blobs")
        conn.execute("INSERT INTO entries VALUES ('k', x'00', 0, NULL, NULL, 'f', 'ns', "
                     "'tool', 0, 0, x'')")
        assert upgrade(conn, 3) is True
        assert layout_ok(conn) and conn.execute("SELECT key FROM entries").fetchall() == [
            ("k",)]


def test_a_file_labelled_current_but_laid_out_otherwise_is_rebuilt() -> None:
    with memory() as conn:
        conn.execute("CREATE TABLE entries (key TEXT, value BLOB)")
        conn.execute("INSERT INTO entries VALUES ('k', x'00')")
        assert upgrade(conn, SCHEMA_VERSION) is False  # the caller says it was rebuilt
        assert layout_ok(conn) and conn.execute("SELECT * FROM entries").fetchall() == []
