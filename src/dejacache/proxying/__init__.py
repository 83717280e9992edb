"""Drivers of the exchange outside the process: ``dejacache proxy`` (HTTP, any language's
agent) and ``dejacache mcp-proxy`` (stdio MCP, any MCP client), and ``dejacache.proxy()``,
which runs the first for a Python test suite that drives a non-Python agent.

Each is one more driver of what in-process interception already does: a request arriving
over HTTP (or a JSON-RPC message over stdio) becomes the same exchange request an in-process
transport makes, so keys, redaction, id aliasing, streams, strict order, partial replay and
ageing come with it, and a cassette recorded through the proxy is an ordinary cassette.
Nothing here is imported by ``import dejacache``.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .handle import ProxyProcess, ProxySession, proxy

__all__ = ["ProxyProcess", "ProxySession", "proxy"]

__getattr__, __dir__ = attach(__name__, {"ProxyProcess": ".handle", "ProxySession": ".handle",
                                         "proxy": ".handle"})
