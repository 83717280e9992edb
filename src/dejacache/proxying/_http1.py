"""HTTP/1.1 as the proxy speaks it: a request read off an asyncio stream, an answer framed.

The proxy serves one client at a time per connection (keep-alive, no pipelining ahead of the
answer), so the whole protocol is: read a head up to its blank line, read the body its
framing announces (``Content-Length`` or ``chunked``), answer with ``Content-Length`` or, for
a stream, one chunk per event. :func:`parse_head` and :func:`framing` are pure; only
:func:`read_request` touches the stream.

Refused with a status and no guessing: a head over :data:`MAX_HEAD` (431), a body over the
server's limit (413), both ``Content-Length`` and ``Transfer-Encoding``, differing lengths or
a malformed line (400: a request two parsers could frame differently is how requests are
smuggled past a proxy), a transfer coding other than ``chunked`` (501), HTTP/2 prior
knowledge or HTTP/0.9 (505).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import re
from collections.abc import Awaitable, Callable, Iterable

__all__ = ["LAST_CHUNK", "MAX_HEAD", "BadRequest", "Request", "chunk", "framing", "head_bytes",
           "parse_head", "read_request"]

#: Request line and headers, at most (the stream reader's limit).
MAX_HEAD = 64 * 1024
LAST_CHUNK = b"0\r\n\r\n"

# RFC 9110 token characters: a header name or method made of anything else is refused.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION = re.compile(rb"HTTP/1\.[01]\Z")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REASONS = {s.value: s.phrase for s in http.HTTPStatus}


class BadRequest(Exception):
    """A request the proxy cannot read; ``status`` is the answer that says so."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(slots=True)
class Request:
    """One request as it came: ``headers`` in order with their names as sent."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def get(self, name: str) -> str | None:
        """The value of header ``name`` (any case); repeats joined with ``", "``."""
        want = name.lower()
        found = [v for k, v in self.headers if k.lower() == want]
        return ", ".join(found) if found else None

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in (self.get("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (without its final blank line)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1]:
        if lines[0].startswith(b"PRI * HTTP/2"):
            raise BadRequest(505, "HTTP/2 is not spoken here; use HTTP/1.1")
        raise BadRequest(400, "malformed request line")
    if not _VERSION.match(parts[2]):
        raise BadRequest(505, f"unsupported protocol {parts[2][:20]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.match(name):  # also refuses obsolete line folding
            raise BadRequest(400, "malformed header line")
        headers.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    return Request(parts[0].decode("ascii"), parts[1].decode("latin-1"),
                   parts[2].decode("ascii"), headers)


def framing(req: Request) -> tuple[str, int]:
    """How the body is framed: ``("length", n)`` or ``("chunked", 0)``."""
    te = [v for k, v in req.headers if k.lower() == "transfer-encoding"]
    cl = [v for k, v in req.headers if k.lower() == "content-length"]
    if te:
        if cl:
            raise BadRequest(400, "both Content-Length and Transfer-Encoding")
        codings = [c.strip().lower() for v in te for c in v.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise BadRequest(501, f"unsupported transfer coding {', '.join(codings)!r}")
        return "chunked", 0
    values = {c.strip() for v in cl for c in v.split(",")}
    if not values:
        return "length", 0
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise BadRequest(400, "malformed Content-Length")
    return "length", int(next(iter(values)))


async def read_request(reader: asyncio.StreamReader, max_body: int,
                       send: Callable[[bytes], Awaitable[None]]) -> Request | None:
    """The next request on ``reader``, or None when the client closed between requests.
    ``send`` writes the interim ``100 Continue`` a client waiting for one gets."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest(400, "connection closed inside a request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest(431, f"request head over {MAX_HEAD} bytes") from None
    req = parse_head(head[:-4].lstrip(b"\r\n"))  # RFC 9112: ignore blank lines before it
    kind, length = framing(req)
    if kind == "length" and length > max_body:
        raise BadRequest(413, f"request body of {length} bytes is over {max_body}")
    expects = (req.get("expect") or "").lower() == "100-continue"
    if expects and (kind == "chunked" or length):
        await send(_CONTINUE)
    try:
        req.body = (await _read_chunked(reader, max_body) if kind == "chunked"
                    else await reader.readexactly(length) if length else b"")
    except asyncio.IncompleteReadError:
        raise BadRequest(400, "connection closed inside a request body") from None
    return req


async def _read_chunked(reader: asyncio.StreamReader, max_body: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        size_text = line[:-2].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadRequest(400, "malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, dropped
                pass
            return b"".join(parts)
        total += size
        if total > max_body:
            raise BadRequest(413, f"request body over {max_body} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise BadRequest(400, "malformed chunk")


def _latin1(text: str) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


def head_bytes(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    """A status line and headers; a header with CR or LF in it is dropped (a value read from
    a hand-edited cassette must not split the answer)."""
    out = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Unknown").encode())]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            continue
        out.append(_latin1(name) + b": " + _latin1(value) + b"\r\n")
    out.append(b"\r\n")
    return b"".join(out)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
