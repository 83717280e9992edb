"""Loop detection over an agent's tool calls: pure state, no clocks, no I/O.

A call is identified by its *signature*: the tool name and the digest of its canonical
arguments. :class:`LoopDetector` sees each call twice: :meth:`~LoopDetector.before` when it is
about to run (so a loop can be stopped before the tool runs again) and
:meth:`~LoopDetector.after` with the digest of its result.

Patterns, in the order they are checked:

``depth``
    the session made more than ``max_depth`` tool calls.
``repeat``
    the same signature was called more than ``max_repeats`` times since the last write (a
    call to a tool that invalidates a resource). Writes reset the count because reading the
    same thing again after changing it is how agents check their work.
``cycle``
    the last ``period * cycle_repeats`` signatures are one block of ``period`` calls
    (2 ≤ period ≤ ``max_cycle``, at least two distinct signatures) repeated
    ``cycle_repeats`` times: A→B→A→B. Writes do not reset it: read→write→read→write with the
    same arguments is exactly the loop to catch.
``no_progress``
    the same signature returned the identical result more than ``max_repeats`` times in a
    row, writes in between or not (the writes are not changing anything it can see).
"""

from __future__ import annotations

import dataclasses
from collections import deque

__all__ = ["Loop", "LoopDetector", "Signature"]

Signature = tuple[str, str]  # (tool name, argument digest)

#: Signatures whose repeat count and result streak are kept, the most recently called
#: ones: a long session of ever new arguments kept one entry per call for good. A
#: signature not called for this many others starts over (a loop missed, never a call
#: refused); a loop repeats recent calls.
MAX_SIGNATURES = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class Loop:
    """One detected loop. ``key`` identifies the pattern instance (for warn-once)."""

    pattern: str
    tool: str
    args: str
    count: int
    cycle: tuple[str, ...] = ()
    limit: int = 0

    @property
    def key(self) -> str:
        if self.pattern == "cycle":
            return "cycle:" + "→".join(self.cycle)
        if self.pattern == "depth":
            return "depth"
        return f"{self.pattern}:{self.tool}:{self.args}"

    def describe(self) -> str:
        if self.pattern == "depth":
            return (f"{self.count} tool calls in this session, over the budget of "
                    f"{self.limit} (last: {self.tool})")
        if self.pattern == "repeat":
            return (f"{self.tool} was called {self.count} times with the same arguments "
                    f"(limit {self.limit})")
        if self.pattern == "cycle":
            return (f"the calls {' → '.join(self.cycle)} repeated {self.count} times in a row "
                    "with the same arguments")
        return (f"{self.tool} returned the same result {self.count} times in a row for the "
                "same arguments")


class LoopDetector:
    """Per-session loop state. Not thread-safe: the driver serialises calls."""

    __slots__ = (
        "_counts",
        "_history",
        "_run",
        "_streaks",
        "cycle_repeats",
        "depth",
        "max_cycle",
        "max_depth",
        "max_repeats",
    )

    def __init__(
        self,
        *,
        max_repeats: int = 3,
        max_depth: int = 50,
        max_cycle: int = 10,
        cycle_repeats: int = 2,
    ) -> None:
        for name, value, least in (("max_repeats", max_repeats, 1), ("max_depth", max_depth, 1),
                                   ("max_cycle", max_cycle, 0),
                                   ("cycle_repeats", cycle_repeats, 2)):
            # Named one by one: "50" from a config file failed as a bare TypeError, and a
            # bad value was not told from the good ones.
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be a whole number >= {least}, not {value!r}")
        self.max_repeats = max_repeats
        self.max_depth = max_depth
        self.max_cycle = max_cycle
        self.cycle_repeats = cycle_repeats
        self.depth = 0
        self._counts: dict[Signature, int] = {}
        self._history: deque[Signature] = deque(maxlen=max(max_cycle, 2) * cycle_repeats)
        self._streaks: dict[Signature, tuple[str, int]] = {}
        self._run = 0  # how many of the newest calls are the same signature

    def before(self, tool: str, args: str, *, write: bool = False) -> Loop | None:
        """Register a call about to run; the first pattern it completes, if any."""
        sig = (tool, args)
        self.depth += 1
        if write:
            # A write changes what reads see: repeated reads after it are not a loop yet.
            own = self._counts.get(sig, 0)
            self._counts.clear()
            self._counts[sig] = own + 1
        else:
            counts = self._counts
            counts[sig] = counts.pop(sig, 0) + 1  # re-inserted: the oldest come first
            if len(counts) > MAX_SIGNATURES:
                del counts[next(iter(counts))]
        h = self._history
        self._run = self._run + 1 if h and h[-1] == sig else 1
        h.append(sig)
        if self.depth > self.max_depth:
            return Loop("depth", tool, args, self.depth, limit=self.max_depth)
        n = self._counts[sig]
        if n > self.max_repeats:
            return Loop("repeat", tool, args, n, limit=self.max_repeats)
        period = self._cycle_period()
        if period:
            block = list(self._history)[-period:]
            return Loop("cycle", tool, args, self.cycle_repeats,
                        cycle=tuple(t for t, _ in block), limit=self.max_cycle)
        return None

    def after(self, tool: str, args: str, result: str | None) -> Loop | None:
        """Register a call's result digest (None: unknown, never matches)."""
        sig = (tool, args)
        if result is None:
            self._streaks.pop(sig, None)
            return None
        streaks = self._streaks
        last = streaks.pop(sig, None)  # re-inserted below: the oldest come first
        n = last[1] + 1 if last is not None and last[0] == result else 1
        streaks[sig] = (result, n)
        if len(streaks) > MAX_SIGNATURES:
            del streaks[next(iter(streaks))]
        # Without writes in between, the repeat rule has already spoken for this call.
        if n > self.max_repeats and self._counts.get(sig, 0) <= self.max_repeats:
            return Loop("no_progress", tool, args, n, limit=self.max_repeats)
        return None

    def _cycle_period(self) -> int:
        h = self._history
        size = len(h)
        reps = self.cycle_repeats
        for p in range(2, self.max_cycle + 1):
            span = p * reps
            if span > size:
                break
            # Cheap rejections first: a block of one repeated call is a repeat, not a cycle;
            # and the newest call must equal the one a period earlier.
            if self._run >= p or h[-1] != h[-1 - p]:
                continue
            if all(h[-1 - i] == h[-1 - i - p] for i in range(1, span - p)):
                return p
        return 0
