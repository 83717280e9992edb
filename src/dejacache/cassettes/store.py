"""``Cassette``: a store backed by one committed JSON file, replayed in order.

The engine sees a ``Store`` with ``sequenced = True``: ``get(key)`` hands out the next unused
recording of that key (FIFO by occurrence), ``put`` appends. Nothing touches the disk until
:meth:`Cassette.save`, which the ``cassette`` block calls when it exits cleanly.

``Cassette`` is the facade the engine and the block use; the work is done by three parts,
each with its own tests: the :class:`~.tape.Tape` (the recording read from the file, lazily,
and which of its entries this run used), the :class:`~.order.RunOrder` (the calls of the
block in the order made, compared with the recorded order: ``tape.calls``,
``tape.divergences``) and the :class:`~.writer.Writer` (new recordings, and the save).

What a cassette guarantees as a store (``tests/stores/contract.py`` runs the shared contract
against it): ``get`` serves the file as it was when the block opened, each recording once;
what ``put`` records is served by the next block over the saved file, not by this one (an
identical call made again in the same run is another occurrence, recorded again); ``delete``
forgets nothing (it returns False: a cassette is not edited call by call); ``clear`` makes
this run use nothing of the file and drops what it recorded; there are no TTLs.
"""

from __future__ import annotations

import _thread
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping

import orjson

from .._paths import path_text
from ..codec import blob_from_tree
from ..config import resolve_mode
from ..errors import CassetteError, ReplayDivergence, ReplayMiss
from ..stats import token_total
from ..stores._base import NOT_SHARED, BaseStore, Hit, Record
from . import format as fmt
from .ageing import block_ageing
from .order import RunOrder
from .tape import NONE_UNUSED, Entry, Tape, Unused, View

_UNSTORED_SHOWN = 3  # calls an unstored error names (their count is given in full)

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import pathlib
    from typing import Any, ClassVar

    from ..stores._store_stats import StoreStats
    from .calls import Call
    from .findings import Divergence, EntryInfo
    from .partial import Partial
    from .redact import Redactor
    from .vcr_match import VcrMatch
    from .writer import Writer

__all__ = ["Cassette", "TapeCounters"]

# Calls a block makes before it reads which request forms its file holds (once): reading
# them touches every entry (~1 ms at 1k entries), each call that asks before costs the older
# forms' keys (~40 us).
_ASKS_BEFORE_SHAPES = 16


class TapeCounters:
    """What one cassette's calls did (replayed, recorded, missed) and what its hits saved.

    A plain slotted class, not a dataclass: defining the slotted dataclass (its class is
    built twice) was ~0.7 ms of a test process's first block, for an ``__init__`` of zeros."""

    __slots__ = ("_dollars", "missed", "recorded", "replayed", "time_saved", "tokens_saved",
                 "unpriced")
    #: the counters :meth:`public` shows, in order (``dollars_saved`` after them)
    _SHOWN = ("replayed", "recorded", "missed", "time_saved", "tokens_saved")

    def __init__(self) -> None:
        self.replayed = 0
        self.recorded = 0
        self.missed = 0
        self.time_saved = 0.0
        self.tokens_saved = 0
        self._dollars = 0.0
        #: (usage, model) of the hits not priced yet: pricing each hit as it replayed was
        #: ~7 us of a proxy's ~330 us replayed call; the total is read once or twice per
        #: block. Priced in hit order, so the sum is the same float as when added up hit by
        #: hit.
        self.unpriced: list[tuple[Mapping[str, int], str]] = []

    @property
    def dollars_saved(self) -> float:
        pending = self.unpriced
        if pending:
            # The first n priced, then dropped in place: a hit another thread appends
            # meanwhile stays for the next read (swapping the list lost it to a thread that
            # had fetched the old one).
            from .prices import estimate_dollars  # (a price table: read when a total is)

            n = len(pending)
            total = self._dollars
            for usage, model in pending[:n]:
                total += estimate_dollars(usage, model)
            self._dollars = total
            del pending[:n]
        return self._dollars

    @dollars_saved.setter
    def dollars_saved(self, value: float) -> None:  # ``+=`` has priced the pending hits
        del self.unpriced[:]
        self._dollars = value

    def public(self) -> dict[str, Any]:
        """The counters as ``stats().extra`` shows them (the total priced, no internals)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in self._SHOWN}
        out["dollars_saved"] = self.dollars_saved
        return out

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._SHOWN)
        return f"TapeCounters({shown})"


class Cassette(BaseStore):
    """A sequenced store over one cassette file (see the module docstring)."""

    sequenced = True
    #: A hit's blob is made in this process (``_record``) from entry bytes checked as they
    #: were read (the entry's own checksum and key: reader.py, tape.py) and decoded moments
    #: later: the engine skips checking the blob's checksum again (``decode_checked``), 1.4
    #: of the 8.7 us decoding a 1.4 KB answer took (more for larger answers: it is a hash).
    checked_on_put = True

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
        match: str = "request",
        max_age: float | None = None,
        on_expiry: str | None = None,
        partial: Partial | None = None,
        live_path: pathlib.Path | None = None,
        derived: bool = False,
        blobs: bool | int = True,
    ) -> None:
        file = path_text(path)
        self.url = str(path)
        self.mode = resolve_mode(mode)
        # None: the default rules, made when first needed (a write, or an answer stored
        # whole): a replay of the file's bytes never loads ``redact.py`` (~0.8M
        # instructions of a first block's process)
        self._redactor = redactor
        self.rerecord_hint = rerecord_hint
        self.record_errors = tuple(record_errors)
        self.shared = shared
        #: entries the save removed as unused (``prune``); they are still in ``unused``
        self.pruned = 0
        #: Calls must follow the recorded order (see ``_core/strict.py``); misses raise.
        self.strict = strict
        self.counters = TapeCounters()
        self.misses: list[ReplayMiss] = []
        #: calls this block ran but could not record (``note_unstored``): how many, and the
        #: first few, named with why
        self.unstored = 0
        self._unstored: list[str] = []
        self._lock = _thread.RLock()
        self._loaded = False
        self._tape = Tape(file, self.mode, self._lock)
        # a partial block's order skips the recorded steps its ``live=`` rules send live
        self._order = RunOrder(self._tape, strict=strict, rerecord_hint=rerecord_hint,
                               live=partial.goes_live if partial and partial.rules else None,
                               derived=derived)
        self._tape.on_index = self._order.indexed
        self._here = self._order.step  # where the calling task is (bound once: the hit path)
        self._blobs = blobs
        self._new: list[dict[str, Any]] = []  # the recordings this run added (``_writer``'s)
        self._match = match  # method + URL matching, vcrpy's way: ``vcr`` (opt-in)
        self._wide = match != "request" and self.vcr.wide  # (any other value checked now)
        self._damage: CassetteError | None = None
        self._identities: dict[tuple[str, str], frozenset[str]] | None = None
        self._shapes: frozenset[frozenset[str] | None] | None = None
        self._asks = 0
        self._miss_divergence: dict[str, ReplayDivergence] = {}
        # Set when the block's save begins: a call completing later (a task or thread that
        # outlived the block) can no longer reach the file, and is named instead of kept.
        self._sealed = False
        #: ``max_age`` applied to entries as they replay (None: they never expire)
        self.ageing = block_ageing(file, max_age, on_expiry, self.mode)
        #: which calls go live (``partial.py``); their recordings go to ``live_tape``
        self.partial = partial
        self.live_tape = None if partial is None else Cassette(
            live_path or _derived_path(self.path), mode="record",
            redactor=self._redactor, rerecord_hint=rerecord_hint,
            record_errors=self.record_errors, derived=True, blobs=blobs)

    @property
    def redactor(self) -> Redactor:
        """What keeps secrets out of the file, and restores ``substitute``'s live values."""
        r = self._redactor
        if r is None:
            from .redact import Redactor

            r = self._redactor = Redactor()
        return r

    @property
    def path(self) -> pathlib.Path:
        """The cassette's path."""
        return self._tape.path

    @property
    def file(self) -> str:
        """The cassette's path as text (``str(path)``, without making the Path)."""
        return self._tape.file

    # ---------------------------------------------------------------- loading

    @property
    def exists(self) -> bool:
        self._load()
        return self._tape.raw is not None

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            exists = self._tape.load()
            if exists and self.strict and self.mode == "auto":
                # A strict recording is a contract: a call it does not have is a
                # divergence, raised before anything is sent (nothing is paid for).
                self.mode = "replay"
                if self.ageing is not None:
                    self.ageing.mode = "replay"
            self._loaded = True  # not when the check raised: the next call reads the file again

    @functools.cached_property
    def _writer(self) -> Writer:  # with the first recording or save (_new_writer)
        return _new_writer(self)

    @functools.cached_property
    def vcr(self) -> VcrMatch:  # with the first miss, or match="vcr" (_new_vcr)
        return _new_vcr(self)

    def expand(self, tree: Any) -> Any:
        return self._tape.expand(tree)

    # ---------------------------------------------------------------- Store protocol

    #: :meth:`plain_hit` answers as :meth:`get` does (False in a subclass that changes how
    #: a hit is read: the engine then calls its ``get``)
    plain_hits: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.plain_hits = all(getattr(cls, n) is getattr(Cassette, n)
                             for n in ("get", "aget", "_get", "_record", "_replayed",
                                       "plain_hit"))

    def get(self, key: str) -> Record | None:
        try:
            return self._get(key)  # type: ignore[return-value]  # (a Record: not lazy)
        except CassetteError as exc:
            self._damage = exc  # reported to the caller: closing the block need not repeat it
            raise

    def plain_hit(self, key: str) -> Hit | None:
        """:meth:`get` for a caller that loads a plain answer's JSON itself (the engine's
        ``CallSite``): a ``Hit`` whose ``body`` is the answer's JSON bytes, checked with
        their entry, when the entry was found by its key and holds a plain answer (no blob
        is built, to be taken apart again: ~100 opcodes and a copy and a hash of the
        answer a hit); else one whose ``record`` is what ``get`` answers."""
        try:
            return self._get(key, True)  # type: ignore[return-value]
        except CassetteError as exc:
            self._damage = exc
            raise

    def _get(self, key: str, lazy: bool = False) -> Record | Hit | None:
        if not self._loaded:  # (loaded: no call)
            self._load()
        with self._lock:
            if self._sealed:
                return None  # too late for this block: see recording.py
            if self._wide and (got := self.vcr.first(key, self._record)) is not None:
                return _hit_of(got) if lazy else got
            # A miss checks the whole file first: a damaged key must be reported as damage.
            found = self._tape.take(key, self._here)
            if found is None:
                got = self.vcr.after_miss(key, self._here, self._record)
                return _hit_of(got) if lazy and got is not None else got
            if self.ageing is not None:
                e, view = found[0], found[1] or self._tape.hit_view(found[0])
                if self.ageing.renew(key, e.index, view[0]):
                    return None  # expired: run live, and the new recording replaces it
                return self._replayed(e, view, lazy)
            return self._replayed(found[0], found[1], lazy)

    def _record(self, e: Entry, view: View | None = None) -> Record:
        return self._replayed(e, view, False)  # type: ignore[return-value]  # (not lazy)

    def _replayed(self, e: Entry, view: View | None, lazy: bool) -> Record | Hit:
        """The record of hit ``e`` (``view``: what was read of it); ``lazy``: a ``Hit``
        instead (see :meth:`plain_hit`)."""
        doc, body = view if view is not None else self._tape.hit_view(e)
        if self.ageing is not None:
            self.ageing.check(doc, e.index)
        usage = doc.get("usage") or None
        duration = float(doc.get("duration", 0.0))
        plain = not doc.get("tagged", False)
        model = ""
        payload: bytes | None = None
        if "error" in doc:
            value = orjson.dumps(doc["error"])
            kind = "error"
        else:
            kind = str(doc.get("kind", "call"))
            if body is not None and (self._redactor is None or not self._redactor.restore_map):
                payload = body if body.find(fmt.REF_BYTES) < 0 else _spliced(body, self._blob)
            if payload is not None:
                # the file's bytes (with their blobs' payloads) are the payload: parsed
                # once, by the codec (Fragment makes orjson emit them verbatim)
                value = (payload if lazy and plain
                         else blob_from_tree(orjson.Fragment(payload), plain, key=e.key))
                if usage:
                    model = fmt.model_in(payload)
            else:
                response = orjson.loads(body) if body is not None else doc.get("response")
                response = self._tape.expand(response)
                if self._redactor is not None:  # (the default rules restore nothing)
                    response = self._redactor.restore(response)
                value = blob_from_tree(response, plain, key=e.key)
                model = _model_of(response)
        if usage and not model:  # an answer that names no model (Cohere): the one asked for
            model = _model_of(self._tape.expand(doc.get("request")))
        c = self.counters
        c.replayed += 1
        c.time_saved += duration
        if usage:
            c.tokens_saved += token_total(usage)
            c.unpriced.append((usage, model))
        exc = self._order.note_hit(e, doc)
        if exc is not None:  # strict, and out of the recorded order
            self.misses.append(exc)  # shown first if an SDK wraps it (pytest plugin)
            raise exc
        if lazy and value is payload:  # a plain answer's JSON: the caller loads it
            return (payload, duration, usage, None, NOT_SHARED)
        # (positional: no keywords to match)
        rec = Record(value, str(doc.get("name", "")), str(doc.get("namespace", "")), kind,
                     b"", duration, usage)
        return _hit_of(rec) if lazy else rec

    def _blob(self, h: str) -> Any:
        return self._tape.resolve(fmt.BLOB + h)

    def unordered(self, names: frozenset[str]) -> None:
        """Calls named so are outside the recorded order (``RunOrder.unordered``)."""
        with self._lock:
            self._order.unordered(names)

    def holds(self, key: str) -> bool:
        """Whether the file holds a recording of ``key``, used or not: whether an older
        spelling of a call's key is worth a lookup (HTTP keys before request headers
        counted), and whether a caller's own identity was recorded."""
        if self.mode == "record":
            return False
        self._load()
        with self._lock:
            return bool(self._tape.positions(key))

    def request_shapes(self) -> frozenset[frozenset[str] | None] | None:
        """The member-name sets of the file's recorded requests (``shapes.request_shapes``):
        which forms of keys it can hold, decided once for the block instead of per call.
        None while the block has asked fewer than ``_ASKS_BEFORE_SHAPES`` times (a test
        that replays a few calls of a large file never reads every entry); empty when
        recording afresh."""
        if self.mode == "record":
            return frozenset()
        shapes = self._shapes
        if shapes is None:
            self._asks += 1
            if self._asks <= _ASKS_BEFORE_SHAPES:
                return None
            self._load()
            with self._lock:
                shapes = self._shapes = _request_shapes(self._tape)
        return shapes

    def identities(self) -> dict[tuple[str, str], frozenset[str]]:
        """Who the file's HTTP calls were recorded from: (item, scope) -> identity digests
        (``http/identities.py``), read once. Empty when recording afresh."""
        if self.mode == "record":
            return {}
        self._load()
        with self._lock:
            if self._identities is None:
                raw = self._tape.raw
                self._identities = {} if raw is None else recorded_identities(raw)
            return self._identities

    def mode_for(self, name: str, kind: str) -> str:
        """The mode of one call of a partial block (``partial.py``)."""
        assert self.partial is not None
        return self.partial.mode_for(name, kind)

    # Recording, misses and listing (``recording.py``): imported in the methods, since a
    # replay hit never records, misses or lists (10 KB of bytecode a replay block skips).

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool:
        from .recording import put

        return put(self, key, record)

    def record_error(self, key: str, name: str, namespace: str, kind: str, canonical: bytes,
                     exc: BaseException, duration: float) -> bool:
        """Keep an exception raised by the live call, if the block opted in to its type."""
        from .recording import record_error

        return record_error(self, key, name, namespace, kind, canonical, exc, duration)

    def recorded_error(self, record: Record) -> BaseException:
        """The exception an error entry stands for (same type and message)."""
        from .recording import rebuild_exception

        return rebuild_exception(orjson.loads(record.value))

    def delete(self, key: str) -> bool:
        # Only reached for an entry whose bytes failed their checksum. A cassette forgets
        # nothing: it is changed by re-recording.
        return False

    def iterate(self, name: str | None = None, namespace: str | None = None
                ) -> Iterator[tuple[str, Record]]:
        from .recording import iterate

        return iterate(self, name, namespace)

    def note_miss(self, miss: ReplayMiss) -> ReplayMiss | None:
        """Kept by the engine when replay raises (a get() that misses may still be followed
        by a hit on the call's full key). An SDK retrying the same call is one miss, and the
        report outlives wrappers (litellm, scenario) that reduce it to a one-line message.
        Returns the error to raise instead (a strict cassette's divergence), or None."""
        from .recording import note_miss

        return note_miss(self, miss)

    def note_unstored(self, name: str, reason: str) -> None:
        """Told by the engine of a call this block ran whose result reached its caller but
        not the file: it could not be encoded, or writing it failed. The block fails when
        it ends (:meth:`unstored_error`), after saving the rest: a recording run that lost
        a call must not pass (its replay would miss, or go live every run in auto mode)."""
        with self._lock:
            self.unstored += 1
            if len(self._unstored) < _UNSTORED_SHOWN:
                from .._secrets import mask_text, placeholder

                self._unstored.append(f"{name}: {mask_text(reason, placeholder)}")

    def unstored_error(self) -> CassetteError | None:
        """The error a block raises at exit when calls it ran were not recorded, or None."""
        with self._lock:
            n, shown = self.unstored, list(self._unstored)
        if not n:
            return None
        more = f"; and {n - len(shown)} more" if n > len(shown) else ""
        return CassetteError(
            f"{n} call{'s' if n != 1 else ''} this block ran could not be recorded (the "
            f"caller got {'their results' if n != 1 else 'its result'}; the file holds the "
            f"rest): {'; '.join(shown)}{more}. Fix the cause and record again.",
            path=self.file)

    def redact_tree(self, tree: Any) -> Any:
        """What the file would hold for ``tree`` (used to keep secrets out of miss reports)."""
        return self.redactor.tree(tree)

    def clear(self, namespace: str | None = None) -> int:
        with self._lock:
            n = self._tape.use_all() + len(self._new)
            self._new.clear()
            return n

    def stats(self) -> StoreStats:
        from ..stores._store_stats import StoreStats  # (only stats() makes one)
        tape = self._tape
        tape.index()
        return StoreStats(backend=f"cassette:{self.file}",
                          entries=len(tape.old) + len(self._new),
                          bytes=len(tape.raw or b""),
                          extra=self.counters.public())

    # ---------------------------------------------------------------- the recorded order

    @property
    def calls(self) -> list[Call]:
        """The calls made in this block, in order (see :class:`~.calls.Call`)."""
        with self._lock:
            return list(self._order.calls)

    @property
    def divergences(self) -> list[Divergence]:
        """Where this run left its recording, in the order found (see
        :class:`~.findings.Divergence`); recorded calls never made are added at exit."""
        with self._lock:
            return self._order.settled()

    def unmade_error(self) -> ReplayDivergence | None:
        """The error a strict block raises at exit for recorded calls never made."""
        if self._rest_live():
            return None
        with self._lock:  # (``live=``: the steps that went live are not counted, order.py)
            return self._order.unmade_error()

    # ---------------------------------------------------------------- after the block

    def close(self) -> None:
        """Drop the file's bytes (a memory map holds a descriptor); counters and ``unused``
        stay readable. Called when the block ends, so a long session holds no open files."""
        if self.live_tape is not None:
            self.live_tape.close()
        with self._lock:
            self._sealed = True
            tape = self._tape
            unused: Unused | None = tape.closed
            try:
                if unused is None:
                    self._order.finish(replayed=self.mode != "record", shared=self.shared,
                                       rest_live=self._rest_live())
                    # positions only: the names are read from the index when asked for
                    unused = (NONE_UNUSED if self.mode == "record" or tape.ix is None
                              else tape.unused_steps())
            except CassetteError:
                unused = NONE_UNUSED
                if self._damage is None:  # damage in entries the run never used: say so once
                    raise
            finally:
                tape.close(unused)

    def _rest_live(self) -> bool:
        """A ``replay_until=N`` block that made its N replayed calls: the recorded calls
        after them went live (not unmade). One that stopped sooner sent nothing live, and
        every recorded call it did not make is a divergence, as in plain strict replay."""
        p = self.partial
        return p is not None and p.until is not None and p.seen >= p.until

    @property
    def unused(self) -> list[EntryInfo]:
        """Recorded entries this run never replayed (empty in ``record`` mode, and for a
        partial block: what it did not replay went live on purpose, and is no orphan)."""
        if self.partial is not None:
            return []
        with self._lock:
            return self._tape.unused()

    @property
    def new_entries(self) -> int:
        return len(self._new)

    def save(self, *, prune: bool = False) -> bool:
        """Write the file if this run changed it; returns whether bytes were written (an
        unchanged run reads nothing more: no scan, no parse, no write). A shared file is
        never pruned: the entries this block did not use may be other tests'. A partial
        block writes only its live calls, to ``live_tape``'s file."""
        if self.live_tape is not None:
            with self._lock:
                self._sealed = True
            return self.live_tape.save()
        self._load()
        prune = prune and not self.shared
        with self._lock:
            self._sealed = True
            if self.mode in ("off",):
                return False
            new = bool(self._new)
            changed = new or (prune and bool(self.unused)) or (
                self.mode == "record" and (self._tape.raw is not None or new))
            if not changed:
                return False  # every call hit: the file is not even rewritten
            dropped = len(self.unused) if prune else 0
            wrote = self._writer.write(prune)
            self.pruned = dropped
            return wrote


def _model_of(response: Any) -> str:
    if isinstance(response, dict):
        m = response.get("model")
        if isinstance(m, str):
            return m
        body = response.get("body") or response.get("json")
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            return str(body["model"])
    return ""


def recorded_identities(raw: fmt.Buffer) -> dict[tuple[str, str], frozenset[str]]:
    """Every identity item a cassette's bytes hold (``NAME@SCOPE#DIGEST``), as (name, scope)
    -> digests: one search of the file, entries and shared values alike. A string of a body
    that happens to be spelled so only adds a value, which can make a mapping refuse (a
    miss), never make one."""
    from ..http.identities import ITEM  # HTTP's knowledge, for HTTP calls only

    found: dict[tuple[str, str], set[str]] = {}
    for m in ITEM.finditer(raw):
        item = (m.group(1).decode(errors="replace"), m.group(2).decode(errors="replace"))
        found.setdefault(item, set()).add(m.group(3).decode())
    return {k: frozenset(v) for k, v in found.items()}


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


def _hit_of(rec: Record) -> Hit:
    """What :meth:`Cassette.plain_hit` answers for a hit that is not a plain answer's JSON
    read from the file: the record ``get`` answers."""
    return (None, rec.duration, rec.usage, rec, NOT_SHARED)


def _derived_path(path: pathlib.Path) -> pathlib.Path:
    from .partial import derived_path  # loaded by a partial block already

    return derived_path(path, None)


def _request_shapes(tape: Tape) -> frozenset[frozenset[str] | None]:
    """``shapes.request_shapes``: loaded by a block's first ask past a few, not by a hit."""
    from .shapes import request_shapes

    return request_shapes(tape)


def _spliced(body: bytes, text: Callable[[str], Any]) -> bytes | None:
    """``blobs.spliced``: loaded by the first answer that holds a reference."""
    from .blobs import spliced

    return spliced(body, text)


def _new_writer(c: Cassette) -> Writer:
    """The writer of ``c``'s new recordings and save, made with the first of them: a replay
    that records nothing never loads ``writer.py`` (0.25-0.35 ms of a first block)."""
    from .writer import Writer

    w = Writer(c._tape, c._order, mode=c.mode, shared=c.shared, blobs=c._blobs)
    w.new = c._new
    # The file as it was read (the tape reads it once): a save that finds it still so knows
    # it holds what was read, and splices instead of rendering it again.
    w.baseline = c._tape.identity
    w.expired = c.ageing.expired if c.ageing is not None else None
    return w


def _new_vcr(c: Cassette) -> VcrMatch:
    """``c``'s method + URL matching (``vcr_match.py``), made when first needed: a replay
    that misses no call of a ``match="request"`` block never loads it (~0.3 ms)."""
    from .vcr_match import VcrMatch

    return VcrMatch(c._tape, c.redact_tree, c._match)
