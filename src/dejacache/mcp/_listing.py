"""What ``mcp_tool_cache`` knows of a session's tools: their annotations as last listed, and
when that stops being true.

A listing holds until the server says its tools changed (``notifications/tools/list_changed``,
which a 2026-07-28 server sends on a ``subscriptions/listen`` stream), the session connects
again (another handshake result), or, on a 2026-07-28 connection, the listing's own
``ttlMs`` runs out (a server that sets none is listed before each call: its hints are
honoured, never widened). A tool the listing does not have is listed for once more, and is
unknown if it is still not there.

How a change is seen: ``ClientSession`` takes its message handler when it is built, and has
no public way to add one later, so the handler is wrapped in place (:class:`ToolsWatch`,
once per session: a counter of changes, then the session's own handler). A session of
another shape, without that attribute, has its tools listed before each call instead.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.lowlevel

from ._identity import handshake_of, inner_session

__all__ = ["Listing", "ToolsWatch", "watch"]

_CHANGED = "notifications/tools/list_changed"
_HANDLER = "_message_handler"  # ClientSession's (mcp 1.x and 2.x)
_MAX_TTL = 24 * 3600.0  # the SDK's cap on any cached entry (``MAX_TTL_MS``)


class ToolsWatch:
    """A session's message handler, counting tool-list changes first."""

    __slots__ = ("changes", "handler")

    def __init__(self, handler: Callable[[Any], Awaitable[None]]) -> None:
        self.handler = handler
        self.changes = 0

    async def __call__(self, message: Any) -> None:
        # Counted before the first await: the notification's task runs before the caller of
        # the call that caused it resumes, so that caller's next call sees the change.
        inner = getattr(message, "root", message)  # mcp 1.x: ServerNotification(root=...)
        if getattr(inner, "method", None) == _CHANGED:
            self.changes += 1
        await self.handler(message)


def watch(session: Any) -> ToolsWatch | None:
    """The change counter in front of ``session``'s message handler (installed once), or
    None when the session has no handler to wrap."""
    inner = inner_session(session)
    handler = getattr(inner, _HANDLER, None)
    if isinstance(handler, ToolsWatch):
        return handler
    if handler is None or not callable(handler):
        return None
    w = ToolsWatch(handler)
    setattr(inner, _HANDLER, w)
    return w


def _dumped(hints: Any) -> Any:
    if hints is not None and hasattr(hints, "model_dump"):
        return hints.model_dump(by_alias=True, exclude_none=True)
    return hints


def _ttl(listed: Any) -> float | None:
    """Seconds the listing holds by its 2026-07-28 ``ttlMs`` (None: no such hint; a
    handshake-era session drops the field, so it is set only where it counts)."""
    if "ttl_ms" not in getattr(listed, "model_fields_set", ()):
        return None
    ttl = getattr(listed, "ttl_ms", 0)
    return min(max(ttl, 0) / 1000, _MAX_TTL) if isinstance(ttl, int) else 0.0


class Listing:
    """The annotations of one session's tools (see the module docstring)."""

    __slots__ = ("_basis", "_clock", "_expires", "_hints", "_watch", "session")

    def __init__(self, session: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self._clock = clock
        self._hints: dict[str, Any] | None = None
        self._basis: tuple[Any, int] | None = None
        self._expires: float | None = None
        self._watch: ToolsWatch | None = None

    def _now_basis(self) -> tuple[Any, int] | None:
        if self._watch is None:
            self._watch = watch(self.session)
        if self._watch is None:
            return None  # changes cannot be seen: nothing holds past this call
        return handshake_of(self.session), self._watch.changes

    def fresh(self) -> bool:
        """Whether the last listing still holds."""
        if self._hints is None or self._basis is None:
            return False
        basis = self._now_basis()
        if basis is None or basis[0] is not self._basis[0] or basis[1] != self._basis[1]:
            return False
        return self._expires is None or self._clock() < self._expires

    async def _list(self) -> dict[str, Any]:
        basis = self._now_basis()  # before the request: a change while it runs counts
        listed = await self.session.list_tools()
        ttl = _ttl(listed)
        self._expires = None if ttl is None else self._clock() + ttl
        self._basis = basis
        self._hints = {t.name: t.annotations for t in listed.tools}
        return self._hints

    async def annotations(self, tool: str) -> tuple[bool, Any]:
        """``(listed, annotations)`` of ``tool``, as its server lists them now (annotations
        as the wire spells them, or None for a tool that declares none)."""
        if self._hints is not None:
            # The session handles a notification in a task of its own, started as the frame
            # arrived: after a listen's consumer was woken by the same frame. Let it count.
            await anyio.lowlevel.checkpoint()
        hints = self._hints if self.fresh() else None
        if hints is None or tool not in hints:
            hints = await self._list()
        if tool not in hints:
            return False, None
        return True, _dumped(hints[tool])
