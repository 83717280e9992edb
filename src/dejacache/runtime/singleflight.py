"""Single-flight: identical concurrent misses run the tool once.

Keys are full runtime store keys, which carry the tenant/session prefix and the generation
counters, so flights never cross tenants and a call made after an invalidation never joins a
flight that started before it.

Every waiter gets the leader's result or its exception. A leader that is cancelled or
interrupted (``BaseException``: ``CancelledError``, ``KeyboardInterrupt``, ``SystemExit``)
marks the flight abandoned; its waiters loop and one of them becomes the new leader, so no
waiter is ever left hanging on a leader that will not finish (the failure mode reported
against async-cache's ``get``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["SingleFlight"]

R = TypeVar("R")

_OK, _ERROR, _ABANDONED = "ok", "error", "abandoned"


class _Call:
    __slots__ = ("event", "state", "value")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.state = ""
        self.value: Any = None


class SingleFlight(Generic[R]):
    """Groups concurrent calls by key; threads and asyncio tasks are grouped separately."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}
        self._acalls: dict[tuple[int, str], asyncio.Future[tuple[str, Any]]] = {}

    def run(self, key: str, fn: Callable[[], R]) -> tuple[R, bool]:
        """``(result, led)``: ``led`` is True for the caller that ran ``fn``."""
        while True:
            with self._lock:
                call = self._calls.get(key)
                leader = call is None
                if call is None:
                    call = self._calls[key] = _Call()
            if not leader:
                call.event.wait()  # the leader sets it in ``finally``, whatever happens
                if call.state == _ABANDONED:
                    continue
                if call.state == _ERROR:
                    raise call.value
                return call.value, False
            try:
                value = fn()
            except Exception as exc:
                call.state, call.value = _ERROR, exc
                raise
            except BaseException:
                call.state = _ABANDONED
                raise
            else:
                call.state, call.value = _OK, value
                return value, True
            finally:
                with self._lock:
                    if self._calls.get(key) is call:
                        del self._calls[key]
                call.event.set()

    async def arun(self, key: str, fn: Callable[[], Awaitable[R]]) -> tuple[R, bool]:
        """Async twin of :meth:`run`; flights are per event loop."""
        loop = asyncio.get_running_loop()
        fk = (id(loop), key)
        while True:
            fut = self._acalls.get(fk)
            if fut is not None:
                # shield: a cancelled waiter must not cancel the leader's shared future.
                state, value = await asyncio.shield(fut)
                if state == _ABANDONED:
                    continue
                if state == _ERROR:
                    raise value
                return value, False
            fut = self._acalls[fk] = loop.create_future()
            try:
                result = await fn()
            except Exception as exc:
                fut.set_result((_ERROR, exc))
                raise
            except BaseException:
                fut.set_result((_ABANDONED, None))
                raise
            else:
                fut.set_result((_OK, result))
                return result, True
            finally:
                if self._acalls.get(fk) is fut:
                    del self._acalls[fk]

    def __len__(self) -> int:
        return len(self._calls) + len(self._acalls)
