"""A body's ``Content-Encoding`` undone for the copy a recording keeps, or found undoable.

The one rule for every answer, whole or streamed (``transport.py``, ``recording.py``,
``observers.py``): the caller always gets the bytes as they came, with their header, and its
own decoder makes of them what it makes; the stored copy is the plain body (so keys, miss
reports and secret scrubbing read text) when every coding the header names was undone, in
reverse order of application (RFC 9110 8.4: ``br, gzip`` is gzip over br), each to its end.
Otherwise (a coding this process cannot undo: ``br`` without brotli, an unknown name; data
that is not what the header says; a body cut short before a coding's end) the body is
*opaque*: kept as it came, with its header, and replayed so. A partly undone body is never
kept as plain: that would replay as an answer the server never gave.

Decoding is bounded: no coding undone yields more than ``bound`` bytes (the caller's: the
recording bound, ``recording.Held``: the decoded copy is what the recording would hold, so
one number, one flag to raise it, bounds both), and no decoder is asked for more than the
room left, so a "decompression bomb" (a 200 KB gzip of zeros inflates to 200 MB; zstd and
brotli go further) costs at most the bound held, never its full size. A body past it is *past*: not
decoded further, and not to be kept at all (kept as it came, it would inflate in every
tool that reads the cassette). A decoder that cannot be held to a size (brotli before 1.2,
brotlicffi) counts as none: its bodies are opaque. The bound costs 0.4 us a body: a 2 KB
JSON answer under gzip decoded in 6.8 us before it and 7.2 after, a 1 MB one in 1.33 ms
either way (medians, ``benchmarks/bench_codings.py --baseline``, rounds interleaved).

Request bodies are never decoded (``exchange.canonical_request`` keys an encoded one by the
digest of its bytes as sent): nothing of them is inflated, two never share a key.

Pure: bytes in, bytes out (``zlib``; brotli and zstandard when installed).
"""

from __future__ import annotations

import importlib
import sys
import zlib
from typing import Any

__all__ = ["Decoding", "Past", "codings", "decoded", "decompressor", "is_encoded"]

_IDENTITY = ("", "identity")


def codings(header: str) -> list[str]:
    """The codings a ``Content-Encoding`` value names, in the order they were applied."""
    names = [c.strip().lower() for c in header.split(",")]
    return [n for n in names if n not in _IDENTITY]


def is_encoded(header: str) -> bool:
    return bool(header) and bool(codings(header))


# No bound: the room a caller's own copy is decoded with (``_plain.py``, as httpx decodes
# it), as large as zlib's ``max_length`` takes.
_UNBOUNDED = sys.maxsize - 1


class _Zlib:
    """gzip (``wbits`` 31), or deflate as sent in the wild: zlib-wrapped, or raw (as httpx
    accepts both: the first chunk decides)."""

    __slots__ = ("_first", "_obj", "room")

    def __init__(self, gzip: bool, room: int) -> None:
        self._obj: Any = zlib.decompressobj(zlib.MAX_WBITS | 16 if gzip else zlib.MAX_WBITS)
        self._first = not gzip
        self.room = room  # the bytes it may still yield; below 0 once past

    def decompress(self, data: bytes) -> bytes:
        # ``room + 1``: one byte more than fits says it is past (and 0 would mean no limit).
        # Input past that is left unread (``unconsumed_tail``): the body is past already.
        if self._first:
            self._first = False
            try:
                out = bytes(self._obj.decompress(data, self.room + 1))
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            else:
                self.room -= len(out)
                return out
        out = bytes(self._obj.decompress(data, self.room + 1))
        self.room -= len(out)
        return out

    def flush(self) -> bytes:
        # (input is all read when not past: what zlib still holds is the last few bytes)
        out = bytes(self._obj.flush())
        self.room -= len(out)
        return out

    @property
    def ended(self) -> bool:
        # (bytes after the end, a second gzip member among them, are not read: not undone)
        return bool(self._obj.eof) and not self._obj.unused_data


class _Brotli:
    """brotli 1.2's decoder, held to ``room + 1`` bytes a call (``output_buffer_limit``:
    it may pass that by one buffer growth, still bounded); an older one (or brotlicffi)
    only for a caller's own copy, which has no bound."""

    __slots__ = ("_obj", "room")

    def __init__(self, obj: Any, room: int) -> None:
        self._obj = obj
        self.room = room

    def decompress(self, data: bytes) -> bytes:
        if self.room == _UNBOUNDED and not hasattr(self._obj, "can_accept_more_data"):
            step = getattr(self._obj, "process", None) or self._obj.decompress
            return bytes(step(data))
        out = bytes(self._obj.process(data, output_buffer_limit=self.room + 1))
        self.room -= len(out)
        return out

    def flush(self) -> bytes:
        return b""

    @property
    def ended(self) -> bool:
        finished = getattr(self._obj, "is_finished", None)
        return bool(finished()) if finished is not None else False


# zstandard's decoder takes no output limit, so it is fed slices small enough that even
# the densest frame cannot pass the room by much: a block yields at most 128 KiB and takes
# at least 4 bytes (an RLE block: 3 of header, 1 to repeat; 327 bytes of zstd give 10 MB of
# zeros, measured), so a slice of ``4 * (room // _ZSTD_BLOCK)`` bytes yields at most the
# room plus the two blocks it may cut across. Under the default bound a slice is 2 KB: a 2
# KB answer is one call, a 1 MB one ~170 (a 1 MB JSON answer decoded in 1.00 ms, against
# 0.86 ms whole).
_ZSTD_BLOCK = 128 * 1024


class _Zstd:
    __slots__ = ("_obj", "room")

    def __init__(self, obj: Any, room: int) -> None:
        self._obj = obj
        self.room = room

    def decompress(self, data: bytes) -> bytes:
        size = max(4 * (self.room // _ZSTD_BLOCK), 4)
        if len(data) <= size:
            out = bytes(self._obj.decompress(data))
        else:
            buf = bytearray()
            at = 0
            while at < len(data) and len(buf) <= self.room:  # (past: the rest is not read)
                buf += self._obj.decompress(data[at:at + size])
                at += size
                size = max(4 * ((self.room - len(buf)) // _ZSTD_BLOCK), 4)
            out = bytes(buf)
        self.room -= len(out)
        return out

    def flush(self) -> bytes:
        return b""

    @property
    def ended(self) -> bool:
        return bool(getattr(self._obj, "eof", False))


def decompressor(name: str, bound: int | None = None) -> Any:
    """A decoder for one coding (``decompress``, ``flush``, ``ended``; ``room``, below 0
    once it has yielded more than ``bound`` bytes), or None when this process has none for
    it: with a ``bound``, none that can be held to one. ``bound`` None: a caller's own copy,
    decoded whole (``_plain.py``)."""
    room = _UNBOUNDED if bound is None else bound
    if name in ("gzip", "x-gzip"):
        return _Zlib(gzip=True, room=room)
    if name == "deflate":
        return _Zlib(gzip=False, room=room)
    if name == "br":
        for module in ("brotli", "brotlicffi"):
            try:
                lib = importlib.import_module(module)
            except ImportError:
                continue
            obj = lib.Decompressor()
            if bound is None or hasattr(obj, "can_accept_more_data"):  # brotli >= 1.2
                return _Brotli(obj, room)
        return None
    if name == "zstd":
        try:
            zstandard = importlib.import_module("zstandard")
        except ImportError:
            return None
        return _Zstd(zstandard.ZstdDecompressor().decompressobj(), room)
    return None


class Past:
    """What :func:`decoded` gives for a body whose decoded form passed ``bound`` bytes."""

    __slots__ = ("bound",)

    def __init__(self, bound: int) -> None:
        self.bound = bound


class Decoding:
    """One body's codings undone as its bytes arrive, each to at most ``bound`` bytes;
    ``opaque`` once one cannot be, ``past`` once one passes the bound (then nothing more
    is decoded, and what was is not to be kept: as it came if opaque, not at all if past)."""

    __slots__ = ("_steps", "bound", "opaque", "past")

    def __init__(self, header: str, *, bound: int) -> None:
        self._steps: list[Any] = []
        self.bound = bound
        self.opaque = self.past = False
        for name in reversed(codings(header)):
            step = decompressor(name, bound)
            if step is None:
                self.opaque = True
                self._steps = []
                return
            self._steps.append(step)

    def feed(self, data: bytes) -> bytes:
        """The plain bytes ``data`` (the next wire bytes) completes; b"" once opaque or
        past."""
        if self.opaque or self.past:
            return b""
        try:
            for step in self._steps:
                if not data:
                    break
                data = step.decompress(data)
                if step.room < 0:
                    return self._stop(opaque=False)
        # Whatever a decoder raises (zlib.error, brotli.error, zstandard's) means the same:
        # the data is not what the header says.
        except Exception:
            return self._stop(opaque=True)
        return data

    def finish(self) -> bytes:
        """The body has ended: the plain bytes still held; opaque unless every coding
        reached its own end (a body cut short, or with bytes after the end, is not one)."""
        if self.opaque or self.past:
            return b""
        data = b""
        try:
            for step in self._steps:  # what one step still holds goes through the next ones
                if data:
                    data = step.decompress(data)
                data += step.flush()
                if step.room < 0:
                    return self._stop(opaque=False)
                if not step.ended:
                    return self._stop(opaque=True)
        except Exception:  # (as in feed)
            return self._stop(opaque=True)
        return data

    def _stop(self, *, opaque: bool) -> bytes:
        """Decode no more; the decoders (and what they hold) are let go."""
        self._steps = []
        if opaque:
            self.opaque = True
        else:
            self.past = True
        return b""


def decoded(header: str, raw: bytes, *, bound: int) -> bytes | Past | None:
    """A whole body ``raw`` under ``Content-Encoding: header`` as plain bytes; None when it
    is opaque; :class:`Past` when its plain form passes ``bound`` bytes. An empty body (a
    ``HEAD`` answer, a 204) has nothing to undo."""
    if not raw or not is_encoded(header):
        return raw
    d = Decoding(header, bound=bound)
    body = d.feed(raw)
    tail = d.finish()
    if d.past:
        return Past(bound)
    return None if d.opaque else body + tail
