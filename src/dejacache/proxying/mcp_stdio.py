"""``dejacache mcp-proxy``: a stdio MCP server in front of the real one, for any MCP client.

The client (an IDE, a TypeScript agent, an inspector) starts ``dejacache mcp-proxy
--cassette FILE -- CMD ARGS`` where it would start ``CMD ARGS``. Every message it writes goes
through the same session-layer recorder as an in-process ``stdio_client`` inside a cassette
block (``mcp/_proxy.py``'s ``session_streams``): a request is keyed by the server's identity
(``CMD``'s file name and arguments, or ``--upstream``'s URL), its method and params, and
answered from the cassette, or by the real server, which is started only when a call must go
live (at once in ``record`` mode, at the first miss in ``auto``, never in ``replay``).
The cassette is a session like the HTTP proxy's (``_sessions.py``): requests in flight
together replay in any order, a sequential client is one chain, and the file is written
when the client disconnects or the proxy is told to stop.

``--cache`` is the runtime face instead (``mcp_tool_cache``'s rules, ``mcp_runtime.py``):
read-only tools cached in a store, every other tool invalidating them, nothing recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import signal
import sys
from typing import Any

from ._mcp_link import is_request, server_of

__all__ = ["run_mcp_proxy"]

# Seconds the requests a client left in flight when it closed its side may still take.
_GRACE = 5.0


async def _pump(session: Any, reads: Any, writes: Any, answers: Any, to_client: Any) -> None:
    """Client -> recorder (a request in a task of its own, answered as it is done; the
    handshake and notifications in order) and recorder -> client, until the client closes
    its side; requests still in flight then get ``_GRACE`` seconds to be answered."""
    from ..mcp._wire import HANDSHAKE

    async def back() -> None:
        async for item in answers:
            await to_client.send(item)

    answering = asyncio.ensure_future(back())
    pending: set[asyncio.Future[Any]] = set()
    try:
        async for item in reads:
            if isinstance(item, Exception):  # a line that is no JSON-RPC message
                print(f"dejacache mcp-proxy: {item}", file=sys.stderr)
                continue
            request, method = is_request(item)
            if request and method not in HANDSHAKE:
                task = asyncio.ensure_future(session.run(lambda item=item: writes.send(item)))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                await session.run(lambda item=item: writes.send(item))
        if pending:
            await asyncio.wait(set(pending), timeout=_GRACE)
    finally:
        for task in (*pending, answering):
            task.cancel()
        await to_client.aclose()  # the transport's writer ends with it


async def _record_replay(args: argparse.Namespace, command: list[str], rerecord: str) -> int:
    from mcp.server.stdio import stdio_server

    from ..mcp._proxy import session_streams
    from ._config import spec_from_args
    from ._sessions import Session

    cassette = pathlib.Path(args.cassette).absolute()
    session = await Session("mcp", spec_from_args(args, cassette, rerecord)).open()
    upstream = server_of(command, args.upstream, args.env)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    status = 0
    try:
        async with stdio_server() as (reads, to_client), \
                session_streams(session.eff, upstream.identity, upstream.open,
                                callers=upstream.callers) as (answers, writes, *_):
            serving = asyncio.ensure_future(_pump(session, reads, writes, answers, to_client))
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
    except Exception as exc:  # the real server could not be started (record mode)
        print(f"dejacache mcp-proxy: error: {_cause(exc)}", file=sys.stderr)
        status = 1
    finally:
        summary = await session.close(status == 0)
        saved = "written" if summary["saved"] else "not written"
        print(f"dejacache mcp-proxy: {summary['cassette']} ({summary['mode']}): "
              f"{summary['replayed']} replayed, {summary['recorded']} recorded, "
              f"{summary['missed']} missed; {saved}", file=sys.stderr)
        if summary["error"]:  # a save that failed, a strict contract broken: not a pass
            print(f"dejacache mcp-proxy: {summary['error']}", file=sys.stderr)
            status = status or 1
    return status


def _cause(exc: BaseException) -> BaseException:
    """The one error inside the task groups an error came up through."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run_mcp_proxy(args: argparse.Namespace, command: list[str], rerecord: str) -> int:
    """``dejacache mcp-proxy --cassette``: record and replay until the client disconnects."""
    return asyncio.run(_record_replay(args, command, rerecord))
