"""``websockets.asyncio.client.connect`` inside a block: the client talks to an endpoint in
memory, never to a socket.

``await connect(...)`` (and ``async with``, ``async for``) builds the client connection the
way websockets does (``ClientProtocol`` and ``ClientConnection``, or the class given as
``create_connection``) and hands it a transport that carries its bytes to an
:class:`~._wire.Endpoint` instead of a socket. The connection then performs its own
handshake; the session (``_drive.AsyncSession``) answers it from the recording or from a
live connection opened with the caller's own ``connect`` object, and a background task feeds
the client the messages the session owes it, as frames, pausing when the client's queue is
full. Each message the client sends is answered when its ``send()`` returns, in the caller's
task (the connection class is subclassed for that, as ``create_connection`` allows): a
message the recording does not have raises ``ReplayMiss`` from that ``send()``, and the
connection is closed with code 1011.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

from ..config import Effective
from ..errors import ReplayMiss
from ..http.transport import Options
from ._captured import ARGS
from ._drive import AsyncSession
from ._message import TOO_BIG, Answer, Closed, Faulted, Message, Refused, Streamed, server_cut
from ._wire import Endpoint, Parts, client_protocol

__all__ = ["Live", "answering", "awaited", "closed_of", "connect_in_block", "in_memory",
           "live_connection", "refused_of"]

_LINK = "_dejacache_ws_link"
# The codes websockets fails a connection with for a frame of the server's it refuses: a
# protocol error, text that is not UTF-8.
_REFUSED = frozenset({1002, 1007})


class _Awaiting:
    """Awaits ``fn(obj)``: the original ``connect.__await__`` on the caller's object."""

    def __init__(self, fn: Callable[[Any], Generator[Any, None, Any]], obj: Any) -> None:
        self.fn, self.obj = fn, obj

    def __await__(self) -> Generator[Any, None, Any]:
        return self.fn(self.obj)


def closed_of(exc: Any, conn: Any = None, raise_with: str | None = None) -> Closed:
    """The end a ``ConnectionClosed`` reports (no close frame received: 1006); a
    ``Faulted`` when ``conn`` (the live connection) failed it for a frame of the server's it
    refused (1002, 1007, and 1009 for one over its ``max_size``): what the app is given, as
    the library closed it (that close sent, none received). ``raise_with``: the live
    connection is not the client's own but a proxy's (what raises its bound), whose
    refusal of a message too big is no client's: a :func:`~._message.server_cut`."""
    sent = getattr(exc, "sent", None)
    rcvd = getattr(exc, "rcvd", None)
    if conn is not None and sent is not None and not getattr(exc, "rcvd_then_sent", False):
        if sent.code == TOO_BIG and raise_with is not None:
            return server_cut(_max_size(conn), raise_with)
        if rcvd is None and (sent.code in _REFUSED or sent.code == TOO_BIG):
            return Faulted(int(sent.code), str(sent.reason))
    if rcvd is None:
        return Closed(1006, "")
    return Closed(int(rcvd.code), str(rcvd.reason))


def _max_size(conn: Any) -> int:
    """The message bound of a websockets connection (the new API's protocol, or legacy)."""
    size = getattr(getattr(conn, "protocol", None), "max_message_size", None)
    if size is None:
        size = getattr(conn, "max_size", None)
    return size if type(size) is int else 0


class Live:
    """The live side: a real ``websockets`` connection (asyncio or legacy; ``answer``: its
    handshake's, read from the response headers it kept; ``raise_with``: what raises its
    message bound when it is a proxy's, not the client's own: :func:`closed_of`)."""

    def __init__(self, conn: Any, answer: Answer | None = None,
                 raise_with: str | None = None) -> None:
        self.conn = conn
        self.answer = answer or Answer(101, list(conn.response.headers.raw_items()),
                                       conn.subprotocol)
        self.raise_with = raise_with

    async def send(self, m: Message) -> None:
        await self.conn.send(m.parts if type(m) is Streamed else m.data)

    async def recv(self) -> Message | Closed:
        from websockets.exceptions import ConnectionClosed

        try:
            return Message(await self.conn.recv())
        except ConnectionClosed as exc:
            return closed_of(exc, self.conn, self.raise_with)

    async def close(self, code: int, reason: str) -> None:
        await self.conn.close(code, reason)


def refused_of(exc: Any) -> Refused:
    r = exc.response
    return Refused(Answer(r.status_code, list(r.headers.raw_items()), None, bytes(r.body or b"")))


async def live_connection(connect: Any, orig_await: Any) -> Live:
    """A real connection made by the caller's own ``connect`` object (its headers, proxy,
    TLS and timeouts)."""
    from websockets.exceptions import InvalidStatus

    try:
        conn = await awaited(connect, orig_await)
    except InvalidStatus as exc:
        raise refused_of(exc) from exc
    return Live(conn)


async def awaited(connect: Any, orig_await: Any) -> Any:
    """``await connect`` as the library does it (its original ``__await__``)."""
    return await _Awaiting(orig_await, connect)


#: The bytes of a streamed message's fragments that may wait for the live side before the
#: client's writes are paused (as a socket's buffer pauses them).
_HELD = 256 * 1024


class _Spill(Parts):
    """A client message past the session's bound, sent live from a task of its own as its
    fragments come (``session.send`` of a ``Streamed``); the client's writes are paused
    while more than ``_HELD`` bytes of them wait. Its error is raised by ``_Link.settle``."""

    def __init__(self, link: _Link, text: bool) -> None:
        super().__init__(text)
        self.conn = link.conn
        self.waiting: collections.deque[tuple[str | bytes, int]] = collections.deque()
        self.held = 0
        self.fin = self.paused = False
        self.changed = asyncio.Event()
        assert link.session is not None
        self.task = link.loop.create_task(link.session.send(Streamed(b"", self._parts())))
        self.task.add_done_callback(self._done)

    def part(self, data: bytes, fin: bool) -> None:
        if self.task.done():  # it failed: the rest is dropped, its error raised by settle
            return
        self.waiting.append((self.piece(data, fin), len(data)))
        self.held += len(data)
        self.fin = fin
        self.changed.set()
        if self.held > _HELD and not self.paused:
            self.paused = True
            self.conn.pause_writing()

    async def _parts(self) -> AsyncIterator[str | bytes]:
        while True:
            while not self.waiting:
                if self.fin:
                    return
                self.changed.clear()
                await self.changed.wait()
            piece, n = self.waiting.popleft()
            self.held -= n
            if self.paused and self.held <= _HELD // 2:
                self._resume()
            yield piece

    def _resume(self) -> None:
        if self.paused:
            self.paused = False
            self.conn.resume_writing()

    def _done(self, task: asyncio.Task[None]) -> None:
        self.waiting.clear()
        self._resume()
        if not task.cancelled():
            task.exception()  # (retrieved: ``settle`` raises it)


class _Link:
    """One in-memory connection: the client connection, its endpoint and its session."""

    def __init__(self, conn: Any, endpoint: Endpoint, loop: asyncio.AbstractEventLoop,
                 peer: tuple[str, int]) -> None:
        self.conn, self.endpoint, self.loop, self.peer = conn, endpoint, loop, peer
        self.session: AsyncSession | None = None
        self.reading = asyncio.Event()
        self.reading.set()
        self.pump: asyncio.Task[None] | None = None
        self.lost = False
        self.settling = asyncio.Lock()
        self.spills: list[_Spill] = []  # streamed messages ``settle`` has not seen end

    def spilling(self, text: bool) -> _Spill:
        spill = _Spill(self, text)
        self.spills.append(spill)
        return spill

    # ------------------------------------------------------------ the client's bytes

    def from_client(self, data: bytes) -> None:
        if not self.lost:
            out = self.endpoint.feed(data)
            if out or self.endpoint.eof:  # (a message alone: nothing to answer at once)
                self._answered(out)

    def client_eof(self) -> None:
        if not self.lost:
            self._answered(self.endpoint.feed_eof())

    def _answered(self, out: bytes) -> None:
        # Later, not inside the client's write: it is in the middle of its own send.
        if out:
            self.loop.call_soon(self.to_client, out)
        if self.endpoint.eof:
            self.loop.call_soon(self.end)

    def to_client(self, data: bytes) -> None:
        if not self.lost and data:
            try:
                self.conn.data_received(data)
            except Exception as exc:
                # The client's parser failed (a recorded end its protocol cannot act out:
                # a close code no frame carries, a reason no frame holds). asyncio's own
                # transports lose the connection with the error then; raised here, it ended
                # the feed and the client waited for the rest forever.
                self.lose(exc)

    def end(self) -> None:
        """The server end has closed the connection."""
        if not self.lost:
            self.conn.eof_received()
            self.lose(None)

    def lose(self, exc: BaseException | None) -> None:
        if self.lost:
            return
        self.lost = True
        self.conn.connection_lost(exc)
        pump, self.pump = self.pump, None
        if pump is not None and pump is not asyncio.current_task():
            pump.cancel()

    # ------------------------------------------------------------ the session

    def start(self) -> None:
        self.pump = self.loop.create_task(self._pump())

    async def _pump(self) -> None:
        """Feed the client what the session owes it, as frames, in order; a failure there
        ends the connection, as a transport's failure does."""
        try:
            await self._feed()
        except Exception as exc:  # (a recorded end the server end cannot write): see above
            self.lose(exc)

    async def _feed(self) -> None:
        from websockets.protocol import State

        session = self.session
        assert session is not None
        while not self.lost:
            items = [await session.receive(), *session.due()]
            await self.reading.wait()
            if self.lost or self.endpoint.proto.state is not State.OPEN:
                return
            frames = []
            for item in items:
                if isinstance(item, Closed):
                    client = getattr(self.conn, "protocol", self.conn)
                    frames.append(self.endpoint.end(item, client))
                    break
                frames.append(self.endpoint.message(item))
            self.to_client(b"".join(frames))
            if self.endpoint.eof:
                self.end()
                return
            if isinstance(items[-1], Closed):
                return

    async def settle(self) -> None:
        """Answer the whole messages the client has written (in the sender's task)."""
        session = self.session
        if session is None:
            return
        # The lock's own acquire and release, not ``async with`` (as ``AsyncSession.send``):
        # ~13 opcodes less a message.
        lock = self.settling
        await lock.acquire()
        try:
            while self.spills:
                try:
                    await self.spills.pop(0).task
                except ReplayMiss as miss:
                    self.fail(miss)
                    raise
            for m in self.endpoint.take():
                try:
                    await session.send(m)
                except ReplayMiss as miss:
                    self.fail(miss)
                    raise
        finally:
            lock.release()

    def fail(self, miss: ReplayMiss) -> None:
        """A replay miss ends the connection (1011), so the client stops waiting for an
        answer that will not come."""
        session = self.session
        if session is not None:
            with session.lock:
                session.state.pending.clear()
        self.to_client(self.endpoint.fail(f"dejacache replay miss: {miss.name}"))


class _Transport(asyncio.Transport):
    """The client connection's transport: its bytes go to the endpoint."""

    def __init__(self, link: _Link) -> None:
        super().__init__()
        self.link = link
        self._closing = False

    def write(self, data: Any) -> None:
        if not self._closing:
            self.link.from_client(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            if not self.link.loop.is_closed():  # (a connection collected after its loop)
                self.link.loop.call_soon(self.link.lose, None)

    def abort(self) -> None:
        self.close()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.link.client_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.link.peer, "sockname": ("127.0.0.1", 0)}.get(name, default)

    def pause_reading(self) -> None:
        self.link.reading.clear()

    def resume_reading(self) -> None:
        self.link.reading.set()

    def is_reading(self) -> bool:
        return self.link.reading.is_set()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def get_write_buffer_size(self) -> int:
        return 0

    def set_protocol(self, protocol: Any) -> None:
        self.link.conn = protocol

    def get_protocol(self) -> Any:
        return self.link.conn


@functools.cache
def answering(base: type) -> type:
    """``base`` (a ``ClientConnection``) whose ``send`` returns once the message is
    answered, and whose ``close`` stores what the session recorded."""

    class Answering(base):  # type: ignore[misc]
        async def send(self, *args: Any, **kwargs: Any) -> None:
            await super().send(*args, **kwargs)
            await getattr(self, _LINK).settle()

        async def close(self, *args: Any, **kwargs: Any) -> None:
            link = getattr(self, _LINK)
            try:
                await super().close(*args, **kwargs)
            finally:
                if link.session is not None:
                    code = kwargs.get("code", args[0] if args else 1000)
                    await link.session.close(code, kwargs.get("reason", ""))

    Answering.__name__ = Answering.__qualname__ = base.__name__
    Answering.__module__ = base.__module__
    return Answering


def _client(connect: Any) -> Any:
    """The client connection ``connect`` would make, not yet connected."""
    from websockets.asyncio.client import ClientConnection

    _, kw = getattr(connect, ARGS)
    opts = {k: kw[k] for k in ("ping_interval", "ping_timeout", "close_timeout", "max_queue",
                               "write_limit") if k in kw}
    cls = answering(kw.get("create_connection") or ClientConnection)
    return cls(client_protocol(connect.uri, kw), **opts)


async def connect_in_block(connect: Any, orig_await: Any, eff: Effective,
                           opts: Options) -> Any:
    """``await connect`` inside a block (see the module docstring)."""
    from websockets.uri import parse_uri

    conn = _client(connect)
    await in_memory(conn, parse_uri(connect.uri),
                    lambda: conn.handshake(connect.additional_headers,
                                           connect.user_agent_header),
                    lambda: live_connection(connect, orig_await), eff, opts)
    return conn


async def in_memory(conn: Any, ws_uri: Any, handshake: Callable[[], Awaitable[None]],
                    open_live: Callable[[], Awaitable[Any]], eff: Effective,
                    opts: Options) -> None:
    """Connect ``conn`` (an asyncio protocol of websockets: a ``ClientConnection``, or the
    legacy API's) to an endpoint in memory, have it make its ``handshake()`` and answer it
    from the session; then feed it what the session owes it."""
    loop = asyncio.get_running_loop()
    # Unbounded: a message over the session's bound goes to the server unrecorded (the
    # client holds a whole one already; a fragmented one is handed on as it comes:
    # ``spill_past``), as aiohttp's does.
    link = _Link(conn, Endpoint("wss" if ws_uri.secure else "ws", None), loop,
                 (ws_uri.host, ws_uri.port))
    setattr(conn, _LINK, link)
    transport = _Transport(link)
    conn.connection_made(transport)
    shaking: asyncio.Task[None] = loop.create_task(handshake())  # type: ignore[arg-type]
    while link.endpoint.request is None and not shaking.done():
        await asyncio.sleep(0)
    hs = link.endpoint.handshake()
    if hs is None:  # the client failed before it asked: its own error
        await shaking
        raise AssertionError("unreachable")  # pragma: no cover
    session = AsyncSession(eff, hs, open_live, realtime=opts.realtime,
                           volatile=opts.volatile)
    link.session = session
    link.endpoint.spill_past(session.max_message, link.spilling)
    try:
        answer = await session.open()
        link.to_client(link.endpoint.answer(answer))
        if link.endpoint.eof:  # a refusal: the client raises it as it did live
            link.end()
        await shaking
    except BaseException:
        shaking.cancel()
        transport.abort()
        with contextlib.suppress(BaseException):
            await shaking
        raise
    link.start()
