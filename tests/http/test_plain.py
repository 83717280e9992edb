"""dejacache's own request/response model (src/dejacache/http/_plain.py).

A request restated by urllib3 or aiohttp must be keyed alike whichever model carried it (a
recording made where httpx was imported replays where it is not installed), so every part a
key reads is checked against httpx and httpx2 under Hypothesis; then the response surface
the exchange uses (bodies, decoding, streams, errors).
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache.http import _plain
from dejacache.http._libs import plain, restating
from dejacache.http.transport import _keyed_path

LIBS = [pytest.importorskip(name) for name in ("httpx", "httpx2")]
_DELIMITER_ESCAPES = (b"%2F", b"%3F", b"%23", b"%25")

_SEGMENT = st.text(alphabet="abcXYZ019-._~%2F41 +é/", max_size=8).map(
    lambda s: s.replace("%", "%2" if s.endswith("%") else "%"))
_PATH = st.lists(st.sampled_from([".", "..", "a", "b.c", "%2E%2E", "%2F", "x%20y", "é", ""])
                 | _SEGMENT, max_size=5).map(lambda parts: "/" + "/".join(parts))
_QUERY = st.lists(st.tuples(st.text(alphabet="ab=+%20é&;", max_size=4),
                            st.text(alphabet="xy+%2541é= ", max_size=5)), max_size=4).map(
    lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
_HOST = st.sampled_from(["127.0.0.1", "api.openai.com", "API.Example.COM", "[::1]", "localhost",
                         "bedrock-runtime.us-east-1.amazonaws.com"])
_PORT = st.sampled_from(["", ":80", ":443", ":8080"])
_HEADERS = st.lists(st.tuples(st.sampled_from(["Content-Type", "X-Api-Key", "accept", "X-Multi",
                                               "x-multi", "User-Agent"]),
                              st.text(alphabet="abc/;= 1.", max_size=10)), max_size=5)


def _parts(req: Any) -> tuple[Any, ...]:
    url = req.url
    return (req.method, url.host, url.path, url.params.multi_items(),
            req.headers.multi_items(), req.headers.get("x-multi"), req.read())


@given(scheme=st.sampled_from(["http", "https"]), host=_HOST, port=_PORT, path=_PATH,
       query=_QUERY, headers=_HEADERS, body=st.binary(max_size=8),
       method=st.sampled_from(["GET", "post", "PUT", "DELETE"]))
def test_a_request_reads_as_httpx_and_httpx2_read_it(scheme: str, host: str, port: str,
                                                      path: str, query: str,
                                                      headers: list[tuple[str, str]],
                                                      body: bytes, method: str) -> None:
    url = f"{scheme}://{host}{port}{path}" + (f"?{query}" if query else "")
    ours = _parts(_plain.Request(method, url, headers=headers, content=body))
    for lib in LIBS:
        try:
            theirs = _parts(lib.Request(method, url, headers=headers, content=body))
        except Exception:  # a URL that library refuses: nothing to compare
            continue
        assert ours == theirs, lib.__name__


@given(path=_PATH, query=_QUERY)
def test_the_keyed_path_reads_alike_in_every_model(path: str, query: str) -> None:
    url = "http://h" + path + (f"?{query}" if query else "")
    ours = _plain.URL(url)
    keyed = _keyed_path(ours, ours.path)
    if not any(e in ours.raw_path.split(b"?")[0].upper() for e in _DELIMITER_ESCAPES):
        assert keyed == ours.path  # a path without an escaped delimiter keys as ever
    for lib in LIBS:
        try:
            theirs = lib.URL(url)
        except Exception:  # a URL that library refuses: nothing to compare
            continue
        assert _keyed_path(theirs, theirs.path) == keyed, lib.__name__


@pytest.mark.parametrize("a, b", [
    ("/api/v4/projects/group%2Frepo", "/api/v4/projects/group/repo"),
    ("/files/a%3Fb", "/files/a?b"),
    ("/files/a%23b", "/files/a#b"),
    ("/files/100%25zz", "/files/100%zz"),
    ("/files/a%252F", "/files/a%2F"),
])
def test_an_escaped_delimiter_keys_apart_from_what_it_decodes_to(a: str, b: str) -> None:
    for model in (_plain, *LIBS):
        ua, ub = model.URL("http://h" + a), model.URL("http://h" + b)
        assert _keyed_path(ua, ua.path) != _keyed_path(ub, ub.path), model.__name__
    lower = _plain.URL("http://h" + a.replace("%2F", "%2f"))
    assert _keyed_path(lower, lower.path) == _keyed_path(_plain.URL("http://h" + a),
                                                         _plain.URL("http://h" + a).path)


def test_headers_httpx_adds_are_added_alike() -> None:
    for body, method in ((b"", "GET"), (b"", "POST"), (b"{}", "POST")):
        ours = _plain.Request(method, "http://h:81/p", content=body).headers.multi_items()
        for lib in LIBS:
            assert ours == lib.Request(method, "http://h:81/p",
                                       content=body).headers.multi_items()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw", "gzip, deflate"])
def test_bodies_are_decoded_as_httpx_decodes_them(encoding: str) -> None:
    raw = b'{"answer": 42}' * 50
    wire = raw
    for name in [e.strip() for e in encoding.split(",")]:
        if name == "gzip":
            wire = gzip.compress(wire)
        elif name == "deflate":
            wire = zlib.compress(wire)
        else:
            c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
            wire = c.compress(wire) + c.flush()
    header = encoding.replace("deflate-raw", "deflate")
    chunks = [wire[i:i + 7] for i in range(0, len(wire), 7)]

    class Chunks(_plain.SyncByteStream):
        def __iter__(self) -> Any:
            return iter(chunks)

    resp = _plain.Response(200, headers=[("Content-Encoding", header)], stream=Chunks())
    assert resp.read() == raw
    assert resp.content == raw and resp.is_stream_consumed


def test_a_response_built_from_content_is_read_and_sized() -> None:
    resp = _plain.Response(404, headers=[("content-type", "application/json")], content=b"{}")
    assert resp.content == b"{}" and resp.is_stream_consumed
    assert resp.headers["content-length"] == "2"
    assert resp.reason_phrase == "Not Found"
    with pytest.raises(_plain.StreamConsumed):
        list(resp.iter_raw())
    assert list(resp.iter_bytes()) == [b"{}"]


def test_a_streamed_response_is_not_read_until_asked() -> None:
    resp = _plain.Response(200, stream=_plain.ByteStream(b"abc"))
    with pytest.raises(_plain.ResponseNotRead):
        _ = resp.content
    assert list(resp.iter_raw()) == [b"abc"] and resp.is_closed


async def test_async_bodies_read_alike() -> None:
    resp = _plain.Response(200, stream=_plain.ByteStream(b"abc"))
    assert await resp.aread() == b"abc"
    chunks = [c async for c in _plain.Response(200, stream=_plain.ByteStream(b"x")).aiter_raw()]
    assert chunks == [b"x"]


def test_transport_errors_are_one_family_carrying_the_request() -> None:
    req = _plain.Request("GET", "http://h/")
    for name in ("ConnectError", "ReadTimeout", "RemoteProtocolError", "ProxyError"):
        exc = getattr(_plain, name)("boom", request=req)
        assert isinstance(exc, _plain.TransportError) and exc.request is req
        assert plain().transport_error(exc)


def test_a_library_already_imported_is_preferred() -> None:
    # (this process imported httpx2 with the test module): no second model, no import paid
    assert restating().name in ("httpx2", "httpx")
