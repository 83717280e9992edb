"""A block's calls in the order made, compared with the recorded order of its cassette.

Every entry stores ``follows``, the step its asyncio task or thread made before it
(``_core/strict.py`` explains why per task). The task's place is kept in a context variable,
which tasks started inside the block copy from their parent. Each call made in the block
becomes a :class:`~.calls.Call` (``tape.calls``); one that leaves the recorded order
becomes a :class:`~.findings.Divergence` (``tape.divergences``), raised as
:class:`~dejacache.ReplayDivergence` when the cassette is ``strict``.

:class:`RunOrder` feeds the pure :class:`~dejacache._core.strict.OrderBook` the run's events
(a replayed step, a new recording, a miss) and turns its verdicts into those records
(written by ``divergence.py``, which explains each). It
reads the recording through the :class:`~.tape.Tape`, and remembers, for the writer, the call
each new entry's task made before it (``pred``) and the call made before each replayed step
(``observed``).
"""

from __future__ import annotations

import _contextvars as contextvars  # (as scope.py says)
import itertools
from collections.abc import Callable

from .._core import strict as order
from ..errors import CassetteError, ReplayDivergence, ReplayMiss
from . import format as fmt
from .calls import Call
from .reader import Index
from .tape import Entry, Tape, Unused

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from .findings import Divergence

# A divergence's explanation (divergence.py: its message, records and field diff) is imported
# where one is found: a replay that follows its recording never does, and it costs ~2 ms to
# load.

__all__ = ["RunOrder"]

# Where the current asyncio task / thread is in a block's recording:
# (run serial, recorded step it is at, the last call it made: an Entry, a new entry's dict
# or None). Tasks copy it from their parent when they start, so a gathered child begins where
# its parent was; a value left by another run means "at the start".
_POSITION: contextvars.ContextVar[tuple[int, int, Any] | None] = contextvars.ContextVar(
    "dejacache_cassette_position", default=None)
# A partial block's derived tape (its live calls) keeps its own place in each task: sharing
# the replayed tape's would send a task's next replayed call back to "the start".
_LIVE_POSITION: contextvars.ContextVar[tuple[int, int, Any] | None] = contextvars.ContextVar(
    "dejacache_live_position", default=None)
_SERIALS = itertools.count(1)


class RunOrder:
    """The calls of one block over ``tape`` (see the module docstring). ``strict`` makes an
    out-of-order replay raise at once; ``rerecord_hint`` ends every divergence message.
    ``live(name, kind)``: the recorded steps of a partial block that go live, skipped by the
    order (``OrderBook.skip``); ``derived``: the tape of such a block's live calls. The
    cassette calls under its lock."""

    def __init__(self, tape: Tape, *, strict: bool = False,
                 rerecord_hint: str | None = None,
                 live: Callable[[str, str], bool] | None = None,
                 derived: bool = False) -> None:
        self.tape = tape
        self.strict = strict
        self.rerecord_hint = rerecord_hint
        self.book = order.OrderBook()
        self.calls: list[Call] = []
        self.divergences: list[Divergence] = []
        self.pred: dict[int, Any] = {}  # id(new entry) -> the call its task made before
        self.observed: dict[int, Any] = {}  # recorded step -> the call made before it now
        self._serial = next(_SERIALS)
        self._complete = False
        self._pending: list[tuple[Call, int, Entry]] = []  # out-of-order hits, not yet named
        self._finished = False
        self._unmade: Unused | None = None  # recorded steps never made, not yet reported
        self._loader = self.load_request
        self._kinds: dict[str, str] | None = None  # recorded name -> its first step's kind
        self.live = live
        self._var = _LIVE_POSITION if derived else _POSITION
        # Names of calls that come when their caller's timing has them (an MCP session's own
        # listings and pings: ``unordered``), and whether the book's ``follows`` skip them.
        self._outside: frozenset[str] = frozenset()
        self._lifted = live is not None

    # ---------------------------------------------------------------- where the task is

    def position(self) -> tuple[int, Any]:
        """(recorded step the calling task is at, the last call it made in this block)."""
        v = self._var.get()
        if v is None or v[0] != self._serial:
            return order.ROOT, None
        return v[1], v[2]

    def step(self) -> int:
        """The recorded step the calling task is at (``position()[0]``, on the hit path)."""
        v = self._var.get()
        return order.ROOT if v is None or v[0] != self._serial else v[1]

    def _set_position(self, step: int, last: Any) -> None:
        _, prev = self.position()
        self._var.set((self._serial, step, last if last is not None else prev))

    # ---------------------------------------------------------------- the book

    def indexed(self, ix: Index, first: bool) -> None:
        """The tape answers from ``ix`` now (``Tape.on_index``)."""
        if first:
            # sized in one step (not n calls of book.add): a 10k-entry file opens in ~1 ms
            self.book.grow(ix.n)
        if (self.live is not None or not ix.lazy) and not self._complete:
            self.complete_book()  # a partial block's order is lifted before its first call

    def complete_book(self) -> None:
        """Every recorded step's name and ``follows``, from the index (on a miss, a
        divergence or at the end, never on an in-order hit)."""
        if self._complete:
            return
        tape = self.tape
        if self.live is None and not self._outside:
            follows = tape.follows()
            if self._complete:
                return  # reading the index just now completed the book (``indexed``)
            if follows:
                # names are read per step when a verdict needs them (``OrderBook.fill``)
                self.book.fill(None, follows, name_of=tape.name_at, all_names=tape.names)
            self._complete = True
            return
        got = tape.names_follows()
        if self._complete:
            return  # reading the index just now completed the book (``indexed``)
        if got is not None:
            self.book.fill(*got)
            self._skip(got[0])
        self._complete = True

    def _skip(self, names: list[str]) -> None:
        """Take the steps a partial block sends live, and the unordered ones, out of the
        recorded order: a step that followed one follows the nearest before it that counts."""
        tape, live, outside = self.tape, self.live, self._outside
        if tape.ix is None or (live is None and not outside):
            return
        kinds = tape.ix.kinds() if live is not None else [""] * len(names)
        self.book.skip([n in outside or (live is not None and live(n, k))
                        for n, k in zip(names, kinds, strict=False)])
        tape.lifted = self.book.follows  # the tape prefers entries by this order too
        self._lifted = True

    def unordered(self, names: frozenset[str]) -> None:
        """Calls named so come when their caller's timing has them (an MCP session lists
        the tools to check each result, and pings, as often as the server's answers make
        it): outside the recorded order, like a partial block's live steps, so a strict
        replay never reads them as out of order nor as unmade."""
        if names <= self._outside:
            return
        self._outside |= names
        if self._complete and self.tape.raw is not None and len(self.book):
            self._skip(self.tape.names())

    def checking(self, replaying: bool) -> bool:
        """Whether this run is compared with a recording (there is one, and it is replayed)."""
        if not replaying or self.tape.raw is None:
            return False
        self.complete_book()
        return len(self.book) > 0

    def kind_of(self, name: str) -> str:
        """The kind recorded for calls named ``name`` (guessed from the name when the book
        does not know it yet)."""
        ix = self.tape.ix
        if ix is not None and self._complete:
            if self._kinds is None:
                # once: each miss searched the names and parsed the kinds column (O(n))
                pairs = list(zip(self.book.all_names(), ix.kinds(), strict=False))
                self._kinds = dict(reversed(pairs))  # the first step of each name wins
            kind = self._kinds.get(name)
            if kind is not None:
                return kind
        return "http" if name.startswith(("openai.", "anthropic.", "http.")) else "call"

    # ---------------------------------------------------------------- events

    def note_hit(self, e: Entry, doc: dict[str, Any]) -> ReplayDivergence | None:
        """Recorded entry ``e`` (fields ``doc``) answered a call; the error to raise when
        the run is strict and this is not the recorded order."""
        i = e.index
        assert i is not None
        name = str(doc.get("name", ""))
        book = self.book
        f = book.follows[i] if self._lifted else fmt.follows_of(doc)  # (lifted: skip)
        book.learn(i, name, f)
        pos, last = self.position()
        call = Call(len(self.calls), name, str(doc.get("kind", "call")), e.key, "replayed",
                    i, self._loader, src=e)
        self.calls.append(call)
        self.observed[i] = last
        if name in self._outside:  # when it comes: no verdict, and its task stays where it is
            book.used[i] = True
            return None
        if f is None or f == pos:  # in order (the hot path: no verdict object)
            book.used[i] = True
            self._var.set((self._serial, i, e))
            return None
        if not self.strict:
            # Out of order: reported when read (tape.divergences) or at close. Naming the
            # expected step reads the whole file, which an in-order replay never does.
            book.used[i] = True
            self._pending.append((call, pos, e))
            self._set_position(i, e)
            return None
        self.complete_book()
        verdict = book.hit(i, pos)
        self._set_position(verdict.position, e)
        if verdict.ok:
            return None
        from .divergence import diverge
        from .findings import CallInfo

        tape = self.tape
        return diverge(self, verdict, call, pos, CallInfo(
            name, call.kind, e.key, tape.expand(tape.doc(e).get("request")), e.index))

    def note_new(self, doc: dict[str, Any], name: str, kind: str, key: str, request: Any,
                 replaying: bool) -> None:
        """A call with no recording was run and recorded as ``doc``."""
        pos, last = self.position()
        self.pred[id(doc)] = last
        call = Call(len(self.calls), name, kind, key, "recorded", None, self._loader,
                    src=doc)
        self.calls.append(call)
        if name in self._outside:
            return  # the task's next call follows the call before this one
        step = pos
        if self.checking(replaying):
            verdict = self.book.new(name, pos)
            step = verdict.position
            if not verdict.ok:
                from .divergence import diverge
                from .findings import CallInfo

                diverge(self, verdict, call, pos, CallInfo(name, call.kind, key, request))
        self._set_position(step, doc)

    def note_miss(self, miss: ReplayMiss, replaying: bool) -> ReplayDivergence | None:
        """Replay found no recording for ``miss``; the divergence it is, if the run is
        compared with a recording and the call is not the one expected here."""
        call = Call(len(self.calls), miss.name, self.kind_of(miss.name), miss.key, "missed",
                    None, None, request=miss.request)
        self.calls.append(call)
        pos, _ = self.position()
        if miss.name in self._outside or not self.checking(replaying):
            return None
        verdict = self.book.new(miss.name, pos)
        self._set_position(verdict.position, None)
        if verdict.ok:
            return None
        from .divergence import diverge
        from .findings import CallInfo

        return diverge(self, verdict, call, pos, CallInfo(
            miss.name, call.kind, miss.key, miss.request))

    # ---------------------------------------------------------------- divergences

    def finish(self, *, replayed: bool, shared: bool, rest_live: bool = False) -> None:
        """Recorded calls never made become ``"unmade"`` divergences (once, at close).
        ``replayed``: the run was compared with a recording; ``shared``: the file serves
        several blocks, each of which uses only its part; ``rest_live``: the recorded calls
        this run did not replay went live instead (``replay_until=N``, N calls made)."""
        if self._finished:
            return
        self._finished = True
        tape = self.tape
        # Reported when asked for (tape.divergences), from the file if the tape is closed by
        # then: reading the requests of 9,999 untouched entries of a 10k cassette cost
        # ~200 ms at every block exit. A strict tape reports at exit anyway. After a full
        # parse too (an auto-mode miss parses the file): expanding the requests of 9,999
        # unused entries of a 20 KB agent run took 2.3 s at the exit of a block that
        # recorded one new call. The file read is still named by its seal; if the block
        # rewrote it, a later report shows those requests as unknown (None). A small file,
        # parsed whole when opened, is read again too unless this run recorded (and so
        # rewrites it): naming a late hit there loaded the report modules (divergence.py,
        # findings.py: 15M instructions, ~2.5 ms) in every such block.
        later = not self.strict and tape.keep_seal(parsed=not self.pred)
        if not later:
            self.settle()
        if not replayed or tape.raw is None or (shared and not self.strict) or rest_live:
            return
        tape.index()
        unused = tape.unused_steps()
        self._unmade = unused.without(self.book.replaced | self.book.skipped)
        if not later:
            self.report_unmade()

    def report_unmade(self) -> None:
        """Turn the recorded steps never made into ``"unmade"`` divergences (their requests
        read from the tape while it is open, or from the file after it closed)."""
        steps, self._unmade = self._unmade, None
        if not steps:
            return
        from .divergence import unmade

        self.divergences += unmade(self.tape, steps)

    def settled(self) -> list[Divergence]:
        """Every divergence found so far, the pending ones named."""
        try:
            self.settle()
            self.report_unmade()
        finally:
            self.tape.forget_file()
        return list(self.divergences)

    def settle(self) -> None:
        """Name the expected step of out-of-order hits (needs every step's ``follows``)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        from .divergence import name_pending

        name_pending(self, pending)

    def unmade_error(self) -> ReplayDivergence | None:
        """The error a strict block raises at exit for recorded calls never made."""
        unmade = [d for d in self.settled() if d.reason == "unmade"]
        if not unmade:
            return None
        from .divergence import unmade_error

        return unmade_error(self, unmade)

    # ---------------------------------------------------------------- requests of calls

    def load_request(self, call: Call) -> Any:
        """``call.request``, read when first asked for: from the open tape, or after the
        block from the file, for every call at once."""
        src = call._src
        tape = self.tape
        with tape.lock:
            if tape.closed is None and src is not None:
                doc = src if isinstance(src, dict) else tape.doc(src)
                return tape.expand(doc.get("request"))
        return self._from_file(call)

    def _from_file(self, call: Call) -> Any:
        """After the block: requests are read back from the file, for every call at once.
        (A closed tape holds no file bytes; a call that was not saved has no request.)"""
        from .trajectory import load_cassette

        try:
            view = load_cassette(self.tape.path)
        except CassetteError:
            return None
        first: dict[str, Any] = {}
        for st in view.steps:
            first.setdefault(st.key, st)
        with self.tape.lock:
            waiting = [c for c in self.calls if c._loader is not None and c is not call]
        for c in waiting:
            found = first.get(c.key)
            c._loader, c._request = None, (found.request if found is not None else None)
        found = first.get(call.key)
        return found.request if found is not None else None
