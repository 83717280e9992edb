"""One traced tool call: its record on ``agent_session(...).calls``, the loop guard's two
checks, and ``@tool``, the tracer for uncached tools.

``traced_call`` / ``atraced_call`` are the one mechanism that notes how a call ended (the
sync and async drivers of all three decorators share it); only ``@tool_cache``'s sync hit
path keeps an inlined twin (see ``_cached``).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, overload

from ..errors import AgentLoopDetected
from ..keys import KeyBuilder, digest
from ._decorate import F, function_only, probe, tool_names
from .guard import PROCEED
from .session import SESSION, agent_session

Args = tuple[Any, ...]
Kwargs = dict[str, Any]


class Trace:
    """What one call did, for ``agent_session(...).calls`` (filled in as the call runs)."""

    __slots__ = ("digest", "loops", "outcome")

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.digest = ""
        self.loops: list[Any] = []


class Noted(Trace):
    """A trace noted on the session however the call ends: the one bookkeeping of how a
    call ended. (A class, not a ``contextlib.contextmanager``: the generator one cost the
    async tool_cache hit ~1.5 µs.)"""

    __slots__ = ("name", "resource", "sess")

    def __init__(self, sess: agent_session, name: str, resource: str, outcome: str) -> None:
        # Trace.__init__ written out: a super() call is ~0.1 µs of an async hit.
        self.outcome = outcome
        self.digest = ""
        self.loops = []
        self.sess, self.name, self.resource = sess, name, resource

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is not None:  # raised: the loop guard blocked it, or the call failed
            self.outcome = "blocked" if issubclass(kind, AgentLoopDetected) else "error"
        self.sess.note_call(self.name, self.resource, self.digest, self.outcome,
                            self.loops[-1].pattern if self.loops else None)


def traced_call(sess: agent_session | None, name: str, resource: str, outcome: str,
                run: Callable[[agent_session | None, Trace, Args, Kwargs], Any],
                args: Args, kwargs: Kwargs) -> Any:
    """``run(sess, trace, args, kwargs)``, noted on the session if it keeps calls."""
    if sess is None or not sess.tracing:
        return run(sess, Trace(outcome), args, kwargs)
    with Noted(sess, name, resource, outcome) as tr:
        return run(sess, tr, args, kwargs)


async def atraced_call(sess: agent_session | None, name: str, resource: str, outcome: str,
                       run: Callable[[agent_session | None, Trace, Args, Kwargs],
                                     Awaitable[Any]],
                       args: Args, kwargs: Kwargs) -> Any:
    """:func:`traced_call` for a coroutine function."""
    if sess is None or not sess.tracing:
        return await run(sess, Trace(outcome), args, kwargs)
    with Noted(sess, name, resource, outcome) as tr:
        return await run(sess, tr, args, kwargs)


def guard_before(sess: agent_session | None, name: str, resource: str, adigest: str,
                 tr: Trace, *, write: bool = False) -> Any:
    """The loop guard's check before a call: PROCEED, or what to answer instead."""
    gs = sess.guard if sess is not None else None
    if gs is None:
        return PROCEED
    nudge = gs.before(name, resource, adigest, write=write, seen=tr.loops)
    if nudge is not PROCEED:
        tr.outcome = "nudged"
    return nudge


def guard_after(sess: agent_session | None, name: str, resource: str, adigest: str,
                value: Any, tr: Trace) -> Any:
    """The loop guard's check of a result: the result, or what to answer instead."""
    gs = sess.guard if sess is not None else None
    if gs is None:
        return value
    out = gs.after(name, resource, adigest, value, seen=tr.loops)
    if out is not value:
        tr.outcome = "nudged"
    return out


def args_digest(kb: KeyBuilder, key_name: str, args: Args, kwargs: Kwargs) -> str:
    """The digest the loop guard compares calls by."""
    try:
        return digest("", key_name, kb.canonical(args, kwargs))
    except TypeError:  # unhashable arguments: a unique digest never repeats
        return f"unkeyable-{time.perf_counter_ns()}"


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, write: bool = False,
         key_self: bool | None = None) -> Callable[[F], F]: ...


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         write: bool = False, key_self: bool | None = None) -> Any:
    """Trace an uncached tool for the session's loop guard (no caching at all).

    ``write=True`` marks a tool that changes state, which resets the repeat counts of reads.
    ``key_self`` as ``@cache`` takes it: a method's repeat is the same call on the same
    instance data; ``key_self=False`` compares the arguments alone (an instance that counts
    its own calls would make every call look new). Outside a session with a loop guard it
    costs one context-variable read.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        function_only(f, "tool")
        key_name, display = tool_names(f, name)
        kb = KeyBuilder(f, key_name, use_default_volatile=False, key_self=key_self)

        def _checks(sess: agent_session | None, tr: Trace, args: Args, kwargs: Kwargs
                    ) -> tuple[str, Any]:
            adigest = tr.digest = args_digest(kb, key_name, args, kwargs)
            return adigest, guard_before(sess, display, display, adigest, tr, write=write)

        if inspect.iscoroutinefunction(probe(f)):

            async def async_traced(*args: Any, **kwargs: Any) -> Any:
                sess = SESSION.get()
                if sess is None or (sess.guard is None and not sess.tracing):
                    return await f(*args, **kwargs)
                return await atraced_call(sess, display, display, "traced", _arun, args,
                                          kwargs)

            async def _arun(sess: agent_session | None, tr: Trace, args: Args,
                            kwargs: Kwargs) -> Any:
                adigest, nudge = _checks(sess, tr, args, kwargs)
                if nudge is not PROCEED:
                    return nudge
                value = await f(*args, **kwargs)
                return guard_after(sess, display, display, adigest, value, tr)

            wrapper: Callable[..., Any] = async_traced
        else:

            def traced(*args: Any, **kwargs: Any) -> Any:
                sess = SESSION.get()
                if sess is None or (sess.guard is None and not sess.tracing):
                    return f(*args, **kwargs)
                return traced_call(sess, display, display, "traced", _run, args, kwargs)

            def _run(sess: agent_session | None, tr: Trace, args: Args, kwargs: Kwargs
                     ) -> Any:
                adigest, nudge = _checks(sess, tr, args, kwargs)
                if nudge is not PROCEED:
                    return nudge
                return guard_after(sess, display, display, adigest, f(*args, **kwargs), tr)

            wrapper = traced
        return functools.wraps(f)(wrapper)

    return deco(fn) if fn is not None else deco
