"""Carry a pool lease's context into the bare threads its agent starts.

hermes-agent sends every provider request from a ``threading.Thread`` it starts for the call,
and Python 3.11 threads start with an empty context, so the lease's ``agent_session`` would
be lost exactly where the request is made. While at least one lease is open, the public
``Thread.start`` is wrapped so that a thread started *from inside a lease* runs in a copy of
its starter's context (what Python 3.14 does under ``-X thread_inherit_context``). Threads
started outside leases are untouched, and the wrapper is removed when the last lease ends.

Executor workers are excluded: they outlive the lease that happened to spawn them and run
other callers' tasks later, so inheriting that lease would attribute those tasks to the wrong
session. Their tasks are carried per task instead, by ``dejacache._threads`` (the same
refcounted mechanism the test-facing blocks use for ``ThreadPoolExecutor.submit``).

A lease's session never carries a tenant, so no tenant-scoped cache can leak this way
(``agent_session`` itself deliberately does not reach bare threads; see ``session.py``).
"""

from __future__ import annotations

import contextvars
import functools
import threading

from .. import _threads

__all__ = ["depth", "enter", "leave", "patched"]

_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL = threading.Thread.start
_IN_LEASE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "dejacache_lease_threads", default=False
)
# Modules whose worker threads are reused across callers (read from the thread's target: the
# only place a worker identifies itself; a rename just falls back to carrying, as 3.14 does).
_POOL_WORKERS = frozenset({"concurrent.futures.thread", "multiprocessing.pool"})


def _start(self: threading.Thread) -> None:
    if _IN_LEASE.get():
        target = getattr(self, "_target", None)
        if getattr(target, "__module__", None) not in _POOL_WORKERS:
            ctx = contextvars.copy_context()
            self.run = functools.partial(ctx.run, self.run)  # type: ignore[method-assign]
    _ORIGINAL(self)


def enter() -> contextvars.Token[bool]:
    """Mark this context as inside a lease and make sure both carries are installed."""
    global _DEPTH
    with _LOCK:
        _DEPTH += 1
        if threading.Thread.start is not _start:
            threading.Thread.start = _start  # type: ignore[method-assign]
    _threads.on_block(1)
    return _IN_LEASE.set(True)


def leave(token: contextvars.Token[bool]) -> None:
    global _DEPTH
    try:
        _IN_LEASE.reset(token)
    except ValueError:  # left from another context (async generator hand-over)
        _IN_LEASE.set(False)
    _threads.on_block(-1)
    with _LOCK:
        _DEPTH = max(0, _DEPTH - 1)
        if _DEPTH == 0 and threading.Thread.start is _start:
            threading.Thread.start = _ORIGINAL  # type: ignore[method-assign]


def patched() -> bool:
    return threading.Thread.start is _start


def depth() -> int:
    return _DEPTH
