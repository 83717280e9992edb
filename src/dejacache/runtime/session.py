"""``agent_session``: who the runtime caches are working for (tenant, session, loop guard).

The session lives in a ``contextvars.ContextVar``, so asyncio tasks started inside it inherit
it and concurrent requests never see each other's. It is deliberately *not* a test-facing
block (``scope.py`` routes bare worker threads to the single active test-facing block): a
thread started without the caller's context must never inherit a tenant, so a tenant-scoped
tool called there raises ``ScopeError`` instead of guessing. Carry it explicitly with
``dejacache.propagate(fn)``, ``dejacache.wrap_executor(pool)``, ``asyncio.to_thread`` or
``contextvars.copy_context().run``.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import itertools
import uuid

from .._core.scopes import global_prefix, session_prefix, tenant_prefix
from .._slots import slot_setters
from ..errors import DejacacheWarning, ScopeError
from ..scope import Block, reset_own
from .guard import GuardState, LoopGuard

__all__ = ["SESSION", "ToolCallTrace", "agent_session", "current_session"]


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCallTrace:
    """One tool call of a session (``agent_session(...).calls``).

    ``outcome``: ``hit`` / ``miss`` / ``coalesced`` (served by an identical call in flight) /
    ``bypassed`` (the cache could not prove freshness and ran the tool) / ``off`` (the cache
    is switched off: ``configure(runtime_cache=False)``) for ``@tool_cache``;
    ``invalidation`` for ``@invalidates``; ``traced`` for ``@tool``; ``nudged`` (the loop
    guard answered instead of the tool), ``blocked`` (it raised) and ``error`` (the tool
    raised) for any of them. ``loop``: the pattern the loop guard found at this call
    (``repeat``, ``cycle``, ``no_progress``, ``depth``), else None. ``index`` counts every
    call of the session, also those the bounded trace no longer holds.
    """

    index: int
    name: str
    resource: str
    args_digest: str
    outcome: str
    loop: str | None = None


_SET_INDEX, _SET_NAME, _SET_RESOURCE, _SET_DIGEST, _SET_OUTCOME, _SET_LOOP = slot_setters(
    ToolCallTrace, "index", "name", "resource", "args_digest", "outcome", "loop")
_NEW = object.__new__


def _new_trace(index: int, name: str, resource: str, args_digest: str, outcome: str,
               loop: str | None) -> ToolCallTrace:
    """``ToolCallTrace(...)`` without the generated frozen ``__init__`` (``object.__setattr__``
    per field: ~1 µs of a tool-cache hit) or the class call (0.9 -> 0.55 µs): the slots' own
    setters leave it exactly as frozen."""
    t: ToolCallTrace = _NEW(ToolCallTrace)
    _SET_INDEX(t, index)
    _SET_NAME(t, name)
    _SET_RESOURCE(t, resource)
    _SET_DIGEST(t, args_digest)
    _SET_OUTCOME(t, outcome)
    _SET_LOOP(t, loop)
    return t


#: The agent session open in this context. The tool cache reads it directly on its hit path
#: (``SESSION.get()``, one call fewer than :func:`current_session`).
SESSION: contextvars.ContextVar[agent_session | None] = contextvars.ContextVar(
    "dejacache_agent_session", default=None
)


class agent_session(Block["agent_session"]):  # lower case like ``scope``: used as a context manager
    """Run agent work for one tenant and session (sync and async context manager).

    ``tenant`` isolates ``scope="tenant"`` and ``"session"`` tool caches; ``session_id``
    (random when omitted) isolates ``scope="session"`` ones; ``loop_guard`` traces every
    tool call of this session. Re-entering the same object continues its loop-guard state.
    ``calls`` lists the session's latest ``max_calls`` tool calls in the order they finished
    (name, resource, argument digest, outcome, loop verdict).
    """

    __slots__ = ("_counter", "_tokens", "calls", "guard", "loop_guard", "prefixes",
                 "session_id", "tenant", "written")

    def __init__(
        self,
        tenant: str | None = None,
        session_id: str | None = None,
        *,
        loop_guard: LoopGuard | None = None,
        max_calls: int = 1000,
    ) -> None:
        for what, value in (("tenant", tenant), ("session_id", session_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ScopeError(
                    f"agent_session {what} must be a non-empty str or None, got {value!r}: "
                    "an empty or non-string id usually means a missing header or lookup, and "
                    "would share one cache between unrelated callers"
                )
        if loop_guard is not None and not isinstance(loop_guard, LoopGuard):
            raise ScopeError(f"loop_guard must be a dejacache.LoopGuard, not "
                             f"{type(loop_guard).__name__}")
        self.tenant = tenant
        self.session_id = session_id if session_id is not None else uuid.uuid4().hex
        self.loop_guard = loop_guard
        self.guard: GuardState | None = (
            loop_guard.new_state(tenant, self.session_id) if loop_guard is not None else None
        )
        # Key prefixes, computed once per session (hot path: one dict lookup per call).
        self.prefixes: dict[str, str] = {"global": global_prefix()}
        if tenant is not None:
            self.prefixes["tenant"] = tenant_prefix(tenant)
            self.prefixes["session"] = session_prefix(tenant, self.session_id)
        self._tokens: list[contextvars.Token[agent_session | None]] = []
        if not isinstance(max_calls, int) or isinstance(max_calls, bool) or max_calls < 0:
            raise ScopeError(f"max_calls must be an int >= 0, got {max_calls!r}")
        #: The latest ``max_calls`` tool calls, oldest first (a ring: long sessions stay
        #: bounded; 0 keeps none). See :class:`ToolCallTrace`.
        self.calls: collections.deque[ToolCallTrace] = collections.deque(maxlen=max_calls)
        self._counter = itertools.count()
        #: The resources ``@invalidates`` tools wrote in this session: one that no
        #: ``@tool_cache`` reads is named in a warning when the session ends.
        self.written: set[str] = set()

    @property
    def tracing(self) -> bool:
        return self.calls.maxlen != 0

    def note_call(self, name: str, resource: str, args_digest: str, outcome: str,
                  loop: str | None = None) -> None:
        """Append one call to :attr:`calls` (thread-safe: deque appends are atomic)."""
        self.calls.append(_new_trace(next(self._counter), name, resource, args_digest,
                                     outcome, loop))

    def __enter__(self) -> agent_session:
        self._tokens.append(SESSION.set(self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        reset_own(self._tokens)  # (one object may be open in several tasks/threads at once)
        self._check_writes(exc_info[0] is None)

    def _check_writes(self, clean: bool) -> None:
        # (not when the block raised: under -W error the warning would replace its error)
        if not self.written or self._tokens or not clean:
            return
        from ._layout import unread_note

        note = unread_note(self.written, "in this process")
        self.written = set()
        if note is not None:
            import warnings

            warnings.warn(note, DejacacheWarning, stacklevel=3)

    def __repr__(self) -> str:
        return (f"agent_session(tenant={self.tenant!r}, session_id={self.session_id!r}, "
                f"loop_guard={self.loop_guard!r})")


def current_session() -> agent_session | None:
    """The innermost active session in this context, or None."""
    return SESSION.get()
