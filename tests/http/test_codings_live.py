"""Encoded bodies through real clients, held to the recording bound when decoded (codings.py).

A live answer whose decoded copy would pass the bound (a decompression bomb: a few KB of
gzip that inflate to megabytes) reaches the caller untouched (its own client decodes it),
is not stored, and says so once; what dejacache's decoders yielded stays within the bound.
A request body is never decoded: an encoded one is keyed by the digest of its bytes as
sent, so two bodies never share a key and nothing of it is inflated. httpx and httpx2
(sync, async, and the stream flow), requests and aiohttp, against a loopback upstream; the
bound is set small here, as ``--max-recorded-stream`` sets it in the proxy.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib
from typing import Any

import orjson
import pytest
from http_support import count_decoded

import dejacache
from dejacache.http import recording
from encoded_upstream import EVENTS, PLAIN, EncodedUpstream, gzipped, pieces

BOUND = 64 * 1024
ZEROS = bytes(8 * 1024 * 1024)  # 8 MiB of zeros: 8 KB of gzip, well within the bound
BOMB = gzipped(ZEROS)
PAST = r"answer \(POST /v1/files\) passed 65536 bytes held for its recording; it was not rec"
STREAM_PAST = r"stream \(POST /v1/chat/completions\) passed 65536 bytes held for its recording"
# The most one decoder call yields: the room left and one byte to say it is past.
MOST = BOUND + 1


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(recording, "MAX_RECORDED_STREAM", BOUND)
    return count_decoded(monkeypatch)


@pytest.fixture
def upstream() -> Any:
    server = EncodedUpstream().serve("gzip", pieces(BOMB, 4), streamed=False,
                                     content_type="application/json").start()
    yield server
    server.stop()


def _post_httpx(lib: str, is_async: bool, url: str, asked: dict[str, Any]) -> bytes:
    m = importlib.import_module(lib)
    if not is_async:
        with m.Client() as client:
            return bytes(client.post(url, json=asked).content)

    async def run() -> bytes:
        async with m.AsyncClient() as client:
            return bytes((await client.post(url, json=asked)).content)

    return asyncio.run(run())


def _said_once_and_stored_nothing(got: Any, store: dejacache.MemoryStore,
                                  made: list[int]) -> None:
    assert len([w for w in got if issubclass(w.category, dejacache.DejacacheWarning)]) == 1
    assert len(store) == 0
    assert made and max(made) <= MOST and sum(made) <= 2 * MOST


@pytest.mark.parametrize(("lib", "asked"), [
    ("httpx", {"file": "zeros"}), ("httpx2", {"file": "zeros"}),
    # A call asking for a stream, answered with a whole body (the stream flow, unflighted)
    ("httpx2", {"file": "zeros", "stream": True}),
], ids=["httpx", "httpx2", "httpx2-asked-a-stream"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_answer_that_decodes_past_the_bound_reaches_the_caller_and_is_not_stored(
        made: list[int], upstream: Any, lib: str, asked: dict[str, Any],
        is_async: bool) -> None:
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got:
        body = _post_httpx(lib, is_async, upstream.url + "/v1/files", asked)
    assert body == ZEROS  # decoded once, by the caller's client
    _said_once_and_stored_nothing(got, store, made)
    assert [s.stores for s in dejacache.stats().by_name.values()] == [0]


def test_requests_reading_an_answer_that_decodes_past_the_bound(made: list[int],
                                                                upstream: Any) -> None:
    import requests

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got:
        r = requests.post(upstream.url + "/v1/files", json={"file": "zeros"}, timeout=10)
    assert r.content == ZEROS and r.headers["content-encoding"] == "gzip"
    _said_once_and_stored_nothing(got, store, made)


def test_aiohttp_reading_stacked_codings_that_decode_past_the_bound(made: list[int],
                                                                    upstream: Any) -> None:
    # aiohttp undoes one coding itself (then its plain bytes are bounded as read:
    # _passing.py); a stack it hands on as it came, and dejacache decodes its own copy.
    import aiohttp

    wire = gzipped(BOMB)
    upstream.serve("gzip, gzip", pieces(wire, 4), streamed=False,
                   content_type="application/json")

    async def run() -> bytes:
        async with aiohttp.ClientSession() as s, s.post(upstream.url + "/v1/files",
                                                        json={"file": "zeros"}) as r:
            return await r.read()

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got:
        body = asyncio.run(run())
    assert body == wire
    _said_once_and_stored_nothing(got, store, made)


@pytest.mark.parametrize("read_whole", [False, True], ids=["streamed", "read-whole"])
def test_a_stream_that_decodes_past_the_bound_reaches_the_caller_and_is_not_stored(
        made: list[int], upstream: Any, read_whole: bool) -> None:
    import httpx

    # Every event the caller asked for, then a comment line of zeros: gzip makes it small.
    plain = PLAIN + b": " + bytes(4 * 1024 * 1024).replace(b"\0", b"0") + b"\n\n"
    upstream.serve("gzip", pieces(gzipped(plain), 4))
    store = dejacache.MemoryStore()
    asked = {"model": "gpt-test", "messages": [], "stream": not read_whole}
    url = upstream.url + "/v1/chat/completions"
    with dejacache.scope(mode="auto", store=store), httpx.Client() as client, \
            pytest.warns(dejacache.DejacacheWarning, match=STREAM_PAST) as got, \
            client.stream("POST", url, json=asked) as r:
        body = b"".join(r.iter_bytes())
    assert body == plain and EVENTS[0].encode() in body
    _said_once_and_stored_nothing(got, store, made)


def test_an_encoded_answer_within_the_bound_is_stored_decoded_and_replayed(
        made: list[int], upstream: Any) -> None:
    import httpx

    text = b'{"id":"file-1","object":"file","bytes":2048,"text":"' + b"a" * 2000 + b'"}'
    upstream.serve("gzip", [gzipped(text)], streamed=False, content_type="application/json")
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), httpx.Client() as client:
        live = client.post(upstream.url + "/v1/files", json={"file": "a"})
    with dejacache.scope(mode="replay", store=store), httpx.Client() as client:
        again = client.post(upstream.url + "/v1/files", json={"file": "a"})
    assert live.content == again.content == text and len(store) == 1
    assert len(upstream.requests) == 1 and sum(made) == len(text)


# ---------------------------------------------------------------- request bodies


@pytest.mark.parametrize("lib", ["httpx", "requests"])
def test_an_encoded_request_body_is_sent_as_it_is_and_keyed_by_its_bytes_never_decoded(
        made: list[int], upstream: Any, lib: str) -> None:
    upstream.serve("", [b'{"ok":true}'], streamed=False, content_type="application/json")
    bodies = [BOMB, gzipped(bytes(len(ZEROS) + 1))]  # two bombs: two keys
    store = dejacache.MemoryStore()
    headers = {"content-encoding": "gzip", "content-type": "application/json"}
    with dejacache.scope(mode="auto", store=store):
        for body in bodies:
            if lib == "httpx":
                import httpx

                httpx.post(upstream.url + "/v1/files", content=body, headers=headers)
            else:
                import requests

                requests.post(upstream.url + "/v1/files", data=body, headers=headers,
                              timeout=10)
    assert upstream.bodies == bodies  # sent unchanged
    assert made == []  # nothing of it was inflated
    # The stored request holds a digest of the bytes as sent, and their size: no text of
    # them (a credential inside one is not readable from the cassette).
    keyed = sorted((orjson.loads(r.request)["body"] for _, r in store.iterate()),
                   key=lambda b: b["size"])
    assert [b["size"] for b in keyed] == sorted(len(b) for b in bodies)
    assert all(set(b) == {"xxh3_128", "size"} for b in keyed)
    assert gzip.decompress(bodies[0]) == ZEROS


@pytest.mark.parametrize("kind", ["whole", "stream-read-whole"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_under_warnings_as_errors_a_bomb_reaches_the_caller_then_the_warning(
        made: list[int], upstream: Any, kind: str, is_async: bool) -> None:
    # python -W error: said when the answer was built, the warning threw the answer away;
    # it is raised once the caller has every byte.
    import warnings

    import httpx

    asked: dict[str, Any] = {"file": "zeros"}
    url, past, want = upstream.url + "/v1/files", PAST, ZEROS
    if kind == "stream-read-whole":
        want = PLAIN + b": " + bytes(4 * 1024 * 1024).replace(b"\0", b"0") + b"\n\n"
        upstream.serve("gzip", pieces(gzipped(want), 4))
        asked = {"model": "gpt-test", "messages": [], "stream": False}
        url, past = upstream.url + "/v1/chat/completions", STREAM_PAST
    got: list[bytes] = []

    async def aread() -> None:
        async with httpx.AsyncClient() as client, \
                client.stream("POST", url, json=asked) as r:
            async for chunk in r.aiter_bytes():
                got.append(chunk)

    with warnings.catch_warnings(), \
            dejacache.scope(mode="auto", store=(store := dejacache.MemoryStore())):
        warnings.simplefilter("error")
        with pytest.raises(dejacache.DejacacheWarning, match=past):
            if is_async:
                asyncio.run(aread())
            else:
                with httpx.Client() as client, client.stream("POST", url, json=asked) as r:
                    for chunk in r.iter_bytes():
                        got.append(chunk)
    assert b"".join(got) == want and len(store) == 0
