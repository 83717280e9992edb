"""What a save over a format-4 file writes: one more segment, or the file compacted.

A save that keeps every entry of the file where it is, with the same bytes (its
``follows`` and occurrence unchanged), and adds new entries after them (a block that
replayed a large cassette and recorded a few calls) is an append: :func:`appended` gives
a segment holding the new entries and only the shared values the file lacks, then the last
member, ``xref_at``, listing every segment's cross-reference. It is written over the old
last member (``append.py``): O(new entries + segments) bytes, where writing the file again
from ranges of the old one (``splice.py``) grew with the file (53 ms at 38 MB).

Any other save, and an append to a file of ``MAX_SEGMENTS`` segments, writes the file
again as one segment: :func:`flattened` turns the entries of the later segments into
entries the splice writes again (they are few: at most ``MAX_SEGMENTS`` - 1 appends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import format as fmt
from .reader import FileIndex
from .render import segment_bytes, tail_bytes, xref_checksum
from .splice import Item, added_values, encode

__all__ = ["appended", "flattened", "is_append"]


def is_append(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None]) -> bool:
    """Whether the new file is the file ``ix`` indexes, unchanged, then new entries (a
    format-3 file is written whole instead: that is its upgrade to format 4)."""
    n = ix.n
    return (ix.version == fmt.FORMAT and len(items) > n
            and all(isinstance(x, dict) for x in items[n:])
            and list(items[:n]) == list(range(n)) and list(follows[:n]) == ix.follows()
            and ix.segments < fmt.MAX_SEGMENTS)


def appended(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None],
             values: Mapping[str, Any]) -> tuple[int, bytes]:
    """``(offset, bytes)``: what to write from where the file's last member starts, for
    an append (:func:`is_append`); ``values`` holds at least every shared value the new
    entries use that the file lacks."""
    n = ix.n
    fresh = [x for x in items[n:] if isinstance(x, dict)]
    seen: dict[str, int] = {}
    data: list[bytes] = []
    xref: dict[str, list[Any]] = {"follows": [], "keys": [], "kinds": [], "names": [],
                                  "sizes": []}
    for d, f in zip(fresh, follows[n:], strict=True):
        k = str(d.get("key", ""))
        occ = seen[k] = seen.get(k, len(ix.positions(k)) - 1) + 1
        data.append(encode(d, f, occ))
        xref["follows"].append(f)
        xref["keys"].append(k)
        xref["kinds"].append(str(d.get("kind", "call")))
        xref["names"].append(str(d.get("name", "")))
        xref["sizes"].append(len(data[-1]))
    xref["checksum"] = xref_checksum(xref)  # type: ignore[assignment]
    added = added_values(ix, fresh, values)
    seg, places = segment_bytes(ix.segments, data, added, xref, ix.end)
    return ix.end, seg + tail_bytes([*ix.places, *places])


def flattened(ix: FileIndex, items: Sequence[Item], values: Mapping[str, Any]
              ) -> tuple[FileIndex, list[Item], Mapping[str, Any]]:
    """``(index, items, values)`` for splicing the file ``ix`` indexes into one segment:
    the first segment's index, entries of later segments as parsed (and checked) entries,
    and ``values`` with the later segments' values."""
    if ix.segments == 1:
        return ix, list(items), values
    first = ix.first_segment()
    keys = ix.keys()
    later: dict[str, Any] = {}
    for k in range(1, ix.segments):
        later.update(ix.segment_values(k))
    later.update(values)
    out: list[Item] = [x if not isinstance(x, int) or x < first.n else ix.entry(x, keys[x])
                       for x in items]
    return first, out, later
