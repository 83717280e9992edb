"""The recorded order of a cassette, and how a run's calls compare with it: pure state.

Each recorded step stores ``follows``: the step made just before it *in the same asyncio
task or thread* (``-1``: the first call of its task in the block). A task started inside the
block begins after its parent's last call at the time it was started, so the steps form a
tree: a sequential agent is one chain; ``asyncio.gather`` forks it. A run is in order when
every call follows, in its own task, the recorded step it followed when it was recorded.
Concurrent tasks may therefore interleave differently on every run (``gather`` stays valid)
while a reordering *within* a task, a changed call, an extra call or a missing one is a
divergence.

:class:`OrderBook` holds the ``follows`` links of the recorded steps and which of them this
run has used; the store feeds it the events (a replayed step, a call with no recording) and
turns its :class:`Verdict` into ``tape.divergences`` entries or, when strict,
:class:`~dejacache.ReplayDivergence`. No files, no clocks, no context variables here.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Callable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import NamedTuple as Row  # checked as one: see _slots.Row
else:
    from .._slots import Row

__all__ = ["ROOT", "OrderBook", "Verdict"]

ROOT = -1  # "the first call of its task in this block"

#: Positions indexed one at a time (each a scan of the ``follows`` column in C, ~0.1 ms at
#: 10k steps) before the whole column is (~15 ms at 10k in Python: most of an auto-mode miss
#: in a 10k-entry cassette): a block that diverges at a few places never pays for the whole
#: recording, and a long one pays for it once.
SCANS = 16

# Verdict reasons
OK = "ok"
ORDER = "order"  # a recorded call, made at another place than the one it was recorded at
CHANGED = "changed"  # no recording; the call expected here has the same name (arguments changed)
EXTRA = "extra"  # no recording; a call the recording does not have at this place
EXHAUSTED = "exhausted"  # no recording; the task's recorded calls are all used up


# A named tuple, not a frozen dataclass: ~0.15 against ~1 ms to define on the 2-core box, in
# a module every first cassette block loads; one is built per strict call, in half the time.
class Verdict(Row):
    """How one call compares with the recording.

    ``expected``: the recorded step the call should have been (None when there is none);
    ``position``: the recorded step the task is at afterwards (what its next call follows).
    """

    reason: str
    expected: int | None
    position: int

    @property
    def ok(self) -> bool:
        return self.reason == OK


class _Line:
    """Recorded steps that follow one position (or one position and name), in file order.
    The first one not yet spent is found by a cursor that only moves forward: steps are
    spent for good (used, or stood in for), so each is passed over once however often the
    line is asked."""

    __slots__ = ("at", "steps")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.at = 0  # every step before it is spent

    def first(self, spent: Callable[[int], bool]) -> int | None:
        steps, at = self.steps, self.at
        while at < len(steps) and spent(steps[at]):
            at += 1
        self.at = at
        return steps[at] if at < len(steps) else None

    def insert(self, step: int) -> None:
        p = bisect.bisect_left(self.steps, step)
        self.steps.insert(p, step)
        if p < self.at:
            self.at = p

    def remove(self, step: int) -> None:
        p = bisect.bisect_left(self.steps, step)
        if p < len(self.steps) and self.steps[p] == step:
            del self.steps[p]
            if p < self.at:
                self.at -= 1


class OrderBook:
    """``follows`` links of the recorded steps (``None``: written before order was kept).

    The steps that follow a position (and a position and name) are indexed when a verdict
    first needs them: one position at a time for the first ``SCANS`` positions, then all
    of them at once; and kept up to date as steps are learned. A call's verdict costs O(1)
    amortised however long the block. (Rebuilt after every replayed step, the index cost a
    block in ``auto`` mode that both replayed and recorded O(n) per new call: 1,600 calls
    over a cassette of 800 spent 0.46 s rebuilding it.)"""

    __slots__ = ("_after", "_all", "_all_names", "_name_of", "_named", "_scans", "_unread",
                 "follows", "names", "ordered", "replaced", "skipped", "used")

    def __init__(self) -> None:
        self.follows: list[int | None] = []
        #: None: not read yet (``fill`` without names), read through ``_name_of``
        self.names: list[str | None] = []
        self._name_of: Callable[[int], str] | None = None
        self._all_names: Callable[[], list[str]] | None = None
        self._unread = False  # some name is still None
        self.used: list[bool] = []
        self.replaced: set[int] = set()  # steps a changed call stood in for
        self.skipped: set[int] = set()  # steps that go live in this run (``skip``)
        self.ordered = False  # some step carries order information
        # position -> the steps following it; (position, name) -> those of that name: for
        # the positions indexed so far (every position once _all)
        self._after: dict[int, _Line] = {}
        self._named: dict[tuple[int, str], _Line] = {}
        self._all = False
        self._scans = 0

    def __len__(self) -> int:
        return len(self.follows)

    def add(self, name: str, follows: int | None) -> None:
        """The next recorded step, in file order."""
        self.names.append(name)
        self.follows.append(follows)
        self.used.append(False)
        if follows is not None:
            self.ordered = True
            if self._all or follows in self._after:
                self._link(len(self.follows) - 1, follows, name)

    def grow(self, n: int) -> None:
        """``n`` more steps whose fields are not read yet (a lazy index's size)."""
        self.follows.extend(itertools.repeat(None, n))
        self.names.extend(itertools.repeat("", n))
        self.used.extend(itertools.repeat(False, n))

    def fill(self, names: list[str] | None, follows: list[int | None], *,
             name_of: Callable[[int], str] | None = None,
             all_names: Callable[[], list[str]] | None = None) -> None:
        """Every step's name and ``follows`` at once (the whole index was read). With
        ``names`` None the names are read when a verdict needs them: one step's through
        ``name_of``, every step's through ``all_names`` (a miss needs the names of the few
        steps that follow its task's place, and reading the whole names column was ~0.8 ms
        of an auto-mode miss in a 10k-entry cassette)."""
        if names is None:
            self.names[:] = itertools.repeat(None, len(follows))
        else:
            self.names[:] = names
        self._name_of, self._all_names = name_of, all_names
        self._unread = names is None
        self.follows[:] = follows
        self.ordered = any(f is not None for f in follows)
        self._forget()

    def learn(self, step: int, name: str, follows: int | None) -> None:
        """Fill in a step whose fields were read later (lazy index)."""
        while len(self.follows) <= step:
            self.add("", None)
        old_f = self.follows[step]
        linked = old_f is not None and old_f in self._after  # (then its name was read)
        old_n = self.name(step) if linked else self.names[step]
        self.names[step] = name
        self.follows[step] = follows
        if follows is not None:
            self.ordered = True
        if old_f != follows or old_n != name:
            if linked and old_f is not None and old_n is not None:
                self._after[old_f].remove(step)
                self._named[(old_f, old_n)].remove(step)
            if follows is not None and (self._all or follows in self._after):
                self._link(step, follows, name)

    def name(self, step: int) -> str:
        """Step ``step``'s name (read now if ``fill`` left it unread)."""
        name = self.names[step]
        if name is None:
            name = self.names[step] = self._name_of(step) if self._name_of is not None else ""
        return name

    def all_names(self) -> list[str]:
        """Every step's name (read now, all at once, if some were left unread)."""
        names = self.names
        if self._unread:
            every = self._all_names() if self._all_names is not None else []
            names[:] = [n if n is not None else (every[i] if i < len(every) else "")
                        for i, n in enumerate(names)]
            self._unread = False
        return names  # type: ignore[return-value]  # (no None is left)

    def skip(self, live: list[bool]) -> None:
        """Recorded steps that go live in this run (a partial replay sends them to the
        model or tool instead of the recording): never expected, never unmade, and a step
        that followed one follows instead the nearest step before it in its task that
        replays. However many calls the live part makes now, the replayed calls are
        checked against each other in their recorded order."""
        follows = self.follows
        for i, f in enumerate(follows):
            if live[i]:
                self.skipped.add(i)
            # a step follows one recorded before it, whose own ``follows`` is lifted already
            if f is not None and 0 <= f < i and live[f]:
                follows[i] = follows[f]
        self._forget()

    # ---------------------------------------------------------------- the index

    def _forget(self) -> None:
        """Drop the index (every ``follows`` may have changed)."""
        self._after, self._named, self._all, self._scans = {}, {}, False, 0

    def _line(self, position: int) -> _Line | None:
        """The steps following ``position``, indexed now if they are not yet (then kept
        by add and learn)."""
        line = self._after.get(position)
        if line is not None or self._all:
            return line
        if self._scans >= SCANS:
            self._index_all()
            return self._after.get(position)
        self._scans += 1
        line = self._after[position] = _Line()
        follows, at = self.follows, -1
        with contextlib.suppress(ValueError):  # (no step after ``at`` follows ``position``)
            while True:
                at = follows.index(position, at + 1)
                self._link(at, position, self.name(at))
        return line

    def _index_all(self) -> None:
        """Index every position not indexed yet (the others keep their lines' cursors)."""
        done = set(self._after)
        names = self.all_names()
        for i, f in enumerate(self.follows):
            if f is not None and f not in done:
                self._link(i, f, names[i])
        self._all = True

    def _link(self, step: int, follows: int, name: str) -> None:
        after = self._after
        line = after.get(follows)
        if line is None:
            line = after[follows] = _Line()
        line.insert(step)
        line = self._named.get((follows, name))
        if line is None:
            line = self._named[(follows, name)] = _Line()
        line.insert(step)

    def _spent(self, step: int) -> bool:
        return self.used[step] or step in self.replaced or step in self.skipped

    def following(self, position: int) -> list[int]:
        """Every recorded step that follows ``position`` (file order), spent or not."""
        line = self._line(position)
        return list(line.steps) if line is not None else []

    def next_after(self, position: int, name: str | None = None) -> int | None:
        """The first unspent recorded step that follows ``position`` (and is named
        ``name``), or None."""
        line = self._line(position)
        if name is not None:
            line = self._named.get((position, name))
        return line.first(self._spent) if line is not None else None

    def in_order(self, step: int, position: int) -> bool:
        """Whether step ``step`` may be made by a task that is at ``position``."""
        f = self.follows[step]
        return f is None or f == position

    def successors(self, position: int) -> list[int]:
        """Unused recorded steps that follow ``position`` (file order)."""
        line = self._line(position)
        if line is None:
            return []
        return [i for i in line.steps[line.at:] if not self._spent(i)]

    def hit(self, step: int, position: int) -> Verdict:
        """A call was answered by recorded step ``step`` while its task was at ``position``."""
        self.used[step] = True
        if self.in_order(step, position):
            return Verdict(OK, step, step)
        return Verdict(ORDER, self.next_after(position), step)

    def new(self, name: str, position: int) -> Verdict:
        """A call with no recording, made while its task was at ``position``."""
        if not self.ordered:
            return Verdict(EXTRA, None, position)
        first = self.next_after(position)
        if first is None:
            return Verdict(EXHAUSTED, None, position)
        same = self.next_after(position, name)
        if same is not None:  # the same tool or endpoint with other arguments: it takes
            self.replaced.add(same)  # that step's place
            return Verdict(CHANGED, same, same)
        return Verdict(EXTRA, first, position)

    def unmade(self) -> list[int]:
        """Recorded steps never made (a changed call's step counts as made)."""
        return [i for i, u in enumerate(self.used)
                if not u and i not in self.replaced and i not in self.skipped]
