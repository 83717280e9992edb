"""The ticket-desk MCP server (fake_mcp_server.py) on each transport the ``mcp`` client has.

* ``StdioServer``: ``stdio_client`` starts ``python fake_mcp_server.py`` as a process of its
  own per session (``params`` is what a framework's ``MCPServerStdio`` takes). Each process
  is a fresh desk.
* ``HttpServer``: one server on a free loopback port, in a thread, over streamable HTTP
  (``url`` ends in ``/mcp``) or SSE (``/sse``); every session shares its desk. ``held()``
  keeps the port after ``stop()`` and counts the connections that still arrive.

All of them write to a ``Ledger`` (processes or servers started, MCP requests, HTTP
requests), so a replay can be shown to have started nothing and connected nowhere.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import anyio
from fake_mcp_server import LEDGER_ENV, Desk, Ledger, build
from mcp import ClientSession, StdioServerParameters

from provider_support import DropListener

__all__ = ["SCRIPT", "HttpServer", "StdioServer", "arrived", "on_change", "run_dir", "session"]

SCRIPT = pathlib.Path(__file__).with_name("fake_mcp_server.py")


def run_dir(temp: pathlib.Path, n: int, made_by: Literal["pytest", "mkdtemp"] = "pytest"
            ) -> pathlib.Path:
    """The directory the ``n``-th run of a test makes under the temp directory ``temp``
    (``$TMPDIR``), shaped as pytest's ``tmp_path`` (another session number, another xdist
    worker) or as ``tempfile.mkdtemp()``'s: a test's next run, in one test."""
    made = (temp / "pytest-of-ci" / f"pytest-{n}" / f"popen-gw{n % 2}" / "test_desk0"
            if made_by == "pytest" else temp / f"tmprun{n:05d}")
    made.mkdir(parents=True, exist_ok=True)
    return made


# What a transport yields: the (read, write) memory-object stream pair a ClientSession takes.
Streams = tuple[Any, Any]

# A session that waits longer than this for an answer fails with an MCPError instead of
# hanging the test; a loopback answer takes milliseconds, a server start about a second.
READ_TIMEOUT = 20.0


class StdioServer:
    """The server as ``stdio_client`` starts it: this interpreter running the script."""

    transport = "stdio"

    def __init__(self, ledger: Ledger, log: pathlib.Path) -> None:
        self.ledger = ledger
        self.log = log  # the processes' stderr, for a failing test to read
        # The ledger's path goes in the environment: command and arguments are the server's
        # identity and must not change from one test directory to the next.
        self.params = StdioServerParameters(command=sys.executable, args=[str(SCRIPT)],
                                            env={LEDGER_ENV: ledger.path})

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Streams]:
        from mcp.client.stdio import stdio_client

        # The process inherits the file's descriptor at spawn; ours closes after the session.
        with self.log.open("a") as errlog:
            async with stdio_client(self.params, errlog=errlog) as streams:
                yield streams


class HttpServer:
    """The server on a free loopback port, served by uvicorn in a thread."""

    def __init__(self, ledger: Ledger, transport: Literal["streamable-http", "sse"],
                 **options: Any) -> None:
        self.ledger = ledger
        self.transport = transport
        self.options = options  # build()'s (cache_hints)
        self.desk = Desk()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        path = "/mcp" if transport == "streamable-http" else "/sse"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        self._ready = threading.Event()
        self._up = False
        self._thread: threading.Thread | None = None
        self._server: Any = None

    def start(self) -> HttpServer:
        import uvicorn

        mcp_app = build(self.ledger, self.desk, **self.options)
        app = (mcp_app.streamable_http_app() if self.transport == "streamable-http"
               else mcp_app.sse_app())
        # The socket is bound and listening before the thread starts, so a client that
        # connects early waits in the kernel's backlog instead of being refused; start()
        # returns once the app has finished its startup (its MCP session manager runs).
        config = uvicorn.Config(self._asgi(app), log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name=f"mcp-{self.transport}",
                                        daemon=True)
        self.ledger.write("start", transport=self.transport, port=self.port)
        self._thread.start()
        if not self._ready.wait(30) or not self._up:
            self.stop()
            raise RuntimeError(f"the {self.transport} MCP server did not start")
        return self

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._ready.set()  # a server that failed to start must not leave start() waiting

    def _asgi(self, app: Any) -> Any:
        async def asgi(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.ledger.write("http", method=scope["method"], path=scope["path"])
            if scope["type"] != "lifespan":
                return await app(scope, receive, send)

            async def observed(message: Any) -> None:
                await send(message)
                if message["type"] == "lifespan.startup.complete":
                    self._up = True
                    self._ready.set()

            await app(scope, receive, observed)

        return asgi

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), f"the {self.transport} MCP server did not stop"
        self._sock.close()

    @contextlib.contextmanager
    def held(self) -> Iterator[DropListener]:
        """After ``stop()``: the port stays taken, and every connection to it is counted."""
        drop = DropListener(self.port)
        try:
            yield drop
        finally:
            drop.close()

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Streams]:
        if self.transport == "sse":
            from mcp.client.sse import sse_client

            async with sse_client(self.url) as streams:
                yield streams
        else:
            from mcp.client.streamable_http import streamable_http_client

            async with streamable_http_client(self.url) as streams:
                yield streams


@contextlib.asynccontextmanager
async def session(server: StdioServer | HttpServer, **kwargs: Any) -> AsyncIterator[ClientSession]:
    """A ``ClientSession`` over the server's transport, entered but not initialized."""
    kwargs.setdefault("read_timeout_seconds", READ_TIMEOUT)
    async with server.client() as (read, write), ClientSession(read, write, **kwargs) as s:
        yield s


def on_change(changed: anyio.Event) -> Any:
    """A session's message handler that sets ``changed`` when the tool list changes."""

    async def handle(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    return handle


async def arrived(changed: anyio.Event) -> None:
    """Wait for ``changed``.

    Over streamable HTTP a server sends a notification on the session's own stream, in no order
    with the answer of the call that caused it: a client hears of it when it arrives."""
    with anyio.fail_after(READ_TIMEOUT):
        await changed.wait()
