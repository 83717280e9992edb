"""Carry the submitter's context into ``ThreadPoolExecutor`` tasks while a block is open.

``loop.run_in_executor`` and ``executor.submit`` run the task in a worker thread with an empty
context, so a call made there cannot tell which cassette or scope it belongs to. With one block
open the scope falls back to routing it there; with several (two ``scenario.run`` calls in
``asyncio.gather``, each in its own cassette and its own executor) it must refuse. Carrying
the context the task was submitted from, as ``asyncio.to_thread`` does, attributes every task
exactly. The patch is on the public ``submit`` method, installed only while at least one
test-facing block is open (a counter fed by ``scope.BLOCK_HOOKS``), and each task carries the
context of its own submitter, so a shared executor never mixes two blocks' calls.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ContextExecutor", "on_block", "patched"]

T = TypeVar("T")

_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL = concurrent.futures.ThreadPoolExecutor.submit


def _submit(self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /,
            *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
    return _ORIGINAL(self, contextvars.copy_context().run, fn, *args, **kwargs)


def on_block(delta: int) -> None:
    """Install the carrying ``submit`` with the first open block, remove it with the last."""
    global _DEPTH
    with _LOCK:
        _DEPTH = max(0, _DEPTH + delta)
        want = _DEPTH > 0
        executor = concurrent.futures.ThreadPoolExecutor
        if want and executor.submit is not _submit:
            executor.submit = _submit  # type: ignore[method-assign, assignment]
        elif not want and executor.submit is _submit:
            executor.submit = _ORIGINAL  # type: ignore[method-assign]


def patched() -> bool:
    return concurrent.futures.ThreadPoolExecutor.submit is _submit


class ContextExecutor(concurrent.futures.Executor):
    """An executor proxy that runs every task in the submitter's context
    (``scope.wrap_executor``; here so ``import dejacache`` does not load concurrent.futures)."""

    def __init__(self, inner: concurrent.futures.Executor) -> None:
        self._inner = inner

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        ctx = contextvars.copy_context()
        return self._inner.submit(ctx.run, fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._inner.shutdown(wait=wait, cancel_futures=cancel_futures)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
