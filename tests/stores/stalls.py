"""Time a block by what it cost the calling thread, not by how long a loaded machine kept
that thread waiting for a core.

A bound such as "one 50 ms timeout, then nothing" is about what the code waits for: the
network, a lock, a timer. On a 2-core CI machine shared by other jobs a runnable thread can
wait hundreds of milliseconds for a core (measured: 2.0 of a 2.2 s CPU loop, at load 18),
and a wall-clock bound then fails with no bug behind it. Linux counts that wait per thread
(``/proc/thread-self/schedstat``, second field: nanoseconds spent runnable on a run queue);
:class:`Stopwatch` subtracts it. Where it is not available the bound is wall time, as strict
as before.
"""

from __future__ import annotations

import time

__all__ = ["Stopwatch", "waited_for_a_core"]

_SCHEDSTAT = "/proc/thread-self/schedstat"


def waited_for_a_core() -> float:
    """Seconds this thread has spent runnable but not running (0.0 when not known)."""
    try:
        with open(_SCHEDSTAT) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class Stopwatch:
    """``with Stopwatch() as w: ...`` then ``w.took``: the block's wall time less the time
    the thread waited for a core meanwhile; ``w.wall`` and ``w.stalled`` are the parts."""

    def __enter__(self) -> Stopwatch:
        self._queued = waited_for_a_core()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        self.stalled = waited_for_a_core() - self._queued
        self.took = self.wall - self.stalled
