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

Pure: bytes in, bytes out (``zlib``; brotli and zstandard when installed).
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any

__all__ = ["Decoding", "codings", "decoded", "decompressor", "is_encoded"]

_IDENTITY = ("", "identity")


def codings(header: str) -> list[str]:
    """The codings a ``Content-Encoding`` value names, in the order they were applied."""
    names = [c.strip().lower() for c in header.split(",")]
    return [n for n in names if n not in _IDENTITY]


def is_encoded(header: str) -> bool:
    return bool(header) and bool(codings(header))


class _Zlib:
    """gzip (``wbits`` 31), or deflate as sent in the wild: zlib-wrapped, or raw (as httpx
    accepts both: the first chunk decides)."""

    __slots__ = ("_first", "_obj")

    def __init__(self, gzip: bool) -> None:
        self._obj: Any = zlib.decompressobj(zlib.MAX_WBITS | 16 if gzip else zlib.MAX_WBITS)
        self._first = not gzip

    def decompress(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            try:
                return bytes(self._obj.decompress(data))
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        return bytes(self._obj.decompress(data))

    def flush(self) -> bytes:
        return bytes(self._obj.flush())

    @property
    def ended(self) -> bool:
        # (bytes after the end, a second gzip member among them, are not read: not undone)
        return bool(self._obj.eof) and not self._obj.unused_data


class _Brotli:
    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def decompress(self, data: bytes) -> bytes:
        step = getattr(self._obj, "process", None) or self._obj.decompress
        return bytes(step(data))

    def flush(self) -> bytes:
        return b""

    @property
    def ended(self) -> bool:
        finished = getattr(self._obj, "is_finished", None)
        return bool(finished()) if finished is not None else False


class _Zstd:
    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def decompress(self, data: bytes) -> bytes:
        return bytes(self._obj.decompress(data))

    def flush(self) -> bytes:
        return b""

    @property
    def ended(self) -> bool:
        return bool(getattr(self._obj, "eof", False))


def decompressor(name: str) -> Any:
    """A decoder for one coding (``decompress``, ``flush``, ``ended``), or None when this
    process has none for it."""
    if name in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if name == "deflate":
        return _Zlib(gzip=False)
    if name == "br":
        for module in ("brotli", "brotlicffi"):
            try:
                lib = importlib.import_module(module)
            except ImportError:
                continue
            return _Brotli(lib.Decompressor())
        return None
    if name == "zstd":
        try:
            zstandard = importlib.import_module("zstandard")
        except ImportError:
            return None
        return _Zstd(zstandard.ZstdDecompressor().decompressobj())
    return None


class Decoding:
    """One body's codings undone as its bytes arrive; ``opaque`` once one cannot be (then
    nothing more is decoded, and what was is not to be kept)."""

    __slots__ = ("_steps", "opaque")

    def __init__(self, header: str) -> None:
        self._steps: list[Any] = []
        self.opaque = False
        for name in reversed(codings(header)):
            step = decompressor(name)
            if step is None:
                self.opaque = True
                self._steps = []
                return
            self._steps.append(step)

    def feed(self, data: bytes) -> bytes:
        """The plain bytes ``data`` (the next wire bytes) completes; b"" once opaque."""
        if self.opaque:
            return b""
        try:
            for step in self._steps:
                if not data:
                    break
                data = step.decompress(data)
        # Whatever a decoder raises (zlib.error, brotli.error, zstandard's) means the same:
        # the data is not what the header says.
        except Exception:
            self.opaque = True
            return b""
        return data

    def finish(self) -> bytes:
        """The body has ended: the plain bytes still held; opaque unless every coding
        reached its own end (a body cut short, or with bytes after the end, is not one)."""
        if self.opaque:
            return b""
        data = b""
        try:
            for step in self._steps:  # what one step still holds goes through the next ones
                if data:
                    data = step.decompress(data)
                data += step.flush()
                if not step.ended:
                    self.opaque = True
                    return b""
        except Exception:  # (as in feed)
            self.opaque = True
            return b""
        return data


def decoded(header: str, raw: bytes) -> bytes | None:
    """A whole body ``raw`` under ``Content-Encoding: header`` as plain bytes, or None when
    it is opaque. An empty body (a ``HEAD`` answer, a 204) has nothing to undo."""
    if not raw or not is_encoded(header):
        return raw
    d = Decoding(header)
    body = d.feed(raw)
    tail = d.finish()
    return None if d.opaque else body + tail
