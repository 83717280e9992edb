"""A real MCP server for the MCP tests: a small ticket desk built on the ``mcp`` package.

``MCPServer`` (FastMCP's name since mcp 2) with what a recorder and a tool cache must get
right: tools whose MCP annotations say what they do (``readOnlyHint`` for ``search_docs``,
``get_ticket``, ``get_weather`` and ``echo``; ``destructiveHint`` for ``close_ticket``, whose
change the read-only tools and the ticket resources then show; no annotations at all on
``add_note``), a tool error result (``close_ticket`` on a closed ticket, ``add_note`` of an
empty note: ``isError``), a JSON-RPC error (``get_ticket`` of an unknown id), progress
notifications (``search_docs``), resources (the static ``tickets://open`` and the template
``ticket://{id}``) and a prompt (``triage``).

Two tools drive what a test needs of time and change: ``echo(text, delay_ms)`` answers after
a delay, so calls gathered by a client come back in the order the test chooses, and
``redeploy(tool, read_only)`` registers a tool again with other annotations and says the
tool list changed (``notifications/tools/list_changed`` to the session that asked, on the
handshake-era protocol; an event on ``subscriptions/listen`` streams on 2026-07-28), as a
server redeployed under its clients does.

``whoami(fail, spell)`` quotes the credential the server was given (its ``GITHUB_TOKEN``, the
request's ``Authorization``, its ``sid`` cookie's value or ``?api_key=``) as a server refusing
one does ("Bad credentials: KEY"): in its result, in an error result (``fail="tool"``) or a
JSON-RPC error (``"rpc"``); ``spell`` quotes it in another spelling, as a tool relaying an
upstream's JSON text or URL would (``SPELLINGS``).

Every answer carries the server's running call number and a fresh nonce, so an answer that
came from the server is told apart from a replayed one by its text alone. ``get_weather(city)``
is the tool the loopback model provider calls (it always asks for ``{"city": "Paris"}``).

The ledger counts what reached a server: a file of JSON lines, one ``start`` per process
(or per HTTP server), one ``request`` per inbound MCP request or notification (written by a
server middleware, so ``initialize`` and failed calls count too) and, over HTTP, one
``http`` per HTTP request. A replay that starts nothing and connects nowhere leaves it
untouched. Its path comes from the environment (``FAKE_MCP_LEDGER``), never the command line:
a stdio server's identity is its command and arguments, which must be the same in the
recording and in the replay while each test's ledger lives in its own temporary directory.

Run as a script it serves stdio (``python fake_mcp_server.py``), as ``stdio_client`` starts
it; ``build()`` makes the app that ``mcp_servers.py`` serves over streamable HTTP and SSE.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel

__all__ = ["LEDGER_ENV", "SERVER_NAME", "SPELLINGS", "Desk", "Ledger", "Ticket", "build"]

LEDGER_ENV = "FAKE_MCP_LEDGER"
SERVER_NAME = "ticket-desk"


class Ledger:
    """An append-only file of JSON lines: what reached the server, from any process.

    Each line is one ``os.write`` on a file opened with ``O_APPEND``, so lines written by
    several processes (or by a server thread and the test) never interleave.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def write(self, event: str, **fields: Any) -> None:
        line = orjson.dumps({"event": event, "pid": os.getpid(), **fields}) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                rows = [orjson.loads(line) for line in f]
        except FileNotFoundError:
            return []
        return [r for r in rows if event is None or r["event"] == event]

    def starts(self) -> int:
        """Server processes (stdio) or servers (HTTP) started."""
        return len(self.events("start"))

    def requests(self) -> list[str]:
        """Inbound MCP methods in arrival order, a call as ``tools/call get_ticket``."""
        return [f"{r['method']} {r['name']}" if r.get("name") else r["method"]
                for r in self.events("request")]


class Ticket(BaseModel):
    id: int
    title: str
    status: str
    notes: list[str]
    seen: int  # the server's call number when this answer was made: fresh per call
    nonce: str


class Desk:
    """The server's state: three tickets and a call counter (one per server)."""

    def __init__(self) -> None:
        self.tickets: dict[int, dict[str, Any]] = {
            1: {"title": "Login page times out", "status": "open", "notes": []},
            2: {"title": "Export drops the last row", "status": "open", "notes": []},
            3: {"title": "Typo in the footer", "status": "closed", "notes": []},
        }
        self._n = 0
        # MCPServer runs sync tools, resources and prompts in worker threads, so calls gathered
        # by one client meet here at once.
        self._lock = threading.Lock()

    def next_n(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def ticket(self, ticket_id: int) -> dict[str, Any]:
        if ticket_id not in self.tickets:
            # A JSON-RPC error, not a tool error result: the caller asked for what is not there.
            raise MCPError(code=INVALID_PARAMS, message=f"no ticket {ticket_id}",
                           data={"id": ticket_id})
        return self.tickets[ticket_id]

    def close(self, ticket_id: int) -> bool:
        """Close a ticket; False when it was closed already."""
        t = self.ticket(ticket_id)
        with self._lock:
            was_open = t["status"] == "open"
            t["status"] = "closed"
        return was_open

    def stamp(self) -> str:
        return f"#{self.next_n()} {secrets.token_hex(3)}"


class _LedgerMiddleware:
    """Writes each inbound request and notification to the ledger before it is handled."""

    def __init__(self, ledger: Ledger | None) -> None:
        self.ledger = ledger

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if self.ledger is not None:
            params = ctx.params or {}
            name = params.get("name") or params.get("uri")
            self.ledger.write("request", method=ctx.method,
                              **({"name": name} if isinstance(name, str) else {}))
        return await call_next(ctx)


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                              open_world_hint=False)


def build(ledger: Ledger | None = None, desk: Desk | None = None,
          cache_hints: dict[Any, Any] | None = None) -> MCPServer:
    """A fresh ticket-desk server; ``ledger`` records what reaches it; ``cache_hints`` the
    2026-07-28 ``ttlMs``/``cacheScope`` of its listings (``MCPServer``'s; default: none,
    every answer immediately stale and private)."""
    desk = desk or Desk()
    app = MCPServer(SERVER_NAME, version="1.0", instructions="A ticket desk for tests.",
                    log_level="WARNING", middleware=[_LedgerMiddleware(ledger)],
                    cache_hints=cache_hints)
    _tools(app, desk)
    _resources_and_prompts(app, desk)
    return app


def _tools(app: MCPServer, desk: Desk) -> None:
    deployed: dict[str, Callable[..., Any]] = {}

    @app.tool(annotations=READ_ONLY)
    async def search_docs(query: str, ctx: Context) -> str:
        """Search the help-desk documentation."""
        await ctx.report_progress(1, 2, "searching")
        await ctx.report_progress(2, 2, "ranked")
        return f"3 documents match {query!r} ({desk.stamp()})"

    @app.tool(annotations=READ_ONLY)
    def get_ticket(id: int) -> Ticket:
        """Read one ticket."""
        t = desk.ticket(id)
        n = desk.next_n()
        return Ticket(id=id, title=t["title"], status=t["status"], notes=list(t["notes"]),
                      seen=n, nonce=secrets.token_hex(3))

    @app.tool(annotations=DESTRUCTIVE)
    def close_ticket(id: int) -> str:
        """Close a ticket (it cannot be reopened)."""
        if not desk.close(id):
            raise ToolError(f"ticket {id} is already closed")  # an isError result
        return f"closed ticket {id} ({desk.stamp()})"

    @app.tool()
    def add_note(id: int, text: str) -> str:
        """Add a note to a ticket (declares no annotations: a client cannot know it writes)."""
        if not text.strip():
            raise ToolError("a note needs some text")  # an isError result
        desk.ticket(id)["notes"].append(text)
        return f"noted on ticket {id} ({desk.stamp()})"

    def get_weather(city: str) -> str:
        """Look up the current weather in a city."""
        return f"sunny in {city} ({desk.stamp()})"

    app.add_tool(get_weather, annotations=READ_ONLY)
    deployed["get_weather"] = get_weather

    @app.tool(annotations=READ_ONLY)
    async def echo(text: str, delay_ms: int = 0) -> str:
        """Answer with the text, after ``delay_ms``."""
        await anyio.sleep(delay_ms / 1000)
        return f"{text} ({desk.stamp()})"

    @app.tool(annotations=READ_ONLY)
    def whoami(ctx: Context, fail: str = "", spell: str = "") -> str:
        """Say which credential the server was given, quoting it."""
        said = f"Bad credentials: {SPELLINGS[spell](_credential(ctx))}"
        if fail == "tool":
            raise ToolError(said)  # an isError result
        if fail == "rpc":
            raise MCPError(code=INVALID_PARAMS, message=said, data={"said": said})
        return f"{said} ({desk.stamp()})"

    @app.tool(annotations=DESTRUCTIVE)
    async def redeploy(tool: str, read_only: bool, ctx: Context) -> str:
        """Register a tool again with other annotations, and say the tool list changed."""
        app.remove_tool(tool)
        app.add_tool(deployed[tool], name=tool,
                     annotations=READ_ONLY if read_only else DESTRUCTIVE)
        await ctx.notify_tools_changed()  # 2026-07-28: to subscriptions/listen streams
        # The handshake-era notification, to the session that asked.
        await ctx.request_context.session.send_tool_list_changed()
        return f"redeployed {tool} ({desk.stamp()})"


def _credential(ctx: Context) -> str:
    """The credential this server was started with, or this request carries."""
    request: Any = ctx.request_context.request
    if request is None:  # stdio: what the process was started with
        return os.environ.get("GITHUB_TOKEN", "")
    auth = request.headers.get("authorization") or request.cookies.get("sid")
    return str(auth) if auth else str(request.query_params.get("api_key", ""))


# How ``whoami(spell=...)`` spells what it quotes: as it is, JSON text escaping ``/`` (PHP)
# or ``+`` and ``=`` (``\\u002B``), a URL's percent-encoding in either case of hex digits.
SPELLINGS: dict[str, Callable[[str], str]] = {
    "": lambda k: k,
    "slash": lambda k: k.replace("/", "\\/"),
    "unicode": lambda k: k.replace("+", "\\u002B").replace("=", "\\u003d"),
    "percent": lambda k: urllib.parse.quote(k, safe=""),
    "percent-lower": lambda k: re.sub("%..", lambda m: m.group(0).lower(),
                                      urllib.parse.quote(k, safe="")),
    # Inside a blob of the request's bytes, base64-encoded (as an echo server answers them).
    "base64": lambda k: base64.b64encode(b"\x00" + k.encode()).decode(),
}


def _resources_and_prompts(app: MCPServer, desk: Desk) -> None:
    @app.resource("tickets://open", mime_type="application/json")
    def open_tickets() -> str:
        """The tickets still open."""
        ids = [i for i, t in desk.tickets.items() if t["status"] == "open"]
        return orjson.dumps({"open": ids, "stamp": desk.stamp()}).decode()

    @app.resource("ticket://{id}", mime_type="application/json")
    def ticket(id: str) -> str:
        """One ticket."""
        t = desk.ticket(int(id))
        return orjson.dumps({"id": int(id), **t, "stamp": desk.stamp()}).decode()

    @app.prompt()
    def triage(id: str) -> str:
        """Ask the model to triage a ticket."""
        t = desk.ticket(int(id))
        return f"Triage ticket {id} ({t['status']}): {t['title']}. [{desk.stamp()}]"


def main() -> None:
    path = os.environ.get(LEDGER_ENV)
    ledger = Ledger(path) if path else None
    if ledger is not None:
        ledger.write("start", transport="stdio")
    build(ledger).run("stdio")


if __name__ == "__main__":
    main()
