"""The bytes a save writes: a whole document (:func:`render`), an entry, a cross-reference
and its checksum, an appended segment and the ``xref_at`` member (the layout: format.py).

Apart from format.py because a replay hit only reads these bytes, with the constants
format.py keeps; the first save, a whole parse (checking checksums) and the CLI load this.
"""

from __future__ import annotations

import collections

import orjson
import xxhash

from .format import (
    CHECKSUMS,
    ENTRIES_HEAD,
    FORMAT,
    HASH_LEN,
    KEYS_HEAD,
    XREF_HEAD,
    follows_of,
    segment_head,
    segment_names,
)

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["build_xref", "dumps", "empty_document", "entry_bytes", "entry_checksum", "render",
           "segment_bytes", "tail_bytes", "value_item", "with_xref_at", "xref_checksum",
           "xref_tail"]

_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def dumps(document: dict[str, Any]) -> bytes:
    """The one byte form of a document (stable key order, 2-space indent, final newline)."""
    return orjson.dumps(document, option=_OPTS)


def empty_document() -> dict[str, Any]:
    return {"checksums": CHECKSUMS, "entries": [], "format": FORMAT, "values": {},
            "xref": build_xref([])}


_ENTRY_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_NESTED = b"\n    "  # an entry sits 4 spaces deep in the file


def entry_checksum(entry: dict[str, Any]) -> str:
    """The hash of ``entry``'s bytes as :func:`dumps` lays them out inside a document (4
    spaces deep), without its ``checksum`` field. Defined on the file's bytes so the hit path
    can check an entry with one hash over its slice, without parsing it."""
    body = entry_bytes({k: v for k, v in entry.items() if k != "checksum"})
    return xxhash.xxh3_128_hexdigest(body)[:HASH_LEN]


def entry_bytes(entry: dict[str, Any]) -> bytes:
    """``entry`` as :func:`dumps` lays it out inside a document (4 spaces deep)."""
    return b"    " + orjson.dumps(entry, option=_ENTRY_OPTS).replace(b"\n", _NESTED)


def xref_checksum(xref: dict[str, Any]) -> str:
    """The hash of the ``xref`` object's bytes as they sit in the file (2 spaces deep),
    without its ``checksum`` field: checked with one hash over the slice a reader holds."""
    body = orjson.dumps({k: v for k, v in xref.items() if k != "checksum"},
                        option=_ENTRY_OPTS)
    return xxhash.xxh3_128_hexdigest(body.replace(b"\n", b"\n  "))[:HASH_LEN]


def build_xref(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The cross-reference of ``entries`` (checksummed, in file order): what opening a file
    and finding one entry need, so neither reads the entries."""
    xref: dict[str, Any] = {
        "follows": [follows_of(e) for e in entries],
        "keys": [str(e.get("key", "")) for e in entries],
        "kinds": [str(e.get("kind", "call")) for e in entries],
        "names": [str(e.get("name", "")) for e in entries],
        "sizes": [len(entry_bytes(e)) for e in entries],
    }
    xref["checksum"] = xref_checksum(xref)
    return xref


def render(entries: list[dict[str, Any]], values: dict[str, Any]) -> bytes:
    """The bytes of a document holding ``entries`` (in this order) and the part of ``values``
    they use. Occurrences are renumbered in file order per key, so FIFO replay and the field
    agree; checksums are computed last, over the final entry."""
    from .pack import reachable  # (a whole save: checking a small file on open never packs)

    seen: collections.Counter[str] = collections.Counter()
    out = []
    for doc in entries:
        k = str(doc.get("key", ""))
        d = {f: v for f, v in doc.items() if f != "checksum"}
        d["occurrence"] = seen[k]
        seen[k] += 1
        d["checksum"] = entry_checksum(d)
        out.append(d)
    return with_xref_at(dumps({"checksums": CHECKSUMS, "entries": out, "format": FORMAT,
                               "values": reachable(out, values), "xref": build_xref(out)}))


def value_item(h: str, value: Any) -> bytes:
    """Shared value ``h`` as :func:`dumps` lays it out in ``values`` (its line and the lines
    of its content, without the comma that separates it from the next)."""
    return orjson.dumps({h: value}, option=_ENTRY_OPTS)[1:-2].replace(b"\n", b"\n  ")


def xref_tail(xref: dict[str, Any], at: int) -> bytes:
    """The end of a one-segment document from its ``xref`` member's value on, ``xref_at``
    included, for a document whose cross-reference starts at byte ``at`` (what
    :func:`with_xref_at` gives, made without the bytes before it)."""
    body, keys, end = _xref_body(xref)
    return body + tail_bytes([len(ENTRIES_HEAD), at, at + keys, at + end])


def _xref_body(xref: dict[str, Any]) -> tuple[bytes, int, int]:
    """``xref`` as it sits in the file (2 spaces deep), and where its ``keys`` column lies
    in those bytes (the ``[`` opening it, the newline closing it)."""
    body = orjson.dumps(xref, option=_ENTRY_OPTS).replace(b"\n", b"\n  ")
    # Searched from a rare byte: a pattern opening with a newline matched at every line
    # (10k entries: 2 ms). "keys" follows "follows" (numbers) and "checksum" (hex); a key
    # is a JSON string, which holds no raw newline, so '],\n    "kinds"' ends the column.
    keys = body.index(b'"keys": [') + len(b'"keys": ')
    end = (keys + 1 if body[keys + 1 : keys + 2] == b"]"
           else body.index(b'],\n    "kinds": [', keys) - len(b"\n    "))
    return body, keys, end


def tail_bytes(places: list[int]) -> bytes:
    """The last member, ``xref_at`` (with the comma before it and the document's end):
    for each segment, where its entries start, where its cross-reference starts, and where
    that one's ``keys`` column opens and closes."""
    return b"," + orjson.dumps({"xref_at": places}, option=_OPTS)[1:]


def segment_bytes(k: int, entries: list[bytes], values: dict[str, Any],
                  xref: dict[str, Any], at: int) -> tuple[bytes, list[int]]:
    """Segment ``k`` >= 1 as written at byte ``at`` of a file (after the cross-reference
    of segment k-1): ``entries`` (each :func:`entry_bytes`), the shared ``values`` it adds
    and its ``xref``; and its places for ``xref_at``. The bytes :func:`dumps` would give
    for these members (tests compare)."""
    _, v, x = segment_names(k)
    head = segment_head(k)
    items = b",".join(value_item(h, values[h]) for h in sorted(values))
    vals = b"{" + items + b"\n  }" if items else b"{}"
    out = b"".join([head, b",\n".join(entries), b'\n  ],\n  "', v.encode(), b'": ', vals,
                    b',\n  "', x.encode(), b'": '])
    body, keys, end = _xref_body(xref)
    xat = at + len(out)
    return out + body, [at + len(head), xat, xat + keys, xat + end]


def with_xref_at(data: bytes) -> bytes:
    """``data`` (:func:`dumps` of a one-segment document whose last member is ``xref``)
    with the ``xref_at`` member added: the bytes :func:`dumps` gives for the document
    holding it, made without rendering the document again."""
    at = data.rindex(XREF_HEAD + b"{\n") + len(XREF_HEAD)
    keys = data.index(KEYS_HEAD + b"[", at) + len(KEYS_HEAD)
    end = keys + 1 if data[keys + 1 : keys + 2] == b"]" else data.index(b"\n    ]", keys)
    return data[: -len(b"\n}\n")] + tail_bytes([len(ENTRIES_HEAD), at, keys, end])
