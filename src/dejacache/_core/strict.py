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

import dataclasses

__all__ = ["ROOT", "OrderBook", "Verdict"]

ROOT = -1  # "the first call of its task in this block"

# Verdict reasons
OK = "ok"
ORDER = "order"  # a recorded call, made at another place than the one it was recorded at
CHANGED = "changed"  # no recording; the call expected here has the same name (arguments changed)
EXTRA = "extra"  # no recording; a call the recording does not have at this place
EXHAUSTED = "exhausted"  # no recording; the task's recorded calls are all used up


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
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


class OrderBook:
    """``follows`` links of the recorded steps (``None``: written before order was kept)."""

    __slots__ = ("_succ", "follows", "names", "ordered", "replaced", "used")

    def __init__(self) -> None:
        self.follows: list[int | None] = []
        self.names: list[str] = []
        self.used: list[bool] = []
        self.replaced: set[int] = set()  # steps a changed call stood in for
        self.ordered = False  # some step carries order information
        self._succ: dict[int, list[int]] | None = None  # position -> steps following it

    def __len__(self) -> int:
        return len(self.follows)

    def add(self, name: str, follows: int | None) -> None:
        """The next recorded step, in file order."""
        self.names.append(name)
        self.follows.append(follows)
        self.used.append(False)
        self._succ = None
        if follows is not None:
            self.ordered = True

    def learn(self, step: int, name: str, follows: int | None) -> None:
        """Fill in a step whose fields were read later (lazy index)."""
        while len(self.follows) <= step:
            self.add("", None)
        self.names[step] = name
        self.follows[step] = follows
        self._succ = None
        if follows is not None:
            self.ordered = True

    def in_order(self, step: int, position: int) -> bool:
        """Whether step ``step`` may be made by a task that is at ``position``."""
        f = self.follows[step]
        return f is None or f == position

    def successors(self, position: int) -> list[int]:
        """Unused recorded steps that follow ``position`` (file order)."""
        if self._succ is None:  # built once per batch of new steps: misses stay O(1)-ish
            succ: dict[int, list[int]] = {}
            for i, f in enumerate(self.follows):
                if f is not None:
                    succ.setdefault(f, []).append(i)
            self._succ = succ
        return [i for i in self._succ.get(position, ())
                if not self.used[i] and i not in self.replaced]

    def hit(self, step: int, position: int) -> Verdict:
        """A call was answered by recorded step ``step`` while its task was at ``position``."""
        self.used[step] = True
        if self.in_order(step, position):
            return Verdict(OK, step, step)
        nxt = self.successors(position)
        return Verdict(ORDER, nxt[0] if nxt else None, step)

    def new(self, name: str, position: int) -> Verdict:
        """A call with no recording, made while its task was at ``position``."""
        if not self.ordered:
            return Verdict(EXTRA, None, position)
        nxt = self.successors(position)
        if not nxt:
            return Verdict(EXHAUSTED, None, position)
        same = [i for i in nxt if self.names[i] == name]
        if same:  # the same tool or endpoint with other arguments: it takes that step's place
            self.replaced.add(same[0])
            return Verdict(CHANGED, same[0], same[0])
        return Verdict(EXTRA, nxt[0], position)

    def unmade(self) -> list[int]:
        """Recorded steps never made (a changed call's step counts as made)."""
        return [i for i, u in enumerate(self.used) if not u and i not in self.replaced]
