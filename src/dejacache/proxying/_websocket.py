"""WebSocket routes through the proxy: a client's ``GET`` with ``Upgrade: websocket`` to
``/<upstream>/<rest>`` becomes a WebSocket session of the request's cassette, recorded and
replayed by the seam the in-process clients drive (``dejacache.ws.AsyncSession``).

The session is the one an in-process client would make: its handshake is the URL the
upstream would have been asked for (``wss://api.openai.com/v1/realtime?model=...``) with
the headers the client sent, so it is keyed, named (``openai.realtime``), redacted and
aliased alike, and a session recorded through the proxy replays in Python and back. To an
upstream the user named, it is keyed with that name too, by the rule HTTP requests through
the proxy follow (``upstreams.keyed_headers``).

The proxy's side of the connection speaks the protocol with ``websockets``' own sans-I/O
server (``ws._wire.Endpoint``, the one the in-process clients are answered by): it reads the
client's handshake and frames from the bytes the connection hands over (:class:`Upgraded`)
and writes the answer, the server's messages and the close as that server writes them
(its pings answered, the closing handshake made). The live leg, when the session must go
live, is a ``websockets`` client connection to the upstream with the client's headers (its
credentials reach the upstream, never a file). A replay opens no connection.

What goes wrong is said in the client's terms: a handshake the recording lacks is an HTTP
error answer in the upstream's shape (404, the miss report, as for HTTP), an upstream that
cannot be reached a 502, and a message the recording lacks closes the WebSocket with 1011.

A message is at most ``max_message`` bytes (``--max-message``), both ways; the side that
sends a larger one is closed with 1009 (the bound and the flag in the reason), before more
of it than one frame header is read. The other side is then closed as a side the proxy
leaves: the upstream with 1001 (going away: its client is gone, it did nothing wrong), the
client with 1011 (the server cannot go on with its request). A window an upstream's
message cut is not stored (``ws._message.Cut``): replayed, its message misses. A client
that leaves without a close code (its connection reset, or a close frame with none) closes
the upstream with 1001 too (``ws._message.onward``: no close frame may carry 1005 or 1006).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any
from urllib.parse import urlsplit

from ..cassettes.placeholder_keys import PLACEHOLDER, proxy_refusal
from ..errors import ConfigurationError, ReplayDivergence, ReplayMiss
from ..http.providers import Provider, all_providers
from ..ws._message import MAX_MESSAGE, Answer, Closed, Handshake, Message
from ._forward import FORWARDED, Out, error_bytes
from ._http1 import Request
from ._sessions import Session
from .upstreams import Upstream, keyed_headers

__all__ = ["Upgraded", "relay", "wants_websocket"]

# Bytes the client may have sent ahead of the relay before the proxy stops reading from it.
_QUEUED = 64
# How long a client has to answer the proxy's close frame before its connection is closed
# anyway (websockets' own close_timeout is 10 s; a client answers in well under one).
_CLOSE_TIMEOUT = 5.0
# What raises the message bound, for the 1009 close reasons.
_RAISE_WITH = "--max-message (max_message= of dejacache.proxy())"
# Request headers the live leg's own handshake writes (or that belong to the client's
# connection to the proxy): the rest are sent on as the client sent them.
_OWN = frozenset({"host", "upgrade", "connection", "keep-alive", "proxy-connection",
                  "proxy-authorization", "te", "trailer", "transfer-encoding",
                  "content-length", "expect", "sec-websocket-key", "sec-websocket-version",
                  "sec-websocket-extensions", "sec-websocket-protocol", "user-agent"})


def wants_websocket(req: Request) -> bool:
    """Whether ``req`` asks to become a WebSocket (RFC 6455: a GET upgraded to it)."""
    upgrade = req.get("upgrade")
    return (req.method == "GET" and upgrade is not None
            and any(t.strip().lower() == "websocket" for t in upgrade.split(",")))


class Upgraded(Out):
    """The client's connection once it asked for a WebSocket: what arrives next is frames,
    handed to the relay in order (:meth:`read`), not parsed as HTTP."""

    __slots__ = ("_inbound", "_paused", "away")

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__(transport)
        self._inbound: asyncio.Queue[bytes] = asyncio.Queue()
        self._paused = False
        self.away = False  # the proxy is stopping: the relay closes with 1001

    def going_away(self) -> None:
        """The proxy is stopping: the relay ends the session now (1001) rather than at the
        end of the grace period."""
        self.away = True
        self._inbound.put_nowait(b"")

    def feed(self, data: bytes) -> None:
        if data:
            self._inbound.put_nowait(data)
            if self._inbound.qsize() > _QUEUED and not self._paused:
                self._paused = True  # a client faster than its session: wait for it
                self.transport.pause_reading()

    def lost(self) -> None:
        """The client's end of the connection is gone (read as ``b""``)."""
        self._inbound.put_nowait(b"")

    async def read(self) -> bytes:
        data = await self._inbound.get()
        if self._paused and self._inbound.qsize() <= _QUEUED // 2:
            self._paused = False
            if not self.transport.is_closing():
                self.transport.resume_reading()
        return data


def _request_bytes(req: Request) -> bytes:
    """The client's handshake as it came, for the server protocol to read."""
    lines = [f"{req.method} {req.target} {req.version}", *(f"{k}: {v}" for k, v in req.headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def _ws_url(http_url: str) -> str:
    scheme, sep, rest = http_url.partition("://")
    return ("wss" if scheme == "https" else "ws") + sep + rest


def _handshake(req: Request, url: str, upstream: Upstream) -> tuple[Handshake, Handshake]:
    """The handshake an in-process client would have made to ``url``, as sent on (the
    client's headers, its ``Host`` the upstream's; the proxy's own ``x-dejacache-*``
    dropped) and as keyed and recorded (``keyed_headers``: with the name of an upstream the
    user named, never sent)."""
    host = url.partition("://")[2].partition("/")[0].partition("?")[0]
    headers = [(k, host if k.lower() == "host" else v) for k, v in req.headers
               if not k.lower().startswith("x-dejacache-")]
    offered = [p.strip() for k, v in req.headers if k.lower() == "sec-websocket-protocol"
               for p in v.split(",") if p.strip()]
    return (Handshake(url, headers, offered),
            Handshake(url, keyed_headers(upstream, headers), offered))


@functools.cache
def _providers() -> dict[str, Provider]:
    return {p.name: p for p in all_providers()}


def _provider(found: Provider, upstream: Upstream) -> Provider:
    """Whose error shape the client reads (as ``Forwarder.provider_for``)."""
    if found.name == "http":
        return _providers().get(upstream.name, found)
    return found


def _open_live(hs: Handshake, max_message: int) -> Any:
    """How the session opens its live leg: a ``websockets`` client to the upstream, taking
    messages of at most ``max_message`` bytes."""

    async def open_live() -> Any:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        from ..ws._asyncio import Live, refused_of

        headers = [(k, v) for k, v in hs.headers if k.lower() not in _OWN]
        if PLACEHOLDER in hs.url or any(PLACEHOLDER in v for _, v in headers):
            host = urlsplit(hs.url).hostname or ""
            raise ConfigurationError(proxy_refusal("WebSocket", hs.url, host, headers))
        agent = next((v for k, v in hs.headers if k.lower() == "user-agent"), None)
        try:
            conn = await connect(hs.url, additional_headers=[*headers, (FORWARDED, "1")],
                                 subprotocols=list(hs.subprotocols) or None,  # type: ignore[arg-type]
                                 user_agent_header=agent, compression=None,
                                 max_size=max_message, open_timeout=30)
        except InvalidStatus as exc:
            raise refused_of(exc) from exc
        return Live(conn, raise_with=_RAISE_WITH)

    return open_live


async def relay(session: Session, upstream: Upstream, req: Request, rest: str,
                out: Upgraded, max_message: int = MAX_MESSAGE) -> None:
    """Answer the WebSocket ``req`` asks for (routed to ``upstream`` with path ``rest``)
    under ``session`` (see the module docstring)."""
    from ..ws._drive import AsyncSession
    from ..ws._wire import Endpoint

    try:
        url = _ws_url(upstream.base(None) + rest)
    except ConfigurationError as exc:
        await out.write(error_bytes(_provider(_providers()["http"], upstream), 502,
                                    "dejacache_proxy_error", str(exc)))
        return
    sent, keyed = _handshake(req, url, upstream)
    endpoint = Endpoint("wss" if url.startswith("wss:") else "ws", max_message, _RAISE_WITH)
    endpoint.feed(_request_bytes(req))
    ws = AsyncSession(session.eff, keyed, _open_live(sent, max_message),
                      realtime=session.options.realtime, max_message=max_message)
    provider = _provider(ws.route.provider, upstream)
    try:
        answer = await ws.open()
    except ReplayMiss as miss:
        kind = ("dejacache_replay_divergence" if isinstance(miss, ReplayDivergence)
                else "dejacache_replay_miss")
        await out.write(error_bytes(provider, 404, kind, f"{type(miss).__name__}: {miss}"))
        return
    except Exception as exc:  # recorded or live: the upstream failed, or is no WebSocket
        await out.write(error_bytes(provider, 502, "dejacache_upstream_error",
                                    f"dejacache proxy: upstream {upstream.name} ({url}) "
                                    f"failed: {type(exc).__name__}: {exc}"))
        return
    await _opened(ws, endpoint, answer, out)


async def _opened(ws: Any, endpoint: Any, answer: Answer, out: Upgraded) -> None:
    """The handshake answered: the server's side of the session until either side ends
    it; the session's open window is stored however it ends."""
    closed = Closed(1001, "")  # the proxy stopping or the client gone: going away
    try:
        await out.write(endpoint.answer(answer))
        if answer.status != 101 or endpoint.eof:
            return
        pump = asyncio.get_running_loop().create_task(_to_client(ws, endpoint, out))
        try:
            closed = await _from_client(ws, endpoint, out)
        finally:
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump
    finally:
        await ws.close(closed.code, closed.reason)


async def _from_client(ws: Any, endpoint: Any, out: Upgraded) -> Closed:
    """The client's frames, its whole messages sent to the session in order, until it
    closes (its close, or 1006 when its connection dropped)."""
    while not endpoint.eof:
        data = await out.read()
        if out.away:
            await out.write(endpoint.close(Closed(1001, "dejacache proxy stopping")))
            return Closed(1001, "")
        reply = endpoint.feed(data) if data else endpoint.feed_eof()
        if reply:  # pongs, the reply to its close
            await out.write(reply)
        for m in endpoint.take():
            try:
                await ws.send(m)
            except Exception as exc:  # a replay miss, or the live leg failed
                # Nothing more comes for it: the client's next call raises (1011).
                with ws.lock:
                    ws.state.pending.clear()
                why = (f"dejacache replay miss: {exc.name}" if isinstance(exc, ReplayMiss)
                       else f"dejacache proxy: upstream failed: {type(exc).__name__}")
                await out.write(endpoint.fail(why))
                await _until_client_closes(endpoint, out)
                return Closed(1011, why[:120])
        if endpoint.over:  # a message passed the bound (those before it were sent on): 1009
            await _drain(out)
            return Closed(1001, "dejacache proxy: the client's message was over its limit")
        if endpoint.client_closed is not None:
            return endpoint.client_closed  # type: ignore[no-any-return]
        if not data:
            break
    return Closed(1006, "")


async def _until_client_closes(endpoint: Any, out: Upgraded) -> None:
    """After the proxy's close frame: the client's frames read and dropped until it answers
    with its own close (or its end of the connection goes), for at most ``_CLOSE_TIMEOUT``.
    Closing the socket with the client's later messages unread makes the kernel reset the
    connection, and a client that had not yet read the close frame lost it with the reset
    (Node's ws reported 1006 instead of the miss's 1011, about 1 run in 10 under load)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_CLOSE_TIMEOUT):
            while not endpoint.eof and endpoint.client_closed is None and not out.away:
                data = await out.read()
                reply = endpoint.feed(data) if data else endpoint.feed_eof()
                if reply:  # the reply to a ping; the protocol ends the connection after a close
                    await out.write(reply)
                endpoint.take()  # messages after the close: nobody reads them
                if not data:
                    return


async def _drain(out: Upgraded) -> None:
    """After a 1009: the end of what the proxy sends (the client's library closes its side
    once it has read the close frame), and the rest of the client's message read and dropped
    until then, for at most ``_CLOSE_TIMEOUT`` (closed with it unread, the socket would be
    reset, and the reset can overtake the close frame: the client saw 1006, not 1009)."""
    transport = out.transport
    if transport.can_write_eof() and not transport.is_closing():
        transport.write_eof()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_CLOSE_TIMEOUT):
            while await out.read():
                pass


async def _to_client(ws: Any, endpoint: Any, out: Upgraded) -> None:
    """What the session owes the client (recorded or live), as frames, in order; the
    server's close ends it (1006: the connection dropped, as it did when recorded)."""
    from websockets.protocol import State

    while True:
        items: list[Message | Closed] = [await ws.receive(), *ws.due()]
        if endpoint.proto.state is not State.OPEN:
            return
        frames = []
        for item in items:
            if isinstance(item, Closed):
                frames.append(endpoint.close(item))
                break
            frames.append(endpoint.message(item))
        await out.write(b"".join(frames))
        if endpoint.eof and endpoint.client_closed is None:  # dropped without a close
            out.abort()
            return
        if isinstance(items[-1], Closed):
            return
