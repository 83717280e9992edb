"""The tape: the recording a cassette replays, and which of its entries this run has used.

The file is read once, when first needed, as it was when the block opened. Large files are
answered from a byte index over a memory map (``reader.FileIndex``): opening reads only the
cross-reference, a hit only its entry, and most of a large file is never touched. Any bytes
the index cannot vouch for make the tape parse and check the whole file
(:meth:`Tape.parse_all`), which names the damage, and answer from the parse from then on.

Entries of one key are handed out first in, first out (the n-th identical call gets the
n-th recording), preferring the one recorded at the calling task's place (concurrent tasks
that make identical calls each get the answer their own task recorded). No locking here:
the cassette calls under its lock, which it shares with the tape (:meth:`Tape.resolve`
takes it for callers outside).
"""

from __future__ import annotations

import _thread
import collections
import itertools
import mmap
import operator
import os
from collections.abc import Callable, Iterable, Iterator

from .._paths import as_path
from ..errors import CassetteError
from . import format as fmt
from .reader import DocIndex, FileIndex, Index

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Any, TypeVar

    from .blobs import Folder
    from .findings import EntryInfo
else:
    from .._hints import Any, TypeVar

__all__ = ["Tape", "Unused", "folder"]

_T = TypeVar("_T")


class Entry:
    """A recorded entry this run has looked at (made on first use)."""

    __slots__ = ("doc", "fields", "index", "key", "occ", "used")

    def __init__(self, key: str, doc: dict[str, Any] | None, index: int | None) -> None:
        self.key = key
        self.doc = doc
        self.index = index
        self.occ = 0  # its place among the file's entries of this key
        self.used = False
        self.fields: dict[str, Any] | None = None  # small fields, read to choose among peers


# What a hit reads of an entry: its fields, and its response as JSON bytes (None when the
# fields hold the response, or for an error entry).
View = tuple[dict[str, Any], bytes | None]

_MISSING: Any = object()


def _layout_changed(path: str) -> CassetteError:
    return CassetteError("the file's layout was changed (its content checks out): rewrite it "
                         f"with dejacache rehash {path}", path=path)


class Unused:
    """The steps ``0 .. n-1`` not in ``taken``, listed only when iterated: a close over a
    10k-entry file that used one entry built and filtered a 10k-step list twice (~1 ms of a
    5 ms budget); most closes only ask whether there are any."""

    __slots__ = ("_n", "_taken")

    def __init__(self, n: int, taken: set[int]) -> None:
        self._n = n
        self._taken = taken  # steps in 0 .. n-1

    def without(self, steps: Iterable[int]) -> Unused:
        """These steps, less ``steps``."""
        extra = {i for i in steps if 0 <= i < self._n}.difference(self._taken)
        return Unused(self._n, self._taken | extra) if extra else self

    def __len__(self) -> int:
        return self._n - len(self._taken)

    def __iter__(self) -> Iterator[int]:
        # the ranges between the taken steps (C loops: no per-step Python work)
        t = sorted(self._taken)
        return itertools.chain.from_iterable(map(range, [0, *(i + 1 for i in t)], [*t, self._n]))


NONE_UNUSED = Unused(0, set())


class Tape:
    """The recorded entries of the cassette file at ``path`` (see the module docstring).

    ``mode`` decides how much is checked when the file is read: ``record`` needs none of its
    entries (a damaged file is replaced), ``off`` only the index, the others check small
    files whole at once and large ones entry by entry. ``on_index(index, first)`` is told
    each time the tape starts answering from an index (the order book sizes and fills
    itself from it).
    """

    def __init__(self, file: str | os.PathLike[str], mode: str,
                 lock: _thread.RLock | None = None,
                 on_index: Callable[[Index, bool], None] | None = None) -> None:
        self.file = os.fspath(file)  # the path as text: what a replay hit reads needs no Path
        self._path: pathlib.Path | None = None
        self.mode = mode
        self.lock = lock if lock is not None else _thread.RLock()
        self.on_index = on_index
        self.loaded = False
        self.raw: fmt.Buffer | None = None
        self.identity: tuple[int, ...] | None = None  # the file read (format.identity)
        self.ix: Index | None = None  # where the recorded entries are (None: no file)
        self.full: dict[str, Any] | None = None
        #: the cross-reference of the file as read (None: not format 3/4, or damaged)
        self.file_index: FileIndex | None = None
        self.old: list[Entry | None] = []  # by position in the file, made on first use
        self.made: list[Entry] = []  # the entries made so far
        self.queues: dict[str, collections.deque[Entry]] = {}
        # key -> recorded step -> its unused entries recorded there (made on first need)
        self._at: dict[str, dict[int | None, collections.deque[Entry]]] = {}
        self._follows: list[int | None] | None = None  # every step's, read for ``_at``
        # A partial block's ``follows`` with the steps that go live skipped (``order.py``):
        # what "recorded at the task's place" means when a task's live calls are not replayed
        self.lifted: list[int | None] | None = None
        self.values: dict[str, Any] = {}  # parsed shared values (from the file or new)
        self.seal: bytes = b""  # the cross-reference checksum of the file read
        self.closed: Unused | None = None  # after close: the positions never used
        self._closed_info: list[EntryInfo] | None = None
        self._uses = 0  # entries marked used so far (what ``_unused_at`` was computed at)
        self._unused_at: tuple[tuple[int, int], Unused] | None = None
        # the file read again for a report after close (``recall.request_of``): its index,
        # bytes and the values read from it
        self.again: tuple[FileIndex | None, fmt.Buffer | None, dict[str, Any]] | None = None
        self.blobs: Folder | None = None  # where its entries' payloads are kept: folder()

    @property
    def path(self) -> pathlib.Path:
        """The cassette's path (``Cassette.path``, the writer's, the reports')."""
        if self._path is None:
            self._path = as_path(self.file)
        return self._path

    # ---------------------------------------------------------------- reading the file

    def load(self) -> bool:
        """Read the file, once (again after a check that raised); whether it exists."""
        if not self.loaded:
            seen: list[tuple[int, ...]] = []
            raw = fmt.read_file(self.file, seen)
            # What a save compares the file with: unchanged since this read, it is spliced.
            self.identity = seen[0] if seen else None
            self.read(raw)
        return self.raw is not None

    def read(self, raw: fmt.Buffer | None) -> None:
        """Answer from ``raw``, the file's bytes (None: there is no file)."""
        with self.lock:
            self.raw = raw
            if raw is not None:
                self._check_on_open()
            self.loaded = True  # not when the check raised: the next call reads it again

    def _check_on_open(self) -> None:
        assert self.raw is not None
        if self.mode == "record":
            # Re-recording is how a damaged file is repaired: its entries are not needed.
            try:
                self.parse_all()
            except CassetteError:
                from .render import empty_document  # (recording: a save loads it anyway)

                full = empty_document()
                self.use(DocIndex(full))
                self.full = full
            return
        try:
            ix = FileIndex.open(self.raw)
        except CassetteError:
            ix = None  # a damaged cross-reference: the full parse below names the damage
        self.file_index = ix  # a shared cassette's saves append through it (writer.py)
        if ix is not None and (self.mode == "off" or _weight(self.raw) >= fmt.EAGER_CHECK_UNDER):
            # Larger files (blob references weigh as payloads) are checked entry by entry as
            # they are read, whole on the first miss (format.py); opening reads the xref.
            self.use(ix)
        elif self.mode != "off":
            # Checked whole now: a damaged file is refused before the test uses any of it.
            self.parse_all()
        _prefetch(self)  # the blobs of its answers

    def use(self, ix: Index) -> None:
        """Start answering from ``ix`` (the first index of the file, or a parse of it)."""
        if isinstance(self.ix, FileIndex):  # the file read keeps its seal after a parse
            self.seal = self.ix.seal
        if self.ix is not None and ix.n != len(self.old):
            raise _layout_changed(self.file)
        first = self.ix is None
        self.ix = ix
        self._follows = None
        if first:
            self.old = [None] * ix.n
        if self.on_index is not None:
            self.on_index(ix, first)

    def index(self) -> Index | None:
        """The index of the recorded entries (None: there is no file)."""
        self.load()
        if self.ix is None and self.raw is not None:
            self.parse_all()
        return self.ix

    def parse_all(self) -> dict[str, Any]:
        """The whole document, parsed and checked (raises ``CassetteError`` naming the damaged
        entry). From then on entries come from it, not from the byte index."""
        if self.full is None:
            assert self.raw is not None
            from .document import load_document  # (a small file, a miss, a damaged index)

            full = load_document(self.raw, self.file)
            keys = [e["key"] for e in full["entries"]]
            for e in self.old:
                if e is not None and (e.index is None or e.index >= len(keys)
                                      or keys[e.index] != e.key):
                    # The parser accepts the file, but the byte index read it differently:
                    # entries it handed out were whole and checked; others may not be.
                    raise _layout_changed(self.file)
            self.use(DocIndex(full))
            self.full = full
            self.values.update(full["values"])
        return self.full

    def fall_back(self) -> None:
        """The byte index met bytes it cannot vouch for: parse and check the whole file,
        which names the damage (or accepts a layout the index does not know)."""
        self.parse_all()

    def from_index(self, read: Callable[[Index], _T]) -> _T:
        """``read(index)``: from the byte index, or, when it meets bytes it cannot vouch
        for, from the whole parse (which vouches for them, or names the damage)."""
        assert self.ix is not None
        try:
            return read(self.ix)
        except CassetteError:
            self.fall_back()
            assert self.ix is not None
            return read(self.ix)

    def _recorded(self) -> bool:
        """Whether there is a file with entries (reads its index)."""
        ix = self.ix if self.ix is not None else self.index()
        return ix is not None and ix.n > 0

    def keys(self) -> list[str]:
        return self.from_index(lambda ix: ix.keys())

    def key_at(self, i: int) -> str:
        """The key of recorded step ``i`` (one element of the index, not its whole column:
        parsing every key was ~1.2 ms of an auto-mode miss in a 10k-entry file)."""
        return self.from_index(lambda ix: ix.key_at(i))

    def names(self) -> list[str]:
        """Every recorded step's name (empty: no file, or no entries)."""
        return self.from_index(lambda ix: ix.names()) if self._recorded() else []

    def name_at(self, i: int) -> str:
        """Recorded step ``i``'s name: from its entry while the names column is unread
        (kept with the entry: a divergence names that step next)."""
        assert self.ix is not None
        name = self.ix.known_name(i)
        if name is None:
            name = str(self.doc(self.entry(i)).get("name", ""))
        return name

    def names_follows(self) -> tuple[list[str], list[int | None]] | None:
        """Every recorded step's name and ``follows`` (None: no file, or no entries)."""
        if not self._recorded():
            return None
        return self.from_index(lambda ix: (ix.names(), ix.follows()))

    def follows(self) -> list[int | None]:
        """Every recorded step's ``follows`` alone (empty: no file, or no entries): a call
        out of recorded order needs no names column (parsing it was ~1 ms of the 10k-entry
        cassette's open + late hit)."""
        return self.from_index(lambda ix: ix.follows()) if self._recorded() else []

    def positions(self, key: str) -> list[int]:
        if self.index() is None:
            return []
        return self.from_index(operator.methodcaller("positions", key))  # (no Python frame)

    # ---------------------------------------------------------------- entries

    def entry(self, i: int, key: str | None = None, occ: int | None = None) -> Entry:
        """Recorded entry ``i`` (made on first use: most of a large file is never touched)."""
        e = self.old[i]
        if e is None:
            if key is None:
                key = self.key_at(i)
            e = Entry(key, None, i)
            e.occ = occ if occ is not None else self.positions(key).index(i)
            self.old[i] = e
            self.made.append(e)
        return e

    def all_entries(self) -> list[Entry]:
        """Every recorded entry, in file order (makes them all: not for the hit path)."""
        if self.index() is None:
            return []
        keys = self.keys()
        return [self.entry(i, keys[i]) for i in range(len(self.old))]

    def queue(self, key: str) -> collections.deque[Entry]:
        """The recorded entries of ``key`` this run has not used yet, in file order."""
        q = self.queues.get(key)
        if q is None:
            q = collections.deque(self.entry(i, key, occ)
                                  for occ, i in enumerate(self.positions(key)))
            self.queues[key] = q
        return q

    def _in_place(self, e: Entry, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc``, read through the byte index for ``e``, if it is the entry the index meant.
        A written file numbers the entries of a key 0, 1, ... in file order: an entry the
        index put at another place would hand its answer to another occurrence (found by
        the fuzz test: a flipped byte in a field name served the second answer to the first
        call)."""
        if doc.get("occurrence") != e.occ:
            raise CassetteError("entry is not at its occurrence")
        return doc

    def doc(self, e: Entry) -> dict[str, Any]:
        """``e`` parsed and checked."""
        if e.doc is None:
            assert e.index is not None
            ix = self.index()
            assert ix is not None
            doc: dict[str, Any] | None = None
            if ix.lazy:
                try:
                    doc = self._in_place(e, ix.entry(e.index, e.key))
                except CassetteError:
                    self.fall_back()
            if doc is None:
                entries = self.parse_all()["entries"]
                if e.index >= len(entries) or entries[e.index]["key"] != e.key:
                    from .document import describe  # (loaded by parse_all above)

                    raise CassetteError(f"{describe(e.index)} is not where the index "
                                        f"put it; rewrite the file with dejacache rehash "
                                        f"{self.file}", path=self.file)
                doc = entries[e.index]
            e.doc = doc
        return e.doc

    def hit_view(self, e: Entry) -> View:
        """What a hit reads of ``e`` (a lazy index slices the response out, unparsed)."""
        ix = self.ix
        if e.doc is None and e.index is not None and ix is not None and ix.lazy:
            try:
                fields, body = ix.replay_view(e.index, e.key)
                return self._in_place(e, fields), body
            except CassetteError:
                self.fall_back()
        return self.doc(e), None

    def _fields(self, e: Entry) -> View:
        if e.doc is not None:
            return e.doc, None
        return self.hit_view(e)

    def take(self, key: str, here: Callable[[], int]) -> tuple[Entry, View | None] | None:
        """The next unused recording of ``key``, marked used, and what was read of it; None
        when there is none left (then the whole file has been checked: a damaged key must be
        reported as damage, not as a miss). ``here()`` is the recorded step the calling task
        is at: among identical calls, the one recorded there is preferred."""
        if self.raw is None:
            return None
        q = self.queue(key)
        while q:
            e = q.popleft()
            if e.used:
                continue
            e, view = self._in_task_order(e, q, here)
            e.used = True
            self._uses += 1
            return e, view
        # A checked cross-reference vouches for its keys: a key it lacks was not recorded
        # (a damaged entry fails its own checksum when read), so an auto-mode miss runs
        # live without parsing the file (0.3 s at 10k entries) and the save splices. A
        # replay miss is about to be reported: that parses it, naming any damage first.
        if self.full is None and not (self.mode == "auto" and self.ix is not None
                                      and self.ix.lazy):
            self.parse_all()
        return None

    def _in_task_order(self, e: Entry, q: collections.deque[Entry], here: Callable[[], int]
                       ) -> tuple[Entry, View | None]:
        """``e``, or a later unused entry of the same key recorded at the calling task's
        place: identical calls made by concurrent tasks get the answers their own task
        recorded. Returns the entry and what was read of it."""
        if self.mode == "record":
            return e, None
        view = self._fields(e)
        if not q:
            # No other recording of this call is waiting, so none can be the task's own:
            # the recorded order is not needed (reading it was ~0.8 ms of a late hit in a
            # 10k-entry file).
            return e, view
        lifted = self.lifted
        f = fmt.follows_of(view[0]) if lifted is None or e.index is None else lifted[e.index]
        if f is None:
            return e, view
        pos = here()
        if f == pos:
            return e, view
        peer = self._first_at(e.key, pos)
        if peer is not None:
            pv = self._fields(peer)
            if (fmt.follows_of(pv[0]) if lifted is None or peer.index is None
                    else lifted[peer.index]) == pos:
                # ``e`` goes back to the front; the peer stays in the queue, which passes
                # over used entries
                q.appendleft(e)
                return peer, pv
        return e, view

    def _first_at(self, key: str, pos: int) -> Entry | None:
        """The first unused entry of ``key`` recorded at step ``pos`` (by the index's
        ``follows``). Looking along the queue, reading each entry, cost O(identical calls
        in flight) per call; this is O(1) amortised: each entry leaves its line once."""
        lines = self._at.get(key)
        if lines is None:
            if self._follows is None:  # read once for every key (a column of the index)
                self._follows = self.lifted if self.lifted is not None else self.follows()
            follows = self._follows
            lines = self._at[key] = {}
            for occ, i in enumerate(self.positions(key)):
                f = follows[i] if i < len(follows) else None
                lines.setdefault(f, collections.deque()).append(self.entry(i, key, occ))
        line = lines.get(pos)
        while line:
            if not line[0].used:
                return line[0]
            line.popleft()
        return None

    def use_all(self) -> int:
        """Mark every recorded entry used (``clear``); how many there are."""
        old = self.all_entries()
        for e in old:
            e.used = True
        self._uses += 1
        self.queues.clear()
        self._at.clear()
        return len(old)

    # ---------------------------------------------------------------- values

    def resolve(self, h: str) -> Any:
        """Shared value ``h`` (from the index, else from the whole parse), or the payload a
        ``blob:<hash>`` reference names (``blobs.py``)."""
        v = self.values.get(h, _MISSING)
        if v is not _MISSING:
            return v
        if h.startswith(fmt.BLOB):  # kept: a payload repeated (silence, an image) is read once
            v = self.values[h] = folder(self).resolve(h)
            return v
        with self.lock:
            ix = self.ix
            if ix is not None and ix.lazy:
                try:
                    found, v = ix.value(h)
                except CassetteError:
                    self.fall_back()  # raises, naming the entry that uses the damaged value
                    found = False
                if found:
                    self.values[h] = v
                    return v
            if self.raw is not None and self.full is None:
                self.parse_all()
            v = self.values.get(h, _MISSING)
            if v is not _MISSING:
                return v
        raise CassetteError(f"dangling value reference {fmt.REF}{h}", path=self.file)

    def expand(self, tree: Any) -> Any:
        """``tree`` with its shared-value references replaced by the values."""
        return fmt.unpack(tree, self.resolve)

    # ---------------------------------------------------------------- what was used

    def unused_steps(self) -> Unused:
        """The recorded steps never used, from the entries made so far, not a walk over all
        of them (an entry never made was never used). Asked twice by a close: kept until
        an entry is used or made."""
        key = (len(self.made), self._uses)
        if self._unused_at is None or self._unused_at[0] != key:
            used = {e.index for e in self.made if e.used}
            used.discard(None)
            self._unused_at = (key, Unused(len(self.old), used))  # type: ignore[arg-type]
        return self._unused_at[1]

    def unused(self) -> list[EntryInfo]:
        """Recorded entries this run never used (none in ``record`` mode)."""
        if self.closed is not None:
            if self._closed_info is None:
                self._closed_info = self.entry_infos(self.closed) if self.closed else []
            return list(self._closed_info)
        if self.mode == "record" or self.index() is None:
            return []
        return self.entry_infos(self.unused_steps())

    def entry_infos(self, steps: Iterable[int]) -> list[EntryInfo]:
        """``steps`` as ``EntryInfo`` (name, key, occurrence, kind), from the index alone."""
        from .findings import entry_infos  # (reports only: see findings.py)
        ix = self.ix
        assert ix is not None
        try:
            keys, names, kinds = ix.keys(), ix.names(), ix.kinds()
        except CassetteError:
            if self.raw is None:
                raise
            self.fall_back()
            assert self.ix is not None
            keys, names, kinds = self.ix.keys(), self.ix.names(), self.ix.kinds()
        return entry_infos(keys, names, kinds, steps)

    def close(self, unused: Unused | None) -> None:
        """Drop the file's bytes (a memory map holds a descriptor), keeping the index's
        columns and ``unused``, the steps never used (None: not known)."""
        self.closed = unused
        if self.ix is not None:  # keeps the columns, not the file's bytes
            self.ix = self.ix.detached()
        self.raw = self.full = self.file_index = None
        self.old, self.made, self.queues, self.values = [], [], {}, {}
        self._at = {}

    # ---------------------------------------------------------------- reports

    def keep_seal(self, *, parsed: bool = True) -> bool:
        """Remember which recording the file held (its cross-reference checksum), so a
        report after close can read it again; whether there is one to read. ``parsed``: a
        file parsed whole when opened (a small one) keeps the seal of its cross-reference
        too (False: its report is made now, from the parse)."""
        if isinstance(self.ix, FileIndex):
            self.seal = self.ix.seal
        elif parsed and self.file_index is not None:
            self.seal = self.file_index.seal
        return bool(self.seal)

    def forget_file(self) -> None:
        """Drop the file read again for a report after close (a memory map holds a
        descriptor)."""
        again, self.again = self.again, None
        if again is not None and isinstance(again[1], mmap.mmap):
            again[1].close()


# ---------------------------------------------------------------- blobs


def folder(tape: Tape) -> Folder:
    """``tape``'s blobs folder (``blobs.py``), made when first needed: a replay of a file that
    refers to no blob never loads that module (0.25-0.3 ms of a first block's imports)."""
    if tape.blobs is None:
        from .blobs import Folder

        tape.blobs = Folder.beside(tape.path)
    return tape.blobs


def _marked(raw: fmt.Buffer) -> bool:
    """Whether ``raw`` may refer to a blob; a memory-mapped file is never searched
    (``blobs.weight`` and ``answers_in`` do not read it either)."""
    return type(raw) is bytes and fmt.refers_blobs(raw)


def _weight(raw: fmt.Buffer) -> int:
    """``blobs.weight(raw)``: a file without blob references weighs its length."""
    if not _marked(raw):
        return len(raw)
    from .blobs import weight

    return weight(raw)


def _prefetch(tape: Tape) -> None:
    """Have the kernel read ahead the blobs the file's answers refer to (``Folder.prefetch``),
    unless the tape only indexes the file (``off``)."""
    raw = tape.raw
    if tape.mode != "off" and raw is not None and _marked(raw):
        from .blobs import answers_in

        folder(tape).prefetch(answers_in(raw))
