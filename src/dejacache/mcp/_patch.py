"""MCP transports recorded and replayed inside blocks: switched on while a block is open.

Loaded by ``_arming`` (which counts the blocks) when ``dejacache._blockwatch`` finds ``mcp`` in
the process: a block in a process that never imported ``mcp`` loads none of this.

While a test-facing block (``scope()``, ``cassette()``) is open, the ``mcp`` package's public
transport functions (``stdio_client``, ``streamable_http_client`` and mcp 1.x's
``streamablehttp_client``, ``sse_client``) yield the recording pair of ``_proxy.py`` to
sessions opened in a block, and their own pair elsewhere. Like HTTP interception
(``http/intercept.py``), the change is made when a block opens and undone when the last one
closes, for modules already imported and, through ``_blockwatch``'s import hook, for one imported
inside the block (a framework that imports ``mcp`` lazily). ``_arming`` holds its lock around
every call here.

How: each function is an ``asynccontextmanager`` whose one closure cell holds the generator
function it runs. The cell's contents are swapped, not the module attribute: ``mcp/__init__``,
``mcp.client.client`` and the frameworks bind ``stdio_client`` by name at import, and would
keep the original function. ``__wrapped__`` names the generator function, so the cell is
found, and checked, by identity; a shape that does not match is left alone with a warning.

A replay miss reaches the session as a JSON-RPC error marked ``MISS_MARK``; the JSON-RPC
dispatcher's ``send_raw_request`` (mcp 2) is wrapped to raise the ``ReplayMiss`` instead, as
an instance of both ``ReplayMiss`` and ``MCPError``, so frameworks that catch ``MCPError``
behave as they would for any failed call while the test sees the miss.

This module imports nothing from ``mcp`` (nor anyio) until a block finds it imported.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from types import ModuleType

from ..errors import DejacacheWarning, ReplayMiss
from ..scope import current

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["loaded", "patch_imported", "patched", "unpatch_all"]

# (module, function, transport, what the function yields after (read, write) when unstarted)
_TRANSPORTS: tuple[tuple[str, str, str], ...] = (
    ("mcp.client.stdio", "stdio_client", "stdio"),
    ("mcp.client.streamable_http", "streamable_http_client", "streamable-http"),
    ("mcp.client.streamable_http", "streamablehttp_client", "streamable-http"),
    ("mcp.client.sse", "sse_client", "sse"),
)
_DISPATCHER = ("mcp.shared.jsonrpc_dispatcher", "JSONRPCDispatcher")
_WATCHED = frozenset({m for m, _, _ in _TRANSPORTS} | {_DISPATCHER[0]})

# module name -> [(undo)]
_UNDO: dict[str, list[Callable[[], None]]] = {}


def _server(transport: str, args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> tuple[dict[str, Any], Any]:
    """The server's identity, and who the session says is asking: its URL's credentials
    and its identity headers, or its launch's credentials and ``env=`` (``_callers``)."""
    from . import _wire
    from ._callers import callers_of, stdio_launch

    if transport == "stdio":
        params = args[0] if args else kwargs["server"]
        return stdio_launch(params.command, [str(a) for a in params.args or ()], params.env,
                            None if params.cwd is None else str(params.cwd))
    url = str(args[0] if args else kwargs["url"])

    return _wire.http_identity(url, transport), callers_of(url, _headers(args, kwargs))


def _headers(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """The headers an HTTP transport sends with every request: ``headers=`` (``sse_client``,
    mcp 1.x's ``streamablehttp_client``), or its ``http_client``'s own (mcp 2)."""
    out: list[tuple[str, str]] = []
    client = kwargs.get("http_client")
    if client is not None:
        out += [(str(k), str(v)) for k, v in client.headers.multi_items()]
    given = kwargs.get("headers", args[1] if len(args) > 1 else None)
    if isinstance(given, Mapping):
        out += [(str(k), str(v)) for k, v in given.items()]
    return out


# One replacement per original, kept: a scope entered around every request patches and
# restores the transports each time, and building them again cost ~30 µs a block.
@functools.cache
def _replacement(orig: Callable[..., Any], transport: str, name: str) -> Callable[..., Any]:
    opened = contextlib.asynccontextmanager(orig)
    # mcp 1.x's streamablehttp_client yields a session-id getter after the pair.
    extra: tuple[Any, ...] = ((lambda: None),) if name == "streamablehttp_client" else ()

    async def transport_in_block(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        from . import _wire

        eff = current()
        if not _wire.recording(eff):
            async with opened(*args, **kwargs) as streams:
                yield streams
            return
        from ._proxy import session_streams

        server, callers = _server(transport, args, kwargs)
        async with session_streams(eff, server, lambda: opened(*args, **kwargs),
                                   extra, callers) as streams:
            yield streams

    # Its name, docstring and (through ``__wrapped__``) signature stay the transport's own.
    functools.update_wrapper(transport_in_block, orig)
    transport_in_block.__dejacache_patch__ = True  # type: ignore[attr-defined]
    return transport_in_block


def _swap_cell(fn: Any, new: Any, old: Any) -> bool:
    cell = _cell_holding(fn, old)
    if cell is None:
        return False
    cell.cell_contents = new
    return True


def _cell_holding(fn: Any, value: Any) -> Any:
    # Looked up once per (wrapper, function) pair: a block opened per request swaps the
    # transports each time, and walking the closure under a context manager cost ~5 µs each.
    key = (fn, value)
    cell = _CELLS.get(key)
    if cell is not None and cell.cell_contents is value:
        return cell
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            if cell.cell_contents is value:
                _CELLS[key] = cell
                return cell
        except ValueError:  # an empty cell
            continue
    return None


_CELLS: dict[tuple[Any, Any], Any] = {}  # the transports' own functions: a few, kept


def _patch_transport(mod: ModuleType, name: str, transport: str) -> Callable[[], None] | None:
    fn = getattr(mod, name, None)
    orig = getattr(fn, "__wrapped__", None)
    if fn is None or orig is None:
        return None
    if getattr(orig, "__dejacache_patch__", False):
        return None  # an alias of a function already done
    new = _replacement(orig, transport, name)
    if not _swap_cell(fn, new, orig):
        import warnings  # (not loaded at interpreter start; only this rare case warns)

        warnings.warn(f"dejacache: {mod.__name__}.{name} is not the asynccontextmanager it "
                      "was; MCP sessions over it are not recorded or replayed",
                      DejacacheWarning, stacklevel=2)
        return None
    fn.__wrapped__ = new

    def undo() -> None:
        _swap_cell(fn, orig, new)
        fn.__wrapped__ = orig

    return undo


def _raise_miss(exc: Exception) -> None:
    data = getattr(exc, "data", None)
    if not isinstance(data, dict):
        return
    from ._proxy import MISS_MARK, take_miss

    miss = take_miss(data.get(MISS_MARK))
    if miss is not None:
        raise _as_mcp_error(miss, exc) from None


_MIXED: dict[tuple[type, type], type] = {}


def _as_mcp_error(miss: ReplayMiss, exc: Exception) -> ReplayMiss:
    base = type(exc)
    cls: Any = _MIXED.get((type(miss), base))
    if cls is None:
        name = f"{type(miss).__name__}[{base.__module__}.{base.__qualname__}]"
        cls = _MIXED[(type(miss), base)] = type(name, (type(miss), base),
                                                 {"__module__": ReplayMiss.__module__,
                                                  "__str__": ReplayMiss.__str__})
    out = cls.__new__(cls)
    base.__init__(out, *exc.args)  # MCPError's fields: code, message, data
    out.__dict__.update(miss.__dict__)
    out.args = miss.args
    return out  # type: ignore[no-any-return]


@functools.cache
def _miss_raiser(orig: Callable[..., Any]) -> Callable[..., Any]:
    async def send_raw_request(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await orig(self, *args, **kwargs)
        except Exception as exc:
            _raise_miss(exc)
            raise

    send_raw_request.__dejacache_patch__ = True  # type: ignore[attr-defined]
    send_raw_request.__wrapped__ = orig  # type: ignore[attr-defined]
    return send_raw_request


def _patch_dispatcher(mod: ModuleType) -> Callable[[], None] | None:
    cls = getattr(mod, _DISPATCHER[1], None)
    orig = getattr(cls, "send_raw_request", None) if cls is not None else None
    if orig is None or getattr(orig, "__dejacache_patch__", False):
        return None

    send_raw_request = _miss_raiser(orig)
    cls.send_raw_request = send_raw_request  # type: ignore[union-attr]

    def undo() -> None:
        cls.send_raw_request = orig  # type: ignore[union-attr]

    return undo


def _patch_module(mod: ModuleType) -> None:
    name = mod.__name__
    if name in _UNDO:
        return
    undo: list[Callable[[], None]] = []
    for module, fn, transport in _TRANSPORTS:
        if module == name:
            u = _patch_transport(mod, fn, transport)
            if u is not None:
                undo.append(u)
    if name == _DISPATCHER[0]:
        u = _patch_dispatcher(mod)
        if u is not None:
            undo.append(u)
    _UNDO[name] = undo


def patch_imported() -> None:
    """Patch the watched modules imported so far (a block opens)."""
    for name in sorted(_WATCHED):
        mod = sys.modules.get(name)
        if mod is not None and not getattr(mod.__spec__, "_initializing", False):
            _patch_module(mod)


def unpatch_all() -> None:
    """Undo every patch (the last block closed)."""
    for undo in _UNDO.values():
        for u in reversed(undo):
            u()
    _UNDO.clear()


def loaded(module: ModuleType) -> None:
    """``module`` was imported while a block is open: patch it if it is watched."""
    if module.__name__ in _WATCHED:
        _patch_module(module)


def patched() -> list[str]:
    # A copy taken in one step: the lock that guards the patches is ``_arming``'s.
    return sorted(n for n, u in list(_UNDO.items()) if u)
