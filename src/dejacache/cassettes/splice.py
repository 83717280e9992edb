"""A save that costs what changed: the bytes of a new document spliced from the old file.

A block that replays a large cassette and records a few calls changes a few entries, yet
rendering the document again re-encoded every entry and re-walked every shared value (1.2 s
for a 10k-entry, 40 MB cassette of growing conversations). :func:`splice` instead lists
the parts of the new file: ranges of the old file for every entry whose bytes stay the same
(its ``follows`` and ``occurrence`` unchanged) and for the runs of shared values between
the new ones, and new bytes only for new or renumbered entries, the new values and the
cross-reference. The result is byte for byte what :func:`render.render` gives for the same
entries (the tests compare the two), so a file saved either way reads the same and diffs
the same.

It applies when every entry of the file is kept (no pruning, no re-recording) and no other
writer changed the file since it was read (the writer checks that under the file lock).
Entries are copied as they are: one whose bytes were damaged stays damaged, and is refused
when read, as it would have been before the save.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._core.strict import ROOT
from ..errors import CassetteError
from . import format as fmt
from .atomic import Part
from .pack import refs_in
from .reader import FileIndex
from .render import entry_bytes, entry_checksum, value_item, xref_checksum, xref_tail
from .tape import Entry

if TYPE_CHECKING:
    from .calls import Call
    from .order import RunOrder

__all__ = ["Item", "added_values", "encode", "follows_of", "order_of", "splice"]

#: An entry of the new file: an old entry by its index, or a new entry (without checksum).
Item = int | dict[str, Any]

_SEP = b",\n"  # between two entries of the written layout


def splice(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None],
           values: Mapping[str, Any]) -> list[Part]:
    """The parts of the one-segment document holding ``items`` in this order, entry ``j`` following
    ``follows[j]`` (None: order unknown), over the file ``ix`` indexes; ``values`` holds at
    least every shared value the new entries use that the file lacks. Every entry of the
    file must be in ``items`` once (its shared values are then all still used). ``ix``
    covers one segment (``segments.flattened`` makes the others' entries new ones)."""
    if ix.segments != 1:
        raise ValueError("splice the first segment alone")
    if len(items) != len(follows):
        raise ValueError("one follows per item")
    fresh_at = [j for j, x in enumerate(items) if not isinstance(x, int)]
    olds = list(items)
    for j in reversed(fresh_at):
        del olds[j]
    if olds == list(range(ix.n)):
        pieces, col = _in_file_order(ix, items, follows, fresh_at)
    else:  # recorded entries replayed out of their order: placed one by one
        pieces, col = _item_by_item(ix, items, follows)
    fresh = _fresh(items, fresh_at)
    mid = fmt.ENTRIES_END + b"%d," % fmt.FORMAT + fmt.VALUES_HEAD
    parts = [fmt.ENTRIES_HEAD, *_joined(pieces, _SEP), mid]
    parts += _values(ix, added_values(ix, fresh, values))
    xref: dict[str, Any] = {"follows": list(follows), **col}
    xref["checksum"] = xref_checksum(xref)
    at = sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in parts)
    at += len(fmt.XREF_HEAD) + 1  # "," then the member's head
    parts.append(b"," + fmt.XREF_HEAD + xref_tail(xref, at))
    return parts


Columns = dict[str, list[Any]]


def _fresh(items: Sequence[Item], fresh_at: list[int]) -> list[dict[str, Any]]:
    return [x for x in (items[j] for j in fresh_at) if isinstance(x, dict)]


def _in_file_order(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None],
                   fresh_at: list[int]) -> tuple[list[Part], Columns]:
    """The file's entries in their order with new ones between them: runs of untouched
    entries are single ranges, found without a step per entry in Python (an append to a
    10k-entry file encodes one entry and touches ten thousand only in C loops). An entry
    is written again only when its ``follows`` or its occurrence changes."""
    n = ix.n
    keys = ix.keys()
    fresh = _fresh(items, fresh_at)
    bounds = [j - t for t, j in enumerate(fresh_at)]  # the file's entries before each new one
    now = list(follows)
    for j in reversed(fresh_at):
        del now[j]
    dirty = set(itertools.compress(range(n), map(operator.ne, now, ix.follows())))
    moved, fresh_occ = _occurrence_shifts(ix, fresh, bounds)
    dirty.update(moved)
    starts, sizes = ix.starts(), list(ix.sizes)
    events = sorted([*((b, 0, t) for t, b in enumerate(bounds)), *((i, 1, i) for i in dirty)])
    pieces: list[Part] = []
    fresh_sizes = []
    cur = 0
    for at, kind, t in events:
        if at > cur:
            pieces.append((starts[cur], starts[at] - len(_SEP)))
            cur = at
        if kind == 0:
            data = encode(fresh[t], follows[fresh_at[t]], fresh_occ[t])
            fresh_sizes.append(len(data))
        else:
            was = ix.positions(keys[t]).index(t)
            doc = ix.entry(t, keys[t])
            if doc.get("occurrence") != was:
                raise CassetteError("entry is not at its occurrence")
            data = encode(doc, now[t], moved.get(t, was))
            sizes[t] = len(data)
            cur = t + 1
        pieces.append(data)
    if cur < n:
        pieces.append((starts[cur], starts[n] - len(_SEP)))
    col: Columns = {"keys": list(keys), "kinds": list(ix.kinds()), "names": list(ix.names()),
                    "sizes": sizes}
    for t, j in enumerate(fresh_at):  # in increasing order: each lands at its final place
        d = fresh[t]
        col["keys"].insert(j, str(d.get("key", "")))
        col["kinds"].insert(j, str(d.get("kind", "call")))
        col["names"].insert(j, str(d.get("name", "")))
        col["sizes"].insert(j, fresh_sizes[t])
    return pieces, col


def _occurrence_shifts(ix: FileIndex, fresh: list[dict[str, Any]], bounds: list[int]
                       ) -> tuple[dict[int, int], list[int]]:
    """``(new occurrence of each file entry whose occurrence changes, occurrence of each new
    entry)``: a new call placed before recorded calls of its key moves them one up."""
    import bisect  # a save only: not with the first block (import time)

    moved: dict[int, int] = {}
    out: list[int] = []
    news: dict[str, int] = {}
    for d, b in zip(fresh, bounds, strict=True):
        k = str(d.get("key", ""))
        pos = ix.positions(k)
        before = bisect.bisect_left(pos, b)
        out.append(before + news.get(k, 0))
        news[k] = news.get(k, 0) + 1
        for r, i in enumerate(pos[before:], before):
            moved[i] = moved.get(i, r) + 1
    return moved, out


def _item_by_item(ix: FileIndex, items: Sequence[Item], follows: Sequence[int | None]
                  ) -> tuple[list[Part], Columns]:
    keys, names, kinds = ix.keys(), ix.names(), ix.kinds()
    was_follows = ix.follows()
    was_occ = _occurrences(keys)
    seen: dict[str, int] = {}
    pieces: list[Part] = []
    col: Columns = {"keys": [], "kinds": [], "names": [], "sizes": []}
    for item, f in zip(items, follows, strict=True):
        if isinstance(item, int):
            k = keys[item]
            occ = seen.get(k, 0)
            seen[k] = occ + 1
            if f == was_follows[item] and occ == was_occ[item]:
                lo, hi = ix.entry_range(item)
                _add_range(pieces, lo, hi)
                size = hi - lo
            else:  # renumbered: the entry, parsed and checked, written again
                doc = ix.entry(item, k)
                if doc.get("occurrence") != was_occ[item]:
                    raise CassetteError("entry is not at its occurrence")
                data = encode(doc, f, occ)
                pieces.append(data)
                size = len(data)
            name, kind = names[item], kinds[item]
        else:
            k = str(item.get("key", ""))
            occ = seen.get(k, 0)
            seen[k] = occ + 1
            data = encode(item, f, occ)
            pieces.append(data)
            size = len(data)
            name, kind = str(item.get("name", "")), str(item.get("kind", "call"))
        col["keys"].append(k)
        col["names"].append(name)
        col["kinds"].append(kind)
        col["sizes"].append(size)
    return pieces, col


def _occurrences(keys: list[str]) -> list[int]:
    """Each entry's place among the entries of its key, in file order."""
    seen: dict[str, int] = {}
    out = []
    for k in keys:
        n = seen.get(k, 0)
        out.append(n)
        seen[k] = n + 1
    return out


def encode(doc: dict[str, Any], follows: int | None, occurrence: int) -> bytes:
    """``doc``'s bytes as :func:`render.render` writes them at this place."""
    d = {f: v for f, v in doc.items() if f != "checksum"}
    if follows is None:
        d.pop("follows", None)
    else:
        d["follows"] = follows
    d["occurrence"] = occurrence
    d["checksum"] = entry_checksum(d)
    return entry_bytes(d)


def _add_range(pieces: list[Part], lo: int, hi: int) -> None:
    """Add an old entry; one range for a run of entries adjacent in the old file (the
    separator between them included)."""
    last = pieces[-1] if pieces else None
    if isinstance(last, tuple) and last[1] + len(_SEP) == lo:
        pieces[-1] = (last[0], hi)
    else:
        pieces.append((lo, hi))


def _joined(pieces: list[Part], sep: bytes) -> list[Part]:
    out: list[Part] = []
    for i, p in enumerate(pieces):
        if i:
            out.append(sep)
        out.append(p)
    return out


def added_values(ix: FileIndex, fresh: list[dict[str, Any]], values: Mapping[str, Any]
                  ) -> dict[str, Any]:
    """The shared values the new entries use, directly or through other values, that the
    file does not hold. Those it holds are read and checked against their hash: one that
    was damaged raises, and the whole save names it."""
    todo: set[str] = set()
    for d in fresh:
        refs_in(d.get("request"), todo)
        refs_in(d.get("response"), todo)
    added: dict[str, Any] = {}
    done: set[str] = set()
    while todo:
        h = todo.pop()
        if h in done:
            continue
        done.add(h)
        found, v = ix.value(h)  # checked: a new entry must not rest on damage
        if not found:
            if h not in values:
                raise CassetteError(f"dangling value reference {fmt.REF}{h}")
            v = added[h] = values[h]
        if type(v) is not str:
            refs_in(v, todo)
    return added


def _values(ix: FileIndex, added: dict[str, Any]) -> list[Part]:
    """The ``values`` member from its ``{`` on: the file's items in runs, the added ones
    in their sorted places."""
    lo, hi = ix.values_bounds
    pieces: list[Part] = []
    cur = lo
    for h in sorted(added):
        at = ix.value_slot(h)[1]
        if at > cur:
            pieces.append((cur, at - 1 if at < hi else at))  # (not the comma before it)
            cur = at
        pieces.append(value_item(h, added[h]))
    if cur < hi:
        pieces.append((cur, hi))
    if not pieces:
        return [b"}"]
    return [*_joined(pieces, b","), b"\n  }"]


# ---------------------------------------------------------------- the new file's order


def order_of(calls: Sequence[Call], new: list[dict[str, Any]], n: int) -> list[Item]:
    """``Writer.final_entries`` by index, nothing pruned: the new entries ``new`` where
    ``calls`` (the run) made them, the file's ``n`` entries after the entry that preceded
    them there."""
    run: list[Item] = []
    placed: set[int] = set()
    fresh = iter(new)
    for c in calls:
        if c.outcome == "replayed":
            i = c.recorded_step
            if i is not None and 0 <= i < n and i not in placed:
                run.append(i)
                placed.add(i)
        elif c.outcome == "recorded":
            d = next(fresh, None)
            if d is not None:
                run.append(d)
    run.extend(fresh)
    if not placed:  # nothing replayed: the file, then the new calls
        return [*range(n), *run]
    after: dict[int | None, list[int]] = collections.defaultdict(list)
    anchor: int | None = None
    for i in range(n):
        if i in placed:
            anchor = i
        else:
            after[anchor].append(i)
    out: list[Item] = [*after.get(None, ())]
    for x in run:
        out.append(x)
        if isinstance(x, int):
            out += after.get(x, ())
    return out


def follows_of(items: list[Item], ix: FileIndex, run: RunOrder, new: list[dict[str, Any]]
               ) -> list[int | None]:
    """Each item's ``follows`` in ``items``, as ``Writer.link`` sets it (nothing is pruned
    here, so every predecessor is in the list): what the run observed for the calls it
    made, the recorded order for the rest."""
    import bisect  # a save only: not with the first block (import time)

    n = ix.n
    if items[:n] == list(range(n)):  # new entries after the file's (compared in C: an
        fresh_at = list(range(n, len(items)))  # append to 10k entries took 2 ms here)
    else:
        fresh_at = [j for j, x in enumerate(items) if not isinstance(x, int)]
        olds = list(items)
        for j in reversed(fresh_at):
            del olds[j]
        if olds != list(range(n)):
            return _follows_each(items, ix, run)
    # The file's entries in their order, new ones between them: entry i moves to
    # i + (new entries before it), and keeps its recorded follows unless what it follows
    # moved (after the first new entry) or the run observed another.
    bounds = [j - t for t, j in enumerate(fresh_at)]

    def place(marker: Any) -> int | None:
        """Where the call ``marker`` (a recorded entry, a new one, or none: the task's
        first call) is in the new file."""
        if isinstance(marker, int):  # a new entry after b old ones comes before old b
            return marker + bisect.bisect_right(bounds, marker) if bounds else marker
        if isinstance(marker, Entry) and marker.index is not None:
            return place(marker.index)
        if isinstance(marker, dict):  # new entries are in ``items`` in the order made
            u = next((u for u, x in enumerate(new) if x is marker), len(fresh_at))
            return fresh_at[u] if u < len(fresh_at) else None
        return ROOT

    recorded = ix.follows()
    out = list(recorded)
    lo_hi = _extent(recorded)
    if lo_hi is not None and (lo_hi[0] < ROOT or lo_hi[1] >= (bounds[0] if bounds else n)):
        for i, f in enumerate(recorded):
            if f is not None:
                out[i] = ROOT if not 0 <= f < n else place(f)
    for i, marker in run.observed.items():  # what the run saw before a replayed entry
        if 0 <= i < n:
            out[i] = place(marker)
    for j in fresh_at:  # in increasing order: each lands at its place
        doc = items[j]
        out.insert(j, place(run.pred[id(doc)]) if id(doc) in run.pred else None)
    return out


def _extent(follows: list[int | None]) -> tuple[int, int] | None:
    """``(smallest, largest)`` recorded ``follows`` (None: none recorded). ``min`` and
    ``max`` over the column first (C loops): a file without unknown ones, the usual case,
    never builds a filtered copy (0.3 ms at 10k entries, in an append's budget)."""
    col: list[Any] = follows
    try:
        return (min(col), max(col)) if col else None
    except TypeError:  # some are None (recorded before the order was kept)
        known = list(filter(functools.partial(operator.is_not, None), col))
        return (min(known), max(known)) if known else None


def _follows_each(items: list[Item], ix: FileIndex, run: RunOrder) -> list[int | None]:
    """:func:`follows_of` one item at a time (recorded entries out of their order)."""
    pos = {(x if isinstance(x, int) else id(x)): j for j, x in enumerate(items)}
    recorded = ix.follows()
    n = ix.n

    def place(marker: Any) -> int | None:
        if isinstance(marker, Entry):
            return pos.get(marker.index) if marker.index is not None else None
        if isinstance(marker, dict):
            return pos.get(id(marker))
        return ROOT

    out: list[int | None] = []
    for x in items:
        if not isinstance(x, int):
            out.append(place(run.pred[id(x)]) if id(x) in run.pred else None)
        elif x in run.observed:
            out.append(place(run.observed[x]))
        else:
            f = recorded[x]
            out.append(None if f is None else ROOT if not 0 <= f < n else pos[f])
    return out
