"""One session's worth of calls to the ticket desk, run where it is recorded (the test
process) and where it is replayed (a fresh interpreter: ``python mcp_flow.py SPEC CASSETTE
MODE`` prints the answers as JSON; MODE ``default`` leaves it to the cassette: ``replay``
under ``CI``).

Every kind of answer a recording must keep is asked for once: the handshake, listings, a
structured tool result, a tool error result (``isError``), a JSON-RPC error, a tool that
reports progress, a resource and a prompt. ``SPEC`` names the server as the test started
it: ``{"transport": "stdio", "command", "args", "env"}`` or ``{"transport":
"streamable-http" | "sse", "url"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any


def dumped(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def failure(exc: BaseException) -> dict[str, Any]:
    from dejacache import ReplayMiss

    out: dict[str, Any] = {"raised": type(exc).__name__,
                           "replay_miss": isinstance(exc, ReplayMiss)}
    error = getattr(exc, "error", None)
    if error is not None:
        out.update(code=error.code, message=error.message, data=error.data)
    if isinstance(exc, ReplayMiss):
        out["text"] = str(exc)
    return out


@contextlib.asynccontextmanager
async def transport(spec: dict[str, Any]) -> AsyncIterator[Any]:
    if spec["transport"] == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=spec["command"], args=spec["args"],
                                       env=spec.get("env"))
        async with stdio_client(params) as streams:
            yield streams
    elif spec["transport"] == "sse":
        from mcp.client.sse import sse_client

        async with sse_client(spec["url"]) as streams:
            yield streams
    else:
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(spec["url"]) as streams:
            yield streams


async def desk_session(spec: dict[str, Any]) -> dict[str, Any]:
    """The calls, in one session; each answer (or failure) by name."""
    from mcp import ClientSession

    out: dict[str, Any] = {}
    progress: list[list[Any]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append([done, total, message])

    async with transport(spec) as (read, write), ClientSession(
            read, write, read_timeout_seconds=30) as s:
        out["initialize"] = dumped(await s.initialize())
        out["tools"] = dumped(await s.list_tools())
        out["get_ticket"] = dumped(await s.call_tool("get_ticket", {"id": 1}))
        out["close_closed"] = dumped(await s.call_tool("close_ticket", {"id": 3}))
        try:
            await s.call_tool("get_ticket", {"id": 99})
        except Exception as exc:
            out["missing"] = failure(exc)
        out["search"] = dumped(await s.call_tool("search_docs", {"query": "timeout"},
                                                 progress_callback=on_progress))
        out["progress"] = progress
        out["resource"] = dumped(await s.read_resource("ticket://2"))
        out["prompt"] = dumped(await s.get_prompt("triage", {"id": "2"}))
    return out


# Three read-only calls gathered, answered 0, 0.6 and 1.2 s late: live, the first answer's
# validating tool listing is back before the others arrive, so the session lists once; in a
# replay every answer is there at once, and each call lists for itself.
GATHERED = [("echo", {"text": text, "delay_ms": ms}) for text, ms in
            (("a", 0), ("b", 600), ("c", 1200))]


@contextlib.asynccontextmanager
async def client_of(spec: dict[str, Any], kind: str) -> AsyncIterator[Any]:
    """A ``ClientSession`` after its handshake (``kind`` ``"session"``: the handshake-era
    protocol), or an ``mcp.Client`` (``"client"``: 2026-07-28 where the server speaks it)."""
    if kind == "session":
        from mcp import ClientSession

        async with transport(spec) as (read, write), ClientSession(
                read, write, read_timeout_seconds=30) as s:
            await s.initialize()
            yield s
        return
    from mcp import Client, StdioServerParameters

    server: Any = spec.get("url") or StdioServerParameters(
        command=spec["command"], args=spec["args"], env=spec.get("env"))
    async with Client(server, read_timeout_seconds=30) as c:
        yield c


async def gathered(spec: dict[str, Any], path: str, mode: str, kind: str = "session",
                   calls: list[tuple[str, dict[str, Any]]] = GATHERED,
                   strict: bool = False) -> list[Any]:
    """``calls`` gathered over one session, without listing the tools first: each answer,
    or its failure (``strict``: under a strict cassette)."""
    with dejacache_cassette(path, mode, strict=strict):
        async with client_of(spec, kind) as s:
            got = await asyncio.gather(*(s.call_tool(n, a) for n, a in calls),
                                       return_exceptions=True)
    return [failure(x) if isinstance(x, BaseException) else dumped(x) for x in got]


def dejacache_cassette(path: str, mode: str, *, strict: bool = False) -> Any:
    import dejacache

    return dejacache.cassette(path, mode=None if mode == "default" else mode, strict=strict)


async def run(spec: dict[str, Any], path: str, mode: str) -> dict[str, Any]:
    import dejacache

    t0 = time.perf_counter()
    try:
        async with dejacache.cassette(path, mode=None if mode == "default" else mode):
            out = await desk_session(spec)
    except Exception as exc:
        out = {"failed": failure(exc)}
    out["seconds"] = time.perf_counter() - t0
    return out


async def ask(spec: dict[str, Any], path: str, mode: str, tool: str,
              arguments: dict[str, Any]) -> dict[str, Any]:
    """One tool call after the handshake: the answer, or the failure."""
    from mcp import ClientSession

    import dejacache

    block = dejacache.cassette(path, mode=None if mode == "default" else mode)
    async with block, transport(spec) as (read, write), \
            ClientSession(read, write, read_timeout_seconds=30) as s:
        await s.initialize()
        try:
            return {"result": dumped(await s.call_tool(tool, arguments))}
        except Exception as exc:
            return {"failed": failure(exc)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    if len(sys.argv) > 4:
        out = asyncio.run(ask(spec, sys.argv[2], sys.argv[3], sys.argv[4],
                              json.loads(sys.argv[5])))
    else:
        out = asyncio.run(run(spec, sys.argv[2], sys.argv[3]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
