"""Server-sent events: cut a byte stream into events while it flows, and play events back.

A recording keeps each event's text and its offset (seconds since the response headers
arrived), so replay can hand the SDK the same events in the same order, one chunk per event,
and with ``realtime=True`` at the same pace.

Newline-delimited JSON streams (Ollama's ``application/x-ndjson``) are kept the same way, one
event per line (:func:`ndjson_events`), so they replay one line per chunk too; they are read
whole while recorded, so their offsets are all 0.

AWS eventstream bodies (``eventstream.py``) are recorded the same way, one decoded message
per event in place of the text, and played back one framed message per chunk:
:func:`event_bytes` is the one place that turns a recorded event back into wire bytes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol

import orjson

from . import eventstream

__all__ = ["LineSplitter", "SSESplitter", "Splitter", "event_bytes", "event_data", "is_ndjson",
           "is_sse", "is_stream", "ndjson_events", "replay_async", "replay_sync", "splitter_for"]

_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


def is_sse(content_type: str | None) -> bool:
    return bool(content_type) and "text/event-stream" in content_type.lower()  # type: ignore[union-attr]


def is_ndjson(content_type: str | None) -> bool:
    ct = (content_type or "").lower()
    return "ndjson" in ct or "jsonl" in ct  # application/x-ndjson, application/jsonl(ines)


def ndjson_events(body: bytes) -> list[list[Any]] | None:
    """A newline-delimited JSON body as ``[[0.0, line], ...]``, each line with its newline, so
    the lines joined are the body byte for byte (None: empty, or not UTF-8)."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return None
    # On "\n" only: str.splitlines also cuts at U+2028 and friends, which JSON text holds raw.
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return [[0.0, line] for line in lines] if lines else None


def is_stream(content_type: str | None) -> bool:
    """A body handed on and recorded event by event as it arrives: server-sent events, an AWS
    eventstream, or newline-delimited JSON (Ollama's streams)."""
    return is_sse(content_type) or eventstream.is_eventstream(content_type) or is_ndjson(
        content_type)


class Splitter(Protocol):
    """Cuts a live body into the events a recording keeps (``[offset, event]``'s event)."""

    def feed(self, chunk: bytes) -> list[Any]: ...

    def flush(self) -> list[Any]: ...

    def body(self) -> bytes | None:
        """The body to store whole instead of the events (they did not decode), else None."""


def splitter_for(content_type: str | None) -> Splitter:
    """The splitter that cuts a streamed body of this type into recorded events."""
    if eventstream.is_eventstream(content_type):
        return eventstream.EventStreamSplitter()
    if is_ndjson(content_type):
        return LineSplitter()
    return SSESplitter()


def event_bytes(event: Any) -> bytes:
    """A recorded event's wire bytes: an SSE event's text, or an eventstream message framed
    again (byte-exact for a message recorded unchanged)."""
    if type(event) is str:
        return event.encode()
    return eventstream.encode(eventstream.from_stored(event))


class LineSplitter:
    """Newline-delimited JSON as it arrives: each complete line (with its newline) is an event,
    as ``ndjson_events`` cuts a whole body. A body that is not UTF-8 is kept whole instead
    (``body``), so a replay gives back exactly the bytes that came."""

    __slots__ = ("_bad", "_buf", "_raw")

    def __init__(self) -> None:
        self._buf = b""
        self._raw: list[bytes] = []
        self._bad = False

    def feed(self, chunk: bytes) -> list[str]:
        self._raw.append(chunk)
        buf = self._buf + chunk
        end = buf.rfind(b"\n") + 1
        self._buf = buf[end:]
        return self._lines(buf[:end].split(b"\n")[:-1], b"\n")

    def flush(self) -> list[str]:
        rest, self._buf = self._buf, b""
        return self._lines([rest], b"") if rest else []

    def _lines(self, lines: list[bytes], end: bytes) -> list[str]:
        if self._bad:
            return []
        try:
            return [(line + end).decode() for line in lines]
        except UnicodeDecodeError:
            self._bad = True
            return []

    def body(self) -> bytes | None:
        return b"".join(self._raw) if self._bad else None


class SSESplitter:
    """Feed bytes as they arrive; get back complete events (text including the blank line)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[str]:
        buf = self._buf + chunk if self._buf else chunk
        out: list[str] = []
        while True:
            cut = -1
            sep_len = 0
            for sep in _SEPARATORS:
                i = buf.find(sep)
                if i != -1 and (cut == -1 or i < cut):
                    cut, sep_len = i, len(sep)
            if cut == -1:
                break
            end = cut + sep_len
            # "\n\n" is ASCII, so an event never ends inside a multi-byte character.
            out.append(buf[:end].decode("utf-8", "replace"))
            buf = buf[end:]
        self._buf = buf
        return out

    def flush(self) -> list[str]:
        """Whatever is left when the stream ends without a final blank line."""
        rest, self._buf = self._buf, b""
        return [rest.decode("utf-8", "replace")] if rest.strip() else []

    def body(self) -> None:
        return None  # any text cuts into events


def event_data(event: str) -> Any:
    """The JSON in an event's ``data:`` lines or an NDJSON line, or None (``[DONE]``,
    comments, non-JSON)."""
    if event[:1] == "{":
        # An NDJSON line is the JSON itself. An SSE event never starts with "{": that would be
        # a field named "{...", which the SSE format ignores.
        lines = [event]
    else:
        lines = [
            line[5:].lstrip(" ") for line in event.splitlines() if line.startswith("data:")
        ]
        if not lines:
            return None
    try:
        return orjson.loads("\n".join(lines))
    except orjson.JSONDecodeError:
        return None


def replay_sync(events: Sequence[Sequence[Any]], realtime: bool) -> Iterator[bytes]:
    """Yield recorded ``[offset, event]`` events as wire bytes (:func:`event_bytes`); with
    ``realtime`` keep the recorded pace."""
    if not realtime:
        for _, text in events:
            yield event_bytes(text)
        return
    start = time.perf_counter()
    for offset, text in events:
        wait = start + offset - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield event_bytes(text)


async def replay_async(events: Sequence[Sequence[Any]], realtime: bool) -> AsyncIterator[bytes]:
    start = time.perf_counter()
    for offset, text in events:
        if realtime:
            wait = start + offset - time.perf_counter()
            if wait > 0:
                # Here, not at module level: asyncio (with ssl, socket, concurrent.futures and
                # logging) was ~40 ms of the first block. A coroutine is
                # running, so this is a dict lookup under asyncio (under trio it loads it, as
                # the module-level import used to).
                import asyncio

                await asyncio.sleep(wait)
        yield event_bytes(text)
