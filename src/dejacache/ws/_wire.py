"""The server end of an in-memory connection, speaking websockets' own sans-I/O protocol.

A ``websockets`` client (asyncio, threads, or the legacy API) inside a block is connected to
an :class:`Endpoint` instead of a server: the client's library writes its real handshake and
frames, which ``websockets.server.ServerProtocol`` (public, sans-I/O) parses; the answer,
messages and close the session owes it come back as the frames that server protocol writes.
So the client's own code does everything it does live (its handshake checks, fragmented
messages, pings and pongs, the closing handshake, its exceptions) while no socket reaches
any server. The endpoint does no I/O: the adapters carry its bytes.

Once the connection is open, a write made only of whole, unfragmented, masked text or binary
frames (RSV bits clear, text valid UTF-8) is read here without the protocol, and each
message the server sends is framed here (FIN, opcode, length, no mask): exactly what
``ServerProtocol`` does with them, since it negotiates no extension and keeps nothing but
the frame boundary between such frames. Anything else (pings, closes, fragments, a frame
split across writes, a frame over the size bound, its debug log on) goes through the protocol.

A message (all its frames together) is bounded: ``max_message`` bytes, ``MAX_MESSAGE`` by
default. The protocol refuses a frame whose length passes what is left of it from its
header, before reading its payload, so nothing over it is held; the connection is closed
with 1009 and a reason naming the bound and ``raise_with`` (what raises it), and
:attr:`over` is set. ``None``: unbounded, for an in-process client, whose session applies
its bound by sending a larger message on unrecorded (``_drive.py``): the client holds a
whole message already, and a live server is owed it; one it sends in fragments is handed on
as they come once past the session's bound (:meth:`Endpoint.spill_past`), never held whole.
"""

from __future__ import annotations

import codecs
import functools
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._message import (
    ABNORMAL,
    MAX_MESSAGE,
    TOO_BIG,
    UPGRADE_HEADERS,
    Answer,
    Closed,
    Faulted,
    Handshake,
    Message,
    TextBytes,
    onward,
    too_big,
)

__all__ = ["Armed", "Endpoint", "Parts", "client_protocol"]

_FRAMING = frozenset({"content-length", "transfer-encoding", "date"})


class Endpoint:
    """One connection's server end. ``feed(data)`` takes the client's bytes and returns the
    bytes the server answers at once (pongs, its reply to a close); whole client messages
    wait in ``incoming`` for the session. ``eof`` is set once the server end has closed."""

    def __init__(self, scheme: str, max_message: int | None = MAX_MESSAGE,
                 raise_with: str = "") -> None:
        from websockets.protocol import State

        self._open = State.OPEN
        self._unmask = _unmask()
        self.scheme = scheme
        self.chosen: str | None = None  # the recorded subprotocol
        self.max_message = max_message
        self._limit = sys.maxsize if max_message is None else max_message

        def select(proto: Any, offered: Sequence[str]) -> str | None:
            return self.chosen if self.chosen in offered else None

        self.proto = _protocol()(select_subprotocol=select, max_size=max_message)
        if max_message is not None:
            self.proto.too_big = too_big("the client's", max_message, raise_with)
        self.request: Any = None
        self.incoming: list[Message] = []
        self.client_closed: Closed | None = None
        self.eof = False
        # The fragmented message under way (None: none). One buffer, not a list of parts:
        # endless empty continuation frames then hold nothing.
        self._parts: bytearray | None = None
        self._text = False
        # An in-process client's bound (``spill_past``): a fragmented message past it is
        # handed on as its fragments come (``_spill``), never held whole here.
        self._bound = sys.maxsize
        self._spilling: Callable[[bool], Parts] | None = None
        self._spill: Parts | None = None
        # What the client wrote before the answer: its request alone, or the protocol's
        # parser may not sit at a frame boundary once open (None once answered).
        self._head: bytearray | None = bytearray()
        # The protocol may be skipped: it is open, with no extension and no debug log
        # (``_quiet``), and nothing of its is waiting to be sent (``_plain``, kept by
        # ``_out``); for the client's frames, its parser also sits between two frames
        # (``_framed``, which implies ``_plain``).
        self._quiet = self._plain = self._framed = False

    # ------------------------------------------------------------ from the client

    def spill_past(self, bound: int, spilling: Callable[[bool], Parts]) -> None:
        """Hand a fragmented message longer than ``bound`` bytes (the session's) on as it
        comes: ``spilling(text)`` takes its fragments, the first ones together, so that
        nothing past the bound is held here."""
        self._bound, self._spilling = bound, spilling

    def feed(self, data: bytes) -> bytes:
        # A voice session's 6.4 KB audio messages read here, not through the protocol's
        # parser: ~550 -> ~150 Python opcodes each.
        if self._framed:
            msgs, whole = _read(data, self._unmask, self._limit)
            if msgs is not None and self._parts is None and self._spill is None:
                # (no fragmented message under way)
                self.incoming += msgs
                return b""
        else:
            whole = False
            if self._head is not None:
                self._head += data
        self._framed = self._plain = False  # until the protocol has taken it (it may raise)
        self.proto.receive_data(data)
        out = self._events()
        self._framed = whole and self._plain
        return out

    def feed_eof(self) -> bytes:
        self._framed = self._plain = False
        self.proto.receive_eof()
        return self._events()

    def _events(self) -> bytes:
        # The library's classes bound once (``_kinds``), and a whole message taken from its
        # one frame: a voice session's 6.4 KB audio message went from 46-55 to 38 µs to
        # take in (interleaved in one process, on the loaded 2-core box).
        frame_t, request_t, text, binary, cont, close = _kinds()
        for ev in self.proto.events_received():
            if not isinstance(ev, frame_t):
                if isinstance(ev, request_t):
                    self.request = ev
                continue
            op = ev.opcode
            if op is text or op is binary:
                if ev.fin:  # a whole message in one frame (the usual case): no parts
                    raw = bytes(ev.data)
                    self.incoming.append(Message(raw.decode() if op is text else raw))
                    continue
                self._text = op is text
                self._parts = bytearray(ev.data)
            elif op is cont:
                if self._spill is not None:  # past the bound: handed on, not held
                    self._spill.part(bytes(ev.data), ev.fin)
                    if ev.fin:
                        self._spill = None
                    continue
                if self._parts is not None:  # (else the protocol has failed the connection)
                    self._parts += ev.data
            elif op is close:
                code = self.proto.close_rcvd.code if self.proto.close_rcvd else 1005
                reason = self.proto.close_rcvd.reason if self.proto.close_rcvd else ""
                self.client_closed = Closed(code, reason)
                continue
            else:
                continue  # ping and pong: the protocol answers a ping itself
            if ev.fin and self._parts is not None:
                raw = bytes(self._parts)
                self._parts = None
                self.incoming.append(Message(raw.decode() if self._text else raw))
            elif self._parts is not None and len(self._parts) > self._bound:
                assert self._spilling is not None
                self._spill = self._spilling(self._text)
                self._spill.part(bytes(self._parts), False)
                self._parts = None
        return self._out()

    @property
    def over(self) -> bool:
        """Whether the client's message passed ``max_message`` (the connection is closed)."""
        return bool(self.proto.over)

    def handshake(self) -> Handshake | None:
        """The client's opening request, once it has come."""
        req = self.request
        if req is None:
            return None
        headers = list(req.headers.raw_items())
        offered = [p.strip() for k, v in headers if k.lower() == "sec-websocket-protocol"
                   for p in v.split(",") if p.strip()]
        host = req.headers.get("Host", "localhost")
        return Handshake(f"{self.scheme}://{host}{req.path}", headers, offered)

    def take(self) -> list[Message]:
        out, self.incoming = self.incoming, []
        return out

    # ------------------------------------------------------------ to the client

    def answer(self, answer: Answer) -> bytes:
        """The handshake response: the client's own accept key, the recorded subprotocol and
        headers; or the recorded refusal (the client raises it as it did live)."""
        if answer.status == 101:
            self.chosen = answer.subprotocol
            response = self.proto.accept(self.request)
            taken = {k.lower() for k in response.headers}
        else:
            response = _refusal(answer)
            taken = set()
        for k, v in answer.headers:
            low = k.lower()
            if low not in taken and low not in UPGRADE_HEADERS and low not in _FRAMING:
                response.headers[k] = v
        if answer.status != 101:
            response.headers["Content-Length"] = str(len(answer.body))
        self.proto.send_response(response)
        head, self._head = self._head, None
        proto = self.proto
        self._quiet = not proto.extensions and not proto.debug
        out = self._out()
        # The request ends at its first blank line, where the parser stops reading it.
        self._framed = (self._plain and head is not None
                        and head.find(b"\r\n\r\n") + 4 == len(head))
        return out

    def message(self, m: Message) -> bytes:
        data = m.data
        if type(m) is TextBytes:  # (the text frame as it came: the client refuses it)
            assert isinstance(data, bytes)
            self.proto.send_text(data)
            return self._out()
        if self._plain:  # the frame the protocol would write: ~235 -> ~50 opcodes
            if type(data) is str:
                return _frame(0x81, data.encode())
            if type(data) is bytes:
                return _frame(0x82, data)
        if type(data) is str:
            self.proto.send_text(data.encode())
        else:
            assert isinstance(data, bytes)
            self.proto.send_binary(data)
        return self._out()

    def close(self, c: Closed) -> bytes:
        """The server closes: its close frame, or nothing (the connection drops) for 1006."""
        from websockets.protocol import State

        if c.code == ABNORMAL:
            self.eof = True
            return b""
        self._framed = self._plain = False
        if self.proto.state is State.OPEN:  # (a close without a code passed on as one)
            self.proto.send_close(onward(c.code) if c.code != 1005 else None, c.reason)
        return self._out()

    def fail(self, reason: str) -> bytes:
        """End the connection with 1011 (a replay miss): the client's next call raises."""
        return self.close(Closed(1011, reason[:120]))

    def end(self, c: Closed, client: Any) -> bytes:
        """The end ``c`` as ``client`` (its protocol: sans-I/O, or the legacy one) is told
        it: a close, or for a refusal of its library's (``Faulted``) a frame it refuses
        again, failing the connection itself as it did live: text that is not UTF-8 for
        1007, else a reserved bit (RSV2: no extension websockets negotiates uses it). Armed
        first (:class:`Armed`: every client protocol a block makes is), the client fails
        with the recorded code and reason, whatever its own bound: a 1009 recorded by a
        client with a ``max_size`` is that client's end, replayed as it was to one with
        none too."""
        if not isinstance(c, Faulted):
            return self.close(c)
        self._framed = self._plain = False
        if isinstance(client, Armed):
            client.fault = c
        return _NOT_UTF8 if c.code == _INVALID_DATA else _RESERVED_BIT

    def _out(self) -> bytes:
        proto = self.proto
        chunks = proto.data_to_send()
        if chunks and chunks[-1] == b"":
            self.eof = True
        self._plain = self._quiet and proto.state is self._open
        return b"".join(chunks)


class Parts:
    """Where the fragments of a client message past its session's bound go as they come
    (each link's queue to the live side subclasses it): text decoded fragment by fragment,
    a character straddling two kept for the next."""

    def __init__(self, text: bool) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")().decode if text else None

    def piece(self, data: bytes, fin: bool) -> str | bytes:
        """The fragment as the live side's fragmented send takes it."""
        return self._decode(data, fin) if self._decode is not None else data

    def part(self, data: bytes, fin: bool) -> None:
        raise NotImplementedError


def _read(data: bytes, unmask: Callable[[bytes, bytes], bytes], limit: int
          ) -> tuple[list[Message] | None, bool]:
    """A client's write read as frames (RFC 6455 5.2): the messages it holds when it is only
    whole, unfragmented, masked text or binary frames (RSV bits clear, text in UTF-8) of at
    most ``limit`` bytes, else None; and whether it ends where a frame ends."""
    msgs: list[Message] | None = []
    pos, end = 0, len(data)
    try:
        while pos < end:
            first, n = data[pos], data[pos + 1] - 0x80
            if n < 0:  # not masked: the protocol fails the connection
                return None, False
            if n < 126:
                at = pos + 6
            elif n == 126:
                n, at = data[pos + 2] << 8 | data[pos + 3], pos + 8
            else:
                n, at = int.from_bytes(data[pos + 2:pos + 10], "big"), pos + 14
            # Over the bound: the protocol refuses it (1009). One comparison a frame: a
            # 69-byte text frame read in 0.76-1.01 µs before it, 0.79-0.85 with it (min of 15
            # runs, interleaved in one process on the loaded 2-core box).
            if n > limit:
                return None, False
            pos = at + n  # past the end when the header itself is cut
            if pos > end:
                return None, False
            if msgs is None:
                continue
            payload: str | bytes
            if first == 0x81:  # FIN, no RSV bit, text
                try:
                    payload = unmask(data[at:pos], data[at - 4:at]).decode()
                except UnicodeDecodeError:  # the protocol's path raises it, as it did
                    msgs = None
                    continue
            elif first == 0x82:  # ... binary
                payload = unmask(data[at:pos], data[at - 4:at])
            else:
                msgs = None
                continue
            msgs.append(Message(payload))
    except IndexError:  # the header is cut
        return None, False
    return msgs, True


# Server frames (unmasked) a client refuses: text that is not UTF-8; RSV2 set, empty.
_NOT_UTF8 = bytes((0x81, 1, 0xFF))
_RESERVED_BIT = bytes((0xA1, 0))
_INVALID_DATA = 1007
_LENGTH16 = struct.Struct("!BBH").pack
_LENGTH64 = struct.Struct("!BBQ").pack


def _frame(first: int, payload: bytes) -> bytes:
    """A server's unmasked frame (RFC 6455 5.2): the shortest length that holds it, as
    ``websockets.frames.Frame.serialize`` writes it."""
    n = len(payload)
    if n < 126:
        return bytes((first, n)) + payload
    if n < 65536:
        return _LENGTH16(first, 126, n) + payload
    return _LENGTH64(first, 127, n) + payload


@functools.cache
def _protocol() -> Any:
    """websockets' ``ServerProtocol`` closing a message over its ``max_size`` with the
    endpoint's reason (``too_big``: the bound and how to raise it) in place of its own
    ("frame with N bytes exceeds limit of M bytes"), and saying so (``over``). ``fail`` is
    the public method its parser calls for every failure."""
    from websockets.server import ServerProtocol

    class Bounded(ServerProtocol):
        too_big = ""
        over = False

        def fail(self, code: int, reason: str = "") -> None:
            if code == TOO_BIG and not self.over:
                self.over = True
                reason = self.too_big
            super().fail(code, reason)

    return Bounded


@functools.cache
def _kinds() -> tuple[Any, ...]:
    """What :meth:`Endpoint._events` tells apart: websockets' frame and request classes and
    the data and close opcodes (imported on first use: ``import dejacache.ws`` loads no
    websockets)."""
    from websockets.frames import Frame, Opcode
    from websockets.http11 import Request

    return Frame, Request, Opcode.TEXT, Opcode.BINARY, Opcode.CONT, Opcode.CLOSE


@functools.cache
def _unmask() -> Callable[[bytes, bytes], bytes]:
    """websockets' own mask function, its C one when built."""
    try:
        from websockets.speedups import apply_mask
    except ImportError:  # pragma: no cover - websockets built without its C extension
        from websockets.utils import apply_mask
    return apply_mask


def _refusal(answer: Answer) -> Any:
    """The response refusing the handshake: the recorded status (one ``http.HTTPStatus``
    does not name too), its body, and the recorded headers added by the caller."""
    import http

    from websockets.datastructures import Headers
    from websockets.http11 import Response

    try:
        phrase = http.HTTPStatus(answer.status).phrase
    except ValueError:
        phrase = ""
    return Response(answer.status, phrase, Headers(), answer.body)


class Armed:
    """A websockets client protocol (sans-I/O or legacy) that fails the connection, once
    armed (``fault``: a recorded ``_message.Faulted``), with the code and reason its live
    twin failed it with: the client refuses :meth:`Endpoint.end`'s frame through its own
    parser and its own failing method (``fail``, ``fail_connection``: public, the one every
    refusal goes through), which asks :meth:`armed` what to fail with, so the app gets the
    same ``ConnectionClosedError`` (that close sent, none received) as live."""

    fault: Closed | None = None

    def armed(self, code: int, reason: str) -> tuple[int, str]:
        """What to fail with instead of ``code`` and ``reason``: the fault armed, once. The
        first failure after arming is the fault's, whichever comes first: the threads
        client decodes text in the app's ``recv()``, and the end of the stream written
        after the frame may fail it before that (1006)."""
        fault, self.fault = self.fault, None
        if fault is None or not _sendable(fault):
            return code, reason
        from websockets.frames import CloseCode

        try:  # (as its own refusals name it)
            return CloseCode(fault.code), fault.reason
        except ValueError:
            return fault.code, fault.reason


@functools.cache
def _faulting() -> Any:
    """websockets' ``ClientProtocol``, :class:`Armed`."""
    from websockets.client import ClientProtocol

    class Faulting(Armed, ClientProtocol):
        def fail(self, code: int, reason: str = "") -> None:
            super().fail(*self.armed(code, reason))

    Faulting.__name__ = Faulting.__qualname__ = ClientProtocol.__name__
    Faulting.__module__ = ClientProtocol.__module__
    return Faulting


def _sendable(c: Closed) -> bool:
    """Whether the client's protocol can fail with ``c`` (its close frame written: a code
    one may carry, a reason it holds). A recorded end that cannot (a cassette edited by
    hand, or written by another client) raised inside the client's parser, which then had
    died with the connection open: the app waited for the rest forever. It fails as its
    own refusal of the frame instead."""
    from websockets.exceptions import ProtocolError
    from websockets.frames import Close

    if c.code == ABNORMAL:  # (no close frame is written for it)
        return True
    try:
        return len(Close(c.code, c.reason).serialize()) <= _CONTROL_PAYLOAD
    except (ProtocolError, ValueError):
        return False


_CONTROL_PAYLOAD = 125  #: the most a control frame carries (RFC 6455 5.5)


def client_protocol(uri: str, kw: dict[str, Any]) -> Any:
    """The sans-I/O ``ClientProtocol`` a websockets ``connect(uri, **kw)`` would make (one
    that can replay a refusal of the server's: ``_faulting``)."""
    from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
    from websockets.uri import parse_uri

    extensions = kw.get("extensions")
    if kw.get("compression", "deflate") == "deflate":
        extensions = enable_client_permessage_deflate(extensions)
    args = {k: kw[k] for k in ("origin", "subprotocols", "max_size", "logger") if k in kw}
    return _faulting()(parse_uri(uri), extensions=extensions, **args)
