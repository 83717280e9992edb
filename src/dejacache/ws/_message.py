"""A WebSocket session as data: messages, the close, the handshake and its answer.

Pure: no socket, no clock, no library. Every client library's frames become a
:class:`Message` (text or binary), its end a :class:`Closed`; a recording stores each
message in the form :func:`stored` gives (readable, and the exact text back):

* ``{"json": tree}``: a JSON object or array (``"binary": true`` when it came in a binary
  frame, as Gemini Live's answers do). It comes back as equal JSON written compactly, with
  the keys in the file's sorted order, as a replayed HTTP JSON body does: the client's
  parser reads the same event;
* ``{"text": "..."}``: any other text, as it came (an object repeating a key among them:
  written again, the repeat would be gone);
* ``{"bytes": "<base64>"}``: any other binary frame, as it came;
* ``{"text_bytes": "<base64>"}``: a text frame whose payload is not UTF-8, as it came
  (:class:`TextBytes`: aiohttp hands it to an app that does not decode text). A key of its
  own, so that a reader that does not know it refuses it rather than replay it as binary.

Large strings inside (audio, images) are stored once by hash beside the cassette
(``cassettes/blobs.py``), so a recording of a voice session stays small.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .._core.repeated_keys import may_repeat, with_pairs
from ..errors import SerializationError

__all__ = ["ABNORMAL", "MAX_MESSAGE", "TOO_BIG", "UPGRADE_HEADERS", "Answer", "Closed", "Cut",
           "Faulted", "Handshake", "Message", "Refused", "Streamed", "TextBytes",
           "canonical_message", "json_of", "larger_than", "message_of", "onward", "server_cut",
           "stored", "too_big"]

#: Response headers that belong to one connection's upgrade: a replay's own handshake makes
#: them anew (its accept key, no extension negotiated), so none is stored or handed back.
UPGRADE_HEADERS = frozenset({"upgrade", "connection", "sec-websocket-accept",
                             "sec-websocket-protocol", "sec-websocket-extensions"})
#: The close code the protocol reserves for a connection that dropped without a close frame.
ABNORMAL = 1006
#: The close code for a message larger than the receiver takes (RFC 6455 7.4.1).
TOO_BIG = 1009
#: Close codes RFC 6455 (7.4.1) keeps for reporting an end no close frame's code told: 1005
#: (a close frame without a code), 1006 (no close frame), 1015 (TLS failed). No close frame
#: may carry one: ``websockets`` refuses to send it, so passed on as heard, the other side's
#: connection was never closed.
_REPORTED_ONLY = frozenset({1005, ABNORMAL, 1015})
_GOING_AWAY = 1001
#: The largest message (bytes, all its frames together) a session takes from either side.
#: The realtime APIs send media as base64 inside JSON: OpenAI Realtime documents up to
#: 15 MiB for one ``input_audio_buffer.append``, and Gemini Live's ``realtimeInput`` /
#: ``clientContent`` carry inline audio and images the same way. 64 MiB is four of the
#: largest documented message (Node's ws takes 100 MiB by default, Python's websockets
#: 1 MiB), so no real session comes near it, while one message (held whole before it is
#: keyed or sent on) no longer takes the process's memory: a 10 GB one was held to its end.
MAX_MESSAGE = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One whole message: ``data`` is ``str`` for a text frame, ``bytes`` for binary."""

    data: str | bytes

    @property
    def binary(self) -> bool:
        return type(self.data) is not str


@dataclasses.dataclass(frozen=True, slots=True)
class TextBytes(Message):
    """A text message whose payload is not UTF-8: ``data`` is its ``bytes``. aiohttp reads
    no text as UTF-8 for an app that asks it not to (``decode_text=False``) and hands such
    a message on as it came; every other client refuses it (1007). Also an aiohttp app's
    text message past the session's bound, its UTF-8 as aiohttp made it: sent on, never
    decoded, kept or stored."""

    @property
    def binary(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True, slots=True)
class Streamed(Message):
    """A client message over the recording's bound, sent in fragments: ``parts`` hands them
    on as they come (an iterator, or an async one, of ``str`` or ``bytes``), so it is never
    held whole; ``data`` is empty. Always past the bound: it goes live, unrecorded."""

    parts: Any = None


@dataclasses.dataclass(frozen=True, slots=True)
class Closed:
    """The end of a session: the close frame's code and reason (1006: the connection
    dropped without one)."""

    code: int = 1000
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Cut(Closed):
    """The end of a session cut because a message passed the size bound: the window it was
    recording is not stored (a replay of it would be a session shorter than the live one,
    served as if whole; without it, the replay misses)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Faulted(Closed):
    """The end of a session the client's own library made, refusing what the server sent
    (a protocol error, text that is not UTF-8): the code it closed with and its error's
    text. The server sent it, so it is recorded (``"error": true`` in the stored close) and
    replayed as that library reports it, not as a close the server made."""


def larger_than(m: Message, limit: int) -> bool:
    """Whether ``m`` is over ``limit`` bytes as it goes on the wire (text as UTF-8): the
    rule of every message bound, as websockets' ``max_size`` reads it. Text is encoded only
    when its length alone cannot tell (a str's UTF-8 is 1 to 4 bytes a character)."""
    data = m.data
    n = len(data)
    if n > limit:
        return True
    if type(data) is not str or n * 4 <= limit:
        return False
    return len(data.encode()) > limit


def onward(code: int) -> int:
    """The code to close the other side with for an end heard as ``code``: one that only
    reports (a connection dropped, a close without a code) becomes 1001, going away (the side
    it came from is gone; the other did nothing wrong)."""
    return _GOING_AWAY if code in _REPORTED_ONLY else code


def too_big(who: str, limit: int, raise_with: str) -> str:
    """The close reason for a message over ``limit`` (it fits a close frame's 123 bytes):
    whose message, the bound, and what raises it."""
    size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit} bytes"
    reason = f"dejacache: {who} message over the {size} limit"
    return f"{reason}; raise {raise_with}"[:123] if raise_with else reason


def server_cut(limit: int, raise_with: str) -> Cut:
    """The end a client is given when its live connection refused a server message over
    its own bound (``limit``, which ``raise_with`` raises): 1011, its session cannot go on
    (the server did nothing wrong by its own rules); the window it cut is not stored."""
    return Cut(1011, too_big("the server's", limit, raise_with))


@dataclasses.dataclass(frozen=True, slots=True)
class Handshake:
    """The opening request: the URL (``ws://`` or ``wss://``), every header as sent
    (credentials included: keys take digests of them, files never hold them) and the
    subprotocols offered."""

    url: str
    headers: Sequence[tuple[str, str]]
    subprotocols: Sequence[str] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """The server's answer to the handshake: 101 (switched, with the subprotocol chosen),
    or a refusal (any other status, with its body)."""

    status: int = 101
    headers: Sequence[tuple[str, str]] = ()
    subprotocol: str | None = None
    body: bytes = b""


class Refused(Exception):
    """A live handshake answered with another status than 101 (kept as the answer)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(f"the server answered the WebSocket handshake with {answer.status}")
        self.answer = answer


def stored(m: Message) -> dict[str, Any]:
    """``m`` as a recording keeps it (see the module docstring)."""
    data = m.data
    if type(m) is TextBytes:
        return {"text_bytes": base64.b64encode(data).decode()}  # type: ignore[arg-type]
    raw = data.encode() if type(data) is str else data
    assert isinstance(raw, bytes)
    if raw[:1] in (b"{", b"["):
        try:
            tree = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if not may_repeat(raw, tree):  # (a repeat is kept as sent: written again, it goes)
                return ({"json": tree, "binary": True} if type(data) is not str
                        else {"json": tree})
    if type(data) is str:
        return {"text": data}
    return {"bytes": base64.b64encode(raw).decode()}


def message_of(value: Mapping[str, Any]) -> Message:
    """The message a recording's stored form stands for (text and bytes as they came,
    JSON as equal JSON)."""
    if "json" in value:
        written = orjson.dumps(value["json"])
        return Message(written if value.get("binary") else written.decode())
    if "text" in value and type(value["text"]) is str:
        return Message(value["text"])
    kind, raw = (TextBytes, value["text_bytes"]) if "text_bytes" in value else (
        Message, value.get("bytes"))
    if isinstance(raw, str):
        try:
            return kind(base64.b64decode(raw, validate=True))
        except (binascii.Error, ValueError):
            pass
    raise SerializationError(f"not a recorded WebSocket message: {str(value)[:120]}")


def canonical_message(m: Message, tree: Any = None) -> dict[str, Any]:
    """``m`` as its key holds it: JSON as its parsed tree (``tree`` when already parsed,
    e.g. with ids aliased), however it was spaced; text and bytes as they came."""
    if tree is None:
        tree = json_of(m)
    if tree is not None:
        out: dict[str, Any] = {"json": tree}
        if m.binary:
            out["binary"] = True
        return out
    data = m.data
    if isinstance(data, str):
        return {"text": data}
    return {"bytes": base64.b64encode(data).decode()}


def json_of(m: Message) -> Any:
    """The JSON ``m`` carries (an object or array), else None; an object repeating a key as
    its pairs in order (``_core/repeated_keys.py``), so it never keys like one without the
    repeat, whose first value a server may read."""
    raw = m.data
    if raw[:1] not in ("{", "[", b"{", b"["):
        return None
    try:
        tree = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return with_pairs(raw) if may_repeat(raw, tree) else tree
