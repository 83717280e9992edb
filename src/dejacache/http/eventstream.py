"""AWS's ``application/vnd.amazon.eventstream`` framing: a pure codec (no I/O).

Bedrock's ConverseStream and InvokeModelWithResponseStream answer in it. One message, every
integer big-endian::

    total length u32 | headers length u32 | CRC32 of those 8 bytes u32     (the prelude)
    headers: (name length u8, name UTF-8, value type u8, value) ...
    payload
    CRC32 of everything above u32

Header value types: 0 true, 1 false, 2 byte (i8), 3 short (i16), 4 integer (i32), 5 long
(i64), 6 byte array (u16 length), 7 string (u16 length, UTF-8), 8 timestamp (i64 ms since the
epoch), 9 uuid (16 bytes).

:class:`Decoder` takes bytes in any chunks and hands back whole :class:`Message` objects,
checking both CRCs and refusing a declared length over :data:`MAX_MESSAGE` before buffering
it; damage is a :class:`~dejacache.errors.SerializationError`, never a different message.
:func:`encode` frames a message again; for a message :class:`Decoder` produced, it gives back
the bytes it came from (same header order, same value types).

:func:`to_stored` / :func:`from_stored` turn a message into the plain JSON a recording keeps
(headers as an ordered list, the payload as text when it is UTF-8) and back.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import struct
import zlib
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ..errors import SerializationError

if TYPE_CHECKING:
    import uuid
    from typing import TypeAlias

__all__ = [
    "CONTENT_TYPE",
    "MAX_HEADERS",
    "MAX_MESSAGE",
    "MAX_PAYLOAD",
    "Decoder",
    "EventStreamSplitter",
    "Int",
    "Message",
    "decode_all",
    "encode",
    "from_stored",
    "is_eventstream",
    "stored_json",
    "stored_type",
    "to_stored",
]

CONTENT_TYPE = "application/vnd.amazon.eventstream"

# AWS documents 128 KiB of headers and 16 MiB of payload per message; botocore accepts payloads
# up to 24 MiB, and so do we: a recording must take whatever botocore itself would parse.
MAX_HEADERS = 128 * 1024
MAX_PAYLOAD = 24 * 1024 * 1024
_PRELUDE = 12  # total length, headers length, prelude CRC
_OVERHEAD = _PRELUDE + 4  # and the message CRC
MAX_MESSAGE = _OVERHEAD + MAX_HEADERS + MAX_PAYLOAD

_U32 = struct.Struct(">I")
_PRELUDE_STRUCT = struct.Struct(">II")


class Int(NamedTuple):
    """An integer header value with its wire type: ``byte``, ``short``, ``integer``,
    ``long`` or ``timestamp`` (milliseconds since the epoch)."""

    kind: str
    value: int


if TYPE_CHECKING:
    HeaderValue: TypeAlias = bool | bytes | str | uuid.UUID | Int

# type code -> (name, struct) for the fixed-width integers
_INTS: dict[int, tuple[str, struct.Struct]] = {
    2: ("byte", struct.Struct(">b")),
    3: ("short", struct.Struct(">h")),
    4: ("integer", struct.Struct(">i")),
    5: ("long", struct.Struct(">q")),
    8: ("timestamp", struct.Struct(">q")),
}
_INT_CODES = {name: (code, st) for code, (name, st) in _INTS.items()}
_U16 = struct.Struct(">H")


def is_eventstream(content_type: str | None) -> bool:
    return bool(content_type) and CONTENT_TYPE in content_type.lower()  # type: ignore[union-attr]


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One eventstream message: headers in wire order with typed values, and the payload."""

    headers: dict[str, HeaderValue]  # in the order they were framed
    payload: bytes

    @property
    def message_type(self) -> str:
        """``event``, ``exception`` or ``error`` (``:message-type``; ``event`` if absent)."""
        kind = self.headers.get(":message-type", "event")
        return kind if type(kind) is str else "event"

    @property
    def event_type(self) -> str | None:
        """``:event-type`` of an event, ``:exception-type`` of an exception."""
        for name in (":event-type", ":exception-type", ":error-code"):
            v = self.headers.get(name)
            if type(v) is str:
                return v
        return None

    def json(self) -> Any:
        """The payload parsed as JSON (raises ``orjson.JSONDecodeError`` when it is not)."""
        return orjson.loads(self.payload)


# ---------------------------------------------------------------- decoding


def _damaged(what: str, index: int) -> SerializationError:
    return SerializationError(f"eventstream message {index}: {what}")


def _parse_headers(raw: memoryview, index: int) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at, end = 0, len(raw)
    while at < end:
        n = raw[at]
        at += 1
        if at + n + 1 > end:
            raise _damaged("a header runs past the headers' length", index)
        try:
            name = bytes(raw[at:at + n]).decode()
        except UnicodeDecodeError:
            raise _damaged("a header name is not UTF-8", index) from None
        at += n
        code = raw[at]
        at += 1
        value: HeaderValue
        if code == 0 or code == 1:
            value = code == 0
        elif code in _INTS:
            kind, st = _INTS[code]
            if at + st.size > end:
                raise _damaged(f"header {name!r} runs past the headers' length", index)
            value = Int(kind, st.unpack_from(raw, at)[0])
            at += st.size
        elif code == 6 or code == 7:
            if at + 2 > end:
                raise _damaged(f"header {name!r} runs past the headers' length", index)
            size = _U16.unpack_from(raw, at)[0]
            at += 2
            if at + size > end:
                raise _damaged(f"header {name!r} runs past the headers' length", index)
            data = bytes(raw[at:at + size])
            at += size
            if code == 6:
                value = data
            else:
                try:
                    value = data.decode()
                except UnicodeDecodeError:
                    raise _damaged(f"header {name!r} is not UTF-8", index) from None
        elif code == 9:
            if at + 16 > end:
                raise _damaged(f"header {name!r} runs past the headers' length", index)
            import uuid  # rare: only here, not with every import of the HTTP layer

            value = uuid.UUID(bytes=bytes(raw[at:at + 16]))
            at += 16
        else:
            raise _damaged(f"header {name!r} has unknown value type {code}", index)
        if name in headers:
            # A dict would keep only one of them, and framing it again would lose the other.
            raise _damaged(f"header {name!r} appears twice", index)
        headers[name] = value
    return headers


class Decoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get whole messages back.

    Holds at most one unfinished message (its declared length is checked against
    ``max_message`` and the prelude CRC before anything else is kept). After damage it
    refuses every later chunk: a stream is never resynchronised into messages it did not send.
    """

    __slots__ = ("_broken", "_buf", "_max", "count")

    def __init__(self, *, max_message: int = MAX_MESSAGE) -> None:
        self._buf = bytearray()
        self._max = max_message
        self._broken: SerializationError | None = None
        self.count = 0  # messages decoded so far

    @property
    def pending(self) -> int:
        """Bytes held of a message not complete yet."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[Message]:
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        buf += chunk
        out: list[Message] = []
        at = 0
        try:
            while len(buf) - at >= _PRELUDE:
                total = self._check_prelude(buf, at)
                if len(buf) - at < total:
                    break
                # A copy: a view into the buffer would pin it (no resizing while exported).
                out.append(self._message(bytes(memoryview(buf)[at:at + total])))
                at += total
        except SerializationError as exc:
            self._broken = exc
            buf.clear()
            raise
        if at:
            del buf[:at]
        return out

    def close(self) -> None:
        """The stream ended: raise if it stopped inside a message."""
        if self._broken is not None:
            raise self._broken
        if self._buf:
            raise _damaged(f"the stream ended {len(self._buf)} bytes into it "
                           "(truncated)", self.count)

    def _check_prelude(self, buf: bytearray, at: int) -> int:
        total, headers_len = _PRELUDE_STRUCT.unpack_from(buf, at)
        if zlib.crc32(buf[at:at + 8]) != _U32.unpack_from(buf, at + 8)[0]:
            raise _damaged("prelude CRC mismatch (damaged bytes)", self.count)
        if total < _OVERHEAD or headers_len > total - _OVERHEAD:
            raise _damaged(f"impossible lengths (total {total}, headers {headers_len})",
                           self.count)
        if total > self._max or headers_len > MAX_HEADERS:
            raise _damaged(f"declares {total} bytes ({headers_len} of headers), over the "
                           f"limit of {self._max} ({MAX_HEADERS} of headers)", self.count)
        return int(total)

    def _message(self, frame: bytes) -> Message:
        index = self.count
        view = memoryview(frame)
        if zlib.crc32(view[:-4]) != _U32.unpack_from(frame, len(frame) - 4)[0]:
            raise _damaged("message CRC mismatch (damaged bytes)", index)
        headers_len = _U32.unpack_from(frame, 4)[0]
        headers = _parse_headers(view[_PRELUDE:_PRELUDE + headers_len], index)
        payload = frame[_PRELUDE + headers_len:-4]
        self.count += 1
        return Message(headers, payload)


def decode_all(data: bytes, *, max_message: int = MAX_MESSAGE) -> list[Message]:
    """Every message of a whole body; raises on damage or a truncated last message."""
    dec = Decoder(max_message=max_message)
    out = dec.feed(data)
    dec.close()
    return out


# ---------------------------------------------------------------- encoding


def _bad(what: str) -> SerializationError:
    return SerializationError(f"cannot frame eventstream message: {what}")


def _header_bytes(name: str, value: Any) -> bytes:
    raw_name = name.encode()
    if not raw_name or len(raw_name) > 255:
        raise _bad(f"header name {name!r} must be 1 to 255 bytes of UTF-8")
    head = bytes((len(raw_name),)) + raw_name
    t = type(value)
    if t is bool:
        return head + (b"\x00" if value else b"\x01")
    if t is str or t is bytes:
        data: bytes = value.encode() if t is str else value
        if len(data) > 0xFFFF:
            raise _bad(f"header {name!r} is longer than 65535 bytes")
        return head + (b"\x07" if t is str else b"\x06") + _U16.pack(len(data)) + data
    if t is Int:
        spec = _INT_CODES.get(value.kind)
        if spec is None or type(value.value) is not int:
            raise _bad(f"header {name!r}: unknown integer kind {value.kind!r}")
        code, st = spec
        try:
            return head + bytes((code,)) + st.pack(value.value)
        except struct.error:
            raise _bad(f"header {name!r}: {value.value} does not fit a {value.kind}") from None
    if t.__name__ == "UUID" and t.__module__ == "uuid":
        return head + b"\x09" + bytes(value.bytes)
    raise _bad(f"header {name!r} has a value of type {t.__name__}")


def encode(message: Message) -> bytes:
    """The message framed: prelude, its CRC, headers in order, payload, message CRC."""
    headers = b"".join([_header_bytes(k, v) for k, v in message.headers.items()])
    payload = bytes(message.payload)
    if len(headers) > MAX_HEADERS or len(payload) > MAX_PAYLOAD:
        raise _bad(f"{len(headers)} bytes of headers and {len(payload)} of payload exceed "
                   f"the limits ({MAX_HEADERS}, {MAX_PAYLOAD})")
    prelude = _PRELUDE_STRUCT.pack(_OVERHEAD + len(headers) + len(payload), len(headers))
    body = prelude + _U32.pack(zlib.crc32(prelude)) + headers + payload
    return body + _U32.pack(zlib.crc32(body))


# ---------------------------------------------------------------- the stored form


def to_stored(message: Message) -> dict[str, Any]:
    """A message as a recording keeps it::

        {"headers": [[":event-type", "messageStart"], ["n", 5, "integer"], ...],
         "payload": "{\\"role\\":\\"assistant\\"}"}

    A string header is ``[name, value]``, a boolean ``[name, true|false]``, any other
    ``[name, value, type]`` (bytes as base64, a uuid as text). The payload is text when it is
    UTF-8 (readable, and the exact bytes again on replay), else bytes.
    """
    headers: list[list[Any]] = []
    for name, v in message.headers.items():
        if isinstance(v, (str, bool)):
            headers.append([name, v])
        elif isinstance(v, Int):
            headers.append([name, v.value, v.kind])
        elif isinstance(v, bytes):
            headers.append([name, base64.b64encode(v).decode(), "bytes"])
        else:
            headers.append([name, str(v), "uuid"])
    payload: str | bytes
    try:
        payload = message.payload.decode()
    except UnicodeDecodeError:
        payload = message.payload
    return {"headers": headers, "payload": payload}


def _stored_header(item: Any) -> tuple[str, Any]:
    if type(item) is not list or not 2 <= len(item) <= 3 or type(item[0]) is not str:
        raise SerializationError(f"stored eventstream header {item!r} is not [name, value] "
                                 "or [name, value, type]")
    name, value = item[0], item[1]
    if len(item) == 2:
        if type(value) is str or type(value) is bool:
            return name, value
        raise SerializationError(f"stored eventstream header {name!r} needs a type")
    kind = item[2]
    try:
        if kind in _INT_CODES and type(value) is int:
            return name, Int(kind, value)
        if kind == "bytes" and type(value) is str:
            return name, base64.b64decode(value, validate=True)
        if kind == "uuid" and type(value) is str:
            import uuid

            return name, uuid.UUID(value)
    except (binascii.Error, ValueError):
        pass
    raise SerializationError(f"stored eventstream header {name!r}: {value!r} is not a "
                             f"valid {kind!r}")


def from_stored(stored: Any) -> Message:
    """The message :func:`to_stored` described (raises on anything else)."""
    if type(stored) is not dict or type(stored.get("headers")) is not list:
        raise SerializationError("a stored eventstream event needs a headers list")
    headers = dict(_stored_header(h) for h in stored["headers"])
    if len(headers) != len(stored["headers"]):
        raise SerializationError("a stored eventstream event repeats a header name")
    payload = stored.get("payload", b"")
    if type(payload) is str:
        payload = payload.encode()
    elif type(payload) is not bytes:
        raise SerializationError("a stored eventstream payload must be text or bytes")
    return Message(headers, payload)


def stored_json(stored: Any) -> Any:
    """The JSON of a stored event's payload, or None (not JSON, or not an event)."""
    payload = stored.get("payload") if type(stored) is dict else None
    if type(payload) is not str and type(payload) is not bytes:
        return None
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def stored_type(stored: Any) -> str | None:
    """``:event-type`` (or ``:exception-type``) of a stored event, without decoding it."""
    if type(stored) is not dict:
        return None
    for h in stored.get("headers") or ():
        if type(h) is list and len(h) == 2 and h[0] in (":event-type", ":exception-type"):
            return h[1] if type(h[1]) is str else None
    return None


class EventStreamSplitter:
    """:class:`~dejacache.http.sse.SSESplitter`'s twin for eventstream bodies: feed chunks,
    get back each whole message in its stored form (:func:`to_stored`).

    It never raises: what the caller reads is the live body, whatever we make of it. On
    damage (a CRC mismatch, a length over the limit, a body ending inside a message)
    ``damaged`` holds the error and no further event comes out; ``body()`` then has every
    byte fed, so a recorder keeps the body whole instead, and a replay fails the same way
    the live call did.
    """

    __slots__ = ("_chunks", "_decoder", "damaged")

    def __init__(self, *, max_message: int = MAX_MESSAGE) -> None:
        self._decoder = Decoder(max_message=max_message)
        self._chunks: list[bytes] = []
        self.damaged: SerializationError | None = None

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self._chunks.append(bytes(chunk))
        if self.damaged is not None:
            return []
        try:
            return [to_stored(m) for m in self._decoder.feed(chunk)]
        except SerializationError as exc:
            self.damaged = exc
            return []

    def flush(self) -> list[dict[str, Any]]:
        """The body ended: nothing is left to hand out (a partial message is damage)."""
        if self.damaged is None:
            try:
                self._decoder.close()
            except SerializationError as exc:
                self.damaged = exc
        return []

    def raw(self) -> bytes:
        return b"".join(self._chunks)

    def body(self) -> bytes | None:
        """Every byte fed when the events cannot stand for the body (damage), else None."""
        return self.raw() if self.damaged is not None else None
