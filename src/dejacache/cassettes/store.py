"""``Cassette``: a store backed by one committed JSON file, replayed in order.

The engine sees a ``Store`` with ``sequenced = True``: ``get(key)`` hands out the next unused
recording of that key (FIFO by occurrence), ``put`` appends. Nothing touches the disk until
:meth:`Cassette.save`, which the ``cassette`` block calls when it exits cleanly.

The recorded order (issue 14): every entry stores ``follows``, the step its asyncio task or
thread made before it (``_core/strict.py`` explains why per task). The task's place is kept in
a context variable, which tasks started inside the block copy from their parent. Each call
made in the block becomes a :class:`~.trajectory.Call` (``tape.calls``); one that leaves the
recorded order becomes a :class:`~.trajectory.Divergence` (``tape.divergences``), raised as
:class:`~dejacache.ReplayDivergence` when the cassette is ``strict``.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import itertools
import mmap
import pathlib
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from .._core import strict as order
from .._core.diff import field_diff
from ..codec import blob_from_tree, blob_payload
from ..config import resolve_mode
from ..errors import CassetteError, ReplayDivergence, ReplayMiss, SerializationError
from ..stats import token_total
from ..stores._base import BaseStore, Record, StoreStats
from . import format as fmt
from .lock import cassette_lock
from .prices import estimate_dollars
from .reader import DocIndex, FileIndex, Index
from .redact import Redactor
from .trajectory import Call, CallInfo, Divergence, step_kind

__all__ = ["Cassette", "EntryInfo", "TapeCounters"]


@dataclasses.dataclass(frozen=True, slots=True)
class EntryInfo:
    """One recorded call, as listed by ``tape.unused``."""

    name: str
    key: str
    occurrence: int
    kind: str


@dataclasses.dataclass(slots=True)
class TapeCounters:
    replayed: int = 0
    recorded: int = 0
    missed: int = 0
    time_saved: float = 0.0
    tokens_saved: int = 0
    dollars_saved: float = 0.0


class _Entry:
    __slots__ = ("doc", "fields", "index", "key", "occ", "used")

    def __init__(self, key: str, doc: dict[str, Any] | None, index: int | None) -> None:
        self.key = key
        self.doc = doc
        self.index = index
        self.occ = 0  # its place among the file's entries of this key
        self.used = False
        self.fields: dict[str, Any] | None = None  # small fields, read to choose among peers


# Where the current asyncio task / thread is in a block's recording:
# (tape serial, recorded step it is at, the last call it made: an _Entry, a new entry's dict
# or None). Tasks copy it from their parent when they start, so a gathered child begins where
# its parent was; a value left by another tape means "at the start".
_POSITION: contextvars.ContextVar[tuple[int, int, Any] | None] = contextvars.ContextVar(
    "dejacache_cassette_position", default=None)
_SERIALS = itertools.count(1)


def _canon(doc: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> bytes:
    out = {k: v for k, v in doc.items() if k not in ignore}
    resp = out.get("response")
    if type(resp) is dict and "headers" in resp:
        # An HTTP answer: its volatile headers (dates, request ids) are no change.
        from ..http.exchange import comparable  # HTTP knowledge, loaded with the first block

        out["response"] = comparable(resp)
    return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)


_VOLATILE_FIELDS = ("checksum", "duration", "follows", "occurrence", "usage")


class Cassette(BaseStore):
    """A sequenced store over one cassette file (see the module docstring)."""

    sequenced = True

    def __init__(
        self,
        path: str | pathlib.Path,
        *,
        mode: str = "auto",
        redactor: Redactor | None = None,
        rerecord_hint: str | None = None,
        record_errors: tuple[type[BaseException], ...] = (),
        shared: bool = False,
        strict: bool = False,
    ) -> None:
        self.path = pathlib.Path(path)
        self.url = str(path)
        self.mode = resolve_mode(mode)
        self.redactor = redactor or Redactor()
        self.rerecord_hint = rerecord_hint
        self.record_errors = tuple(record_errors)
        self.shared = shared
        self.counters = TapeCounters()
        self.misses: list[ReplayMiss] = []
        self._lock = threading.RLock()
        self._loaded = False
        self._raw: fmt.Buffer | None = None
        self._ix: Index | None = None  # where the recorded entries are (None: no file)
        self._full: dict[str, Any] | None = None
        self._old: list[_Entry | None] = []  # by position in the file, made on first use
        self._made: list[_Entry] = []  # the entries made so far
        self._queues: dict[str, collections.deque[_Entry]] = {}
        self._values: dict[str, Any] = {}  # parsed shared values (from the file or new)
        self._new: list[dict[str, Any]] = []
        self._new_count: collections.Counter[str] = collections.Counter()
        self._deleted = 0
        self._closed: _Unused | None = None  # after close: the positions never used
        self._closed_info: list[EntryInfo] | None = None
        self._unmade: _Unused | None = None  # recorded steps never made, not yet reported
        self._uses = 0  # entries marked used so far (what ``_unused_at`` was computed at)
        self._unused_at: tuple[tuple[int, int], _Unused] | None = None
        self._seal: bytes = b""  # the cross-reference checksum of the file read
        self._again: tuple[FileIndex | None, fmt.Buffer | None, dict[str, Any]] | None = None
        self._damage: CassetteError | None = None
        #: Calls must follow the recorded order (see ``_core/strict.py``); misses raise.
        self.strict = strict
        self._serial = next(_SERIALS)
        self._book = order.OrderBook()
        self._book_complete = False
        self._calls: list[Call] = []
        self._divergences: list[Divergence] = []
        self._pending: list[tuple[Call, int, _Entry]] = []  # out-of-order hits, not yet named
        self._pred: dict[int, Any] = {}  # id(new entry) -> the call its task made before
        self._observed: dict[int, Any] = {}  # recorded step -> the call made before it now
        self._miss_divergence: dict[str, ReplayDivergence] = {}
        self._finished = False
        self._load_request_fn = self._load_request

    # ---------------------------------------------------------------- loading

    @property
    def exists(self) -> bool:
        self._load()
        return self._raw is not None

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._raw = fmt.read_file(self.path)
            if self._raw is not None:
                self._check_on_open()
                if self.strict and self.mode == "auto":
                    # A strict recording is a contract: a call it does not have is a
                    # divergence, raised before anything is sent (nothing is paid for).
                    self.mode = "replay"
            self._loaded = True  # not when the check raised: the next call reads the file again

    def _check_on_open(self) -> None:
        assert self._raw is not None
        if self.mode == "record":
            # Re-recording is how a damaged file is repaired: its entries are not needed.
            try:
                self._parse_all()
            except CassetteError:
                full = fmt.empty_document()
                self._use(DocIndex(full))
                self._full = full
            return
        try:
            ix = FileIndex.open(self._raw)
        except CassetteError:
            ix = None  # a damaged cross-reference: the full parse below names the damage
        if ix is not None and (self.mode == "off" or len(self._raw) >= fmt.EAGER_CHECK_UNDER):
            # Larger files are checked entry by entry as they are read, and whole on the
            # first miss (see format.py); opening reads only the cross-reference.
            self._use(ix)
        elif self.mode != "off":
            # Checked whole now, so a damaged file is refused when the block opens, before
            # the test has used any of it (issue 8).
            self._parse_all()

    def _use(self, ix: Index) -> None:
        """Start answering from ``ix`` (the first index of the file, or a parse of it)."""
        if isinstance(self._ix, FileIndex):  # the file read keeps its seal after a parse
            self._seal = self._ix.seal
        if self._ix is not None and ix.n != len(self._old):
            raise CassetteError(
                "the file's layout was changed (its content checks out): rewrite it with "
                f"dejacache rehash {self.path}", path=self.path)
        first = self._ix is None
        self._ix = ix
        if first:
            n = ix.n
            self._old = [None] * n
            book = self._book
            # sized in one step (not n calls of book.add): a 10k-entry file opens in ~1 ms
            book.follows.extend(itertools.repeat(None, n))
            book.names.extend(itertools.repeat("", n))
            book.used.extend(itertools.repeat(False, n))
        if not ix.lazy and not self._book_complete:
            self._complete_book()

    def _index(self) -> Index | None:
        """The index of the recorded entries (None: there is no file)."""
        self._load()
        if self._ix is None and self._raw is not None:
            self._parse_all()
        return self._ix

    def _entry(self, i: int, key: str | None = None, occ: int | None = None) -> _Entry:
        """Recorded entry ``i`` (made on first use: most of a large file is never touched)."""
        e = self._old[i]
        if e is None:
            ix = self._ix
            assert ix is not None
            if key is None:
                key = self._keys()[i]
            e = _Entry(key, None, i)
            e.occ = occ if occ is not None else self._positions(key).index(i)
            self._old[i] = e
            self._made.append(e)
        return e

    def _keys(self) -> list[str]:
        assert self._ix is not None
        try:
            return self._ix.keys()
        except CassetteError:
            self._fall_back()
            return self._ix.keys()

    def _positions(self, key: str) -> list[int]:
        ix = self._index()
        if ix is None:
            return []
        try:
            return ix.positions(key)
        except CassetteError:
            self._fall_back()
            assert self._ix is not None
            return self._ix.positions(key)

    def _queue(self, key: str) -> collections.deque[_Entry]:
        """The recorded entries of ``key`` this run has not used yet, in file order."""
        q = self._queues.get(key)
        if q is None:
            q = collections.deque(self._entry(i, key, occ)
                                  for occ, i in enumerate(self._positions(key)))
            self._queues[key] = q
        return q

    def _in_place(self, e: _Entry, doc: dict[str, Any]) -> dict[str, Any]:
        """``doc``, read through the byte index for ``e``, if it is the entry the index meant.
        A written file numbers the entries of a key 0, 1, ... in file order: an entry the
        index put at another place would hand its answer to another occurrence (found by
        the fuzz test: a flipped byte in a field name served the second answer to the first
        call)."""
        if doc.get("occurrence") != e.occ:
            raise CassetteError("entry is not at its occurrence")
        return doc

    def _parse_all(self) -> dict[str, Any]:
        """The whole document, parsed and checked (raises ``CassetteError`` naming the damaged
        entry). From then on entries come from it, not from the byte index."""
        if self._full is None:
            assert self._raw is not None
            full = fmt.load_document(self._raw, self.path)
            keys = [e["key"] for e in full["entries"]]
            for e in self._old:
                if e is not None and (e.index is None or e.index >= len(keys)
                                      or keys[e.index] != e.key):
                    # The parser accepts the file, but the byte index read it differently:
                    # entries it handed out were whole and checked; others may not be.
                    raise CassetteError(
                        "the file's layout was changed (its content checks out): rewrite it "
                        f"with dejacache rehash {self.path}", path=self.path)
            self._use(DocIndex(full))
            self._full = full
            self._values.update(full["values"])
        return self._full

    def _fall_back(self) -> None:
        """The byte index met bytes it cannot vouch for: parse and check the whole file,
        which names the damage (or accepts a layout the index does not know)."""
        self._parse_all()

    def _doc(self, e: _Entry) -> dict[str, Any]:
        if e.doc is None:
            assert e.index is not None
            ix = self._index()
            assert ix is not None
            doc: dict[str, Any] | None = None
            if ix.lazy:
                try:
                    doc = self._in_place(e, ix.entry(e.index, e.key))
                except CassetteError:
                    self._fall_back()
            if doc is None:
                entries = self._parse_all()["entries"]
                if e.index >= len(entries) or entries[e.index]["key"] != e.key:
                    raise CassetteError(f"{fmt.describe(e.index)} is not where the index "
                                        f"put it; rewrite the file with dejacache rehash "
                                        f"{self.path}", path=self.path)
                doc = entries[e.index]
            e.doc = doc
        return e.doc

    def _resolve(self, h: str) -> Any:
        v = self._values.get(h, _MISSING)
        if v is not _MISSING:
            return v
        with self._lock:
            ix = self._ix
            if ix is not None and ix.lazy:
                try:
                    found, v = ix.value(h)
                except CassetteError:
                    self._fall_back()  # raises, naming the entry that uses the damaged value
                    found = False
                if found:
                    self._values[h] = v
                    return v
            if self._raw is not None and self._full is None:
                self._parse_all()
            v = self._values.get(h, _MISSING)
            if v is not _MISSING:
                return v
        raise CassetteError(f"dangling value reference {fmt.REF}{h}", path=self.path)

    def expand(self, tree: Any) -> Any:
        return fmt.unpack(tree, self._resolve)

    # ---------------------------------------------------------------- Store protocol

    def get(self, key: str) -> Record | None:
        try:
            return self._get(key)
        except CassetteError as exc:
            self._damage = exc  # reported to the caller: closing the block need not repeat it
            raise

    def _get(self, key: str) -> Record | None:
        self._load()
        with self._lock:
            if self._raw is not None:
                q = self._queue(key)
                while q:
                    e = q.popleft()
                    if e.used:
                        continue
                    e, view = self._in_task_order(e, q)
                    e.used = True
                    self._uses += 1
                    return self._record(e, view)
            # A miss. Before the engine reports "no recording matches", check the whole file:
            # a damaged key must be reported as damage (issue 8). An auto-mode miss pays
            # nothing extra: the write at the end parses the whole file anyway.
            if self._raw is not None and self._full is None:
                self._parse_all()
            return None

    def _hit_view(self, e: _Entry) -> tuple[dict[str, Any], bytes | None]:
        ix = self._ix
        if e.doc is None and e.index is not None and ix is not None and ix.lazy:
            try:
                fields, body = ix.replay_view(e.index, e.key)
                return self._in_place(e, fields), body
            except CassetteError:
                self._fall_back()
        return self._doc(e), None

    def _record(self, e: _Entry,
                view: tuple[dict[str, Any], bytes | None] | None = None) -> Record:
        doc, body = view if view is not None else self._hit_view(e)
        usage = doc.get("usage") or None
        duration = float(doc.get("duration", 0.0))
        plain = not doc.get("tagged", False)
        model = ""
        if "error" in doc:
            value = orjson.dumps(doc["error"])
            kind = "error"
        else:
            kind = str(doc.get("kind", "call"))
            if body is not None and body.find(fmt.REF_BYTES) < 0 and not self.redactor.restore_map:
                # the file's bytes are the payload: parsed once, by the codec (Fragment
                # makes orjson emit them verbatim)
                value = blob_from_tree(orjson.Fragment(body), plain, key=e.key)
                if usage:
                    model = fmt.model_in(body)
            else:
                response = orjson.loads(body) if body is not None else doc.get("response")
                response = self.redactor.restore(self.expand(response))
                value = blob_from_tree(response, plain, key=e.key)
                model = _model_of(response)
        c = self.counters
        c.replayed += 1
        c.time_saved += duration
        if usage:
            c.tokens_saved += token_total(usage)
            c.dollars_saved += estimate_dollars(usage, model)
        self._note_hit(e, doc)
        return Record(value=value, name=str(doc.get("name", "")),
                      namespace=str(doc.get("namespace", "")), kind=kind,
                      duration=duration, usage=usage)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        try:
            tree, plain = blob_payload(record.value)
        except SerializationError as exc:
            raise CassetteError(f"cannot store {record.name}: {exc}", path=self.path) from None
        doc: dict[str, Any] = {"response": tree}
        if not plain:
            doc["tagged"] = True
        if record.usage:
            doc["usage"] = dict(record.usage)
        self._append(key, record.name, record.namespace, record.kind, record.request,
                     record.duration, doc)

    def record_error(self, key: str, name: str, namespace: str, kind: str, canonical: bytes,
                     exc: BaseException, duration: float) -> bool:
        """Keep an exception raised by the live call, if the block opted in to its type."""
        if not self.record_errors or not isinstance(exc, self.record_errors):
            return False
        t = type(exc)
        args = list(exc.args)
        try:
            orjson.dumps(args)
        except TypeError:
            args = [str(exc)]
        err = {"type": f"{t.__module__}:{t.__qualname__}", "message": str(exc), "args": args}
        self._append(key, name, namespace, kind, canonical, duration, {"error": err})
        return True

    def recorded_error(self, record: Record) -> BaseException:
        """The exception an error entry stands for (same type and message)."""
        err = orjson.loads(record.value)
        return rebuild_exception(err)

    def _append(self, key: str, name: str, namespace: str, kind: str, request: bytes,
                duration: float, doc: dict[str, Any]) -> None:
        self._load()
        try:
            req_tree = orjson.loads(request) if request else None
        except orjson.JSONDecodeError:
            req_tree = request.decode(errors="replace")
        red = self.redactor
        with self._lock:
            packer = fmt.Packer(self._values)
            red_request = red.tree(req_tree)
            doc["request"] = packer.pack_root(red_request)
            if "response" in doc:
                light = fmt.Packer(self._values, min_shared=fmt.MIN_SHARED_RESPONSE,
                                   share_containers=False)
                doc["response"] = light.pack_root(red.tree(doc["response"], response=True))
            if "error" in doc:
                doc["error"] = red.tree(doc["error"])
            doc.update(name=name, kind=kind, key=key, namespace=namespace,
                       duration=round(duration, 4))
            if self.mode == "record":
                occ = self._new_count[key]
            else:
                occ = len(self._positions(key)) + self._new_count[key]
            self._new_count[key] += 1
            doc["occurrence"] = occ
            if self.mode == "record":
                doc = self._verbatim(key, occ, doc)
            self._new.append(doc)
            self.counters.recorded += 1
            self._note_new(doc, name, kind, key, red_request)

    def _verbatim(self, key: str, occ: int, doc: dict[str, Any]) -> dict[str, Any]:
        # Re-recording an unchanged call keeps the old entry, duration included: no git diff.
        old = self._positions(key)
        if occ < len(old):
            prev = self._doc(self._entry(old[occ], key, occ))
            if _canon(prev, ignore=_VOLATILE_FIELDS) == _canon(doc, ignore=_VOLATILE_FIELDS):
                return dict(prev, occurrence=occ)
        return doc

    def delete(self, key: str) -> bool:
        # Only reached for an entry whose bytes failed their checksum: forget it for this run.
        self._deleted += 1
        return False

    def iterate(self, name: str | None = None, namespace: str | None = None
                ) -> Iterator[tuple[str, Record]]:
        with self._lock:
            items: list[_Entry | dict[str, Any]] = [*self._all_entries(), *self._new]
        for item in items:  # parsed one by one: a miss report looks at the first 1000 only
            if isinstance(item, _Entry):
                with self._lock:
                    doc = self._doc(item)
            else:
                doc = item
            if name is not None and doc.get("name") != name:
                continue
            if namespace is not None and doc.get("namespace", "") != namespace:
                continue
            req = self.expand(doc.get("request"))
            yield str(doc.get("key", "")), Record(
                value=b"", name=str(doc.get("name", "")), namespace=str(doc.get("namespace", "")),
                kind=str(doc.get("kind", "call")), request=orjson.dumps(req),
                duration=float(doc.get("duration", 0.0)), usage=doc.get("usage") or None,
            )

    def note_miss(self, miss: ReplayMiss) -> ReplayMiss | None:
        """Kept by the engine when replay raises (a get() that misses may still be followed
        by a hit on the call's full key). An SDK retrying the same call is one miss, and the
        report outlives wrappers (litellm, scenario) that reduce it to a one-line message.
        Returns the error to raise instead (a strict cassette's divergence), or None."""
        with self._lock:
            again = self._miss_divergence.get(miss.key)
            if again is not None:
                return again
            if any(m.key == miss.key for m in self.misses):
                return None
            self.misses.append(miss)
            self.counters.missed += 1
            raw_kind = self._kind_of_name(miss.name)
            call = Call(len(self._calls), miss.name, raw_kind, miss.key, "missed", None, None,
                        request=miss.request)
            self._calls.append(call)
            pos, _ = self._position()
            if not self._checking():
                return None
            verdict = self._book.new(miss.name, pos)
            self._set_position(verdict.position, None)
            if verdict.ok:
                return None
            exc = self._diverge(verdict, call, pos, CallInfo(
                miss.name, call.kind, miss.key, miss.request))
            if not self.strict:
                return None
            self._miss_divergence[miss.key] = exc
            self.misses[-1] = exc  # what a failing test's report leads with (pytest plugin)
            return exc

    def redact_tree(self, tree: Any) -> Any:
        """What the file would hold for ``tree`` (used to keep secrets out of miss reports)."""
        return self.redactor.tree(tree)

    def clear(self, namespace: str | None = None) -> int:
        with self._lock:
            old = self._all_entries()
            n = len(old) + len(self._new)
            for e in old:
                e.used = True
            self._uses += 1
            self._queues.clear()
            self._new.clear()
            return n

    def stats(self) -> StoreStats:
        self._index()
        return StoreStats(backend=f"cassette:{self.path}",
                          entries=len(self._old) + len(self._new),
                          bytes=len(self._raw or b""),
                          extra=dataclasses.asdict(self.counters))

    # ---------------------------------------------------------------- the recorded order

    def _position(self) -> tuple[int, Any]:
        """(recorded step the calling task is at, the last call it made in this block)."""
        v = _POSITION.get()
        if v is None or v[0] != self._serial:
            return order.ROOT, None
        return v[1], v[2]

    def _set_position(self, step: int, last: Any) -> None:
        _, prev = self._position()
        _POSITION.set((self._serial, step, last if last is not None else prev))

    def _checking(self) -> bool:
        """Whether this run is compared with a recording (there is one, and it is replayed)."""
        if self.mode == "record" or self._raw is None:
            return False
        self._complete_book()
        return len(self._book) > 0

    def _all_entries(self) -> list[_Entry]:
        """Every recorded entry, in file order (makes them all: not for the hit path)."""
        if self._index() is None:
            return []
        keys = self._keys()
        return [self._entry(i, keys[i]) for i in range(len(self._old))]

    def _complete_book(self) -> None:
        """Every recorded step's name and ``follows``, from the index (on a miss, a
        divergence or at the end, never on an in-order hit)."""
        if self._book_complete:
            return
        ix = self._ix if self._ix is not None else self._index()
        if ix is not None and ix.n:
            try:
                names, follows = ix.names(), ix.follows()
            except CassetteError:
                self._fall_back()
                assert self._ix is not None
                names, follows = self._ix.names(), self._ix.follows()
            book = self._book
            book.names[:] = names
            book.follows[:] = follows
            book.ordered = any(f is not None for f in follows)
            book.learn(0, names[0], follows[0])  # (drops the book's successor cache)
        self._book_complete = True

    def _fields(self, e: _Entry) -> tuple[dict[str, Any], bytes | None]:
        if e.doc is not None:
            return e.doc, None
        return self._hit_view(e)

    def _in_task_order(self, e: _Entry, q: collections.deque[_Entry]
                       ) -> tuple[_Entry, tuple[dict[str, Any], bytes | None] | None]:
        """``e``, or a later unused entry of the same key recorded at the calling task's
        place: identical calls made by concurrent tasks get the answers their own task
        recorded. Returns the entry and what was read of it."""
        if self._raw is None or self.mode == "record":
            return e, None
        view = self._fields(e)
        f = fmt.follows_of(view[0])
        pos, _ = self._position()
        if f is None or f == pos:
            return e, view
        for i, peer in enumerate(q):
            if peer.used:
                continue
            pv = self._fields(peer)
            if fmt.follows_of(pv[0]) == pos:
                del q[i]
                q.appendleft(e)
                return peer, pv
        return e, view

    def _note_hit(self, e: _Entry, doc: dict[str, Any]) -> None:
        i = e.index
        assert i is not None
        name = str(doc.get("name", ""))
        f = fmt.follows_of(doc)
        book = self._book
        book.learn(i, name, f)
        pos, last = self._position()
        call = Call(len(self._calls), name, str(doc.get("kind", "call")), e.key, "replayed",
                    i, self._load_request_fn, src=e)
        self._calls.append(call)
        self._observed[i] = last
        if f is None or f == pos:  # in order (the hot path: no verdict object)
            book.used[i] = True
            _POSITION.set((self._serial, i, e))
            return
        if not self.strict:
            # Out of order: reported when read (tape.divergences) or at close. Naming the
            # expected step reads the whole file, which an in-order replay never does.
            book.used[i] = True
            self._pending.append((call, pos, e))
            self._set_position(i, e)
            return
        self._complete_book()
        verdict = book.hit(i, pos)
        self._set_position(verdict.position, e)
        if not verdict.ok:
            exc = self._diverge(verdict, call, pos, CallInfo(
                name, call.kind, e.key, self.expand(self._doc(e).get("request")), e.index))
            if self.strict:
                self.misses.append(exc)  # shown first if an SDK wraps it (pytest plugin)
                raise exc

    def _note_new(self, doc: dict[str, Any], name: str, kind: str, key: str,
                  request: Any) -> None:
        pos, last = self._position()
        self._pred[id(doc)] = last
        call = Call(len(self._calls), name, kind, key, "recorded", None, self._load_request,
                    src=doc)
        self._calls.append(call)
        step = pos
        if self._checking():
            verdict = self._book.new(name, pos)
            step = verdict.position
            if not verdict.ok:
                self._diverge(verdict, call, pos, CallInfo(name, call.kind, key, request))
        self._set_position(step, doc)

    def _kind_of_name(self, name: str) -> str:
        if self._ix is not None and self._book_complete:
            book = self._book
            if name in book.names:
                return self._ix.kinds()[book.names.index(name)]
        return "http" if name.startswith(("openai.", "anthropic.", "http.")) else "call"

    def _request_of(self, step: int) -> Any:
        """Recorded step ``step``'s request as the file holds it (redacted), expanded: read
        through the open tape, or after close from the file, if it is still the recording
        the tape read (same cross-reference checksum); otherwise None (a report shows no
        request rather than another recording's)."""
        if self._raw is not None:
            return self.expand(self._doc(self._entry(step)).get("request"))
        if self._again is None:
            raw = fmt.read_file(self.path) if self._seal else None
            try:
                now = FileIndex.open(raw) if raw is not None else None
            except CassetteError:
                now = None
            if now is None or now.seal != self._seal:
                now = None
            self._again = (now, raw, {})
        now, _, values = self._again
        ix = self._ix
        if now is None or ix is None:
            return None

        def resolve(h: str) -> Any:
            if h not in values:
                found, v = now.value(h)
                if not found:
                    raise CassetteError(f"dangling value reference {fmt.REF}{h}")
                values[h] = v
            return values[h]

        try:
            return fmt.unpack(now.entry(step, ix.keys()[step]).get("request"), resolve)
        except CassetteError:
            return None

    def _forget_file(self) -> None:
        """Drop the file read again for a report after close (a memory map holds a
        descriptor)."""
        again, self._again = self._again, None
        if again is not None and isinstance(again[1], mmap.mmap):
            again[1].close()

    def _info(self, step: int) -> CallInfo:
        if self._raw is None:  # closed: names from the index, the request from the file
            ix = self._ix
            assert ix is not None
            name, kind = ix.names()[step], ix.kinds()[step]
            return CallInfo(name, step_kind(kind, name), ix.keys()[step],
                            self._request_of(step), step)
        doc = self._doc(self._entry(step))
        name = str(doc.get("name", ""))
        return CallInfo(name, step_kind(str(doc.get("kind", "call")), name),
                        str(doc.get("key", "")), self.expand(doc.get("request")), step)

    def _diverge(self, verdict: order.Verdict, call: Call, pos: int,
                 actual: CallInfo) -> ReplayDivergence:
        """Record a divergence (``tape.divergences``) and build the error strict mode raises."""
        exp = self._info(verdict.expected) if verdict.expected is not None else None
        diff: list[str] = []
        if exp is not None:
            if exp.name != actual.name:
                diff.append(f"name: {exp.name!r} -> {actual.name!r}")
            if verdict.reason != order.ORDER:
                diff += field_diff(exp.request, actual.request)
        what = f"call #{call.index} ({actual.kind} {actual.name})"
        at = ("none (it is the first call of its task)" if pos == order.ROOT
              else f"step {pos}")
        total = len(self._book)
        reason = verdict.reason
        if reason == order.ORDER:
            f = self._book.follows[actual.recorded_step or 0]
            head = (f"{what} is out of order: it was recorded as step {actual.recorded_step}, "
                    f"after step {f}, but its task's previous call in this run is {at}")
        elif reason == order.CHANGED:
            head = f"{what} differs from the recorded call at step {verdict.expected}"
        elif reason == order.EXHAUSTED:
            head = (f"{what} goes past the end of the recording, which is exhausted: the "
                    f"cassette holds {total} calls and none follows its task's previous "
                    f"call, {at}")
        elif exp is None:
            head = f"{what} is not in the recording ({total} calls)"
        else:
            head = f"{what} is not the call recorded after {at}"
        lines = [f"dejacache {'strict ' if self.strict else ''}replay divergence in cassette "
                 f"{self.path}: {head}."]
        if exp is not None:
            lines.append(f"  expected: {exp}")
        lines.append(f"  actual:   {actual}")
        if diff:
            lines.append("  differences (recorded -> now):")
            lines += [f"    {d}" for d in diff[:30]]
            if len(diff) > 30:
                lines.append(f"    ... and {len(diff) - 30} more")
        lines.append("  (the order is compared per asyncio task / thread: concurrent tasks may "
                     "interleave freely)")
        lines.append(f"  to re-record: {self.rerecord_hint or 'DEJACACHE_MODE=record'}")
        message = "\n".join(lines)
        call.divergence = reason
        self._divergences.append(Divergence(reason, call.index, verdict.expected, exp, actual,
                                           tuple(diff), message))
        return ReplayDivergence(message, name=actual.name, key=actual.key,
                                source=str(self.path), diff=diff, step=call.index,
                                recorded_step=verdict.expected, expected=exp, actual=actual,
                                reason=reason)

    def _finish_order(self) -> None:
        """Recorded calls never made become ``"unmade"`` divergences (once, at close)."""
        if self._finished:
            return
        self._finished = True
        ix = self._ix
        # Reported when asked for (tape.divergences), from the file if the tape is closed by
        # then: reading the requests of 9,999 untouched entries of a 10k cassette cost
        # ~200 ms at every block exit (issue 12). A strict tape reports at exit anyway.
        # After a full parse too (an auto-mode miss parses the file): expanding the requests
        # of 9,999 unused entries of a 20 KB agent run took 2.3 s at the exit of a block that
        # recorded one new call (issue 12). The file read is still named by its seal; if the
        # block rewrote it, a later report shows those requests as unknown (None).
        if isinstance(ix, FileIndex):
            self._seal = ix.seal
        later = bool(self._seal) and not self.strict
        if not later:
            self._settle()
        if self.mode == "record" or self._raw is None or (self.shared and not self.strict):
            return  # (a shared cassette serves several tests: each uses only its part)
        self._index()
        unused = self._unused_steps()
        self._unmade = unused.without(self._book.replaced)
        if not later:
            self._report_unmade()

    def _unused_steps(self) -> _Unused:
        """The recorded steps never used, from the entries made so far, not a walk over all
        of them (an entry never made was never used). Asked twice by a close: kept until
        an entry is used or made."""
        key = (len(self._made), self._uses)
        if self._unused_at is None or self._unused_at[0] != key:
            used = {e.index for e in self._made if e.used}
            used.discard(None)
            self._unused_at = (key, _Unused(len(self._old), used))  # type: ignore[arg-type]
        return self._unused_at[1]

    def _report_unmade(self) -> None:
        """Turn the recorded steps never made into ``"unmade"`` divergences (their requests
        read from the tape while it is open, or from the file after it closed)."""
        steps, self._unmade = self._unmade, None
        if not steps:
            return
        for i in steps:
            exp = self._info(i)
            self._divergences.append(Divergence(
                "unmade", None, i, exp, None, (),
                f"recorded step {i} ({exp.kind} {exp.name}) was never made"))

    def unmade_error(self) -> ReplayDivergence | None:
        """The error a strict block raises at exit for recorded calls never made."""
        unmade = [d for d in self._settled_divergences() if d.reason == "unmade"]
        if not unmade:
            return None
        lines = [f"dejacache strict replay: {len(unmade)} of the {len(self._book)} recorded "
                 f"calls in cassette {self.path} were never made:"]
        lines += [f"  {d.expected}" for d in unmade[:20]]
        if len(unmade) > 20:
            lines.append(f"  ... and {len(unmade) - 20} more")
        lines.append(f"  to re-record: {self.rerecord_hint or 'DEJACACHE_MODE=record'}")
        first = unmade[0]
        return ReplayDivergence("\n".join(lines), name=first.expected.name if first.expected
                                else "", source=str(self.path), step=None,
                                recorded_step=first.recorded_step, expected=first.expected,
                                reason="unmade")

    @property
    def divergences(self) -> list[Divergence]:
        """Where this run left its recording, in the order found (see
        :class:`~.trajectory.Divergence`); recorded calls never made are added at exit."""
        return self._settled_divergences()

    def _settled_divergences(self) -> list[Divergence]:
        with self._lock:
            try:
                self._settle()
                self._report_unmade()
            finally:
                self._forget_file()
            return list(self._divergences)

    def _settle(self) -> None:
        """Name the expected step of out-of-order hits (needs every step's ``follows``)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._complete_book()
        used_by = {c.recorded_step: c.index for c in self._calls
                   if c.recorded_step is not None}
        for call, pos, e in pending:
            assert e.index is not None
            # the steps that followed ``pos`` and were still unused when this call was made
            cands = [i for i, f in enumerate(self._book.follows)
                     if f == pos and used_by.get(i, call.index + 1) > call.index
                     and i not in self._book.replaced]
            verdict = order.Verdict(order.ORDER, cands[0] if cands else None, e.index)
            self._diverge(verdict, call, pos, CallInfo(
                call.name, call.kind, e.key, self._request_of(e.index), e.index))
        self._divergences.sort(key=lambda d: (d.step is None, d.step or 0))

    @property
    def calls(self) -> list[Call]:
        """The calls made in this block, in order (see :class:`~.trajectory.Call`)."""
        with self._lock:
            return list(self._calls)

    def _load_request(self, call: Call) -> Any:
        src = call._src
        with self._lock:
            if self._closed is None and src is not None:
                doc = src if isinstance(src, dict) else self._doc(src)
                return self.expand(doc.get("request"))
        return self._from_file(call)

    def _from_file(self, call: Call) -> Any:
        """After the block: requests are read back from the file, for every call at once.
        (A closed tape holds no file bytes; a call that was not saved has no request.)"""
        from .trajectory import load_cassette

        try:
            view = load_cassette(self.path)
        except CassetteError:
            return None
        first: dict[str, Any] = {}
        for st in view.steps:
            first.setdefault(st.key, st)
        with self._lock:
            waiting = [c for c in self._calls if c._loader is not None and c is not call]
        for c in waiting:
            found = first.get(c.key)
            c._loader, c._request = None, (found.request if found is not None else None)
        found = first.get(call.key)
        return found.request if found is not None else None

    # ---------------------------------------------------------------- after the block

    def close(self) -> None:
        """Drop the file's bytes (a memory map holds a descriptor); counters and ``unused``
        stay readable. Called when the block ends, so a long session holds no open files."""
        with self._lock:
            try:
                if self._closed is None:
                    self._finish_order()
                    # positions only: the names are read from the index when asked for
                    self._closed = (_Unused(0, set()) if self.mode == "record"
                                    or self._ix is None else self._unused_steps())
            except CassetteError:
                self._closed = _Unused(0, set())
                if self._damage is None:  # damage in entries the run never used: say so once
                    raise
            finally:
                if self._ix is not None:  # keeps the columns, not the file's bytes
                    self._ix = self._ix.detached()
                self._raw = self._full = None
                self._old, self._made, self._queues, self._values = [], [], {}, {}

    @property
    def unused(self) -> list[EntryInfo]:
        """Recorded entries this run never replayed (empty in ``record`` mode)."""
        with self._lock:
            if self._closed is not None:
                if self._closed_info is None:
                    self._closed_info = self._entry_infos(self._closed) if self._closed else []
                return list(self._closed_info)
            if self.mode == "record" or self._index() is None:
                return []
            return self._entry_infos(self._unused_steps())

    def _entry_infos(self, steps: Iterable[int]) -> list[EntryInfo]:
        """``steps`` as ``EntryInfo`` (name, key, occurrence, kind), from the index alone."""
        ix = self._ix
        assert ix is not None
        try:
            keys, names, kinds = ix.keys(), ix.names(), ix.kinds()
        except CassetteError:
            if self._raw is None:
                raise
            self._fall_back()
            assert self._ix is not None
            keys, names, kinds = self._ix.keys(), self._ix.names(), self._ix.kinds()
        want = set(steps)
        out = []
        occ: collections.Counter[str] = collections.Counter()
        for i, k in enumerate(keys):
            n = occ[k]
            occ[k] += 1
            if i in want:
                out.append(EntryInfo(names[i], k, n, kinds[i]))
        return out

    @property
    def new_entries(self) -> int:
        return len(self._new)

    def _final_entries(self, prune: bool) -> list[dict[str, Any]]:
        if self.mode == "record":
            return list(self._new)
        old = self._all_entries()
        if not self._new:  # only pruning: the file's order stays
            return [self._doc(e) for e in old if not (prune and not e.used)]
        # New calls go where this run made them: the file reads in the order of the run.
        # Recorded entries it did not use stay after the entry that preceded them in the file.
        with self._lock:
            calls = list(self._calls)
        by_index = {e.index: e for e in old}
        run: list[_Entry | dict[str, Any]] = []
        placed: set[int] = set()
        fresh = iter(self._new)  # recorded calls and new entries are appended together
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
        after: dict[int, list[_Entry]] = collections.defaultdict(list)
        anchor: Any = None
        for e in old:
            if id(e) in placed:
                anchor = e
            elif e.used or not prune:
                after[id(anchor)].append(e)
        out: list[dict[str, Any]] = [self._doc(e) for e in after.get(id(None), ())]
        for x in run:
            out.append(x if isinstance(x, dict) else self._doc(x))
            out += [self._doc(e) for e in after.get(id(x), ())]
        return out

    def _link(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``entries`` with ``follows`` set to the index (in this list) of the step
        each one's task made before it: as observed in this run for the calls it made, as
        recorded for the rest. A predecessor that is not in the list (pruned) is replaced by
        its own predecessor."""
        old_docs: dict[int, _Entry] = {}
        if self.mode != "record":
            for e in self._all_entries():
                if e.doc is not None or self._full is not None:
                    old_docs[id(self._doc(e))] = e

        def marker_doc(marker: Any) -> dict[str, Any] | None:
            if isinstance(marker, _Entry):
                return self._doc(marker)
            return marker if isinstance(marker, dict) else None

        def pred(doc: dict[str, Any]) -> Any:
            """_MISSING: unknown; None: the first call of its task; else a doc."""
            if id(doc) in self._pred:
                return marker_doc(self._pred[id(doc)])
            e = old_docs.get(id(doc))
            if e is None:
                return _MISSING  # another process's entry (merged): its order is unknown
            if e.index in self._observed:
                return marker_doc(self._observed[e.index])
            f = fmt.follows_of(doc)
            if f is None:
                return _MISSING
            if f < 0 or f >= len(self._old):
                return None
            return self._doc(self._entry(f))

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

    def save(self, *, prune: bool = False) -> bool:
        """Write the file if this run changed it; returns whether bytes were written (an
        unchanged run reads nothing more: no scan, no parse, no write)."""
        self._load()
        with self._lock:
            if self.mode in ("off",):
                return False
            changed = bool(self._new) or (prune and bool(self.unused)) or (
                self.mode == "record" and (self._raw is not None or bool(self._new)))
            if not changed:
                return False  # every call hit: the file is not even rewritten
            if self._raw is not None:
                self._parse_all()
            entries = self._final_entries(prune)
            with cassette_lock(self.path):
                # Under the lock no other writer is between creating and renaming its temp
                # file: any left over is from one killed mid-write.
                fmt.remove_stale_temps(self.path)
                entries = self._link(self._merge_with_disk(entries))
                data = self._render(entries)
                try:
                    current = self.path.read_bytes()
                except FileNotFoundError:
                    current = None
                if current == data or (
                    self.mode == "record" and current is not None
                    and _same_multiset(current, entries, self.path)
                ):
                    return False
                fmt.atomic_write(self.path, data)
            self._raw = data
            return True

    def _render(self, entries: list[dict[str, Any]]) -> bytes:
        return fmt.render(entries, self._values)

    def _merge_with_disk(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Another process (an xdist worker) may have written the file since we read it:
        keep what it added instead of overwriting it."""
        try:
            disk = self.path.read_bytes()
        except FileNotFoundError:
            disk = None
        if disk is None or (self._raw is not None and disk == self._raw[:]):
            return entries
        try:
            other = fmt.load_document(disk, self.path)
        except CassetteError:
            if self.mode == "record":  # re-recording replaces a damaged file
                return entries
            raise
        self._values.update(other["values"])
        mine_before = {_canon(d, ignore=_VOLATILE_FIELDS) for d in (
            self._full["entries"] if self._full else [])}
        theirs = [d for d in other["entries"]
                  if _canon(d, ignore=_VOLATILE_FIELDS) not in mine_before]
        if self.mode == "record" and self.shared:
            mine_keys = {d["key"] for d in self._new}
            kept = [d for d in other["entries"] if d.get("key") not in mine_keys]
            return kept + list(self._new)
        theirs_set = {_canon(d, ignore=_VOLATILE_FIELDS) for d in theirs}
        new_ids = {id(d) for d in self._new}
        new_only = [d for d in entries if id(d) in new_ids
                    and _canon(d, ignore=_VOLATILE_FIELDS) not in theirs_set]
        base = [d for d in entries if id(d) not in new_ids]
        return base + theirs + new_only

    def summary_counts(self) -> TapeCounters:
        return self.counters


_MISSING: Any = object()


class _Unused:
    """The steps ``0 .. n-1`` not in ``taken``, listed only when iterated: a close over a
    10k-entry file that used one entry built and filtered a 10k-step list twice (~1 ms of a
    5 ms budget, issue 12); most closes only ask whether there are any."""

    __slots__ = ("_n", "_taken")

    def __init__(self, n: int, taken: set[int]) -> None:
        self._n = n
        self._taken = taken  # steps in 0 .. n-1

    def without(self, steps: Iterable[int]) -> _Unused:
        """These steps, less ``steps``."""
        extra = {i for i in steps if 0 <= i < self._n}.difference(self._taken)
        return _Unused(self._n, self._taken | extra) if extra else self

    def __len__(self) -> int:
        return self._n - len(self._taken)

    def __iter__(self) -> Iterator[int]:
        # the ranges between the taken steps (C loops: no per-step Python work)
        t = sorted(self._taken)
        return itertools.chain.from_iterable(map(range, [0, *(i + 1 for i in t)], [*t, self._n]))


def _same_multiset(current: bytes, entries: list[dict[str, Any]], path: Any) -> bool:
    """Re-recording that only reordered concurrent calls (``asyncio.gather``) is no change."""
    try:
        doc = fmt.load_document(current, path)
    except CassetteError:
        return False
    if doc["format"] != fmt.FORMAT:
        return False  # re-recording upgrades an older file (format 1 had no checksums)
    return _order_free(doc["entries"]) == _order_free(entries)


def _order_free(entries: list[dict[str, Any]]) -> list[bytes]:
    """Entries as a sorted list, each with its predecessor's key in place of its index:
    equal for two runs whose tasks made the same calls in the same order, however the
    tasks interleaved."""
    out = []
    for d in entries:
        f = fmt.follows_of(d)
        prev = entries[f].get("key") if f is not None and 0 <= f < len(entries) else f
        out.append(_canon(d, ignore=("checksum", "occurrence", "follows"))
                   + orjson.dumps(prev))
    return sorted(out)


def _model_of(response: Any) -> str:
    if isinstance(response, dict):
        m = response.get("model")
        if isinstance(m, str):
            return m
        body = response.get("body") or response.get("json")
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            return str(body["model"])
    return ""


def rebuild_exception(err: dict[str, Any]) -> BaseException:
    """Same type (when its module is imported) and message as the recorded exception."""
    type_name = str(err.get("type", ""))
    message = str(err.get("message", ""))
    args = err.get("args") or [message]
    module, _, qual = type_name.partition(":")
    cls: Any = sys.modules.get(module)
    for part in qual.split("."):
        cls = getattr(cls, part, None) if cls is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return CassetteError(f"recorded exception {type_name}: {message}")
    try:
        exc = cls(*args)
    except Exception:
        exc = cls.__new__(cls)
        exc.args = (message,)
    return exc


def summarize(tapes: Iterable[Cassette]) -> TapeCounters:
    total = TapeCounters()
    for t in tapes:
        c = t.counters
        total.replayed += c.replayed
        total.recorded += c.recorded
        total.missed += c.missed
        total.time_saved += c.time_saved
        total.tokens_saved += c.tokens_saved
        total.dollars_saved += c.dollars_saved
    return total
