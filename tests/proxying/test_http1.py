"""The proxy's HTTP/1.1: heads parsed, bodies framed, and every request two parsers could
frame differently refused with its status (pure functions, and the parser fed bytes as a
connection would: at once, or split anywhere)."""

from __future__ import annotations

import time

import pytest

from dejacache.proxying._http1 import (
    CONTINUE,
    MAX_HEAD,
    BadRequest,
    Request,
    RequestParser,
    chunk,
    framing,
    head_bytes,
    parse_head,
)


def test_a_head_keeps_names_as_sent_and_reads_them_in_any_case() -> None:
    req = parse_head(b"POST /openai/v1/chat?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  v \r\n"
                     b"x-thing: w")
    assert (req.method, req.target, req.version) == ("POST", "/openai/v1/chat?x=1", "HTTP/1.1")
    assert req.headers == [("Host", "a"), ("X-Thing", "v"), ("x-thing", "w")]
    assert req.get("X-THING") == "v, w" and req.get("missing") is None


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /", 400),
    (b"GET / HTTP/1.1 extra", 400),
    (b"G@T / HTTP/1.1", 400),
    (b"GET / HTTP/2.0", 505),
    (b"PRI * HTTP/2.0", 505),
    (b"GET / HTTP/1.1\r\nno colon", 400),
    (b"GET / HTTP/1.1\r\nHost", 400),  # a name read before, without its colon
    (b"GET / HTTP/1.1\r\nBad Name: x", 400),
    (b"GET / HTTP/1.1\r\nA: 1\r\n folded", 400),
])
def test_malformed_heads_are_refused_with_their_status(head: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as info:
        parse_head(head)
    assert info.value.status == status


@pytest.mark.parametrize(("headers", "expected"), [
    (b"", ("length", 0)),
    (b"\r\nContent-Length: 12", ("length", 12)),
    (b"\r\nContent-Length: 12\r\ncontent-length: 12", ("length", 12)),
    (b"\r\nTransfer-Encoding: chunked", ("chunked", 0)),
    (b"\r\nTransfer-Encoding: Chunked", ("chunked", 0)),
])
def test_framing(headers: bytes, expected: tuple[str, int]) -> None:
    assert framing(parse_head(b"POST / HTTP/1.1" + headers)) == expected


@pytest.mark.parametrize(("headers", "status"), [
    (b"\r\nContent-Length: 1\r\nTransfer-Encoding: chunked", 400),  # smuggling's shape
    (b"\r\nContent-Length: 1\r\nContent-Length: 2", 400),
    (b"\r\nContent-Length: -1", 400),
    (b"\r\nContent-Length: 1e3", 400),
    (b"\r\nContent-Length: \xb2", 400),  # a digit to ``str.isdigit``, not to ``int``
    (b"\r\nTransfer-Encoding: gzip, chunked", 501),
    (b"\r\nTransfer-Encoding: chunked, identity", 501),
])
def test_ambiguous_framing_is_refused(headers: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as info:
        framing(parse_head(b"POST / HTTP/1.1" + headers))
    assert info.value.status == status


@pytest.mark.parametrize(("version", "connection", "keep"), [
    ("HTTP/1.1", None, True), ("HTTP/1.1", "close", False), ("HTTP/1.1", "Keep-Alive, Close",
                                                              False),
    ("HTTP/1.0", None, False), ("HTTP/1.0", "keep-alive", True),
])
def test_keep_alive(version: str, connection: str | None, keep: bool) -> None:
    head = f"GET / {version}" + (f"\r\nConnection: {connection}" if connection else "")
    assert parse_head(head.encode()).keep_alive is keep


def _read(raw: bytes, max_body: int = 1 << 20,
          step: int | None = None) -> tuple[object, list[bytes]]:
    """The first request ``raw`` holds (fed whole, or ``step`` bytes at a time), the refusal
    it gets, None for a connection closed between requests, or "incomplete" for one closed
    inside a request; and the interim answers the parser asked for."""
    parser = RequestParser(max_body)
    sent: list[bytes] = []
    got: list[Request] = []
    for at in range(0, max(len(raw), 1), step or max(len(raw), 1)):
        got += parser.feed(raw[at:at + (step or len(raw))])
        if parser.continue_wanted:
            parser.continue_wanted = False
            sent.append(CONTINUE)
    if parser.failed is not None:
        return parser.failed, sent
    if got:
        return got[0], sent
    return (None if parser.idle else "incomplete"), sent


def test_bodies_are_read_by_length_or_by_chunks() -> None:
    req, _ = _read(b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloNEXT")
    assert getattr(req, "body", None) == b"hello"
    raw = (b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n")
    req, _ = _read(raw)
    assert getattr(req, "body", None) == b"hello world"


def test_a_client_waiting_for_100_continue_gets_it() -> None:
    head = b"PUT /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    req, sent = _read(head + b"ok", step=len(head))  # the body after the head, as it waits
    assert sent == [b"HTTP/1.1 100 Continue\r\n\r\n"] and getattr(req, "body", None) == b"ok"
    _, sent = _read(head + b"ok")
    assert sent == []  # the body came with the head: nothing to wait for
    _, sent = _read(b"GET /a HTTP/1.1\r\nExpect: 100-continue\r\n\r\n")
    assert sent == []  # no body to wait for


def test_a_close_between_requests_is_no_request() -> None:
    assert _read(b"")[0] is None
    assert _read(b"\r\n")[0] is None


@pytest.mark.parametrize("raw", [
    b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nshort",
    b"GET / HTTP/1.1\r\nHost: a",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n",
])
def test_a_close_inside_a_request_is_no_request(raw: bytes) -> None:
    assert _read(raw)[0] == "incomplete"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_requests_split_anywhere_parse_as_when_whole(step: int) -> None:
    raw = (b"\r\nPOST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
           b"PUT /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
           b"GET /c HTTP/1.1\r\n\r\n")
    parser = RequestParser(1 << 20)
    got: list[Request] = []
    for at in range(0, len(raw), step):
        got += parser.feed(raw[at:at + step])
    assert [(r.method, r.target, r.body) for r in got] == [
        ("POST", "/a", b"hello world"), ("PUT", "/b", b"abc"), ("GET", "/c", b"")]
    assert parser.idle


def test_the_requests_before_an_unreadable_one_are_kept() -> None:
    parser = RequestParser(1 << 20)
    got = parser.feed(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nBad Name: x\r\n\r\n"
                      b"GET /c HTTP/1.1\r\n\r\n")
    assert [r.target for r in got] == ["/a"]
    assert parser.failed is not None and parser.failed.status == 400
    assert parser.feed(b"GET /d HTTP/1.1\r\n\r\n") == []  # nothing after it is read


@pytest.mark.parametrize(("raw", "status"), [
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 2048\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + b"x" * 2048, 413),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD, 431),  # no end in sight
    (b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 5000 + b"\r\n", 413),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),  # TLS: refused at its first byte
    (b"\x00\x00", 400),
])
def test_broken_and_oversized_requests_are_refused(raw: bytes, status: int) -> None:
    got, _ = _read(raw, max_body=1024)
    assert isinstance(got, BadRequest) and got.status == status


@pytest.mark.parametrize("size", [b"0x3", b"-3", b"+3", b"1_0", b"3 3", b""])
def test_a_chunk_size_other_parsers_could_read_otherwise_is_refused(size: bytes) -> None:
    # ``int(_, 16)`` reads the first four; a proxy in front may read them as garbage.
    raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\nabc\r\n0\r\n\r\n" % size
    got, _ = _read(raw)
    assert isinstance(got, BadRequest) and got.status == 400
    assert str(got) == "malformed chunk size"


def test_leading_zeros_are_a_length_however_many() -> None:
    req, _ = _read(b"POST / HTTP/1.1\r\nContent-Length: " + b"0" * 5000 + b"5\r\n\r\nhello")
    assert getattr(req, "body", None) == b"hello"
    req, _ = _read(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   + b"0" * 40 + b"5\r\nhello\r\n0\r\n\r\n")
    assert getattr(req, "body", None) == b"hello"


@pytest.mark.parametrize("framed", ["length", "chunked"])
def test_a_large_body_is_read_in_time_linear_in_its_size(framed: str) -> None:
    # Each read of 64 KiB was added to one buffer: a 64 MiB body took 30 s (0.1-0.2 s now).
    size = 64 << 20
    body = b"x" * size
    if framed == "length":
        head, raw = b"Content-Length: %d" % size, body
    else:
        head, raw = b"Transfer-Encoding: chunked", b"%x\r\n%s\r\n0\r\n\r\n" % (size, body)
    pieces = [raw[at:at + 65536] for at in range(0, len(raw), 65536)]
    parser = RequestParser(256 << 20)
    started = time.perf_counter()
    got = parser.feed(b"POST / HTTP/1.1\r\n%s\r\n\r\n" % head)
    for piece in pieces:
        got += parser.feed(piece)
    took = time.perf_counter() - started
    assert len(got) == 1 and got[0].body == body and parser.idle
    assert took < 3.0, f"{took:.2f} s for a 64 MiB body"


def test_a_request_refused_while_arriving_ends_the_parse() -> None:
    parser = RequestParser(1 << 20)
    parser.fail(408, "too slow")
    assert parser.failed is None  # nothing was arriving: nothing to refuse
    assert parser.feed(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc") == []
    parser.fail(408, "too slow")
    assert parser.failed is not None and parser.failed.status == 408
    assert parser.feed(b"defghi") == []


def test_answers_are_framed_and_never_split_by_a_header() -> None:
    head = head_bytes(404, [("a", "1"), ("evil", "x\r\nset-cookie: y"), ("b", "é")])
    assert head == b"HTTP/1.1 404 Not Found\r\na: 1\r\nb: \xe9\r\n\r\n"
    assert head_bytes(299, []) == b"HTTP/1.1 299 Unknown\r\n\r\n"
    # one encode when every header is plain latin-1; header by header otherwise
    assert head_bytes(200, [("a", "1"), ("b", "é")]) == (
        b"HTTP/1.1 200 OK\r\na: 1\r\nb: \xe9\r\n\r\n")
    assert head_bytes(200, [("a", "é"), ("b", "€")]) == (
        b"HTTP/1.1 200 OK\r\na: \xe9\r\nb: " + "€".encode() + b"\r\n\r\n")
    assert head_bytes(200, [("a", "x\ry"), ("b", "z\n")]) == b"HTTP/1.1 200 OK\r\n\r\n"
    assert chunk(b"data: x\n\n") == b"9\r\ndata: x\n\n\r\n"


# ---------------------------------------------------------------- the budget of body bytes


def test_a_body_takes_its_declared_length_from_the_budget_and_its_request_holds_it() -> None:
    from dejacache.proxying._limits import Budget

    budget = Budget(100)
    parser = RequestParser(1000, budget)
    assert parser.feed(b"POST / HTTP/1.1\r\nContent-Length: 60\r\n\r\n" + b"x" * 10) == []
    assert budget.held == 60  # taken before the body arrived
    [req] = parser.feed(b"x" * 50)
    assert req.held == 60 and budget.held == 60  # the request's to give back, answered
    # Another one that would pass the budget: a 503 before its body is read, nothing taken.
    other = RequestParser(1000, budget)
    assert other.feed(b"POST / HTTP/1.1\r\nContent-Length: 41\r\n\r\n") == []
    assert other.failed is not None and other.failed.status == 503
    assert "over 100 bytes (60 held now)" in str(other.failed) and budget.held == 60
    budget.give(req.held)
    assert budget.held == 0


def test_a_chunked_body_takes_chunk_by_chunk_and_a_dropped_one_gives_back() -> None:
    from dejacache.proxying._limits import Budget

    budget = Budget(100)
    parser = RequestParser(1000, budget)
    head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert parser.feed(head + b"32\r\n" + b"x" * 50 + b"\r\n") == [] and budget.held == 50
    assert parser.feed(b"33\r\n") == []  # 51 more: over 100
    assert parser.failed is not None and parser.failed.status == 503 and budget.held == 0
    for too_slow in (True, False):  # refused as too slow, or its client gone
        parser = RequestParser(1000, budget)
        parser.feed(head + b"32\r\n" + b"x" * 10)
        assert budget.held == 50
        if too_slow:
            parser.fail(408, "too slow")
        else:
            parser.drop()
        assert budget.held == 0
