"""Carry a pool lease's or a prefix monitor's context into the bare threads started inside it.

hermes-agent sends every provider request from a ``threading.Thread`` it starts for the call,
and Python 3.11 threads start with an empty context, so the lease's ``agent_session`` (or the
monitor watching the agent) would be lost exactly where the request is made. While at least
one lease or monitor is open, the public ``Thread.start`` is wrapped so that a thread started
*from inside one* runs in a context carried from its starter:

- inside a lease, a copy of the starter's whole context (what Python 3.14 does under
  ``-X thread_inherit_context``), with what the lease sets over it: a lease for a tenant
  hands its threads no session, only the conversation's name, so no tenant-scoped cache can
  leak into a thread that outlives the turn and serves another tenant's work later
  (``agent_session`` itself deliberately does not reach bare threads; see ``session.py``);
- inside a monitor only, a fresh context holding just the variables the monitor names (its
  observers, the conversation's name), read when the thread starts: a monitor sees the
  thread's requests without changing the session, tenant or scope they run under, and a
  long-lived thread started inside it keeps no tenant.

Threads started outside both are untouched, and the wrapper is removed when the last lease or
monitor ends. Executor workers are excluded: they outlive the lease that happened to spawn
them and run other callers' tasks later, so inheriting that lease would attribute those tasks
to the wrong session. Their tasks are carried per task instead, by ``dejacache._threads`` (the
same refcounted mechanism the test-facing blocks use for ``ThreadPoolExecutor.submit``).
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .. import _threads

__all__ = ["Carried", "depth", "enter", "leave", "patched"]

# What a carrier hands a thread: (variable, value) pairs, read in the starting thread.
Carried = Callable[[], Iterable[tuple[contextvars.ContextVar[Any], Any]]]


class _Whole:
    """Inside a lease: threads take a copy of the starter's whole context, with ``over``
    (variable, value) pairs set in the copy."""

    __slots__ = ("over",)

    def __init__(self, over: tuple[tuple[contextvars.ContextVar[Any], Any], ...] = ()) -> None:
        self.over = over


_WHOLE = _Whole()
_Carry = _Whole | tuple[Carried, ...]

_LOCK = threading.Lock()
_DEPTH = 0
_ORIGINAL = threading.Thread.start
_CARRY: contextvars.ContextVar[_Carry] = contextvars.ContextVar(
    "dejacache_thread_carry", default=()
)
# Modules whose worker threads are reused across callers (read from the thread's target: the
# only place a worker identifies itself; a rename just falls back to carrying, as 3.14 does).
_POOL_WORKERS = frozenset({"concurrent.futures.thread", "multiprocessing.pool"})


def _set_all(pairs: list[tuple[contextvars.ContextVar[Any], Any]], carry: _Carry) -> None:
    for var, value in pairs:
        var.set(value)
    _CARRY.set(carry)  # the thread's own threads carry the same again


def _context_for_thread() -> contextvars.Context | None:
    carry = _CARRY.get()
    if isinstance(carry, _Whole):
        ctx = contextvars.copy_context()
        if carry.over:
            ctx.run(_set_all, list(carry.over), carry)
        return ctx
    if not carry:
        return None
    ctx = contextvars.Context()
    ctx.run(_set_all, [pair for carried in carry for pair in carried()], carry)
    return ctx


def _start(self: threading.Thread) -> None:
    ctx = _context_for_thread()
    if ctx is not None:
        target = getattr(self, "_target", None)
        if getattr(target, "__module__", None) not in _POOL_WORKERS:
            self.run = functools.partial(ctx.run, self.run)  # type: ignore[method-assign]
    _ORIGINAL(self)


def enter(carried: Carried | None = None, *,
          over: tuple[tuple[contextvars.ContextVar[Any], Any], ...] = ()
          ) -> contextvars.Token[_Carry]:
    """Mark this context so that threads started here carry it: the whole of it (a lease,
    ``carried`` None) with the ``over`` pairs set over it, or just the variables
    ``carried()`` returns (a monitor; inside a lease the whole copy holds them already).
    Makes sure both carries are installed."""
    global _DEPTH
    with _LOCK:
        _DEPTH += 1
        if threading.Thread.start is not _start:
            threading.Thread.start = _start  # type: ignore[method-assign]
    _threads.on_block(1)
    carry = _CARRY.get()
    if carried is None:
        carry = _Whole(over) if over else _WHOLE
    elif not isinstance(carry, _Whole) and carried not in carry:
        carry = (*carry, carried)
    return _CARRY.set(carry)


def leave(token: contextvars.Token[_Carry]) -> None:
    global _DEPTH
    try:
        _CARRY.reset(token)
    except ValueError:  # left from another context (async generator hand-over)
        _CARRY.set(())
    _threads.on_block(-1)
    with _LOCK:
        _DEPTH = max(0, _DEPTH - 1)
        if _DEPTH == 0 and threading.Thread.start is _start:
            threading.Thread.start = _ORIGINAL  # type: ignore[method-assign]


def patched() -> bool:
    return threading.Thread.start is _start


def depth() -> int:
    return _DEPTH
