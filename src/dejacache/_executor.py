"""``wrap_executor``'s proxy: every task runs in its submitter's context.

Its own module so that ``_threads`` (loaded by a block or a lease once the executor's module
is) does not load ``concurrent.futures`` (the proxy subclasses its ``Executor``; whoever wraps
an executor has loaded it already).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ContextExecutor"]

T = TypeVar("T")


class ContextExecutor(concurrent.futures.Executor):
    """An executor proxy that runs every task in the submitter's context
    (``scope.wrap_executor``)."""

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
