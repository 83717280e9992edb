"""The writer: the recordings a block adds, and the file they are saved to.

A new recording is redacted and packed (large parts shared through the document's
``values``) when it is made (:meth:`Writer.add`). Nothing touches the disk until
:meth:`Writer.write`, which the cassette's ``save`` calls when the block exits cleanly: new
calls go where this run made them, recorded entries keep their place after the entry that
preceded them, every entry's ``follows`` is set from the order observed in this run, and the
result is merged under the file lock with whatever another writer (an xdist worker, an
earlier test sharing the file) put there meanwhile (``merge.py``), then written atomically.
A save that only adds calls to the file it read appends them in place as a segment
(``segments.py``, ``append.py``); one that keeps every entry splices the new file from the
old one (``splice.py``).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from .._core import strict as order
from ..errors import CassetteError
from . import format as fmt
from .atomic import atomic_write, atomic_write_parts, remove_stale_temps
from .document import load_document
from .order import RunOrder
from .pack import MIN_SHARED_RESPONSE, Packer
from .reader import FileIndex
from .redact import Redactor
from .render import render
from .tape import Entry, Tape, folder

if TYPE_CHECKING:
    from .blobs import Sink
    from .merge import Merged
    from .splice import Item

# The save's machinery (the file lock, the merge with what others saved, the splice) loads
# with the first write: a replay block that records nothing never imports it.

__all__ = ["Writer"]

_MISSING: Any = object()


class Writer:
    """New recordings over ``tape`` and their save (see the module docstring). In ``record``
    mode the file's entries are replaced, not kept; ``shared``: other blocks keep their
    entries in the file. The cassette calls under its lock."""

    def __init__(self, tape: Tape, run: RunOrder, *, mode: str, shared: bool = False,
                 blobs: bool | int = False) -> None:
        self.tape = tape
        #: ``cassette(blobs=)``: the sink it asks for is made with the first recording (a
        #: replay never loads ``blobs.py``).
        self.blobs_wanted = blobs
        #: Payloads cut out of new entries, written beside the cassette before it (None:
        #: every payload stays in the file, or nothing was recorded yet).
        self.blobs: Sink | None = None
        self.run = run
        self.path = tape.path
        self.mode = mode
        self.recording = mode == "record"
        self.shared = shared
        self.new: list[dict[str, Any]] = []
        self._count: collections.Counter[str] = collections.Counter()
        #: The file's :func:`format.identity` before the tape read it (None: unknown); a
        #: save finding it unchanged splices the new file from the one read.
        self.baseline: tuple[int, ...] | None = None
        #: File indexes of expired entries a new recording replaces (``ageing.py``).
        self.replaced: set[int] = set()
        #: Whether a recorded entry is older than the cassette's max_age (None: none set).
        self.expired: Callable[[dict[str, Any]], bool] | None = None

    def add(self, doc: dict[str, Any], *, key: str, name: str, namespace: str, kind: str,
            request: Any, duration: float, redactor: Redactor) -> tuple[dict[str, Any], Any]:
        """Keep the recording ``doc`` (its ``response`` or ``error``) of a call made with
        ``request`` (a JSON tree); returns the entry kept and the redacted request."""
        values = self.tape.values
        if self.blobs is None and self.blobs_wanted:
            from .blobs import sink_for

            self.blobs = sink_for(self.blobs_wanted)
        red_request = redactor.tree(request)
        doc["request"] = Packer(values, blobs=self.blobs,
                                    own_last_turn=True).pack_root(red_request)
        if "response" in doc:
            light = Packer(values, min_shared=MIN_SHARED_RESPONSE,
                               share_containers=False, blobs=self.blobs)
            doc["response"] = light.pack_root(redactor.tree(doc["response"], response=True))
        if "error" in doc:
            doc["error"] = redactor.tree(doc["error"])
        doc.update(name=name, kind=kind, key=key, namespace=namespace,
                   duration=round(duration, 4))
        if self.recording:
            occ = self._count[key]
        else:
            occ = len(self.tape.positions(key)) + self._count[key]
        self._count[key] += 1
        doc["occurrence"] = occ
        if self.recording:
            doc = self._verbatim(key, occ, doc)
        self.new.append(doc)
        return doc, red_request

    def _verbatim(self, key: str, occ: int, doc: dict[str, Any]) -> dict[str, Any]:
        # Re-recording an unchanged call keeps the old entry, duration included: no git diff.
        tape = self.tape
        old = tape.positions(key)
        if occ < len(old):
            prev = tape.doc(tape.entry(old[occ], key, occ))
            if _same_recording(tape, prev, doc):
                # ...unless it had expired: the live call just confirmed it, and its age
                # restarts (else it would stay expired, and be re-recorded, for ever).
                if self.expired is not None and self.expired(prev):
                    return dict(prev, occurrence=occ, **_stamps(doc))
                return dict(prev, occurrence=occ)
        return doc

    # ---------------------------------------------------------------- the saved file

    def unsaved(self) -> str:
        """What a save that could not take the lock leaves unsaved, for its error."""
        n = len(self.new)
        if not n:
            return "this block's changes to the file (pruning) are not saved"
        return (f"the {n} call{'s' if n != 1 else ''} this block recorded "
                f"{'are' if n != 1 else 'is'} not saved")

    def write(self, prune: bool) -> bool:
        """Write the file (``prune``: without the recorded entries this run never used);
        whether bytes were written (not when the file already holds them)."""
        from . import segments  # a save only: not with the first block (import time)

        if self.blobs is not None and self.blobs.pending:
            # Blobs first, each durable: a crash then leaves a blob nothing refers to, never
            # a cassette referring to a blob that is not there.
            folder(self.tape).store(self.blobs.pending)
            self.blobs.pending = {}
        plan = self._splice_plan(prune)
        if plan is not None and (
                (segments.is_append(*plan) and self._write_appended(*plan))
                or self._write_spliced(*plan)):
            return True
        return self._write_whole(prune)

    def _write_whole(self, prune: bool) -> bool:
        """Parse the file, render every entry, merge with the file as it is now, write."""
        from .lock import cassette_lock

        tape = self.tape
        if tape.raw is not None:
            tape.parse_all()
        entries = self.final_entries(prune)
        with cassette_lock(self.path, unsaved=self.unsaved()):
            # Under the lock no other writer is between creating and renaming its temp
            # file: any left over is from one killed mid-write (and an undo record from
            # one killed mid-append, rolled back before the file is read).
            remove_stale_temps(self.path)
            fmt.recover_locked(self.path)
            entries = self.link(*self._merge_with_disk(entries))
            data = render(entries, tape.values)
            try:
                current = self.path.read_bytes()
            except FileNotFoundError:
                current = None
            if current == data or (
                self.recording and current is not None
                and _same_multiset(current, entries, self.path)
            ):
                return False
            atomic_write(self.path, data)
        if tape.raw is not None:
            tape.raw = data
        # else: a brand-new file. The tape read no recording, so none of what it just
        # wrote may count as a recorded step this block left unused (or never made).
        return True

    # ---------------------------------------------------------------- spliced saves

    def _splice_plan(self, prune: bool
                     ) -> tuple[FileIndex, list[Item], list[int | None]] | None:
        """The new file's entries (old ones by index) and each one's ``follows``, when the
        save can be spliced from the file read (``splice.py``): new calls kept over a file
        read through its cross-reference, none of its entries dropped. None otherwise."""
        from .splice import follows_of, order_of

        tape = self.tape
        ix = tape.ix if isinstance(tape.ix, FileIndex) else None
        if ix is None and self.shared:
            # A file parsed whole (under EAGER_CHECK_UNDER) is written whole, one segment,
            # for its diffs; a shared one appends through its own index instead, or every
            # test's save grew with the file (45 -> 141 ms per save over 0.5 MB, 3 writers).
            ix = tape.file_index
        if (self.recording or not self.new or self.replaced or self.baseline is None
                or tape.raw is None or ix is None or ix.n != len(tape.old)
                or (prune and len(tape.unused_steps()) > 0)):
            return None
        with tape.lock:
            calls = list(self.run.calls)
        items = order_of(calls, self.new, ix.n)
        return ix, items, follows_of(items, ix, self.run, self.new)

    def _write_appended(self, ix: FileIndex, items: list[Item], follows: list[int | None]
                        ) -> bool:
        """Append the new entries as a segment, in place (``segments.py``, ``append.py``),
        to the file as read or as other writers' appends left it (:meth:`_rebased`);
        whether it was written (False: the file is written whole instead)."""
        from . import append, segments
        from .lock import cassette_lock

        with cassette_lock(self.path, unsaved=self.unsaved()):
            remove_stale_temps(self.path)
            fmt.recover_locked(self.path)  # (an append killed mid-way is not a change)
            baseline = self.baseline
            if fmt.identity(self.path) != baseline:
                rebased = self._rebased(ix, items, follows)
                if rebased is None:
                    return False
                ix, items, follows, baseline = rebased
                if not segments.is_append(ix, items, follows):  # the others' appends filled it
                    return self._flatten_locked(ix, items, follows, baseline)
            try:
                at, data = segments.appended(ix, items, follows, self.tape.values)
            except CassetteError:
                return False  # the whole save parses the file and names the damage
            if not append.append(self.path, at, data, baseline):
                return False
        # The tape still reads the file as it was (the bytes before ``at`` did not change,
        # the rest is in its copy of the file's last bytes); a second save merges with
        # the file as it is now.
        self.baseline = None
        return True

    def _rebased(self, ix: FileIndex, items: list[Item], follows: list[int | None]
                 ) -> tuple[FileIndex, list[Item], list[int | None], tuple[int, ...]] | None:
        """The append of this block's new entries to the file as it is now, when it still
        begins with the entries read, unchanged (the same keys, order links and checksums:
        others only added entries after them, in place or writing the file again) and no
        entry added since records one of the same calls with the same answer (the merge
        keeps one of those): ``(index now, items, follows, identity)``.
        Else None, and the save merges with the whole file. Called under the file lock.

        Cost: the cross-references, one checksum line per entry, and the entries added
        since under one of this block's keys; never a parse of the file (three writers
        saving blocks of ten calls into one file wrote it whole at each save, 200 ms a
        save at 0.5 MB, and one whole write made every other writer's next save whole)."""
        seen: list[tuple[int, ...]] = []
        raw = fmt.read_file(self.path, seen)
        if raw is None or not seen:
            return None  # gone
        try:
            now = FileIndex.open(raw)
        except CassetteError:
            return None
        n = ix.n
        if (now is None or now.version != fmt.FORMAT or now.n < n
                or now.keys()[:n] != ix.keys() or now.follows()[:n] != ix.follows()
                or now.checksums(n) != ix.checksums(n)
                or self._recorded_by_others(now, n)):
            return None
        shift = now.n - n  # this block's own entries move past the ones appended since
        moved = [f + shift if f is not None and f >= n else f for f in follows[n:]]
        return (now, [*range(now.n), *items[n:]], [*now.follows(), *moved], seen[0])

    def _flatten_locked(self, ix: FileIndex, items: list[Item], follows: list[int | None],
                        baseline: tuple[int, ...]) -> bool:
        """Write the file ``ix`` indexes (as other writers left it, ``baseline``) again as one
        segment with this block's entries, from byte ranges of it: what an append past
        ``MAX_SEGMENTS`` does, without parsing the file. Under the file lock."""
        if not self._splice_locked(ix, items, follows, baseline):
            return False
        self.baseline = None  # the tape reads the file as it was; a second save merges
        return True

    def _splice_locked(self, ix: FileIndex, items: list[Item], follows: list[int | None],
                       baseline: tuple[int, ...] | None) -> bool:
        """Write the file ``ix`` indexes again as one segment from byte ranges of it
        (``splice.py``), if it is still the file ``baseline`` names; whether it was written
        (False: the whole save runs instead). Under the file lock."""
        from .splice import splice

        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if fmt.identity(self.path, fd) != baseline:
                return False  # another writer, or an edit: merge with what is there
            try:
                parts = splice(*_one_segment(ix, items, follows, self.tape.values))
            except CassetteError:
                return False  # the whole save parses the file and names the damage
            atomic_write_parts(self.path, parts, fd)
        finally:
            os.close(fd)
        return True

    def _recorded_by_others(self, now: FileIndex, n: int) -> bool:
        """Whether an entry appended since the file was read (``n`` on) records one of this
        block's new calls with the same answer."""
        from .merge import VOLATILE_FIELDS, canon

        mine: dict[str, set[bytes]] = collections.defaultdict(set)
        for d in self.new:
            mine[str(d.get("key", ""))].add(canon(d, ignore=VOLATILE_FIELDS))
        keys = now.keys()
        return any(keys[i] in mine and canon(now.entry(i, keys[i]), ignore=VOLATILE_FIELDS)
                   in mine[keys[i]] for i in range(n, now.n))

    def _write_spliced(self, ix: FileIndex, items: list[Item], follows: list[int | None]
                       ) -> bool:
        """Write the spliced file if nobody changed the file since it was read (under the
        lock); whether it was written (False: the whole save runs instead)."""
        from .lock import cassette_lock

        with cassette_lock(self.path, unsaved=self.unsaved()):
            remove_stale_temps(self.path)
            fmt.recover_locked(self.path)  # (then the file is not the one read)
            if not self._splice_locked(ix, items, follows, self.baseline):
                return False
            self.baseline = fmt.identity(self.path)  # a second save merges with this one
        return True

    def final_entries(self, prune: bool) -> list[dict[str, Any]]:
        """The file's entries after this run, before another writer's are merged in."""
        if self.recording:
            return list(self.new)
        tape = self.tape
        old = tape.all_entries()
        if self.replaced:
            old = [e for e in old if e.index not in self.replaced]
        if not self.new:  # only pruning: the file's order stays
            return [tape.doc(e) for e in old if not (prune and not e.used)]
        # New calls go where this run made them: the file reads in the order of the run.
        # Recorded entries it did not use stay after the entry that preceded them in the file.
        with tape.lock:
            calls = list(self.run.calls)
        by_index = {e.index: e for e in old}
        run: list[Entry | dict[str, Any]] = []
        placed: set[int] = set()
        fresh = iter(self.new)  # recorded calls and new entries are appended together
        for c in calls:
            if c.outcome == "replayed":
                e = by_index.get(c.recorded_step)
                if e is not None and id(e) not in placed:
                    run.append(e)
                    placed.add(id(e))
            elif c.outcome == "recorded":
                d = next(fresh, None)
                if d is not None:
                    run.append(d)
        run.extend(fresh)
        after: dict[int, list[Entry]] = collections.defaultdict(list)
        anchor: Any = None
        for e in old:
            if id(e) in placed:
                anchor = e
            elif e.used or not prune:
                after[id(anchor)].append(e)
        out: list[dict[str, Any]] = [tape.doc(e) for e in after.get(id(None), ())]
        for x in run:
            out.append(x if isinstance(x, dict) else tape.doc(x))
            out += [tape.doc(e) for e in after.get(id(x), ())]
        return out

    def link(self, entries: list[dict[str, Any]],
             theirs: dict[int, tuple[dict[str, Any], Any]] | None = None
             ) -> list[dict[str, Any]]:
        """Copies of ``entries`` with ``follows`` set to the index (in this list) of the step
        each one's task made before it: as observed in this run for the calls it made, as
        recorded for the rest (``theirs``: for entries another writer put in the file, the
        entry each follows there). A predecessor that is not in the list (pruned) is
        replaced by its own predecessor."""
        pred = self._predecessors(theirs or {})
        pos = {id(d): i for i, d in enumerate(entries)}
        out = []
        for d in entries:
            p = pred(d)
            hops = 0
            while isinstance(p, dict) and id(p) not in pos and hops < len(entries) + 1:
                p = pred(p)
                hops += 1
            c = dict(d)
            if p is _MISSING or (isinstance(p, dict) and id(p) not in pos):
                c.pop("follows", None)
            else:
                c["follows"] = order.ROOT if p is None else pos[id(p)]
            out.append(c)
        return out

    def _predecessors(self, theirs: dict[int, tuple[dict[str, Any], Any]]) -> Any:
        """``pred(doc)``: the entry ``doc``'s task made before it (None: the first call of
        its task; ``_MISSING``: unknown)."""
        tape, run = self.tape, self.run
        old_docs: dict[int, Entry] = {}
        if not self.recording:
            for e in tape.all_entries():
                if e.doc is not None or tape.full is not None:
                    old_docs[id(tape.doc(e))] = e

        def marker_doc(marker: Any) -> dict[str, Any] | None:
            if isinstance(marker, Entry):
                return tape.doc(marker)
            return marker if isinstance(marker, dict) else None

        def pred(doc: dict[str, Any]) -> Any:
            if id(doc) in run.pred:
                return marker_doc(run.pred[id(doc)])
            there = theirs.get(id(doc))
            if there is not None and there[0] is doc:
                return there[1]
            e = old_docs.get(id(doc))
            if e is None:
                return _MISSING  # another process's entry (merged): its order is unknown
            if e.index in run.observed:
                return marker_doc(run.observed[e.index])
            f = fmt.follows_of(doc)
            if f is None:
                return _MISSING
            if f < 0 or f >= len(tape.old):
                return None
            return tape.doc(tape.entry(f))

        return pred

    def _merge_with_disk(self, entries: list[dict[str, Any]]
                         ) -> tuple[list[dict[str, Any]], dict[int, tuple[Any, Any]]]:
        """``entries`` applied to the file as it is now (``merge.py`` says how, per mode):
        another writer (an xdist worker, an earlier test sharing the file) keeps what it
        wrote. Returns the entries and, for those taken from the file now, the entry each
        follows there (for :meth:`link`). Called under the file lock."""
        from .merge import merge

        tape = self.tape
        try:
            disk = self.path.read_bytes()
        except FileNotFoundError:
            disk = None
        read = tape.full["entries"] if tape.full is not None else []
        unchanged = disk is not None and tape.raw is not None and disk == fmt.whole(tape.raw)
        if unchanged and not (self.recording and self.shared):
            return entries, {}  # nobody else wrote: what this block made is the file
        now: list[dict[str, Any]] | None = read if unchanged else None
        if disk is not None and not unchanged:
            try:
                other = load_document(disk, self.path)
            except CassetteError:
                if not self.recording:
                    raise
                other = None  # re-recording replaces a damaged file
            if other is not None:
                tape.values.update(other["values"])
                now = other["entries"]
        new = {id(d) for d in self.new}
        merged = merge(entries, new=new, read=read, now=now, mode=self.mode,
                       shared=self.shared)
        return merged.entries, _followed_in(now or [], merged)


def _one_segment(ix: FileIndex, items: list[Item], follows: list[int | None],
                 values: dict[str, Any]) -> tuple[FileIndex, list[Item], list[int | None],
                                                  Any]:
    """``splice``'s arguments for writing the file ``ix`` indexes as one segment."""
    from . import segments

    first, flat, more = segments.flattened(ix, items, values)
    return first, flat, follows, more


def _followed_in(now: list[dict[str, Any]], merged: Merged
                 ) -> dict[int, tuple[dict[str, Any], Any]]:
    """For each entry of the file as it is now (``now``): itself and the entry it follows
    there (None: the first call of its task), or the entry standing in that one's place in
    ``merged``. Entries without a recorded order are left out (their order is unknown)."""
    out: dict[int, tuple[dict[str, Any], Any]] = {}
    for d in now:
        f = fmt.follows_of(d)
        if f is None:
            continue
        prev = now[f] if 0 <= f < len(now) else None
        out[id(d)] = (d, merged.stand_ins.get(id(prev), prev) if prev is not None else None)
    return out


def _stamps(doc: dict[str, Any]) -> dict[str, Any]:
    return {f: doc[f] for f in ("recorded_at", "recorded_with") if f in doc}


def _same_recording(tape: Tape, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether two recordings of a call are the same, whatever was shared in each: an entry
    packed by an earlier version (its request body shared whole) is the same recording as
    its re-record packed now, and keeps its bytes."""
    from .merge import VOLATILE_FIELDS, canon

    if canon(old, ignore=VOLATILE_FIELDS) == canon(new, ignore=VOLATILE_FIELDS):
        return True
    try:
        a, b = ({**d, **{f: tape.expand(d[f]) for f in ("request", "response") if f in d}}
                for d in (old, new))
    except CassetteError:  # a value it needs is damaged: not provably the same
        return False
    return canon(a, ignore=VOLATILE_FIELDS) == canon(b, ignore=VOLATILE_FIELDS)


def _same_multiset(current: bytes, entries: list[dict[str, Any]], path: Any) -> bool:
    """Re-recording that only reordered concurrent calls (``asyncio.gather``) is no change."""
    try:
        doc = load_document(current, path)
    except CassetteError:
        return False
    if doc["format"] != fmt.FORMAT:
        return False  # re-recording upgrades an older file (format 1 had no checksums)
    return _order_free(doc["entries"]) == _order_free(entries)


def _order_free(entries: list[dict[str, Any]]) -> list[bytes]:
    """Entries as a sorted list, each with its predecessor's key in place of its index:
    equal for two runs whose tasks made the same calls in the same order, however the
    tasks interleaved."""
    from .merge import canon

    out = []
    for d in entries:
        f = fmt.follows_of(d)
        prev = entries[f].get("key") if f is not None and 0 <= f < len(entries) else f
        out.append(canon(d, ignore=("checksum", "occurrence", "follows"))
                   + orjson.dumps(prev))
    return sorted(out)
