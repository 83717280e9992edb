"""``websockets.sync.client.connect`` inside a block: the threading client on a socket pair
whose other end is an in-memory endpoint.

The threading client reads its socket with a selector, so it gets a real one: one end of a
``socket.socketpair()`` (a local pair, as websockets makes for every connection anyway to
wake its reader; nothing is connected anywhere). Its writes never cross the pair: the
socket's ``sendall`` hands them to the :class:`~._wire.Endpoint`, and what the server says
is written into the other end, which the client reads as it would read a server. The
handshake is answered in the calling thread, each message when its ``send()`` returns, in
the sender's thread; a thread feeds the client what the session owes it (a full client
queue stops the feed, as a slow reader stops a socket).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..config import Effective
from ..errors import ReplayMiss
from ..http.transport import Options
from ._asyncio import closed_of, refused_of
from ._drive import SyncSession
from ._message import Answer, Closed, Message, Streamed
from ._wire import Endpoint, Parts, client_protocol

__all__ = ["connect_in_block", "live_by_function"]

_LINK = "_dejacache_ws_link"


class _Live:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        if getattr(conn, "pending_legacy_warning", False):
            conn.pending_legacy_warning = False  # used directly, as legacy=True asks
        self.answer = Answer(101, list(conn.response.headers.raw_items()), conn.subprotocol)

    def send(self, m: Message) -> None:
        self.conn.send(m.parts if type(m) is Streamed else m.data)

    def recv(self) -> Message | Closed:
        from websockets.exceptions import ConnectionClosed

        try:
            return Message(self.conn.recv())
        except ConnectionClosed as exc:
            return closed_of(exc, self.conn)

    def close(self, code: int, reason: str) -> None:
        self.conn.close(code, reason)


def live_by_function(orig: Any, uri: str, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """How a websockets without ``reconnect`` connects live: its ``connect`` function."""
    kw = dict(kwargs)
    if "legacy" in inspect.signature(orig).parameters:
        kw["legacy"] = True  # a connection used directly, as this one is: no warning
    return lambda: orig(uri, **kw)


def _live(connect: Callable[[], Any]) -> _Live:
    from websockets.exceptions import InvalidStatus

    try:
        return _Live(connect())
    except InvalidStatus as exc:
        raise refused_of(exc) from exc


#: The fragments of a streamed message that may wait for the live side before the client's
#: write blocks (as a full socket buffer blocks it).
_QUEUED = 4


class _Spill(Parts):
    """A client message past the session's bound, sent live from a thread of its own as its
    fragments come (``session.send`` of a ``Streamed``); the client's write blocks while
    ``_QUEUED`` of them wait. Its error is raised by ``_Link.settle``."""

    def __init__(self, session: SyncSession, text: bool) -> None:
        super().__init__(text)
        self.waiting: queue.Queue[tuple[str | bytes, bool]] = queue.Queue(_QUEUED)
        self.error: Exception | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._send, args=(session,), daemon=True,
                                       name="dejacache-ws-spill")
        self.thread.start()

    def part(self, data: bytes, fin: bool) -> None:
        item = (self.piece(data, fin), fin)
        while not self.done.is_set():  # (it failed: the rest is dropped)
            with contextlib.suppress(queue.Full):
                self.waiting.put(item, timeout=0.05)
                return

    def _parts(self) -> Iterator[str | bytes]:
        while True:
            piece, fin = self.waiting.get()
            yield piece
            if fin:
                return

    def _send(self, session: SyncSession) -> None:
        try:
            session.send(Streamed(b"", self._parts()))
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()


class _Link:
    """One connection: its endpoint (under a lock: the client writes from its own thread
    and from its reader's) and the end of the pair the server writes to."""

    def __init__(self, endpoint: Endpoint, server: socket.socket) -> None:
        self.endpoint = endpoint
        self.server = server
        self.lock = threading.Lock()
        self.asked = threading.Event()  # the client's handshake request has come
        self.session: SyncSession | None = None
        self.client: Any = None  # the client connection's sans-I/O protocol
        self.settling = threading.Lock()
        self.spills: list[_Spill] = []  # streamed messages ``settle`` has not seen end

    def spilling(self, text: bool) -> _Spill:
        assert self.session is not None
        spill = _Spill(self.session, text)
        self.spills.append(spill)
        return spill

    def from_client(self, data: bytes) -> None:
        with self.lock:
            out = self.endpoint.feed(data)
            eof = self.endpoint.eof
        if self.endpoint.request is not None:
            self.asked.set()
        self.write(out, eof)

    def client_eof(self) -> None:
        with self.lock:
            out = self.endpoint.feed_eof()
            eof = self.endpoint.eof
        self.write(out, eof)

    def write(self, data: bytes, eof: bool = False) -> None:
        with contextlib.suppress(OSError):  # the client closed its end
            if data:
                self.server.sendall(data)
            if eof:
                self.server.shutdown(socket.SHUT_WR)

    def feed(self) -> None:
        """Write what the session owes the client, in order (the pump's thread). A failure
        there (a recorded end the server end cannot write: a reason no close frame holds)
        ends the connection, as a socket's failure does: the client waited forever."""
        try:
            self._feed()
        except Exception:
            self.write(b"", eof=True)

    def _feed(self) -> None:
        from websockets.protocol import State

        session = self.session
        assert session is not None
        while True:
            item = session.receive()
            with self.lock:
                if self.endpoint.proto.state is not State.OPEN:
                    return
                if isinstance(item, Closed):
                    data, eof = self.endpoint.end(item, self.client), True
                else:
                    assert item is not None
                    data, eof = self.endpoint.message(item), self.endpoint.eof
            self.write(data, eof if isinstance(item, Closed) else False)
            if isinstance(item, Closed):
                return

    def settle(self) -> None:
        session = self.session
        if session is None:
            return
        with self.settling:
            while self.spills:
                spill = self.spills.pop(0)
                spill.done.wait()
                if spill.error is not None:
                    self._failed(session, spill.error)
            with self.lock:
                sent = self.endpoint.take()
            for m in sent:
                try:
                    session.send(m)
                except ReplayMiss as miss:
                    self._failed(session, miss)

    def _failed(self, session: SyncSession, exc: Exception) -> None:
        """Raise ``exc``; a replay miss ends the connection (1011) first."""
        if isinstance(exc, ReplayMiss):
            with session.lock:
                session.state.pending.clear()
            with self.lock:
                out = self.endpoint.fail(f"dejacache replay miss: {exc.name}")
            self.write(out)
        raise exc


class _Socket(socket.socket):
    """The client's end: writes go to the endpoint, reads come from the pair."""

    link: _Link

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.link.from_client(bytes(data))

    def send(self, data: Any, flags: int = 0) -> int:
        self.link.from_client(bytes(data))
        return len(data)

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            self.link.client_eof()
        with contextlib.suppress(OSError):
            super().shutdown(how)

    def close(self) -> None:
        super().close()
        self.link.server.close()  # the pair's other end goes with it


@functools.cache
def _answering(base: type) -> type:
    class Answering(base):  # type: ignore[misc]
        def send(self, *args: Any, **kwargs: Any) -> None:
            super().send(*args, **kwargs)
            getattr(self, _LINK).settle()

        def close(self, *args: Any, **kwargs: Any) -> None:
            link = getattr(self, _LINK)
            try:
                super().close(*args, **kwargs)
            finally:
                if link.session is not None:
                    code = kwargs.get("code", args[0] if args else 1000)
                    link.session.close(code, kwargs.get("reason", ""))

    Answering.__name__ = Answering.__qualname__ = base.__name__
    Answering.__module__ = base.__module__
    return Answering


def _client(uri: str, kw: dict[str, Any], sock: socket.socket) -> Any:
    from websockets.sync.client import ClientConnection

    opts = {k: kw[k] for k in ("ping_interval", "ping_timeout", "close_timeout", "max_queue")
            if k in kw}
    cls = _answering(kw.get("create_connection") or ClientConnection)
    conn = cls(sock, client_protocol(uri, kw), **opts)
    if kw.get("legacy"):
        conn.pending_legacy_warning = False
    return conn


def connect_in_block(uri: str, kwargs: dict[str, Any], live: Callable[[], Any],
                     eff: Effective, opts: Options) -> Any:
    """``connect(uri, **kwargs)`` inside a block (see the module docstring); ``live()``
    makes the real connection the caller asked for."""
    from websockets.http11 import USER_AGENT
    from websockets.uri import parse_uri

    mine, theirs = socket.socketpair()
    # (unbounded: the session's bound applies, as for the asyncio client: ``_asyncio.py``)
    link = _Link(Endpoint("wss" if parse_uri(uri).secure else "ws", None), theirs)
    sock = _Socket(mine.family, mine.type, mine.proto, fileno=mine.detach())
    sock.link = link
    conn = _client(uri, kwargs, sock)
    setattr(conn, _LINK, link)
    link.client = conn.protocol
    failed: list[BaseException] = []

    def shake() -> None:
        try:
            conn.handshake(kwargs.get("additional_headers"),
                           kwargs.get("user_agent_header", USER_AGENT),
                           kwargs.get("open_timeout", 10))
        except BaseException as exc:
            failed.append(exc)
            link.asked.set()

    shaking = threading.Thread(target=shake, daemon=True, name="dejacache-ws-handshake")
    shaking.start()
    link.asked.wait()
    hs = link.endpoint.handshake()
    try:
        if hs is None:
            raise failed[0]
        session = SyncSession(eff, hs, lambda: _live(live),
                              realtime=opts.realtime, volatile=opts.volatile)
        link.session = session
        link.endpoint.spill_past(session.max_message, link.spilling)
        answer = session.open()
        with link.lock:
            out = link.endpoint.answer(answer)
        link.write(out, link.endpoint.eof)
        shaking.join()
        if failed:
            raise failed[0]
    except BaseException:
        with contextlib.suppress(Exception):
            conn.close_socket()
        raise
    threading.Thread(target=link.feed, daemon=True, name="dejacache-ws-feed").start()
    return conn
