"""``mcp_tool_cache(session)``: an MCP session whose read-only tools are cached, by the tools'
own annotations.

The rules (:func:`tool_role`, pure): a tool whose annotations say ``readOnlyHint: true`` is
a *reader*: its results are cached per tool and canonical arguments, exactly as
``@tool_cache`` caches a function (tenant/session scoping, TTL, single-flight, error results
never kept). Every other tool is a *writer*: MCP's defaults are ``readOnlyHint: false`` and
``destructiveHint: true``, so a tool that declares nothing, or declares that it changes
things, may have changed what the readers read; it invalidates them before and after it
runs, as ``@invalidates`` does (O(1) generation counters). A tool that declares no
annotations is cached only when the caller names it in ``cacheable=``; naming one that
declares it changes things is refused (``ConfigurationError``), and a tool the server does
not list is never cached.

Whose cache: the server's identity (``_identity.py``: the connection, plus the name and
version from its handshake), never its name alone. What the annotations are: the server's
current listing (``_listing.py``: listed again when the server says its tools changed, on
reconnect, and when a 2026-07-28 listing's ``ttlMs`` runs out).

What a writer invalidates: the server's cached results (one resource per server), or, with
``resources={"close_ticket": "tickets", "get_ticket": "tickets"}``, the named resource only,
so ``get_weather`` stays cached while tickets change. A writer not named there invalidates
every resource of the server, named or not: it may change what any of them reads.

The cached call is one module-level ``tool_cache`` reader per (server, resource and cache
settings), shared by every session wrapped with them: an application that opens a session
per request still shares one cache, when its sessions name the same server.

What is stored of a result is stored without the credentials the session's connection names
(``_identity``: a URL's, a stdio launch's ``env=`` and command line) wherever it quotes them,
by the rule every recorded answer follows (``_callers.Callers.unechoed``); the caller who ran
the tool gets its result as it came, a hit the placeholder.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from .._secrets import key_loaded, secret_key
from ..config import Duration
from ..errors import ConfigurationError
from ..runtime.tools import invalidates, tool_cache
from ..stores._protocols import Store
from ._identity import Identity, handshake_of, identify
from ._listing import Listing

__all__ = ["CachedSession", "mcp_tool_cache", "tool_role"]

_LOCK = threading.Lock()
_CALLERS: dict[tuple[Any, ...], Any] = {}
# The callers of servers known by no connection (a ClientSession given no server=): one
# table per session, dropped with it. A process that opens a session per request would
# otherwise keep every session's readers, and their results, for good.
_OWNED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary())


def _hint(annotations: Mapping[str, Any], wire: str, model: str) -> Any:
    return annotations.get(wire, annotations.get(model))


def tool_role(annotations: Mapping[str, Any] | None, opted_in: bool, *, tool: str = "",
              listed: bool = True) -> str:
    """``"read"`` (cache it) or ``"write"`` (invalidate) for a tool's annotations, given as
    the wire spells them (``readOnlyHint``) or as mcp's model fields (``read_only_hint``).
    ``opted_in``: named in ``cacheable=``; ``listed``: False when the server does not list
    the tool (its annotations are unknown: never cached)."""
    if not listed:
        return "write"
    hints = annotations or {}
    read_only = _hint(hints, "readOnlyHint", "read_only_hint")
    if opted_in:
        destructive = _hint(hints, "destructiveHint", "destructive_hint")
        if destructive is True or read_only is False:
            said = "destructiveHint: true" if destructive is True else "readOnlyHint: false"
            raise ConfigurationError(
                f"mcp_tool_cache: cacheable= names the tool {tool!r}, but its server declares "
                f"{said}: a tool that says it changes things is never cached. cacheable= is "
                f"for tools that declare no annotations; remove {tool!r} from it")
        return "read"
    return "read" if read_only is True else "write"


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("dejacache.mcp_tool_cache needs the mcp package: "
                                 "pip install 'dejacache[mcp]'") from None


async def _call(tool: str, arguments: Any, session: Any, options: dict[str, Any]) -> Any:
    return await session.call_tool(tool, arguments, **options)


async def _read(tool: str, arguments: Any, session: Any, options: dict[str, Any],
                given: _Given) -> Any:
    """A reader's run: the result as the cache keeps it (:meth:`_Given.stored`)."""
    return given.stored(await session.call_tool(tool, arguments, **options))


class _Given:
    """One reader call: who its session says is asking, and the result as it came when what
    is stored of it differs (it quoted one of their credentials)."""

    __slots__ = ("callers", "result")

    def __init__(self, callers: Any) -> None:
        self.callers = callers
        self.result: Any = None

    def stored(self, result: Any) -> Any:
        """``result`` without the session's credentials wherever it quotes them, looked for
        in its wire form (a ``CallToolResult``: text, structured content, error text), and
        rebuilt as its own type when one is found. Only when the tool ran (a hit never):
        8.8 us for a ``get_ticket`` result beside a stdio call's milliseconds, most of it
        pydantic's dump; nothing for a session whose connection names no credential."""
        dump = getattr(result, "model_dump", None)
        if not self.callers.secrets or dump is None:
            return result
        wire = dump(mode="json", by_alias=True, exclude_none=True)
        kept = self.callers.unechoed(wire)
        if kept is wire:
            return result
        self.result = result
        return type(result).model_validate(kept)


def _table(server: Identity, own: dict[tuple[Any, ...], Any]) -> dict[tuple[Any, ...], Any]:
    """Where the callers of ``server`` are kept (under ``_LOCK``); ``own``: the wrapper's
    table, for an owner that cannot be referred to weakly."""
    if server.owner is None:
        return _CALLERS
    try:
        return _OWNED.setdefault(server.owner, {})
    except TypeError:
        return own


def _caller(role: str, resources: tuple[str, ...], server: Identity,
            settings: tuple[Any, ...], own: dict[tuple[Any, ...], Any]) -> Any:
    """The shared ``tool_cache`` reader of ``resources[0]``, or the ``invalidates`` writer
    of every resource in ``resources``."""
    scope, ttl, store, max_bytes, counter_max_age = settings
    key = (role, server.key, resources, scope, ttl, id(store), max_bytes, counter_max_age)
    with _LOCK:
        table = _table(server, own)
        fn = table.get(key)
        if fn is None:
            if role == "read":
                fn = tool_cache(resource=resources[0], scope=scope, ttl=ttl, store=store,
                                max_bytes=max_bytes, name=server.key,
                                ignore=("session", "options", "given"),
                                counter_max_age=counter_max_age)(_read)
            else:
                fn = _call
                for resource in resources:
                    fn = invalidates(resource, store=store, name=server.key)(fn)
            table[key] = fn
        return fn


class CachedSession:
    """An MCP ``ClientSession`` (or ``mcp.Client``) whose ``call_tool`` goes through the
    runtime cache; every other attribute is the session's own."""

    def __init__(self, session: Any, *, server: Any, cacheable: frozenset[str],
                 resources: Mapping[str, str], settings: tuple[Any, ...]) -> None:
        self.session = session
        self._server = server
        self._cacheable = cacheable
        self._resources = dict(resources)
        self._settings = settings
        self._listing = Listing(session)
        self._identity: tuple[Any, Identity] | None = None  # (handshake, identity)
        self._own: dict[tuple[Any, ...], Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def _identified(self) -> Identity:
        handshake = handshake_of(self.session)
        if self._identity is None or self._identity[0] is not handshake:
            self._identity = handshake, identify(self.session, self._server)
        return self._identity[1]

    def server_name(self) -> str:
        """The server as metrics show it: ``server=`` when it is a label, else the name the
        server gave in its handshake (or its host, or its command)."""
        return self._identified().name

    async def annotations(self, tool: str) -> Any:
        """The tool's annotations as its server lists them now (None: it declares none, or
        is not listed)."""
        return (await self._listing.annotations(tool))[1]

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None,
                        **options: Any) -> Any:
        listed, hints = await self._listing.annotations(name)
        role = tool_role(hints, name in self._cacheable, tool=name, listed=listed)
        if not key_loaded():  # credentials in the identity are masked with the user's key
            import anyio.to_thread

            await anyio.to_thread.run_sync(secret_key)
        server = self._identified()
        if name in self._resources:
            targets: tuple[str, ...] = (self._resources[name],)
        elif role == "read":
            targets = (server.key,)
        else:  # a write nobody placed may change what any of the server's tools reads
            targets = tuple(sorted({server.key, *self._resources.values()}))
        fn = _caller(role, targets, server, self._settings, self._own)
        if role != "read":
            return await fn(name, arguments or {}, self.session, options)
        given = _Given(server.callers)
        result = await fn(name, arguments or {}, self.session, options, given)
        return result if given.result is None else given.result  # as it came, when it ran


def mcp_tool_cache(
    session: Any,
    *,
    server: Any = None,
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
    runs. ``cacheable`` names tools without annotations to cache anyway. ``server`` is what
    the session is connected to (a URL, ``StdioServerParameters`` or a label), so sessions
    naming the same server share its cache; an ``mcp.Client`` knows it, a ``ClientSession``
    without it has a cache of its own. ``scope``, ``ttl``, ``store``, ``max_bytes`` and
    ``counter_max_age`` are ``tool_cache``'s: per tenant by default, so calls run inside
    ``dejacache.agent_session(tenant=...)``.
    """
    _require_mcp()
    settings = (scope, ttl, store, max_bytes, counter_max_age)
    if isinstance(session, CachedSession):
        session = session.session
    return CachedSession(session, server=server, cacheable=frozenset(cacheable),
                         resources=resources or {}, settings=settings)
