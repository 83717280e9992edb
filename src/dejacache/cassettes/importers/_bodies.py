"""The bodies of a vcrpy interaction, in the shapes serializers write them, as the bytes the
client read.

vcrpy itself writes a request's ``body`` as text, bytes or ``None`` and a response's as
``body: {string: ...}`` (``content`` in its older httpx format), kept as they came off the
wire: compressed when the server compressed them. Serializers registered with
``vcr.register_serializer`` change that shape; the common ones keep a JSON body parsed, either
under ``parsed_body`` (pydantic-ai's, with ``body`` removed) or as a mapping in place of the
text. A parsed body is JSON again here, and is already decoded whatever ``content-encoding``
still says.

A body that none of these shapes explains raises ``Unreadable``: the interaction is skipped
and listed, never written with an empty or ``null`` body standing in for the one sent.
Decoding is done here, in steps of ``_STEP`` bytes charged to the file's ``InflateBudget``,
so a compression bomb stops at the budget instead of at the end of memory.
"""

from __future__ import annotations

import importlib
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from ._limits import InflateBudget

__all__ = ["Unreadable", "decode", "is_placeholder", "media_type", "request_body",
           "response_body", "sniff", "gzipped"]

_STEP = 1 << 20  # inflate a megabyte at a time: the budget is checked between steps
_NO_BODY = object()


class Unreadable(Exception):
    """This interaction cannot be converted faithfully; the message says why. ``name`` is the
    call's name, once it is known."""

    name = "http"


def _json(value: Any, where: str) -> bytes:
    """A parsed body as JSON text. Refused unless it reads back as the same value: NaN (which
    orjson writes as ``null``), tuples, dates and non-text keys are not JSON's own."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_DATETIME)
    except TypeError as exc:  # (orjson.JSONEncodeError is a TypeError)
        raise Unreadable(f"its {where} is not JSON ({exc})") from None
    if orjson.loads(text) != value:
        raise Unreadable(f"its {where} is not JSON (it does not read back as itself)")
    return text


def _text(value: Any, where: str, content_type: str) -> bytes:
    """A body as vcrpy or a serializer kept it: text, bytes, or a JSON value in place."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError:  # a lone surrogate: no bytes were ever sent as this text
            raise Unreadable(f"its {where} is not valid Unicode text") from None
    if isinstance(value, (dict, list)):
        if "json" not in content_type:
            raise Unreadable(f"its {where} is a {type(value).__name__} but its content type is "
                             f"{content_type or 'not given'}, not JSON")
        return _json(value, where)
    raise Unreadable(f"its {where} is a {type(value).__name__}, not text, bytes or JSON")


def request_body(req: Mapping[str, Any], content_type: str) -> bytes:
    """The bytes the request sent."""
    parsed = req.get("parsed_body", _NO_BODY)
    body = req.get("body", _NO_BODY)
    if parsed is not _NO_BODY:
        if body not in (_NO_BODY, None, "", b""):
            raise Unreadable("the request has both a body and a parsed_body")
        return _json(parsed, "request parsed_body")
    if body is _NO_BODY:
        raise Unreadable("the request has no body (nor a parsed_body): its serializer kept it "
                         "in a shape this importer does not read")
    return b"" if body is None else _text(body, "request body", content_type)


def response_body(resp: Mapping[str, Any], content_type: str) -> tuple[bytes, bool]:
    """The response body and whether it is still as sent (compressed if the server
    compressed it); ``False`` for a body a serializer parsed, which is decoded already."""
    if "parsed_body" in resp:
        if resp.get("body", _NO_BODY) not in (_NO_BODY, None):
            raise Unreadable("the response has both a body and a parsed_body")
        return _json(resp["parsed_body"], "response parsed_body"), False
    if "status_code" in resp:  # vcrpy's older httpx format
        body = resp.get("content", _NO_BODY)
    else:
        body = resp.get("body", _NO_BODY)
        if isinstance(body, dict) and "string" in body:
            body = body["string"]
    if body is _NO_BODY or body is None:
        raise Unreadable("the response has no body (nor a parsed_body): its serializer kept "
                         "it in a shape this importer does not read")
    return _text(body, "response body", content_type), not isinstance(body, (dict, list))


def codings(values: Iterable[str]) -> list[str]:
    """``content-encoding`` header values as the list of codings applied, in order."""
    out = [c.strip().lower() for v in values for c in v.split(",")]
    return [c for c in out if c and c != "identity"]


def decode(body: bytes, applied: list[str], budget: InflateBudget) -> bytes:
    """``body`` with the codings ``applied`` to it undone, last first."""
    for coding in reversed(applied):
        if coding in ("gzip", "x-gzip"):
            body = _inflate(body, zlib.MAX_WBITS | 16, budget, coding)
        elif coding == "deflate":
            body = _deflate(body, budget)
        elif coding == "br":
            body = _unbrotli(body, budget)
        else:
            raise Unreadable(f"its body is {coding}-encoded, which this importer cannot decode")
    return body


def _inflate(data: bytes, wbits: int, budget: InflateBudget, coding: str) -> bytes:
    """One zlib/gzip/raw-deflate stream, as httpx reads it (the first gzip member; what
    follows it is ignored, as httpx ignores it)."""
    d = zlib.decompressobj(wbits)
    out: list[bytes] = []
    try:
        while not d.eof:
            chunk = d.decompress(data, _STEP)
            budget.take(len(chunk))
            out.append(chunk)
            data = d.unconsumed_tail
            if not data and len(chunk) < _STEP and not d.eof:
                raise Unreadable(f"its {coding} body is cut short")
    except zlib.error as exc:
        raise Unreadable(f"its {coding} body cannot be decoded ({exc})") from None
    return b"".join(out)


def _deflate(data: bytes, budget: InflateBudget) -> bytes:
    # "deflate" is meant to be zlib-wrapped; some servers send raw deflate (httpx reads both).
    try:
        zlib.decompressobj().decompress(data[:64], 1)
    except zlib.error:
        return _inflate(data, -zlib.MAX_WBITS, budget, "deflate")
    return _inflate(data, zlib.MAX_WBITS, budget, "deflate")


def _unbrotli(data: bytes, budget: InflateBudget) -> bytes:
    """Brotli through the ``brotli`` package's streaming decoder, which can be held to
    ``_STEP`` bytes per call (its 1.2 API); without it the body is not read."""
    try:
        brotli: Any = importlib.import_module("brotli")
    except ImportError:
        brotli = None
    d = brotli.Decompressor() if brotli is not None else None
    if d is None or not hasattr(d, "can_accept_more_data"):  # brotli < 1.2 cannot bound it
        raise Unreadable("its body is br-encoded: decoding it needs the brotli package "
                         "(pip install 'brotli>=1.2')")
    out: list[bytes] = []
    try:
        chunk = d.process(data, output_buffer_limit=_STEP)
        while True:
            budget.take(len(chunk))
            out.append(chunk)
            if d.is_finished() or d.can_accept_more_data():
                break
            chunk = d.process(b"", output_buffer_limit=_STEP)
    except brotli.error as exc:
        raise Unreadable(f"its br body cannot be decoded ({exc})") from None
    if not d.is_finished():
        raise Unreadable("its br body is cut short")
    return b"".join(out)


# What a header value looks like when a suite's ``before_record_*`` hook blanked it:
# langchain's partner packages write ``**REDACTED**`` for every header, Content-Type included.
_MEDIA = re.compile(r"[A-Za-z0-9][\w!#$&^.+-]*/[\w!#$&^.+-]+")
_CODING = frozenset({"gzip", "x-gzip", "deflate", "br", "identity", "zstd", "compress"})
_GZIP = b"\x1f\x8b"


def media_type(value: str) -> str:
    """``value`` when it is a media type (``application/json; charset=utf-8``), else ``""``
    (missing, or blanked: ``**REDACTED**``)."""
    return value if _MEDIA.match(value.strip()) else ""


def is_placeholder(coding: str) -> bool:
    """A ``content-encoding`` value that names no coding (blanked by the suite)."""
    return coding.strip().lower() not in _CODING


def sniff(body: bytes) -> str:
    """The content type ``body`` was sent with, read from the bytes, for an answer whose
    Content-Type the recording blanked (``""``: none of these): an AWS eventstream (its
    messages' lengths and checksums all hold), JSON (a JSON-array stream included), SSE,
    newline-delimited JSON. Each test is exact for its format, so a guess never turns one
    format into another."""
    from ...errors import SerializationError
    from ...http import eventstream

    if not body:
        return ""
    if len(body) >= 16 and body[:1] == b"\x00":  # a prelude's total length: under 16 MiB
        try:
            if eventstream.decode_all(body):
                return "application/vnd.amazon.eventstream"
        except SerializationError:
            pass
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    else:
        return "application/json"
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return ""
    if _SSE_FIELD.match(text) and "\n\n" in text.replace("\r\n", "\n"):
        return "text/event-stream"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1 and all(_is_json(ln) for ln in lines):
        return "application/x-ndjson"
    return ""


_SSE_FIELD = re.compile(r"(?:data|event|id|retry)?:")


def _is_json(line: str) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def gzipped(body: bytes) -> bool:
    return body[:2] == _GZIP
