"""``ClientSession.ws_connect`` inside a block: a real ``ClientWebSocketResponse`` whose
reader and writer are the session's, not a connection's.

aiohttp's WebSocket response does its work (autoping, autoclose, the closing handshake,
receive timeouts, heartbeats, ``receive_json``, iteration) over two objects it is given, a
reader whose ``read()`` returns the next ``WSMessage`` and a writer with ``send_frame()`` and
``close()``. Here the reader hands out what the session owes the client, and the writer
sends each message to the session, in the caller's task, so a message the recording lacks
raises ``ReplayMiss`` from ``send_str()`` itself. The handshake is made of what aiohttp
would send: the session's default headers, the call's, ``auth``, the cookie jar's cookies
for the URL, the subprotocols and the origin. A refusal is raised as
``WSServerHandshakeError``, a connection failure as ``ClientOSError``; the live side, when
one is needed, is the original ``ws_connect`` with the caller's arguments. A server message
over the caller's ``max_msg_size``, which aiohttp refuses live (1009 to the server), ends
the session as the websockets clients' bound does (``_message.server_cut``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from ..config import Effective
from ..http.transport import Options
from ._drive import AsyncSession
from ._message import ABNORMAL, TOO_BIG, Answer, Closed, Handshake, Message, Refused, server_cut

__all__ = ["Connecting", "connect_in_block"]


class Connecting:
    """What ``ws_connect`` returns: awaitable, and an async context manager."""

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._ws: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    async def __aenter__(self) -> Any:
        self._ws = await self._coro
        return self._ws

    async def __aexit__(self, *exc: object) -> None:
        await self._ws.close()


class _Live:
    """The live side: aiohttp's own WebSocket (``bound``: its ``max_msg_size``, read when
    a message passes it)."""

    def __init__(self, ws: Any, bound: Callable[[], int]) -> None:
        self.ws = ws
        self.answer = Answer(101, [], ws.protocol)
        self.bound = bound

    async def send(self, m: Message) -> None:
        if m.binary:
            await self.ws.send_bytes(m.data)
        else:
            await self.ws.send_str(m.data)

    async def recv(self) -> Message | Closed:
        import aiohttp

        while True:
            try:
                msg = await self.ws.receive()
            except TimeoutError:
                # The caller's receive timeout, which ws_connect gave this connection too:
                # it times out the app's own receive (the block's response has it), and
                # aiohttp reads on after it. Taken here as the end, a server silent that
                # long was recorded and replayed as a dropped connection.
                continue
            # (autoping off) pings and pongs are the connection's, not messages: a replay
            # has none to give, so the app is not given them live either, and the server's
            # ping is answered here
            if msg.type is aiohttp.WSMsgType.PING:
                await self.ws.pong(msg.data)
            elif msg.type is not aiohttp.WSMsgType.PONG:
                break
        if msg.type is aiohttp.WSMsgType.TEXT:
            return Message(msg.data if type(msg.data) is str else bytes(msg.data).decode())
        if msg.type is aiohttp.WSMsgType.BINARY:
            return Message(bytes(msg.data))
        if msg.type is aiohttp.WSMsgType.CLOSE:
            return Closed(int(msg.data), str(msg.extra or ""))
        if (msg.type is aiohttp.WSMsgType.ERROR and isinstance(msg.data, aiohttp.WebSocketError)
                and msg.data.code == TOO_BIG):
            # aiohttp closed it (1009 to the server), not the server: stored as the
            # server's close, it was replayed as one the server never sent, after a window
            # one message short.
            return server_cut(self.bound(), "max_msg_size= of ws_connect()")
        # No close frame came (a CLOSE message is the only one that carries one): 1006,
        # though aiohttp reports 1000 when the stream ended and it closed its end cleanly.
        code = self.ws.close_code
        return Closed(int(code) if code is not None and code != 1000 else ABNORMAL, "")

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, message=reason.encode())


async def _live(session: Any, orig: Any, url: str, kwargs: dict[str, Any]) -> _Live:
    import aiohttp

    try:
        ws = await orig(session, url, **kwargs)
    except aiohttp.WSServerHandshakeError as exc:
        headers = list((exc.headers or {}).items())
        raise Refused(Answer(exc.status, headers)) from exc
    return _Live(ws, lambda: _max_msg_size(orig, kwargs))


def _max_msg_size(orig: Any, kwargs: dict[str, Any]) -> int:
    """The message bound the live ``ws_connect`` had: the caller's, else its default."""
    size = kwargs.get("max_msg_size")
    if size is None:
        param = inspect.signature(orig).parameters.get("max_msg_size")
        size = None if param is None else param.default
    return size if type(size) is int else 0


class _Reader:
    """What the WebSocket response reads: the session's messages as ``WSMessage``, and what
    the response feeds itself (its CLOSING marker, a pong)."""

    def __init__(self, session: AsyncSession) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.session = session
        self.task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        import aiohttp

        while True:
            for item in (await self.session.receive(), *self.session.due()):
                if isinstance(item, Closed):
                    self.queue.put_nowait(item)
                    return
                t = aiohttp.WSMsgType.BINARY if item.binary else aiohttp.WSMsgType.TEXT
                self.queue.put_nowait(aiohttp.WSMessage(t, item.data, None))

    def feed_data(self, data: Any, size: int = 0) -> None:
        self.queue.put_nowait(data)

    async def read(self) -> Any:
        import aiohttp

        item = await self.queue.get()
        if isinstance(item, Closed):
            if item.code == ABNORMAL:  # the connection dropped: what aiohttp reads then
                # aiohttp calls no close() after it (it is closed), so the session's last
                # window is stored here: the block's exit, which tracks sessions weakly,
                # found it only while the app still held the WebSocket (else it was lost).
                await self.session.close(item.code, item.reason)
                raise aiohttp.ServerDisconnectedError()
            return aiohttp.WSMessage(aiohttp.WSMsgType.CLOSE, item.code, item.reason)
        return item


class _Writer:
    """Where the WebSocket response writes: data frames to the session, the rest answered
    here (a ping gets its pong, a close gets the server's close)."""

    def __init__(self, session: AsyncSession, reader: _Reader) -> None:
        self.session, self.reader = session, reader

    async def send_frame(self, message: Any, opcode: Any, compress: int | None = None) -> None:
        import aiohttp

        data = bytes(message)
        if opcode is aiohttp.WSMsgType.TEXT or opcode == 1:
            await self.session.send(Message(data.decode()))
        elif opcode is aiohttp.WSMsgType.BINARY or opcode == 2:
            await self.session.send(Message(data))
        elif opcode is aiohttp.WSMsgType.PING or opcode == 9:
            self.reader.feed_data(aiohttp.WSMessage(aiohttp.WSMsgType.PONG, data, None))

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        import aiohttp

        reason = bytes(message).decode(errors="replace")
        await self.session.close(code, reason)
        self.reader.task.cancel()
        self.reader.feed_data(aiohttp.WSMessage(aiohttp.WSMsgType.CLOSE, code, reason))


class _Response:
    """The HTTP response a WebSocket response keeps: no connection to release."""

    connection = None

    def __init__(self, answer: Answer, url: Any) -> None:
        from multidict import CIMultiDict, CIMultiDictProxy

        self.status = answer.status
        self.url = url
        self.headers = CIMultiDictProxy(CIMultiDict(list(answer.headers)))

    def close(self) -> None:
        return None


def _handshake(session: Any, url: str, kw: dict[str, Any]) -> tuple[Any, Handshake]:
    from multidict import CIMultiDict
    from yarl import URL

    target = URL(url)
    if kw.get("params"):
        target = target.update_query(kw["params"])
    headers: CIMultiDict[str] = CIMultiDict(session.headers)
    headers.update(CIMultiDict(kw.get("headers") or {}))
    for k, v in (("Upgrade", "websocket"), ("Connection", "Upgrade"),
                 ("Sec-WebSocket-Version", "13")):
        headers.setdefault(k, v)
    protocols = list(kw.get("protocols") or ())
    if protocols:
        headers["Sec-WebSocket-Protocol"] = ",".join(protocols)
    if kw.get("origin") is not None:
        headers["Origin"] = kw["origin"]
    auth = kw.get("auth") or session.auth
    if auth is not None and "Authorization" not in headers:
        headers["Authorization"] = auth.encode()
    cookies = session.cookie_jar.filter_cookies(target)
    if cookies and "Cookie" not in headers:
        headers["Cookie"] = "; ".join(f"{k}={m.value}" for k, m in cookies.items())
    return target, Handshake(str(target), list(headers.items()), protocols)


def _refusal(target: Any, hs: Handshake, answer: Answer) -> BaseException:
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy

    info = aiohttp.RequestInfo(target, "GET", CIMultiDictProxy(CIMultiDict(hs.headers)), target)
    return aiohttp.WSServerHandshakeError(
        info, (), message="Invalid response status", status=answer.status,
        headers=CIMultiDictProxy(CIMultiDict(list(answer.headers))))


def _response(session: AsyncSession, answer: Answer, target: Any, kw: dict[str, Any]) -> Any:
    import aiohttp

    reader = _Reader(session)
    timeout = kw.get("timeout")
    if not isinstance(timeout, aiohttp.ClientWSTimeout):
        timeout = aiohttp.ClientWSTimeout(ws_receive=kw.get("receive_timeout"), ws_close=10.0)
    offered = {"reader": reader, "writer": _Writer(session, reader),
               "protocol": answer.subprotocol, "response": _Response(answer, target),
               "timeout": timeout, "autoclose": kw.get("autoclose", True),
               "autoping": kw.get("autoping", True), "loop": asyncio.get_running_loop(),
               "heartbeat": kw.get("heartbeat"), "compress": 0, "client_notakeover": False}
    cls = aiohttp.ClientWebSocketResponse
    params = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in offered.items() if k in params})


async def connect_in_block(client: Any, orig: Any, url: str, kw: dict[str, Any],
                           eff: Effective, opts: Options) -> Any:
    """``await client.ws_connect(url, **kw)`` inside a block (see the module docstring)."""
    import aiohttp

    target, hs = _handshake(client, url, kw)
    session = AsyncSession(eff, hs, lambda: _live(client, orig, url, kw),
                           realtime=opts.realtime, volatile=opts.volatile)
    try:
        answer = await session.open()
    except OSError as exc:
        if isinstance(exc, aiohttp.ClientError):
            raise
        raise aiohttp.ClientOSError(exc.errno, exc.strerror or str(exc)) from exc
    if answer.status != 101:
        with contextlib.suppress(Exception):
            await session.close()
        raise _refusal(target, hs, answer)
    return _response(session, answer, target, kw)
