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
one is needed, is the original ``ws_connect`` with the caller's arguments.

What aiohttp refuses of the server's reaches the app as aiohttp makes it, recorded or
replayed: an ``ERROR`` message holding its ``WebSocketError`` (the connection closed with
its code). A frame it refuses for what the server did (a protocol error, 1002; text that is
not UTF-8, 1007) is recorded as such (``_message.Faulted``); a message over the caller's
``max_msg_size`` (1009) ends a recording without storing the window it cut (the message was
never read: ``_message.Cut``), and a replay applies the caller's bound to each recorded
message by aiohttp's own rule, so a smaller bound than the recording's refuses as live.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Coroutine, Generator
from typing import Any

from ..config import Effective
from ..http.transport import Options
from ._drive import AsyncSession
from ._message import (
    ABNORMAL,
    TOO_BIG,
    Answer,
    Closed,
    Cut,
    Faulted,
    Handshake,
    Message,
    Refused,
    TextBytes,
    larger_than,
)

__all__ = ["Connecting", "connect_in_block"]

#: What aiohttp's reader fails a text message that is not UTF-8 with, when it decodes.
INVALID_TEXT = 1007
_NOT_UTF8 = "Invalid UTF-8 text message"


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
    """The live side: aiohttp's own WebSocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.answer = Answer(101, [], ws.protocol)

    async def send(self, m: Message) -> None:
        if type(m) is TextBytes:  # text past the bound, as its UTF-8: sent as it is
            await _send_text(self.ws, m.data)
        elif m.binary:
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
            if type(msg.data) is str:
                return Message(msg.data)
            raw = bytes(msg.data)  # (``decode_text=False``: aiohttp did not read it as UTF-8)
            try:
                return Message(raw.decode())
            except UnicodeDecodeError:  # handed to the app as it came: kept so
                return TextBytes(raw)
        if msg.type is aiohttp.WSMsgType.BINARY:
            return Message(bytes(msg.data))
        if msg.type is aiohttp.WSMsgType.CLOSE:
            return Closed(int(msg.data), str(msg.extra or ""))
        if msg.type is aiohttp.WSMsgType.ERROR and isinstance(msg.data, aiohttp.WebSocketError):
            # aiohttp closed it (with this code, to the server), not the server: stored as
            # the server's close, it reached the app as a CLOSE message, where aiohttp
            # gives an ERROR. Over max_msg_size, the message was refused from its header
            # (never read): the window it cut is not stored.
            err = msg.data
            return (Cut if err.code == TOO_BIG else Faulted)(int(err.code), str(err))
        # No close frame came (a CLOSE message is the only one that carries one): 1006,
        # though aiohttp reports 1000 when the stream ended and it closed its end cleanly.
        code = self.ws.close_code
        return Closed(int(code) if code is not None and code != 1000 else ABNORMAL, "")

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, message=reason.encode())


async def _send_text(ws: Any, raw: Any) -> None:
    """A text message's UTF-8 sent as a TEXT frame without decoding it
    (``send_frame``, aiohttp 3.11+; decoded for an older one)."""
    import aiohttp

    send_frame = getattr(ws, "send_frame", None)
    if send_frame is None:  # pragma: no cover - aiohttp < 3.11
        await ws.send_str(bytes(raw).decode())
    else:
        await send_frame(raw, aiohttp.WSMsgType.TEXT)


async def _live(session: Any, orig: Any, url: str, kwargs: dict[str, Any]) -> _Live:
    import aiohttp

    try:
        ws = await orig(session, url, **kwargs)
    except aiohttp.WSServerHandshakeError as exc:
        headers = list((exc.headers or {}).items())
        raise Refused(Answer(exc.status, headers)) from exc
    return _Live(ws)


def _refusal_of(m: Message, bound: int, compressed: bool) -> str | None:
    """The error aiohttp 3.14's reader raises for ``m`` under ``max_msg_size=bound`` (None:
    it takes it). Uncompressed, a message of ``bound`` bytes or more: it compares the length
    a frame header declares, plus the parts before it, with ``>=``, so one of exactly the
    bound is refused too; compressed, one over ``bound`` once inflated."""
    if not larger_than(m, bound if compressed else bound - 1):
        return None
    if compressed:
        return f"Decompressed message exceeds size limit {bound}"
    n = len(m.data.encode() if type(m.data) is str else m.data)
    return f"Message size {n} exceeds limit {bound}"


def _max_msg_size(orig: Any, kwargs: dict[str, Any]) -> int:
    """The message bound the live ``ws_connect`` has: the caller's, else its default."""
    size = kwargs.get("max_msg_size")
    if size is None:
        size = _default_bound(orig)
    return size if type(size) is int else 0


@functools.cache
def _default_bound(orig: Any) -> Any:
    # Read once per method: ``inspect.signature`` of aiohttp 3.14's ws_connect took 69 µs.
    param = inspect.signature(orig).parameters.get("max_msg_size")
    return None if param is None else param.default


class _Reader:
    """What the WebSocket response reads: the session's messages as ``WSMessage``, and what
    the response feeds itself (its CLOSING marker, a pong). ``bound``: the caller's
    ``max_msg_size`` (0: none); ``decode``: its ``decode_text`` (False: a TEXT message's
    data is its UTF-8 ``bytes``, as aiohttp's reader then gives it)."""

    def __init__(self, session: AsyncSession, bound: int, compressed: bool,
                 decode: bool = True) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.session = session
        self.bound, self.compressed, self.decode = bound, compressed, decode
        self.task = asyncio.get_running_loop().create_task(self._pump())

    async def _pump(self) -> None:
        import aiohttp

        bound = self.bound
        while True:
            for item in (await self.session.receive(), *self.session.due()):
                if isinstance(item, Closed):
                    self.queue.put_nowait(item)
                    return
                refusal = _refusal_of(item, bound, self.compressed) if bound else None
                if refusal is not None:  # as aiohttp's reader refuses it live
                    self.queue.put_nowait(Cut(TOO_BIG, refusal))
                    return
                data = item.data
                if type(data) is str:
                    t = aiohttp.WSMsgType.TEXT
                    if not self.decode:
                        data = data.encode()
                elif type(item) is TextBytes:
                    if self.decode:  # as aiohttp's reader refuses it when it decodes
                        self.queue.put_nowait(Faulted(INVALID_TEXT, _NOT_UTF8))
                        return
                    t = aiohttp.WSMsgType.TEXT
                else:
                    t = aiohttp.WSMsgType.BINARY
                # ("" as aiohttp's reader gives a data message, not None)
                self.queue.put_nowait(aiohttp.WSMessage(t, data, ""))

    def feed_data(self, data: Any, size: int = 0) -> None:
        self.queue.put_nowait(data)

    async def read(self) -> Any:
        import aiohttp

        item = await self.queue.get()
        if isinstance(item, Closed):
            if isinstance(item, (Cut, Faulted)):  # aiohttp's refusal: its ERROR message
                raise aiohttp.WebSocketError(_close_code(item.code), item.reason)
            if item.code == ABNORMAL:  # the connection dropped: what aiohttp reads then
                # aiohttp calls no close() after it (it is closed), so the session's last
                # window is stored here: the block's exit, which tracks sessions weakly,
                # found it only while the app still held the WebSocket (else it was lost).
                await self.session.close(item.code, item.reason)
                raise aiohttp.ServerDisconnectedError()
            return aiohttp.WSMessage(aiohttp.WSMsgType.CLOSE, item.code, item.reason)
        return item


def _close_code(code: int) -> int:
    """``code`` as aiohttp's reader names the codes it fails with (its ``WSCloseCode``:
    the error's ``code`` and the response's ``close_code`` the app reads)."""
    import aiohttp

    try:
        return aiohttp.WSCloseCode(code)
    except ValueError:
        return code


class _Writer:
    """Where the WebSocket response writes: data frames to the session, the rest answered
    here (a ping gets its pong, a close gets the server's close)."""

    def __init__(self, session: AsyncSession, reader: _Reader) -> None:
        self.session, self.reader = session, reader

    async def send_frame(self, message: Any, opcode: Any, compress: int | None = None) -> None:
        import aiohttp

        text = opcode is aiohttp.WSMsgType.TEXT or opcode == 1
        if text or opcode is aiohttp.WSMsgType.BINARY or opcode == 2:
            await self.session.send(self._message(message, text))
        elif opcode is aiohttp.WSMsgType.PING or opcode == 9:
            data = bytes(message)
            self.reader.feed_data(aiohttp.WSMessage(aiohttp.WSMsgType.PONG, data, None))

    def _message(self, data: Any, text: bool) -> Message:
        """The message aiohttp hands over (text as its UTF-8). Past the session's bound it
        goes on as it came, unrecorded: copied to ``bytes`` and text decoded, it was held
        twice more than live (a 16 MiB text message: 114 MB at the peak against 80 live;
        a ``bytearray``: 80 against 64)."""
        session = self.session
        # (a shorter one cannot pass: nothing more made for it; a 250-byte message went
        # from 0.77 to 0.88 µs, min of 40 interleaved runs)
        if len(data) > session.surely_within:
            whole = TextBytes(data) if text else Message(data)
            if larger_than(whole, session.max_message):
                return whole
        raw = bytes(data)
        return Message(raw.decode() if text else raw)

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


def _response(session: AsyncSession, answer: Answer, target: Any, orig: Any,
              kw: dict[str, Any]) -> Any:
    import aiohttp

    # Compressed as the live connection negotiated; a replay has none to ask, and takes the
    # caller's request for it (the rules differ only for a message of exactly the bound).
    live = getattr(session.live, "ws", None)
    compressed = bool(live.compress if live is not None else kw.get("compress"))
    reader = _Reader(session, _max_msg_size(orig, kw), compressed,
                     kw.get("decode_text", True) is not False)
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
    return _response(session, answer, target, orig, kw)
