"""A save that costs what changed: the bytes of a new document spliced from the old file.

A block that replays a large cassette and records a few calls changes a few entries, yet
rendering the document again re-encoded every entry and re-walked every shared value (1.2 s
for a 10k-entry, 40 MB cassette of growing conversations). :func:`splice` instead lists
the parts of the new file: ranges of the old file for every entry whose bytes stay the same
(its ``follows`` and ``occurrence`` unchanged) and for the runs of shared values between
the new ones, and new bytes only for new or renumbered entries, the new values and the
cross-reference. The result is byte for byte what :func:`format.render` gives for the same
entries (the tests compare the two), so a file saved either way reads the same and diffs
the same.

It applies when every entry of the file is kept (no pruning, no re-recording) and no other
writer changed the file since it was read (the writer checks that under the file lock).
Entries are copied as they are: one whose bytes were damaged stays damaged, and is refused
when read, as it would have been before the save.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CassetteError
from . import format as fmt
from .reader import FileIndex

__all__ = ["Item", "splice"]

#: An entry of the new file: an old entry by its index, or a new entry (without checksum).
Item = int | dict[str, Any]

_SEP = b",\n"  # between two entries of the written layout


def splice(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None],
           values: Mapping[str, Any]) -> list[fmt.Part]:
    """The parts of the document holding ``items`` in this order, entry ``j`` following
    ``follows[j]`` (None: order unknown), over the file ``ix`` indexes; ``values`` holds at
    least every shared value the new entries use that the file lacks. Every entry of the
    file must be in ``items`` once (its shared values are then all still used)."""
    if len(items) != len(follows):
        raise ValueError("one follows per item")
    keys, names, kinds = ix.keys(), ix.names(), ix.kinds()
    was_follows = ix.follows()
    was_occ = _occurrences(keys)
    seen: collections.Counter[str] = collections.Counter()
    pieces: list[fmt.Part] = []
    col: dict[str, list[Any]] = {"keys": [], "kinds": [], "names": [], "sizes": []}
    fresh: list[dict[str, Any]] = []
    for item, f in zip(items, follows, strict=True):
        if isinstance(item, int):
            k = keys[item]
            occ = seen[k]
            seen[k] += 1
            if f == was_follows[item] and occ == was_occ[item]:
                lo, hi = ix.entry_range(item)
                _add_range(pieces, lo, hi)
                size = hi - lo
            else:  # renumbered: the entry, parsed and checked, written again
                doc = ix.entry(item, k)
                if doc.get("occurrence") != was_occ[item]:
                    raise CassetteError("entry is not at its occurrence")
                data = _encode(doc, f, occ)
                pieces.append(data)
                size = len(data)
            name, kind = names[item], kinds[item]
        else:
            k = str(item.get("key", ""))
            occ = seen[k]
            seen[k] += 1
            data = _encode(item, f, occ)
            pieces.append(data)
            fresh.append(item)
            size = len(data)
            name, kind = str(item.get("name", "")), str(item.get("kind", "call"))
        col["keys"].append(k)
        col["names"].append(name)
        col["kinds"].append(kind)
        col["sizes"].append(size)
    parts = [fmt.ENTRIES_HEAD, *_joined(pieces, _SEP), fmt.ENTRIES_END + b"3," + fmt.VALUES_HEAD]
    parts += _values(ix, _added_values(ix, fresh, values))
    xref: dict[str, Any] = {"follows": list(follows), **col}
    xref["checksum"] = fmt.xref_checksum(xref)
    at = sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in parts)
    at += len(fmt.XREF_HEAD) + 1  # "," then the member's head
    parts.append(b"," + fmt.XREF_HEAD + fmt.xref_tail(xref, at))
    return parts


def _occurrences(keys: list[str]) -> list[int]:
    """Each entry's place among the entries of its key, in file order."""
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for k in keys:
        out.append(seen[k])
        seen[k] += 1
    return out


def _encode(doc: dict[str, Any], follows: int | None, occurrence: int) -> bytes:
    """``doc``'s bytes as :func:`format.render` writes them at this place."""
    d = {f: v for f, v in doc.items() if f != "checksum"}
    if follows is None:
        d.pop("follows", None)
    else:
        d["follows"] = follows
    d["occurrence"] = occurrence
    d["checksum"] = fmt.entry_checksum(d)
    return fmt.entry_bytes(d)


def _add_range(pieces: list[fmt.Part], lo: int, hi: int) -> None:
    """Add an old entry; one range for a run of entries adjacent in the old file (the
    separator between them included)."""
    last = pieces[-1] if pieces else None
    if isinstance(last, tuple) and last[1] + len(_SEP) == lo:
        pieces[-1] = (last[0], hi)
    else:
        pieces.append((lo, hi))


def _joined(pieces: list[fmt.Part], sep: bytes) -> list[fmt.Part]:
    out: list[fmt.Part] = []
    for i, p in enumerate(pieces):
        if i:
            out.append(sep)
        out.append(p)
    return out


def _added_values(ix: FileIndex, fresh: list[dict[str, Any]], values: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """The shared values the new entries use, directly or through other values, that the
    file does not hold."""
    todo: set[str] = set()
    for d in fresh:
        fmt.refs_in(d.get("request"), todo)
        fmt.refs_in(d.get("response"), todo)
    added: dict[str, Any] = {}
    done: set[str] = set()
    while todo:
        h = todo.pop()
        if h in done:
            continue
        done.add(h)
        if ix.value_slot(h)[0]:
            continue  # in the file, with every value it uses
        if h not in values:
            raise CassetteError(f"dangling value reference {fmt.REF}{h}")
        v = added[h] = values[h]
        if type(v) is not str:
            fmt.refs_in(v, todo)
    return added


def _values(ix: FileIndex, added: dict[str, Any]) -> list[fmt.Part]:
    """The ``values`` member from its ``{`` on: the file's items in runs, the added ones
    in their sorted places."""
    lo, hi = ix.values_bounds
    pieces: list[fmt.Part] = []
    cur = lo
    for h in sorted(added):
        at = ix.value_slot(h)[1]
        if at > cur:
            pieces.append((cur, at - 1 if at < hi else at))  # (not the comma before it)
            cur = at
        pieces.append(fmt.value_item(h, added[h]))
    if cur < hi:
        pieces.append((cur, hi))
    if not pieces:
        return [b"}"]
    return [*_joined(pieces, b","), b"\n  }"]
