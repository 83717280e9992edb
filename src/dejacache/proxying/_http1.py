"""HTTP/1.1 as the proxy speaks it: requests parsed from the bytes that arrive, answers
framed.

A connection's requests are answered one after the other (keep-alive; pipelined ones wait
their turn), so the whole protocol is: a head up to its blank line, the body its framing
announces (``Content-Length`` or ``chunked``), and an answer with ``Content-Length`` or, for
a stream, one chunk per event. All of it is pure (:class:`RequestParser` takes bytes and
gives back requests); the connection that feeds it is ``_server.py``'s.

Refused with a status and no guessing: a head over :data:`MAX_HEAD` (431), a body over the
server's limit (413), both ``Content-Length`` and ``Transfer-Encoding``, differing lengths or
a malformed line or chunk size (400: a request two parsers could frame differently is how
requests are smuggled past a proxy), a body the proxy cannot hold now, its bodies across
connections at their limit (503, ``_limits.py``), a first byte no method begins with (400,
at once: a TLS handshake is told so), a transfer coding other than ``chunked`` (501),
HTTP/2 prior knowledge or HTTP/0.9 (505). A request that stops arriving is the
connection's to refuse (408, ``_connection.py``): the parser only waits for bytes.
"""

from __future__ import annotations

import dataclasses
import http
import re
from collections.abc import Iterable, Sequence

from ._limits import Budget

__all__ = ["CONTINUE", "LAST_CHUNK", "MAX_HEAD", "BadRequest", "Request", "RequestParser",
           "chunk", "framing", "head_bytes", "parse_head"]

#: Request line and headers, at most (the stream reader's limit).
MAX_HEAD = 64 * 1024
LAST_CHUNK = b"0\r\n\r\n"

# RFC 9110 token characters: a header name or method made of anything else is refused.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION = re.compile(r"HTTP/1\.[01]\Z")
_DIGITS = re.compile(r"[0-9]+\Z")
_HEX = re.compile(rb"[0-9A-Fa-f]+\Z")
#: The bytes a method may begin with: a request beginning with any other is refused at once.
_TOKEN_BYTES = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                         b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
#: A length no limit allows (more digits than it is worth reading).
_HUGE = 1 << 63
#: The interim answer a client that sent ``Expect: 100-continue`` waits for.
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REASONS = {s.value: s.phrase for s in http.HTTPStatus}
# Header names read as tokens so far -> lower-cased (see ``_checked_name``).
_NAMES: dict[str, str] = {}
_NAMES_KEPT = 512


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
    # What the body counts for in the proxy's budget of buffered bytes (``RequestParser``),
    # given back once the request is answered or dropped.
    held: int = 0
    # Lower-cased name -> value, repeats joined: every request is asked for several headers
    # (framing, keep-alive, routing), so they are gathered once, on first use.
    _by_name: dict[str, str] | None = None

    def get(self, name: str) -> str | None:
        """The value of header ``name`` (any case); repeats joined with ``", "``."""
        by_name = self._by_name
        if by_name is None:
            by_name = {}
            for k, v in self.headers:
                low = k.lower()
                by_name[low] = f"{by_name[low]}, {v}" if low in by_name else v
            self._by_name = by_name
        return by_name.get(name.lower())

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in (self.get("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def parse_head(head: bytes) -> Request:
    """The request line and headers of ``head`` (without its final blank line)."""
    # Split as text decoded once (latin-1 maps each byte to one character, so the checks
    # below see the bytes): per header line, one decode where two were, ~10 us of ~17 for a
    # fetch() request's ten headers (measured).
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1]:
        if lines[0].startswith("PRI * HTTP/2"):
            raise BadRequest(505, "HTTP/2 is not spoken here; use HTTP/1.1")
        raise BadRequest(400, "malformed request line")
    if not _VERSION.match(parts[2]):
        raise BadRequest(505, f"unsupported protocol {parts[2][:20].encode('latin-1')!r}")
    headers: list[tuple[str, str]] = []
    by_name: dict[str, str] = {}  # ``Request.get``'s, gathered in the same pass
    known = _NAMES
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:  # also refuses obsolete line folding
            raise BadRequest(400, "malformed header line")
        low = known.get(name)
        if low is None:
            low = _checked_name(name)
        value = value.strip(" \t")
        headers.append((name, value))
        by_name[low] = f"{by_name[low]}, {value}" if low in by_name else value
    return Request(parts[0], parts[1], parts[2], headers, _by_name=by_name)


def _checked_name(name: str) -> str:
    """``name`` lower-cased, when it is a token (else a 400); remembered, up to
    :data:`_NAMES_KEPT` names: a client sends the same few names on every request, and
    matching each against the token pattern and lower-casing it again was ~4 us of ~14 for
    a fetch() request's ten headers (measured)."""
    if not _TOKEN.match(name):
        raise BadRequest(400, "malformed header line")
    low = name.lower()
    if len(_NAMES) < _NAMES_KEPT:
        _NAMES[name] = low
    return low


def framing(req: Request) -> tuple[str, int]:
    """How the body is framed: ``("length", n)`` or ``("chunked", 0)``."""
    te = req.get("transfer-encoding")
    cl = req.get("content-length")
    if te is not None:
        if cl is not None:
            raise BadRequest(400, "both Content-Length and Transfer-Encoding")
        codings = [c.strip().lower() for c in te.split(",") if c.strip()]
        if codings != ["chunked"]:
            raise BadRequest(501, f"unsupported transfer coding {', '.join(codings)!r}")
        return "chunked", 0
    if cl is None:
        return "length", 0
    values = {c.strip() for c in cl.split(",")}
    value = next(iter(values))
    # ASCII digits only: ``str.isdigit`` takes "²", which ``int`` then refuses.
    if len(values) != 1 or not _DIGITS.match(value):
        raise BadRequest(400, "malformed Content-Length")
    # More digits than any body could have: over every limit (``int`` refuses 4,300 digits,
    # leading zeros included).
    digits = value.lstrip("0")
    return "length", _HUGE if len(digits) > 18 else int(digits or "0")


class RequestParser:
    """Bytes in, whole requests out: the proxy's connection feeds it what arrives and gets
    back the requests completed so far (pure: no I/O). ``continue_wanted`` is set once per
    request whose client waits for ``100 Continue`` before sending its body (the caller
    writes :data:`CONTINUE` and clears it). A request it cannot read sets ``failed``: the
    requests before it are still returned (and answered), nothing after it is read.

    A body's bytes go to a list as they arrive and are joined once: added to one buffer
    piece by piece, a 64 MiB body sent in 64 KiB reads was copied 512 times over (30 s,
    measured; 0.05 s now). Only a head, a chunk's size line and trailers are buffered.

    ``budget``: the bytes of bodies the proxy may hold at once, shared by its connections.
    A body's declared length (a chunk's size, chunk by chunk) is taken from it before the
    body is read; it passes to the finished request (``Request.held``), whose connection
    gives it back once the request is answered or dropped; the parser gives back what a
    request it refuses, or one its connection drops (:meth:`drop`), had taken."""

    __slots__ = ("_body", "_buf", "_chunked", "_crlf", "_held", "_left", "_req", "_scanned",
                 "_total", "budget", "continue_wanted", "failed", "max_body")

    def __init__(self, max_body: int, budget: Budget | None = None) -> None:
        self.max_body = max_body
        self.budget = budget if budget is not None else Budget(_HUGE)
        self._held = 0  # taken from the budget for the request arriving
        self._buf = b""
        self._scanned = 0  # how much of ``_buf`` holds no head's end (searched already)
        self._req: Request | None = None  # a head whose body is still coming
        self._chunked = False
        self._left = 0  # bytes of the body (or of the current chunk) still to come
        self._crlf = False  # the CRLF that ends a chunk's data is still to come
        self._body: list[bytes] = []
        self._total = 0
        self.continue_wanted = False
        self.failed: BadRequest | None = None

    @property
    def idle(self) -> bool:
        """Nothing of a next request has arrived (a close now loses nothing)."""
        return self._req is None and not self._buf.strip(b"\r\n")

    @property
    def in_head(self) -> bool:
        """A request's head has begun to arrive and has not ended."""
        return self._req is None and not self.idle

    def feed(self, data: bytes) -> list[Request]:
        out: list[Request] = []
        if self.failed is None:
            if self._left and not self._buf:  # inside a body: straight to the list
                data = self._absorb(data)
                if self._left:
                    return out
            self._buf = self._buf + data if self._buf else data
            try:
                self._parse(out)
            except BadRequest as exc:
                self.failed, self._buf, self._req = exc, b"", None
                self.drop()
        return out

    def fail(self, status: int, message: str) -> None:
        """Refuse the request that is arriving (a client too slow to send it)."""
        if self.failed is None and not self.idle:
            self.failed, self._buf, self._req = BadRequest(status, message), b"", None
            self.drop()

    def drop(self) -> None:
        """Give back what the request arriving took from the budget (refused, or its
        client gone); its bytes are let go."""
        if self._held:
            self.budget.give(self._held)
            self._held = 0
        self._body = []

    def _hold(self, n: int) -> None:
        """Take ``n`` bytes of body from the budget for the request arriving, else a 503.
        (``Budget.take`` inlined: a call fewer per request with a body, ~540 of the ~2,600
        instructions the budget then cost a parsed request of ~55,000; callgrind.)"""
        budget = self.budget
        if budget.held + n > budget.limit:
            raise BadRequest(503, (
                f"a body of {n} more bytes would take the request bodies held at once over "
                f"{budget.limit} bytes ({budget.held} held now): retry shortly, or raise "
                "--max-buffered (max_buffered= of dejacache.proxy())"))
        budget.held += n
        self._held += n

    def _absorb(self, data: bytes) -> bytes:
        """Up to ``_left`` bytes of ``data`` into the body; the rest."""
        n = self._left
        if len(data) <= n:
            if data:
                self._body.append(data)
            self._left = n - len(data)
            return b""
        self._body.append(data[:n])
        self._left = 0
        return data[n:]

    def _parse(self, out: list[Request]) -> None:
        while True:
            if self._req is None and not self._head():
                return
            done = self._chunks() if self._chunked else self._length()
            if not done:
                return
            assert self._req is not None
            self._req.body = b"".join(self._body)
            self._req.held, self._held = self._held, 0
            out.append(self._req)
            self._req, self._body, self._total = None, [], 0

    def _head(self) -> bool:
        buf = self._buf.lstrip(b"\r\n")  # RFC 9112: blank lines before a request are ignored
        if buf and buf[0] not in _TOKEN_BYTES:
            if buf[0] == 0x16:  # a TLS handshake record
                raise BadRequest(400, "this is a TLS handshake: the proxy speaks plain HTTP "
                                      "(http://, not https://)")
            raise BadRequest(400, "malformed request line")
        end = buf.find(b"\r\n\r\n", self._scanned)
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise BadRequest(431, f"request head over {MAX_HEAD} bytes")
            self._buf, self._scanned = buf, max(len(buf) - 3, 0)
            return False
        self._scanned = 0
        if end > MAX_HEAD:
            raise BadRequest(431, f"request head over {MAX_HEAD} bytes")
        req = parse_head(buf[:end])
        kind, length = framing(req)
        if kind == "length" and length > self.max_body:
            raise BadRequest(413, f"request body of {length} bytes is over {self.max_body}")
        if length:
            self._hold(length)
        self._buf = buf[end + 4:]
        self._req, self._chunked, self._left = req, kind == "chunked", length
        expects = (req.get("expect") or "").lower() == "100-continue"
        if expects and (self._chunked or length) and not self._buf:
            self.continue_wanted = True
        return True

    def _length(self) -> bool:
        if self._left:
            self._buf = self._absorb(self._buf)
        return not self._left

    def _chunks(self) -> bool:
        while True:
            if self._left:
                self._buf = self._absorb(self._buf)
                if self._left:
                    return False
            if self._crlf:
                if len(self._buf) < 2:
                    return False
                if self._buf[:2] != b"\r\n":
                    raise BadRequest(400, "malformed chunk")
                self._buf, self._crlf = self._buf[2:], False
            line_end = self._buf.find(b"\r\n")
            if line_end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise BadRequest(400, "malformed chunk size")
                return False
            size_text = self._buf[:line_end].split(b";", 1)[0].strip(b" \t")
            # Hex digits only: ``int(_, 16)`` also reads "0x1f", "-3", "+3" and "1_0", which
            # another parser in the path may frame differently (a smuggled request).
            if not _HEX.match(size_text):
                raise BadRequest(400, "malformed chunk size")
            digits = size_text.lstrip(b"0")
            size = _HUGE if len(digits) > 15 else int(digits or b"0", 16)
            if size == 0:
                return self._trailers(line_end + 2)
            if self._total + size > self.max_body:
                raise BadRequest(413, f"request body over {self.max_body} bytes")
            self._hold(size)
            self._total += size
            self._buf = self._buf[line_end + 2:]
            self._left, self._crlf = size, True

    def _trailers(self, start: int) -> bool:
        end = self._buf.find(b"\r\n", start)
        while end >= 0 and end != start:  # trailer fields, dropped
            start = end + 2
            end = self._buf.find(b"\r\n", start)
        if end < 0:
            return False
        self._buf = self._buf[end + 2:]
        return True


def _latin1(text: str) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


def head_bytes(status: int, headers: Sequence[tuple[str, str]]) -> bytes:
    """A status line and headers; a header with CR or LF in it is dropped (a value read from
    a hand-edited cassette must not split the answer)."""
    line = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Unknown").encode())
    # The usual case in one encode: no CR or LF but each line's own, all latin-1. Checked
    # and encoded header by header, a replayed answer's head took ~9 us (measured).
    text = "".join([f"{name}: {value}\r\n" for name, value in headers])
    if text.count("\r") == text.count("\n") == len(headers):
        try:
            return line + text.encode("latin-1") + b"\r\n"
        except UnicodeEncodeError:
            pass
    return line + _each_header(headers)


def _each_header(headers: Iterable[tuple[str, str]]) -> bytes:
    out = []
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            continue
        out.append(_latin1(name) + b": " + _latin1(value) + b"\r\n")
    out.append(b"\r\n")
    return b"".join(out)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
