"""Single-flight: identical concurrent misses run once; threads and asyncio tasks alike.

It lives outside ``runtime`` (which re-exports it as ``runtime.singleflight``) because
``@cache`` alone must not load the runtime package.

One implementation serves the engine (``_engine``: every ``@cache`` call and HTTP exchange,
keyed by store and key) and the runtime tool cache (keyed by full runtime store keys, which
carry the tenant/session prefix and the generation counters, so flights never cross tenants
and a call made after an invalidation never joins a flight that started before it).

Every waiter gets the leader's result or its exception. A leader that is cancelled or
interrupted (``BaseException``: ``CancelledError``, ``KeyboardInterrupt``, ``SystemExit``)
marks the flight abandoned; its waiters loop and one of them becomes the new leader, so no
waiter is ever left hanging on a leader that will not finish (the failure mode reported
against async-cache's ``get``). An asyncio leader cancelled after its run returned, while
storing the result (``arun``'s ``keep``), is not abandoned: the storing starts over in a
task that lands the flight with that result.

A flight never outlives its leader. A caller makes its flight before it joins and takes
charge of it inside its ``finally``, so an exception a signal handler raises between the two
(``KeyboardInterrupt``) still lands it. An asyncio flight holds its loop (the table is keyed
by the loop object, so a call on another loop never joins it, even one that reuses a freed
loop's ``id``) and lands without needing that loop to run: a leader coroutine closed
outside it (``coro.close()``, or collected un-finished after ``asyncio.run`` returned or its
loop was closed) removes its flight and wakes its waiters, who run the call themselves.

The primitive is :meth:`SingleFlight.join` / :meth:`SingleFlight.land` (and their asyncio
forms): a leader lands its flight ``OK``, ``ERROR`` or ``ABANDONED`` in a ``finally``.
:meth:`SingleFlight.run` / :meth:`SingleFlight.arun` wrap a callable in that protocol.
"""

from __future__ import annotations

import _thread
import weakref
from collections.abc import Awaitable, Callable, Hashable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import asyncio  # imported where a coroutine runs: ~35 ms of ``import dejacache``
    import threading
    from typing import Any, Generic, TypeVar
else:
    from ._hints import Generic, TypeVar

__all__ = ["ABANDONED", "ERROR", "OK", "Flight", "SingleFlight"]

R = TypeVar("R")

OK, ERROR, ABANDONED = "ok", "error", "abandoned"


class Flight:
    """One run others wait for. ``state``/``value`` are final once the flight has landed."""

    __slots__ = ("akey", "event", "fut", "owner", "state", "value")

    def __init__(self) -> None:
        # A thread's flight gets its event from its first waiter, under the lock: a lone
        # miss (nearly every miss) makes none and sets none, ~10 Python calls fewer.
        self.event: threading.Event | None = None
        # An asyncio flight's future and its key in the table, ``(loop, key)``: set when
        # it starts, so landing needs no running loop.
        self.fut: asyncio.Future[None] | None = None
        self.akey: tuple[asyncio.AbstractEventLoop, Hashable] | None = None
        self.state = ABANDONED  # what a leader that never says otherwise leaves behind
        self.value: Any = None
        # Who leads it: a thread's ident, an asyncio task (weakly). A call it makes with the
        # same key (a function retrying by calling itself) must not wait for itself: that
        # never lands.
        self.owner: Any = None


class SingleFlight(Generic[R]):
    """Groups concurrent calls by key; threads and asyncio tasks are grouped separately
    (asyncio flights per event loop)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._calls: dict[Hashable, Flight] = {}
        self._acalls: dict[tuple[asyncio.AbstractEventLoop, Hashable], Flight] = {}
        # Flights landed so far. A caller whose lookup missed just before another leader
        # stored and left would otherwise lead a second run; reading this before the lookup
        # and again on leading tells it whether one more lookup is worth it, so a plain miss
        # costs one read.
        self.landed = 0

    # ------------------------------------------------------------ the primitive (threads)

    def join(self, key: Hashable, mine: Flight) -> tuple[Flight, bool]:
        """``(flight, leader)``: the flight under ``key``, or ``mine`` started now if none
        was. The caller lands ``mine`` in a ``finally`` it entered before joining."""
        me = _thread.get_ident()
        with self._lock:
            flight = self._calls.get(key)
            if flight is not None:
                if flight.owner == me:  # its own leader, called again inside its run:
                    return mine, True  # runs as live would (``mine``, unlisted, lands as nothing)
                if flight.event is None:
                    # Loaded by a waiter only: a replay hit (no flight) never needs the
                    # module, ~2.5M instructions of a fresh process's first hit.
                    import threading

                    flight.event = threading.Event()
                return flight, False
            mine.owner = me
            self._calls[key] = mine
            return mine, True

    @staticmethod
    def wait(flight: Flight) -> tuple[str, Any]:
        assert flight.event is not None
        flight.event.wait()  # the leader lands it in ``finally``, whatever happens
        return flight.state, flight.value

    def land(self, key: Hashable, flight: Flight) -> None:
        """End a flight this caller leads, with the ``state``/``value`` it set (a flight
        that never started, another's being joined instead, is nothing)."""
        with self._lock:
            if self._calls.get(key) is not flight:
                return
            del self._calls[key]
            self.landed += 1
            # Read under the lock: every waiter joined (and made the event) before the
            # flight left ``_calls``; one that comes after leads a flight of its own.
            event = flight.event
        if event is not None:
            event.set()

    # ------------------------------------------------------------ the primitive (asyncio)

    def ajoin(self, key: Hashable, mine: Flight) -> tuple[Flight, bool]:
        """:meth:`join` for a task on the running event loop."""
        import asyncio  # a coroutine runs here, so asyncio is loaded: a dict lookup

        loop = asyncio.get_running_loop()
        # The loop itself, not its id: a loop freed and another made at its address must
        # not find the first one's flights (the key holds the loop, so it cannot be freed).
        fk = (loop, key)
        flight = self._acalls.get(fk)
        task = asyncio.current_task(loop)
        if flight is not None:
            if task is not None and flight.owner is not None and flight.owner() is task:
                return mine, True  # (as in :meth:`join`)
            return flight, False
        # Weakly: the table holds the flight, and a task held here would keep its coroutine,
        # which a closed loop's leader is landed by the collector closing.
        mine.owner = None if task is None else weakref.ref(task)
        mine.fut, mine.akey = loop.create_future(), fk
        self._acalls[fk] = mine
        return mine, True

    @staticmethod
    async def await_landing(flight: Flight) -> tuple[str, Any]:
        import asyncio

        assert flight.fut is not None
        # shield: a waiter being cancelled must not cancel the shared result
        await asyncio.shield(flight.fut)
        return flight.state, flight.value

    def aland(self, key: Hashable, flight: Flight) -> None:
        """:meth:`land` for an asyncio flight, from anywhere: its leader may be closed
        outside its loop (collected after the loop stopped, or while another one runs)."""
        fk = flight.akey
        if fk is None:  # never started: this caller joined another's flight
            return
        with self._lock:
            # (the lock: a leader collected in another thread may land here)
            if self._acalls.get(fk) is flight:
                del self._acalls[fk]
            self.landed += 1
        fut = flight.fut
        assert fut is not None
        loop = fk[0]
        try:
            if loop is _running_loop():
                fut.set_result(None)
            elif not fut.done():  # (a stopped loop wakes its waiters when it runs again)
                loop.call_soon_threadsafe(_wake, fut)
        except RuntimeError:
            pass  # the loop is closed: no waiter of it can run again

    # ------------------------------------------------------------ one callable

    def run(self, key: Hashable, fn: Callable[[], R]) -> tuple[R, bool]:
        """``(result, led)``: ``led`` is True for the caller that ran ``fn``."""
        while True:
            mine = Flight()
            with _Leading(mine, key, self.land):
                flight, leader = self.join(key, mine)
                if leader:
                    return _landed(flight, fn()), True
            state, value = self.wait(flight)
            if state != ABANDONED:
                return _shared(state, value), False

    async def arun(self, key: Hashable, fn: Callable[[], Awaitable[R]],
                   keep: Callable[[], Awaitable[None]] | None = None) -> tuple[R, bool]:
        """Async twin of :meth:`run`; flights are per event loop. ``keep`` (storing what
        ``fn`` returned; safe to run again) is awaited after it, the flight still open. A
        leader cancelled there starts it over in a task of its own, which lands the flight
        when done: what ``fn`` paid for is handed to the waiters and stored, not run
        again."""
        import asyncio

        while True:
            mine = Flight()
            with _Leading(mine, key, self.aland) as leading:
                flight, leader = self.ajoin(key, mine)
                if leader:
                    result = _landed(flight, await fn())
                    if keep is not None:
                        try:
                            await keep()
                        except asyncio.CancelledError:
                            leading.handed = True
                            _in_background(self._keep(keep, key, flight))
                            raise
                    return result, True
            state, value = await self.await_landing(flight)
            if state != ABANDONED:
                return _shared(state, value), False

    async def _keep(self, keep: Callable[[], Awaitable[None]], key: Hashable,
                    flight: Flight) -> None:
        try:
            await keep()
        finally:
            self.aland(key, flight)

    def __len__(self) -> int:
        return len(self._calls) + len(self._acalls)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    import asyncio

    return asyncio._get_running_loop()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# Tasks started by ``_in_background``: the event loop holds tasks only weakly.
_BACKGROUND: set[Any] = set()


def _in_background(step: Awaitable[None]) -> None:
    import asyncio

    task = asyncio.ensure_future(step)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


def _landed(flight: Flight, result: R) -> R:
    flight.state, flight.value = OK, result
    return result


def _shared(state: str, value: Any) -> Any:
    if state == ERROR:
        raise value
    return value


class _Leading:
    """Around a leader's run: its exception becomes every waiter's, and the flight lands
    whatever happens (an interrupted leader's as abandoned)."""

    __slots__ = ("flight", "handed", "key", "land")

    def __init__(self, flight: Flight, key: Hashable,
                 land: Callable[[Hashable, Flight], None]) -> None:
        self.flight, self.key, self.land = flight, key, land
        self.handed = False  # True: another task lands the flight

    def __enter__(self) -> _Leading:
        return self

    def __exit__(self, tp: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if isinstance(exc, Exception) and self.flight.state != OK:
            self.flight.state, self.flight.value = ERROR, exc
        if not self.handed:
            self.land(self.key, self.flight)
