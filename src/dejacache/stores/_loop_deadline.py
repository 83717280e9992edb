"""A timeout for an awaited network call that does not fire because the event loop was late.

A socket timeout on an event loop is a timer. When the loop is busy (a handler holding it
60 ms, a saturated worker), the timer runs late, in the same loop iteration that has just
read the reply which arrived while the loop was busy: the reply is there, the task waiting
for it is queued to resume, and the timer cancels it first. Measured: 30 sessions on one
loop held 60 ms every 200 ms, with Redis healthy, saw 95% of ``tool_cache`` calls bypass the
cache (every such timeout opened the store's breaker for a second).

:func:`within` bounds a call by the time Redis had to answer, not by how late the loop was
to look. One watch per event loop ticks every ``TICK`` seconds while calls are in flight;
a tick that runs late found the loop busy, and gives that time back to every call in
flight (the request may have waited as long to be sent, or its reply to be read). A call
past its deadline is cancelled one iteration later, behind the resumption of a task whose
reply the loop has just read, and only if the loop did not get busy in between. A loop late
at every tick stops waiting ``MAX_LATE`` seconds after a call's deadline at most, so a
silent server still costs a bounded delay. (A timer per call cost ~2 µs to arm and cancel,
and more as cancelled timers piled up in the loop's heap; a watch costs a dict entry.)
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable
from typing import Any, TypeVar

import redis

__all__ = ["MAX_LATE", "SLACK", "TICK", "within"]

T = TypeVar("T")

#: How often a loop's watch looks at its calls in flight (a timeout fires up to this late).
TICK = 0.005
#: A tick later than this found the loop busy (a loop running many tasks is a millisecond or
#: so late on every timer).
SLACK = 0.002
#: A loop late at every tick stops waiting this long after a call's deadline at the most.
MAX_LATE = 1.0

_running_loop = asyncio._get_running_loop  # the C getter, as the store's hit path uses it


class _Call:
    """One call in flight: its task, its deadline (moved by the loop's lateness), and
    whether the watch cancelled it."""

    __slots__ = ("cancelling", "deadline", "expiring", "fired", "last", "task")

    def __init__(self, task: asyncio.Task[Any], deadline: float) -> None:
        self.task = task
        self.cancelling = task.cancelling()
        self.deadline = deadline
        self.last = deadline + MAX_LATE
        self.expiring = False
        self.fired = False


class _Watch:
    """The calls in flight on one event loop, looked at every ``TICK`` while there are.
    (It holds its loop weakly: a loop's watch must not keep the loop alive.)"""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self.calls: dict[_Call, None] = {}
        self.due = 0.0  # when the next tick is planned for; 0: none planned

    def add(self, loop: asyncio.AbstractEventLoop, call: _Call) -> None:
        self.calls[call] = None
        if not self.due:
            self.due = loop.time() + TICK
            loop.call_at(self.due, self._tick)

    def _tick(self) -> None:
        loop = self._loop()
        if loop is None:
            return
        now = loop.time()
        late = now - self.due
        if late > SLACK:
            # Busy at least ``late``: the calls in flight get that time back.
            for call in self.calls:
                call.deadline = min(call.deadline + late, call.last)
        for call in list(self.calls):
            if now >= call.deadline and not call.expiring:
                # This iteration has read the sockets: a reply that came in time has queued
                # its task to resume; the cancel goes behind it.
                call.expiring = True
                loop.call_soon(self._expire, call, now)
        if self.calls:
            self.due = now + TICK
            loop.call_at(self.due, self._tick)
        else:
            self.due = 0.0

    def _expire(self, call: _Call, decided: float) -> None:
        loop = self._loop()
        if call not in self.calls or loop is None:
            return  # it finished first
        now = loop.time()
        if now - decided > SLACK and now < call.last:
            # Busy since the decision (later callbacks of its iteration): the sockets have
            # not been read since. Credit that and let a later tick decide again.
            call.deadline = min(now + (now - decided), call.last)
            call.expiring = False
            return
        call.fired = True
        call.task.cancel()


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = (
    weakref.WeakKeyDictionary())
# The last loop's watch, checked first (a weak dictionary's get costs ~0.2 µs). A watch
# holds its loop only weakly, so keeping the last one here keeps no loop alive.
_LAST: list[Any] = [None]


def _watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = _Watch(loop)
    _LAST[0] = watch
    return watch


async def within(aw: Awaitable[T], seconds: float) -> T:
    """``await aw``, or ``redis.TimeoutError`` when it has not finished ``seconds`` after
    the start, not counting the time the event loop was too busy to read the reply."""
    loop = _running_loop()
    task = asyncio.current_task(loop)
    if loop is None or task is None:
        return await aw
    watch = _LAST[0]
    if watch is None or watch._loop() is not loop:
        watch = _watch(loop)
    call = _Call(task, loop.time() + seconds)
    watch.add(loop, call)
    try:
        out = await aw
    except asyncio.CancelledError as exc:
        del watch.calls[call]
        # Ours (and no one else's) to handle: the cancel the deadline asked for.
        if call.fired and task.uncancel() <= call.cancelling:
            raise redis.TimeoutError(
                f"no answer within {seconds * 1000:.0f} ms (time the event loop was busy "
                "not counted)") from exc
        raise
    except BaseException:
        del watch.calls[call]
        if call.fired:
            task.uncancel()
        raise
    del watch.calls[call]
    if call.fired:  # finished although cancelled (an awaitable that swallowed it)
        task.uncancel()
    return out
