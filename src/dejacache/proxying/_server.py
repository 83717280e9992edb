"""The proxy's server: it listens on loopback, routes each request to a session and an
upstream, and saves its cassettes when it stops.

``http://HOST:PORT/<upstream>/<rest>`` goes to the default session (``--cassette``);
``/_dejacache/s/<id>/<upstream>/<rest>`` (or the header ``x-dejacache-session: <id>``) to a
session a test runner opened; ``/_dejacache...`` is the control endpoint (``_control.py``).
A connection (``_connection.py``) answers its requests one after the other, each started
at once in its session's context (``Session.begin``), in a task from where it first waits.
A connection over ``max_connections`` is answered ``503`` at once and closed; a body that
would take the bodies held over ``max_buffered`` is refused so too (``_limits.py``).

Stopping (SIGTERM, SIGINT, or the command it ran exiting) stops accepting, lets requests in
flight finish for ``grace`` seconds, then closes the sessions: the default cassette is
written (atomically, by the cassette's writer), sessions their runner never closed are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import pathlib
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .. import __version__
from ..cassettes.block import default_mode
from ..cassettes.placeholder_keys import KEY_VARIABLES, PLACEHOLDER
from ..errors import ConfigurationError
from ..http._libs import LIBRARIES, Lib, lib_named
from ..http.providers import all_providers
from ..http.recording import recording_bound
from ._connection import IDLE_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT, Connection, start
from ._control import PREFIX, SESSION_PREFIX, control
from ._forward import FORWARDED, Forwarder, Out, error_bytes, json_bytes
from ._http1 import Request
from ._limits import MAX_BUFFERED, MAX_CONNECTIONS, MAX_MESSAGE, MAX_RECORDED_STREAM, Budget
from ._sessions import Session, Sessions, SessionSpec
from ._websocket import Upgraded, relay
from .upstreams import BASE_URL_ENV, Upstream, split_target, unknown_upstream

__all__ = ["ProxyConfig", "ProxyServer", "command_env", "is_loopback", "serve"]

@dataclasses.dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What ``dejacache proxy`` runs with. ``spec``: the settings of the default session,
    and the defaults of those opened by a test runner."""

    spec: SessionSpec
    upstreams: Mapping[str, Upstream]
    cassette: pathlib.Path | None = None
    cassette_dir: pathlib.Path = pathlib.Path(".")
    host: str = "127.0.0.1"
    port: int = 0
    allow_remote: bool = False
    max_body: int = 256 * 1024 * 1024
    read_timeout: float = READ_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    max_buffered: int = MAX_BUFFERED
    max_message: int = MAX_MESSAGE
    max_recorded_stream: int = MAX_RECORDED_STREAM
    grace: float = 10.0


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _lib() -> Lib:
    for name in LIBRARIES:
        lib = lib_named(name)
        if lib is not None:
            return lib
    raise ConfigurationError("dejacache proxy needs httpx2 or httpx: "
                             "pip install 'dejacache[proxy]'")


class ProxyServer:
    """One proxy (see the module docstring): ``await start()``, then ``await stop()``."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.forwarder = Forwarder(_lib())
        self.sessions = Sessions(config.cassette_dir)
        self.url = ""
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[Connection] = set()
        self.admitted = Budget(config.max_connections)  # connections open, refused ones not
        self.buffered = Budget(config.max_buffered)  # bytes of request bodies held
        self.stopping = False
        self._generic = next(p for p in all_providers() if p.name == "http")

    async def start(self) -> str:
        """Listen; the base URL. A ``ConfigurationError`` says why it cannot."""
        host = self.config.host
        if not (is_loopback(host) or self.config.allow_remote):
            raise ConfigurationError(
                f"--host {host} is not a loopback address: the proxy answers with recorded "
                "calls and forwards live ones with the caller's credentials, so it listens "
                "on loopback only unless --allow-remote is given")
        if self.config.cassette is not None:  # read first: a damaged file fails by name
            await self.sessions.open_default(dataclasses.replace(self.config.spec,
                                                           cassette=self.config.cassette))
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._connection, host, self.config.port)
        except OSError as exc:
            await self.sessions.close_all(grace=0.0, save=False)  # nothing ran
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConfigurationError(f"cannot listen on {host}:{self.config.port}: {why}"
                                     ) from None
        port = self._server.sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        return self.url

    async def stop(self) -> list[dict[str, Any]]:
        """Stop serving and close the sessions; what each one did."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close_if_idle()  # idle keep-alive connections: nothing to finish
        busy = [c.task for c in self._connections if c.task is not None]
        if busy:
            _, late = await asyncio.wait(busy, timeout=self.config.grace)
            for task in late:
                task.cancel()
        for conn in list(self._connections):
            conn.transport.close()
        summaries = await self.sessions.close_all(grace=1.0)
        await self.forwarder.aclose()
        return summaries

    def status(self) -> dict[str, Any]:
        default = self.sessions.default
        return {
            "dejacache": __version__, "url": self.url,
            "cassette": str(default.spec.cassette) if default is not None else None,
            "mode": default.mode if default is not None else (
                self.config.spec.mode or default_mode()),
            "cassette_dir": str(self.config.cassette_dir.resolve()),
            "upstreams": {n: u.url for n, u in sorted(self.config.upstreams.items())},
            "sessions": [s.id for s in self.sessions.all() if s is not default],
        }

    # ---------------------------------------------------------------- requests

    def _connection(self) -> Connection:
        config = self.config
        # A body larger than all the proxy may hold could never be taken: 413, not 503.
        return _Tracked(self, min(config.max_body, config.max_buffered), config.read_timeout,
                        config.idle_timeout, config.write_timeout, self.buffered)

    def refusal(self, status: int, message: str, *, close: bool = False) -> bytes:
        extra = [("connection", "close")] if close else []
        kind = "dejacache_bad_request"
        if status == 503:  # the proxy's state, not the request: it may be sent again
            extra.append(("retry-after", "1"))
            kind = "dejacache_busy"
        return json_bytes(status, {"error": {"message": f"dejacache proxy: {message}",
                                             "type": kind}}, extra)

    def answer(self, req: Request, out: Out) -> asyncio.Future[Any] | None:
        """Answer ``req``: None when it was answered at once, else the task finishing it
        (``_connection.start``). A request to a session runs in its context. The loop is
        asked for only where a task is made (``start`` says why)."""
        routed = self._route(req)
        if isinstance(routed, bytes):
            return start(out.write(routed))
        if routed is None:
            return asyncio.get_running_loop().create_task(self._control(req, out))
        session, upstream, rest = routed
        ctx = session.begin()
        ctx.run(recording_bound, self.config.max_recorded_stream)
        task: asyncio.Future[Any]
        if isinstance(out, Upgraded):
            task = asyncio.get_running_loop().create_task(
                relay(session, upstream, req, rest, out, self.config.max_message), context=ctx)
        else:
            started = start(self.forwarder.answer(session, upstream, req, rest, out), ctx)
            if started is None or started.done():
                session.end(ctx)
                return started
            task = started
        task.add_done_callback(lambda _: session.end(ctx))
        return task

    async def _control(self, req: Request, out: Out) -> None:
        status, data = await control(self, req.method, req.target.partition("?")[0], req.body)
        await out.write(json_bytes(status, data))

    def _route(self, req: Request) -> tuple[Session, Upstream, str] | bytes | None:
        """(session, upstream, rest of the path), an answer refusing the request, or None
        for the control endpoint."""
        target = req.target
        session: Session | None
        if req.get(FORWARDED) is not None:  # an upstream that leads back here
            return self.refusal(508, "this request came from this proxy: an upstream URL "
                                     "points back at it")
        if target.startswith(SESSION_PREFIX):
            sid, _, rest = target[len(SESSION_PREFIX):].partition("/")
            session = self.sessions.find(sid)
            if session is None or session.closed:
                return self.refusal(404, f"no open session {sid[:40]!r}")
            target = "/" + rest
        elif target == PREFIX or target.startswith((PREFIX + "/", PREFIX + "?")):
            return None
        else:
            sid = req.get("x-dejacache-session") or ""
            session = self.sessions.find(sid) if sid else self.sessions.default
            if session is None or session.closed:
                return self.refusal(404, (
                    f"no open session {sid[:40]!r}" if sid else
                    "no cassette for this request: start the proxy with --cassette, or open "
                    f"a session (POST {PREFIX}/sessions) and send its requests to its url"))
        name, rest = split_target(target)
        upstream = session.upstreams.get(name) or self.config.upstreams.get(name)
        if upstream is None:
            table = {**self.config.upstreams, **session.upstreams}
            return error_bytes(self._generic, 404, "dejacache_unknown_upstream",
                               unknown_upstream(name, table))
        return session, upstream, rest


class _Tracked(Connection):
    """A connection the server keeps track of, for ``stop``, and counts against
    ``max_connections``: one over it is turned away at once (the accept loop never waits)."""

    def __init__(self, server: ProxyServer, max_body: int, read_timeout: float,
                 idle_timeout: float, write_timeout: float, buffered: Budget) -> None:
        super().__init__(server, max_body, read_timeout, idle_timeout, write_timeout,
                         buffered)
        self.server = server
        self.admitted = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        server = self.server
        server._connections.add(self)
        self.admitted = server.admitted.take(1)
        if not self.admitted:
            self.turn_away(
                f"its limit of {server.admitted.limit} open connections is reached: retry "
                "shortly, or raise --max-connections (max_connections= of dejacache.proxy())")

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.server._connections.discard(self)
        if self.admitted:
            self.admitted = False
            self.server.admitted.give(1)


# ---------------------------------------------------------------- running it


def command_env(url: str, upstreams: Mapping[str, Upstream], mode: str,
                environ: Mapping[str, str]) -> dict[str, str]:
    """What a command run under the proxy at ``url`` finds in its environment. Replaying,
    an API key it lacks is the placeholder the pytest plugin supplies too (the SDKs refuse
    to start without one); the proxy never sends it on."""
    env = {"DEJACACHE_PROXY": url}
    for name, (var, suffix) in BASE_URL_ENV.items():
        if name in upstreams:
            env[var] = f"{url}/{name}{suffix}"
    if mode == "replay":
        env.update({k: PLACEHOLDER for k in KEY_VARIABLES if not environ.get(k)})
    return env


def _announce(url: str, ready_file: pathlib.Path | None, running: bool) -> None:
    """The base URL on stdout, on a line of its own (on stderr when it runs a command:
    stdout is then the command's, which may be a report a tool reads)."""
    if running:
        print(f"dejacache proxy: listening on {url}", file=sys.stderr, flush=True)
    else:
        print(url, flush=True)
    if ready_file is not None:
        tmp = ready_file.with_name(ready_file.name + f".{os.getpid()}.tmp")
        tmp.write_text(url + "\n", encoding="utf-8")
        os.replace(tmp, ready_file)  # whoever polls for it reads a whole line or nothing


def _report(summaries: list[dict[str, Any]]) -> None:
    for s in summaries:
        saved = "written" if s["saved"] else "not written"
        print(f"dejacache proxy: {s['cassette']} ({s['mode']}): {s['replayed']} replayed, "
              f"{s['recorded']} recorded, {s['missed']} missed; {saved}", file=sys.stderr)
        if s["error"]:
            print(f"dejacache proxy: {s['error']}", file=sys.stderr)


async def _run(config: ProxyConfig, ready_file: pathlib.Path | None,
               command: Sequence[str]) -> int:
    server = ProxyServer(config)
    url = await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    status = 0
    try:
        _announce(url, ready_file, bool(command))
        if command:
            mode = config.spec.mode or default_mode()
            env = command_env(url, config.upstreams, mode, os.environ)
            status = await _supervise(command, {**os.environ, **env}, stop)
        else:
            await stop.wait()
    finally:
        summaries = await server.stop()
        _report(summaries)
        if ready_file is not None:
            with contextlib.suppress(OSError):
                ready_file.unlink()
    # A cassette that did not hold (its save failed, a strict one's calls were not all
    # made) fails the run the command passed: CI must not go green without its recording.
    return status or (1 if any(s["error"] for s in summaries) else 0)


async def _supervise(command: Sequence[str], env: dict[str, str], stop: asyncio.Event) -> int:
    """Run ``command``; its exit status, or 0 when the proxy is told to stop first."""
    try:
        child = await asyncio.create_subprocess_exec(*command, env=env)
    except OSError as exc:
        raise ConfigurationError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
    waiting = asyncio.ensure_future(child.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not waiting.done():
        child.terminate()
        await waiting
        return 0
    return waiting.result()


def serve(config: ProxyConfig, *, ready_file: pathlib.Path | None = None,
          command: Sequence[str] = ()) -> int:
    """Run a proxy until SIGTERM/SIGINT (exit status 0) or until ``command`` exits (its
    status)."""
    return asyncio.run(_run(config, ready_file, command))
