"""What both faces of ``dejacache mcp-proxy`` share: the real server's identity and
transport, and what kind of message a client wrote."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple

from ..errors import ConfigurationError
from ..scope import scope

__all__ = ["Upstream", "is_request", "require_mcp", "server_of", "unrecorded"]


def require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigurationError("dejacache mcp-proxy needs the mcp package: "
                                 "pip install 'dejacache[mcp]'") from None


class Upstream(NamedTuple):
    """The real server: its identity and who is asking as the recorder keys them, the
    server as ``mcp_tool_cache``'s ``server=`` names it, and how to open its transport."""

    identity: dict[str, Any]
    callers: Any  # mcp._callers.Callers
    named: Any
    open: Callable[[], Any]


def server_of(command: list[str], url: str | None,
              env: Mapping[str, str] | None = None) -> Upstream:
    """The server at ``url``, or the stdio server ``command`` launched with ``env`` (the
    ``--env`` entries: who launches it, part of its identity) over the proxy's own
    environment (passed on, never read into the identity)."""
    from ..mcp import _callers, _wire

    if url is not None:
        from mcp.client.streamable_http import streamable_http_client

        return Upstream(_wire.http_identity(url, "streamable-http"), _callers.callers_of(url),
                        url, lambda: unrecorded(streamable_http_client(url)))
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    named = StdioServerParameters(command=command[0], args=command[1:], env=dict(env or {}))
    params = StdioServerParameters(command=command[0], args=command[1:],
                                   env={**os.environ, **(env or {})})
    identity, callers = _callers.stdio_launch(command[0], command[1:], env)
    return Upstream(identity, callers, named,
                    lambda: unrecorded(stdio_client(params, errlog=sys.stderr)))


@contextlib.asynccontextmanager
async def unrecorded(transport: contextlib.AbstractAsyncContextManager[Any]
                     ) -> AsyncIterator[Any]:
    """The real transport, opened outside the cassette: while a block is open the ``mcp``
    transports record (``mcp/_patch.py``), and this one is the wire the recorder forwards
    to, not a session to record again."""
    with scope(cache_key=None):
        async with transport as streams:
            yield streams


def is_request(item: Any) -> tuple[bool, str]:
    """(a request, its method) of one ``SessionMessage`` (mcp 2's types, or 1.x root
    models)."""
    msg = getattr(item.message, "root", item.message)
    method = getattr(msg, "method", "")
    return hasattr(msg, "id") and bool(method), method
