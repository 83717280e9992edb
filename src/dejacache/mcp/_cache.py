"""``mcp_tool_cache(session)``: an MCP session whose read-only tools are cached, by the tools'
own annotations.

The rules (:func:`tool_role`, pure): a tool whose annotations say ``readOnlyHint: true`` is
a *reader*: its results are cached per tool and canonical arguments, exactly as
``@tool_cache`` caches a function (tenant/session scoping, TTL, single-flight, error results
never kept). Every other tool is a *writer*: MCP's defaults are ``readOnlyHint: false`` and
``destructiveHint: true``, so a tool that declares nothing, or declares that it changes
things, may have changed what the readers read; it invalidates them before and after it
runs, as ``@invalidates`` does (O(1) generation counters). A tool without annotations is
cached only when the caller names it in ``cacheable=``.

What a writer invalidates: the server's cached results (one resource per server), or, with
``resources={"close_ticket": "tickets", "get_ticket": "tickets"}``, the named resource only,
so ``get_weather`` stays cached while tickets change. A writer not named there invalidates
every resource of the server, named or not: it may change what any of them reads.

The cached call is one module-level ``tool_cache`` reader per (server, resource and cache
settings), shared by every session wrapped with them: an application that opens a session
per request still shares one cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ..config import Duration
from ..errors import ConfigurationError
from ..runtime.tools import invalidates, tool_cache
from ..stores._base import Store

__all__ = ["CachedSession", "mcp_tool_cache", "tool_role"]

_LOCK = threading.Lock()
_CALLERS: dict[tuple[Any, ...], Any] = {}


def tool_role(annotations: Mapping[str, Any] | None, opted_in: bool) -> str:
    """``"read"`` (cache it) or ``"write"`` (invalidate) for a tool's annotations, given as
    the wire spells them (``readOnlyHint``) or as mcp's model fields (``read_only_hint``)."""
    if opted_in:
        return "read"
    if not annotations:
        return "write"
    hint = annotations.get("readOnlyHint", annotations.get("read_only_hint"))
    return "read" if hint is True else "write"


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("dejacache.mcp_tool_cache needs the mcp package: "
                                 "pip install 'dejacache[mcp]'") from None


async def _call(tool: str, arguments: Any, session: Any, options: dict[str, Any]) -> Any:
    return await session.call_tool(tool, arguments, **options)


def _caller(role: str, resources: tuple[str, ...], server: str,
            settings: tuple[Any, ...]) -> Any:
    """The shared ``tool_cache`` reader of ``resources[0]``, or the ``invalidates`` writer
    of every resource in ``resources``."""
    scope, ttl, store, max_bytes, counter_max_age = settings
    key = (role, server, resources, scope, ttl, id(store), max_bytes, counter_max_age)
    with _LOCK:
        fn = _CALLERS.get(key)
        if fn is None:
            name = f"mcp:{server}"
            if role == "read":
                fn = tool_cache(resource=resources[0], scope=scope, ttl=ttl, store=store,
                                max_bytes=max_bytes, name=name, ignore=("session", "options"),
                                counter_max_age=counter_max_age)(_call)
            else:
                fn = _call
                for resource in resources:
                    fn = invalidates(resource, store=store, name=name)(fn)
            _CALLERS[key] = fn
        return fn


class CachedSession:
    """An MCP ``ClientSession`` (or ``mcp.Client``) whose ``call_tool`` goes through the
    runtime cache; every other attribute is the session's own."""

    def __init__(self, session: Any, *, server: str | None, cacheable: frozenset[str],
                 resources: Mapping[str, str], settings: tuple[Any, ...]) -> None:
        self.session = session
        self._server = server
        self._cacheable = cacheable
        self._resources = dict(resources)
        self._settings = settings
        self._hints: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def server_name(self) -> str:
        """``server=``, else the name the server gave in the handshake."""
        if self._server is not None:
            return self._server
        s = self.session
        info = getattr(s, "server_info", None)  # ClientSession and mcp.Client (mcp 2)
        for attr in ("initialize_result", "discover_result"):
            result = getattr(s, attr, None)
            info = info or getattr(result, "server_info", None) or getattr(
                result, "serverInfo", None)
        name = getattr(info, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                "mcp_tool_cache cannot tell which server this session talks to (it has not "
                "finished its handshake, or the server gave no name): pass server='...'")
        self._server = name
        return name

    async def annotations(self, tool: str) -> Any:
        """The tool's annotations as its server lists them (listed once; again for a tool
        the listing did not have)."""
        if self._hints is None or tool not in self._hints:
            listed = await self.session.list_tools()
            self._hints = {t.name: t.annotations for t in listed.tools}
        hints = self._hints.get(tool)
        if hints is None:
            return None
        return hints.model_dump(by_alias=True, exclude_none=True) if hasattr(
            hints, "model_dump") else hints

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None,
                        **options: Any) -> Any:
        hints = None if name in self._cacheable else await self.annotations(name)
        role = tool_role(hints, name in self._cacheable)
        server = self.server_name()
        everything = f"mcp:{server}"
        if name in self._resources:
            targets: tuple[str, ...] = (self._resources[name],)
        elif role == "read":
            targets = (everything,)
        else:  # a write nobody placed may change what any of the server's tools reads
            targets = tuple(sorted({everything, *self._resources.values()}))
        fn = _caller(role, targets, server, self._settings)
        return await fn(name, arguments or {}, self.session, options)


def mcp_tool_cache(
    session: Any,
    *,
    server: str | None = None,
    cacheable: Iterable[str] = (),
    resources: Mapping[str, str] | None = None,
    scope: str = "tenant",
    ttl: Duration | None = 3600.0,
    store: Store | str | None = None,
    max_bytes: int = 1024 * 1024,
    counter_max_age: Duration = 0.0,
) -> CachedSession:
    """Wrap an MCP session so ``call_tool`` results of its read-only tools are cached.

    ``readOnlyHint`` tools are cached per tool and arguments; every other tool invalidates
    the server's cached results (or its resource in ``resources``) before and after it
    runs. ``cacheable`` names tools without annotations to cache anyway. ``server`` names
    the server in keys and counters (default: the name from its handshake). ``scope``,
    ``ttl``, ``store``, ``max_bytes`` and ``counter_max_age`` are ``tool_cache``'s: per
    tenant by default, so calls run inside ``dejacache.agent_session(tenant=...)``.
    """
    _require_mcp()
    settings = (scope, ttl, store, max_bytes, counter_max_age)
    if isinstance(session, CachedSession):
        session = session.session
    return CachedSession(session, server=server, cacheable=frozenset(cacheable),
                         resources=resources or {}, settings=settings)
