"""What a cassette save writes when other writers may have changed the file: pure.

A save runs under the file lock and writes what the block would have written had it read
the file as it is *now* rather than as it was when the block opened. Concurrent saves
(pytest-xdist workers) then come out as if they had run one after another, and tests that
share a cassette, run one after another, each keep the others' entries. Each mode applies
its own change to the file as it is now:

=====================  ================================================================
mode                   the block's change
=====================  ================================================================
``record``, own file   the file becomes this run's calls (the block owns the file)
``record``, shared     this run's calls replace the recorded calls of the same key, the
                       n-th for the n-th, in place; calls beyond those are appended; every
                       other entry stays (other tests' recordings)
``auto`` / ``replay``  new calls are added where the run made them; entries the block
                       pruned go; entries another writer added stay, and those it removed
                       (re-recorded) stay removed
``auto`` / ``replay``,  the same, but the file keeps its order: the block's new calls go
shared                 after every entry there (the place an append puts them)
=====================  ================================================================

A shared file is never pruned by one block (``Cassette.save``): it cannot tell which of the
entries it did not use the other tests need. Entries are compared by content, without the
fields a save recomputes (:data:`VOLATILE_FIELDS`), and counted as a multiset: two
identical calls are two entries.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Collection
from typing import Any

import orjson

__all__ = ["VOLATILE_FIELDS", "Merged", "canon", "merge"]

Doc = dict[str, Any]

#: Fields two recordings of one call may differ in (timings, order links, numbering, sums,
#: when and with which SDK version they were made).
VOLATILE_FIELDS = ("checksum", "duration", "follows", "occurrence", "recorded_at",
                   "recorded_with", "usage")


def canon(doc: Doc, *, ignore: tuple[str, ...] = ()) -> bytes:
    """``doc`` as bytes, without the fields in ``ignore``: equal for equal recordings."""
    out = {k: v for k, v in doc.items() if k not in ignore}
    resp = out.get("response")
    if type(resp) is dict and "headers" in resp:
        # An HTTP answer: its volatile headers (dates, request ids) are no change.
        from ..http.exchange import comparable  # HTTP knowledge, loaded with the first block

        out["response"] = comparable(resp)
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


def _content(doc: Doc) -> bytes:
    return canon(doc, ignore=VOLATILE_FIELDS)


@dataclasses.dataclass(frozen=True, slots=True)
class Merged:
    """The entries to write, and for each entry of the file as it is now that is not
    written itself (``id``), the entry written in its place: the new call that replaced it,
    or an equal entry of the block's. The recorded order of the file's other entries
    follows the stand-in."""

    entries: list[Doc]
    stand_ins: dict[int, Doc]


def merge(mine: list[Doc], *, new: Collection[int], read: list[Doc], now: list[Doc] | None,
          mode: str, shared: bool) -> Merged:
    """The entries a save writes (see the module docstring).

    ``mine``: what the block would write alone, in its order; ``new``: ``id`` of the entries
    in ``mine`` this run made; ``read``: the file's entries when the block read it; ``now``:
    its entries now (None: there is no file).
    """
    if mode == "record":
        if not shared:
            return Merged(list(mine), {})
        return _rerecorded(now or [], mine)
    if now is None:
        return Merged(list(mine), {})
    if shared:
        return _appended(mine, new, read, now)
    return _added(mine, new, read, now)


def _rerecorded(now: list[Doc], mine: list[Doc]) -> Merged:
    """``now`` with the n-th recorded entry of each key this run called replaced by this
    run's n-th call of it; this run's further calls at the end, in its order."""
    fresh: dict[str, collections.deque[Doc]] = collections.defaultdict(collections.deque)
    for d in mine:
        fresh[str(d.get("key", ""))].append(d)
    out: list[Doc] = []
    stand_ins: dict[int, Doc] = {}
    placed: set[int] = set()
    for d in now:
        q = fresh.get(str(d.get("key", "")))
        if q:
            m = q.popleft()
            stand_ins[id(d)] = m
            placed.add(id(m))
            out.append(m)
        else:
            out.append(d)
    out += [d for d in mine if id(d) not in placed]
    return Merged(out, stand_ins)


def _added(mine: list[Doc], new: Collection[int], read: list[Doc], now: list[Doc]) -> Merged:
    """``mine``, less the recorded entries another writer removed since (a re-recording:
    keeping the old answer too would put it back in front of the new one), plus the
    entries another writer added (once, if this run made the same call with the same
    answer). An entry of ``now`` left out for an equal one of ``mine`` has that one as its
    stand-in."""
    content = {id(d): _content(d) for d in (*mine, *now)}
    was = collections.Counter(_content(d) for d in read)
    is_ = collections.Counter(content[id(d)] for d in now)
    gone = was - is_
    theirs = is_ - was
    out: list[Doc] = []
    for d in mine:
        c = content[id(d)]
        if id(d) in new:
            if theirs[c] > 0:  # another writer recorded the same call, answered the same
                theirs[c] -= 1
        elif gone[c] > 0:
            gone[c] -= 1
            continue
        out.append(d)
    spare: dict[bytes, collections.deque[Doc]] = collections.defaultdict(collections.deque)
    for d in now:
        c = content[id(d)]
        if theirs[c] > 0:
            theirs[c] -= 1
            out.append(d)
        else:
            spare[c].append(d)
    stand_ins = {}
    for d in out:
        q = spare.get(content[id(d)])
        if q:
            stand_ins[id(q.popleft())] = d
    return Merged(out, stand_ins)


def _appended(mine: list[Doc], new: Collection[int], read: list[Doc], now: list[Doc]) -> Merged:
    """:func:`_added` for a shared file: the file as it is now, in its order (each entry
    that is the block's too written as the block's), less the recorded entries the block
    dropped; then the block's new calls that are not there yet, in the run's order.

    The order is what appending the new calls would have written, so the next writer
    still finds the entries it read at the start of the file and appends after them. When
    a whole save put its own calls first instead, every other writer's next save had to
    be whole too, and so on: 3 writers x 400 calls in blocks of 10 into one file wrote it
    whole at 9 of 90 saves in a quick run, each up to 290 ms and growing with the file."""
    content = {id(d): _content(d) for d in (*mine, *now)}
    pool: dict[bytes, collections.deque[Doc]] = collections.defaultdict(collections.deque)
    # Recorded entries stand in first: a new call equal to one of them is a second one.
    for d in sorted(mine, key=lambda d: id(d) in new):
        pool[content[id(d)]].append(d)
    dropped = (collections.Counter(_content(d) for d in read)
               - collections.Counter(content[id(d)] for d in mine))
    out: list[Doc] = []
    stand_ins: dict[int, Doc] = {}
    placed: set[int] = set()
    for d in now:
        c = content[id(d)]
        q = pool.get(c)
        if q:
            m = q.popleft()
            out.append(m)
            placed.add(id(m))
            stand_ins[id(d)] = m
        elif dropped[c] > 0:
            dropped[c] -= 1  # re-recorded by this block: the old answer goes
        else:
            out.append(d)  # another writer's
    # The block's calls not in the file now: its new ones go last; the recorded ones
    # another writer removed (re-recorded) stay removed.
    out += [d for d in mine if id(d) in new and id(d) not in placed]
    return Merged(out, stand_ins)
