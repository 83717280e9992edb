"""How ``SQLiteStore`` keeps a row's ``request``: whole, compressed, or as a skeleton of shared
blobs (``_sqlite_blobs``) counted by the rows that use them.

``entries.z`` says which: 0 whole, 1 whole and zlib-compressed, 2 a skeleton, 3 a compressed
skeleton. The counts change inside the writer's transaction (:func:`add_refs`,
:func:`release`), so no other writer ever sees a blob half-counted. Hits never read any of
this; only ``iterate`` (miss reports, diffs, the CLI) puts requests back together
(:class:`RequestReader`), checking each blob against its hash.
"""

from __future__ import annotations

import collections
import sqlite3
import zlib
from collections.abc import Iterable, Mapping

import orjson

from ._sqlite_blobs import blob_hash, pack, refs, splice
from ._sqlite_file import Warn

__all__ = ["COMPRESS_OVER", "RequestReader", "Stored", "add_refs", "refs_of_rows", "release",
           "stored_request"]

# Requests, skeletons and blobs above this size are stored zlib-compressed (level 1: ~3.5x
# smaller JSON for about 6 us per KB, paid on the miss path only; hits never read them).
COMPRESS_OVER = 32 * 1024
_BLOB_CACHE_BYTES = 8 << 20  # at most this much of checked blobs kept by one iterate()

# The row a write replaces: its skeleton (z 2/3) to release its blobs; a whole request is
# not read at all.
OLD_ROW = "SELECT z, CASE WHEN z >= 2 THEN request END FROM entries WHERE key=?"
_ADD_BLOB = ("INSERT INTO blobs (h, n, z, data) VALUES (?, 1, ?, ?) "
             "ON CONFLICT(h) DO UPDATE SET n = n + 1")
_RELEASE = "UPDATE blobs SET n = n - ? WHERE h=?"
_DROP_UNUSED = "DELETE FROM blobs WHERE h=? AND n <= 0"
_BLOB = "SELECT z, data FROM blobs WHERE h=?"

Stored = tuple[bytes, int, list[tuple[str, int, bytes]]]  # (column, z, blob rows to add)


def stored_request(request: bytes) -> Stored:
    """``request`` as the ``request`` column holds it, its ``z``, and the blob rows
    ``(hash, z, data)`` it references (cut before the write lock is taken: the lock is
    held for SQL only)."""
    packed = pack(request)
    added: list[tuple[str, int, bytes]] = []
    if packed is None:
        z = 0
        if len(request) > COMPRESS_OVER:
            request, z = zlib.compress(request, 1), 1
        return request, z, added
    request, z = packed.skeleton, 2
    if len(request) > COMPRESS_OVER:
        request, z = zlib.compress(request, 1), 3
    for h, data in packed.blobs.items():
        added.append((h, 1, zlib.compress(data, 1)) if len(data) > COMPRESS_OVER
                     else (h, 0, data))
    return request, z, added


def _refs(z: int, skeleton: bytes) -> set[str]:
    """The blobs a stored skeleton (``z`` 2, or 3 when compressed) references."""
    return refs(zlib.decompress(skeleton) if z == 3 else skeleton)


def refs_of_rows(rows: Iterable[tuple[int, bytes]]) -> collections.Counter[str]:
    """How many of the skeleton rows ``(z, request)`` reference each blob."""
    counts: collections.Counter[str] = collections.Counter()
    for z, skeleton in rows:
        counts.update(_refs(z, skeleton))
    return counts


def add_refs(conn: sqlite3.Connection, stored: Stored, old: tuple[int, bytes | None] | None
             ) -> None:
    """After a row was written as ``stored`` over ``old`` (its ``OLD_ROW``, or None): take
    the new blob references before dropping the old ones."""
    request, z, added = stored
    if old is not None and old[0] == z and old[1] == request:
        return  # the same request again: its blobs stay as they are
    if added:
        conn.executemany(_ADD_BLOB, added)
    if old is not None and old[1] is not None:
        release(conn, collections.Counter(_refs(old[0], old[1])))


def release(conn: sqlite3.Connection, counts: Mapping[str, int]) -> None:
    """Drop ``counts[h]`` references to each blob, and the blobs nothing references now
    (inside the caller's write transaction, so no other writer sees them half-counted)."""
    if counts:
        conn.executemany(_RELEASE, [(n, h) for h, n in counts.items()])
        conn.executemany(_DROP_UNUSED, [(h,) for h in counts])


class RequestReader:
    """Puts stored requests back together during one ``iterate()``. Blobs read and checked
    are kept (up to ``_BLOB_CACHE_BYTES``): a conversation's system prompt and early
    messages are shared by every later request, and are read and hashed once."""

    __slots__ = ("_path", "_warn", "blobs", "size")

    def __init__(self, path: object, warn: Warn) -> None:
        self._path = path
        self._warn = warn
        self.blobs: dict[bytes, bytes] = {}  # hash (ASCII) -> JSON
        self.size = 0

    def _add(self, h: bytes, data: bytes) -> None:
        if self.size + len(data) > _BLOB_CACHE_BYTES:
            self.blobs.clear()
            self.size = 0
        self.blobs[h] = data
        self.size += len(data)

    def request(self, conn: sqlite3.Connection, key: str, z: int, request: bytes) -> bytes:
        """The request of row ``key`` (column ``request``, ``z``), read on ``conn`` in the
        caller's read transaction; empty when it is damaged (warned once)."""
        try:
            if z == 0:
                return request
            if z == 1:
                return zlib.decompress(request)
            skeleton = zlib.decompress(request) if z == 3 else request
            known = self.blobs.get

            def resolve(h: bytes) -> bytes:
                data = known(h)
                return data if data is not None else self._blob(conn, h)

            return splice(skeleton, resolve)
        except (zlib.error, ValueError) as exc:
            # The request only explains a call (miss reports, diffs): the entry stays
            # usable, it just cannot be shown.
            self._warn.once("request", f"dejacache: {self._path}: the stored request of key "
                            f"{key} is damaged ({exc}); it is left out of reports")
            return b""

    def _blob(self, conn: sqlite3.Connection, hb: bytes) -> bytes:
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
                problem = "" if blob_hash(data) == h else "damaged"
            except zlib.error:
                problem = "damaged"
        if problem:
            self._warn.once("blob", f"dejacache: {self._path}: the shared request part "
                            f"@ref:{h} is {problem} (edited by hand, or a damaged file); "
                            "requests are shown without it. Responses are not affected.")
            return orjson.dumps(f"<dejacache: shared part {h} is {problem}>")
        self._add(hb, data)
        return data
