"""Store work handed to a worker thread under asyncio: ``off_loop`` and its two kinds of
work that must not be dropped when the caller is cancelled. Loaded by the first async call
that waits on a file or a lock (``BaseStore.blocking``): a replay hit never does (~0.3 ms of
a fresh process's import when ``_base`` held them)."""

from __future__ import annotations

import threading
from collections.abc import Callable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar
else:
    from .._hints import Generic, TypeVar

__all__ = ["off_loop", "off_loop_owned", "off_loop_whole"]

T = TypeVar("T")


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread under asyncio, so whatever it waits on (a
    file, a lock another process holds) never stalls the event loop; inline under any other
    loop (trio), which asyncio's threads cannot serve."""
    import asyncio  # a coroutine runs here: under asyncio, already loaded

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


async def off_loop_owned(fn: Callable[[], T], release: Callable[[T], object]) -> T:
    """:func:`off_loop` for a result that holds something until it is released (a cassette's
    tape: a large file's memory map). A caller cancelled meanwhile hears of it at once; the
    result, once made, is released rather than left to the garbage collector: by the worker
    when it finishes, or here when it had finished already."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    handoff = _Handoff(release)
    try:
        return await asyncio.to_thread(handoff.run, fn)
    except BaseException:
        handoff.leave()
        raise


class _Handoff(Generic[T]):
    """A worker's result and a caller that may leave before it comes: whichever of the two
    is second (the lock decides) releases it."""

    __slots__ = ("_gone", "_lock", "_release", "_result")

    def __init__(self, release: Callable[[T], object]) -> None:
        self._lock = threading.Lock()
        self._release = release
        self._gone = False
        self._result: list[T] = []  # the result, given and not yet released

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``, in the worker: kept for the caller, or released if it has left."""
        result = fn()
        with self._lock:
            if not self._gone:
                self._result.append(result)
                return result
        self._release(result)
        return result

    def leave(self) -> None:
        """The caller will not take the result: release it if the worker gave it already."""
        with self._lock:
            self._gone = True
            given, self._result = self._result, []
        for result in given:
            self._release(result)


async def off_loop_whole(fn: Callable[..., T], /, *args: Any) -> T:
    """:func:`off_loop` for work that must finish once begun (a cassette's save: the
    recordings the caller paid for). A caller cancelled meanwhile waits for the worker, then
    hears of the cancellation, or of the work's own error, which would otherwise be lost."""
    import asyncio
    import contextvars
    import functools

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    # A future, not a task: asyncio.run cancels the tasks left when its coroutine ends, and
    # would cancel the wait for the worker with them.
    work = loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, fn,
                                                        *args))
    cancelled: asyncio.CancelledError | None = None
    while not work.done():
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError as exc:  # (again after each further cancellation)
            cancelled = exc
    result = work.result()  # the work's error first
    if cancelled is not None:
        raise cancelled
    return result
