"""``dejacache mcp-proxy --cache``: ``mcp_tool_cache`` for any MCP client, at runtime.

The proxy sits between the client and the real server, forwarding every message, except the
client's ``tools/call`` requests: those go through ``mcp_tool_cache`` (``mcp/_cache.py``),
whose rules decide, from the tools' own annotations as the server lists them, which results
are kept (``readOnlyHint`` tools, per tool and arguments, TTL, single-flight, error results
never kept) and which calls invalidate them (every other tool). Nothing is recorded; the
store is the runtime one (``--store``, default the project's SQLite cache), so several
clients (an IDE's agents, CI jobs through Redis) share it.

``mcp_tool_cache`` wraps a session; here the session is :class:`_Link`'s facade: its
``call_tool`` and ``list_tools`` are requests the proxy sends the server under ids of its
own, its handshake is the one the client made, and the server's notifications pass through
its message handler (how the cache sees ``notifications/tools/list_changed``) on their way
to the client.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import types
from collections.abc import Callable
from typing import Any

import anyio

from ..mcp._cache import mcp_tool_cache
from ..runtime.session import agent_session
from ._mcp_link import is_request, server_of

__all__ = ["run_cached", "serve_cached"]


class _Link:
    """The connection to the real server, shared by the client's messages and the cache's
    own requests (ids ``dejacache-N``, answered here and never shown to the client)."""

    def __init__(self, codec: Callable[[dict[str, Any]], Any], to_server: Any,
                 to_client: Any) -> None:
        self.make = codec
        self.to_server = to_server
        self.to_client = to_client
        self.initialize_result: Any = None
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._handshake: dict[Any, bool] = {}  # the client's initialize request ids

    async def _message_handler(self, message: Any) -> None:
        """Where the cache's change counter sits (``mcp/_listing.watch``)."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        rid = f"dejacache-{next(self._ids)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = waiter
        try:
            await self.to_server.send(self.make({"jsonrpc": "2.0", "id": rid,
                                                 "method": method, "params": params}))
            answer = await waiter
        finally:
            self._waiting.pop(rid, None)
        if "error" in answer:
            raise _ServerError(answer["error"])
        result: dict[str, Any] = answer.get("result") or {}
        return result

    async def list_tools(self) -> Any:
        tools, cursor = [], None
        while True:
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools += [types.SimpleNamespace(name=t.get("name"), annotations=t.get("annotations"))
                      for t in page.get("tools", [])]
            cursor = page.get("nextCursor")
            if not cursor:
                return types.SimpleNamespace(tools=tools)

    async def call_tool(self, name: str, arguments: dict[str, Any], **options: Any) -> Any:
        return await self.request("tools/call", {"name": name, "arguments": arguments})

    def noted(self, data: dict[str, Any]) -> None:
        if data.get("method") == "initialize":
            self._handshake[data.get("id")] = True

    async def from_server(self, item: Any, data: dict[str, Any]) -> None:
        rid = data.get("id")
        waiter = self._waiting.get(rid) if isinstance(rid, str) else None
        if waiter is not None and "method" not in data:
            waiter.set_result(data)
            return
        if self._handshake.pop(rid, False) and "result" in data:
            info = data["result"].get("serverInfo") or {}
            self.initialize_result = types.SimpleNamespace(
                server_info=types.SimpleNamespace(name=info.get("name"),
                                                  version=info.get("version")))
        if "method" in data and "id" not in data:
            await self._message_handler(types.SimpleNamespace(method=data["method"]))
        await self.to_client.send(item)


class _ServerError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", "error"))
        self.error = error


def _dump(item: Any) -> dict[str, Any]:
    msg = getattr(item.message, "root", item.message)
    return msg.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]


async def _cached_call(cached: Any, link: _Link, data: dict[str, Any], tenant: str) -> None:
    params = data.get("params") or {}
    try:
        with agent_session(tenant=tenant):
            result = await cached.call_tool(params.get("name", ""), params.get("arguments"))
        reply = {"jsonrpc": "2.0", "id": data["id"], "result": result}
    except _ServerError as exc:
        reply = {"jsonrpc": "2.0", "id": data["id"], "error": exc.error}
    except Exception as exc:  # the cache's own refusal (a cacheable= writer), the link gone
        reply = {"jsonrpc": "2.0", "id": data["id"],
                 "error": {"code": -32603, "message": f"dejacache: {exc}"}}
    await link.to_client.send(link.make(reply))


def run_cached(args: argparse.Namespace, command: list[str]) -> int:
    """``dejacache mcp-proxy --cache``: serve until the client disconnects."""
    return asyncio.run(serve_cached(args, command))


async def serve_cached(args: argparse.Namespace, command: list[str]) -> int:
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    def make(data: dict[str, Any]) -> Any:
        return SessionMessage(jsonrpc_message_adapter.validate_python(data))

    upstream = server_of(command, args.upstream, args.env)
    async with stdio_server() as (reads, to_client), \
            upstream.open() as (from_server, to_server, *_):
        link = _Link(make, to_server, to_client)
        cached = mcp_tool_cache(link, server=upstream.named, cacheable=args.cacheable,
                                ttl=args.ttl, store=args.store)
        async with anyio.create_task_group() as tg:

            async def back() -> None:
                async for item in from_server:
                    if not isinstance(item, Exception):
                        await link.from_server(item, _dump(item))

            tg.start_soon(back)
            async for item in reads:
                if isinstance(item, Exception):
                    continue
                data = _dump(item)
                request, method = is_request(item)
                link.noted(data)
                if request and method == "tools/call":
                    tg.start_soon(_cached_call, cached, link, data, args.tenant)
                else:
                    await to_server.send(item)
            tg.cancel_scope.cancel()
        await to_client.aclose()
    return 0

