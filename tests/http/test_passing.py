"""A live whole answer (not a stream) larger than the recording bound (http/_passing.py).

The caller gets every byte, as it arrives and as it came (its client decodes a gzip body
once); nothing is stored; one warning names the call and the bound; the exchange held no
more than the bound and the one read that passed it, and read the rest only as the caller
did. Below the bound nothing changes. httpx and httpx2 (``client.stream``, sync and async),
requests (``stream=True``, ``iter_content``) and aiohttp, against a loopback upstream; the
recording bound is set small here, as ``--max-recorded-stream`` sets it in the proxy.
"""

from __future__ import annotations

import asyncio
import importlib
import random
from typing import Any

import pytest
from http_support import WatchedPassing, watch_passing

import dejacache
from encoded_upstream import EncodedUpstream, gzipped, pieces

LIBS = ["httpx", "httpx2"]
BOUND = 4096
BODY = random.Random(7).randbytes(256 * 1024)  # random: gzip leaves it as large
# The most one read of httpx's and httpx2's transports returns.
READ = 64 * 1024
PAST = (r"http.* answer \(POST /download\) passed 4096 bytes held for its recording; it was "
        r"not recorded in memory:// \(the caller still gets every byte, as it arrives\)")
# case: (sent in chunks, not with a length; content-encoding; the bytes on the wire)
CASES = {"length": (False, "identity", BODY), "chunked": (True, "identity", BODY),
         "gzip": (False, "gzip", gzipped(BODY))}
ASKED = {"file": "report.bin"}


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> list[WatchedPassing]:
    dejacache.configure(max_recorded_stream=BOUND)
    return watch_passing(monkeypatch)


@pytest.fixture(params=list(CASES))
def upstream(request: pytest.FixtureRequest) -> Any:
    streamed, encoding, wire = CASES[request.param]
    server = EncodedUpstream().serve(encoding, pieces(wire, 64), streamed=streamed,
                                     content_type="application/octet-stream").start()
    server.case = request.param
    yield server
    server.stop()


def _read_httpx(lib: str, is_async: bool, url: str, seen: list[WatchedPassing],
                asked: dict[str, Any] = ASKED) -> tuple[dict[str, str], bytes, list[int]]:
    """(the answer's headers, its body as the caller's client decodes it, the bytes pulled
    past the bound before the caller read any)."""
    m = importlib.import_module(lib)
    if not is_async:
        with m.Client() as client, client.stream("POST", url, json=asked) as r:
            before = [w.pulled for w in seen]
            return dict(r.headers), b"".join(r.iter_bytes()), before

    async def run() -> tuple[dict[str, str], bytes, list[int]]:
        async with m.AsyncClient() as client, client.stream("POST", url, json=asked) as r:
            before = [w.pulled for w in seen]
            return dict(r.headers), b"".join([c async for c in r.aiter_bytes()]), before

    return asyncio.run(run())


def _held_no_more_than_the_bound(w: WatchedPassing, wire: int, read: int | None = READ) -> None:
    # Every chunk it held but the last fits the bound; the last is the one read that
    # passed it. The rest was pulled only as the caller read it, and all of it was.
    assert sum(w.held[:-1]) <= BOUND < sum(w.held)
    assert read is None or w.held[-1] <= read
    assert sum(w.held) + w.pulled == wire


def _said_once_and_stored_nothing(got: Any, store: dejacache.MemoryStore) -> None:
    assert len([w for w in got if issubclass(w.category, dejacache.DejacacheWarning)]) == 1
    assert len(store) == 0
    assert [s.stores for s in dejacache.stats().by_name.values()] == [0]


@pytest.mark.parametrize(("lib", "asked"), [
    ("httpx", ASKED), ("httpx2", ASKED),
    # A call asking for a stream, answered with a whole body (the stream flow, unflighted)
    ("httpx2", {**ASKED, "stream": True}),
], ids=["httpx", "httpx2", "httpx2-asked-a-stream"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_whole_answer_past_the_bound_reaches_the_caller_as_it_arrives_and_is_not_stored(
        bounded: list[WatchedPassing], upstream: Any, lib: str, asked: dict[str, Any],
        is_async: bool) -> None:
    streamed, encoding, wire = CASES[upstream.case]
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got:
        headers, body, before = _read_httpx(lib, is_async, upstream.url + "/download",
                                            bounded, asked)
    assert body == BODY  # every byte, decoded once (by the caller's client)
    assert headers["content-encoding"] == encoding
    assert headers.get("content-length") == (None if streamed else str(len(wire)))
    _said_once_and_stored_nothing(got, store)
    (w,) = bounded
    assert before == [0]
    _held_no_more_than_the_bound(w, len(wire))


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_under_warnings_as_errors_the_caller_gets_every_byte_then_the_warning(
        bounded: list[WatchedPassing], lib: str, is_async: bool) -> None:
    # python -W error / filterwarnings = error: raised when the answer was built, the
    # warning threw the answer away; it is raised once the caller has every byte.
    import warnings

    server = EncodedUpstream().serve("identity", pieces(BODY, 64), streamed=True,
                                     content_type="application/octet-stream").start()
    m = importlib.import_module(lib)
    got: list[bytes] = []
    try:
        with warnings.catch_warnings(), \
                dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
            warnings.simplefilter("error")
            with pytest.raises(dejacache.DejacacheWarning, match=PAST):
                if is_async:
                    async def run() -> None:
                        async with m.AsyncClient() as client, \
                                client.stream("POST", server.url + "/download",
                                              json=ASKED) as r:
                            async for chunk in r.aiter_bytes():
                                got.append(chunk)
                    asyncio.run(run())
                else:
                    with m.Client() as client, \
                            client.stream("POST", server.url + "/download", json=ASKED) as r:
                        got.extend(r.iter_bytes())
    finally:
        server.stop()
    assert b"".join(got) == BODY


def test_requests_streaming_a_download_past_the_bound(bounded: list[WatchedPassing],
                                                      upstream: Any) -> None:
    import requests

    streamed, encoding, wire = CASES[upstream.case]
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got, \
            requests.post(upstream.url + "/download", json=ASKED, stream=True,
                          timeout=10) as r:
        before = [w.pulled for w in bounded]
        body = b"".join(r.iter_content(8192))
    assert body == BODY and r.headers["content-encoding"] == encoding
    assert r.headers.get("content-length") == (None if streamed else str(len(wire)))
    _said_once_and_stored_nothing(got, store)
    (w,) = bounded
    assert before == [0]
    _held_no_more_than_the_bound(w, len(wire), read=None)


def test_aiohttp_reading_a_download_past_the_bound(bounded: list[WatchedPassing],
                                                   upstream: Any) -> None:
    import aiohttp

    async def run() -> bytes:
        async with aiohttp.ClientSession() as s, s.post(upstream.url + "/download",
                                                        json=ASKED) as r:
            return b"".join([c async for c in r.content.iter_chunked(8192)])

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match=PAST) as got:
        body = asyncio.run(run())
    assert body == BODY
    _said_once_and_stored_nothing(got, store)
    (w,) = bounded
    # (aiohttp undoes gzip itself: what reaches the exchange is the body decoded)
    _held_no_more_than_the_bound(w, len(BODY), read=None)


def test_a_whole_answer_within_the_bound_is_recorded_and_replayed_as_before(
        monkeypatch: pytest.MonkeyPatch, upstream: Any) -> None:
    import httpx2

    watched = watch_passing(monkeypatch)  # the default bound: 64 MiB
    streamed, _, wire = CASES[upstream.case]
    store = dejacache.MemoryStore()
    answers = []
    for mode in ("auto", "replay"):
        with dejacache.scope(mode=mode, store=store), httpx2.Client() as client:
            r = client.post(upstream.url + "/download", json=ASKED)
            answers.append((r.content, r.headers.get("content-length")))
    assert len(store) == 1 and watched == [] and len(upstream.requests) == 1
    (live, live_length), (again, length) = answers
    assert live == again == BODY
    assert live_length == (None if streamed else str(len(wire)))
    # Replayed whole, with its length (a gzip body was stored decoded: its decoded length).
    assert length == str(len(BODY))
