"""The explicit seam: Transport / http_client over httpx and httpx2, in and out of blocks."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import orjson
import pytest
from fake_provider import FakeProvider
from http_support import FORMS, SPELLINGS, KeyRefuser, KeySpeller, leaked

import dejacache
from dejacache.http import AsyncTransport, Transport
from encoded_upstream import PLAIN, EncodedUpstream, deflated, gzipped, pieces

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_raw_clients_record_and_replay(fake: FakeProvider, lib: Any) -> None:
    store = dejacache.MemoryStore()

    def run() -> Any:
        with lib.Client(transport=Transport(lib.HTTPTransport())) as c:
            r = c.post(fake.openai_url + "/chat/completions", json=BODY)
            with c.stream("POST", fake.openai_url + "/chat/completions",
                          json={**BODY, "stream": True}) as s:
                chunks = list(s.iter_lines())
            return r.status_code, r.json(), chunks

    with dejacache.scope(mode="record", store=store):
        live = run()
    fake.stop()
    with dejacache.scope(mode="replay", store=store):
        again = run()
    assert live == again
    assert again[2][-2:] == ["data: [DONE]", ""]


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_raw_async_clients_record_and_replay(fake: FakeProvider, lib: Any) -> None:
    store = dejacache.MemoryStore()

    async def run() -> Any:
        async with lib.AsyncClient(transport=AsyncTransport(lib.AsyncHTTPTransport())) as c:
            r = await c.post(fake.openai_url + "/embeddings", json={"input": "x"})
            async with c.stream("POST", fake.url + "/v1/messages", json={**BODY, "stream": True},
                                headers={"anthropic-version": "2023-06-01"}) as s:
                chunks = [line async for line in s.aiter_lines()]
            return r.json(), chunks

    with dejacache.scope(mode="record", store=store):
        live = asyncio.run(run())
    fake.stop()
    with dejacache.scope(mode="replay", store=store):
        again = asyncio.run(run())
    assert live == again
    assert {r.name for _, r in store.iterate()} == {"openai.embeddings", "anthropic.messages"}


def test_http_client_caches_outside_any_block(fake: FakeProvider) -> None:
    dejacache.configure(store=dejacache.MemoryStore())
    with dejacache.http_client() as http:
        client = openai.OpenAI(base_url=fake.openai_url, api_key="k", http_client=http)
        a = client.chat.completions.create(**BODY)  # type: ignore[call-overload]
        b = client.chat.completions.create(**BODY)  # type: ignore[call-overload]
    assert a.model_dump() == b.model_dump()
    assert fake.count() == 1
    assert isinstance(http, httpx2.Client)


def test_openai3_over_a_legacy_httpx_client(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()

    def run() -> Any:
        with dejacache.http_client(library="httpx") as http:
            assert isinstance(http, httpx.Client)
            client = openai.OpenAI(base_url=fake.openai_url, api_key="k", http_client=http)
            r = client.chat.completions.create(**BODY)  # type: ignore[call-overload]
            s = client.chat.completions.create(**BODY, stream=True)  # type: ignore[call-overload]
            return r.model_dump(), [c.model_dump() for c in s]

    with dejacache.scope(mode="record", store=store):
        live = run()
    fake.stop()
    with dejacache.scope(mode="replay", store=store):
        assert run() == live


def test_explicit_client_inside_a_block_records_once(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store), dejacache.http_client() as http:
        client = openai.OpenAI(base_url=fake.openai_url, api_key="k", http_client=http)
        client.chat.completions.create(**BODY)  # type: ignore[call-overload]
    assert len(store) == 1
    assert dejacache.stats().total.misses == 1


def test_secrets_never_reach_the_store_and_headers_are_not_keyed(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    url = fake.openai_url + "/chat/completions?api_key=QUERY-SECRET&api-version=2024"
    with dejacache.scope(mode="auto", store=store), httpx2.Client() as c:
        a = c.post(url, json=BODY, headers={"Authorization": "Bearer HEADER-SECRET",
                                            "traceparent": "00-aaaa-01"})
        b = c.post(url.replace("QUERY-SECRET", "OTHER"), json=BODY,
                   headers={"Authorization": "Bearer ANOTHER", "traceparent": "00-bbbb-01"})
    assert a.json() == b.json()
    assert fake.count() == 1
    ((_, rec),) = list(store.iterate())
    blob = rec.value + rec.request
    for secret in (b"SECRET", b"server-secret", b"Bearer", b"session"):
        assert secret not in blob
    assert b"api-version" in rec.request
    assert a.headers["content-type"] == b.headers["content-type"] == "application/json"
    assert "set-cookie" not in b.headers


def test_volatile_body_fields_do_not_change_the_key(fake: FakeProvider) -> None:
    # (an SDK's own header: at a host that is not OpenAI's, a path alone does not vouch)
    sdk = {"x-stainless-lang": "python"}
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            httpx2.Client(headers=sdk) as c:
        url = fake.openai_url + "/chat/completions"
        a = c.post(url, json={**BODY, "user": "alice"}).json()
        b = c.post(url, json={**BODY, "user": "bob"}).json()
        d = c.post(url, json={**BODY, "temperature": 0.5}).json()
    assert a == b != d
    assert fake.count() == 2


def test_a_path_alone_does_not_make_a_providers_fields_volatile(fake: FakeProvider) -> None:
    """``POST /forms/7/responses {"user": ...}`` to some service matched OpenAI's path, and
    bob was served alice's recording: without OpenAI's host or its SDK's headers, ``user``
    is keyed like any field."""
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), httpx2.Client() as c:
        url = fake.openai_url + "/chat/completions"
        c.post(url, json={**BODY, "user": "alice"})
        c.post(url, json={**BODY, "user": "bob"})
    assert fake.count() == 2


def test_no_namespace_means_no_caching(fake: FakeProvider) -> None:
    with dejacache.scope(cache_key=None), httpx2.Client() as c:
        c.post(fake.openai_url + "/embeddings", json={"input": "x"})
        c.post(fake.openai_url + "/embeddings", json={"input": "x"})
    assert fake.count() == 2


def test_transport_needs_a_library_it_knows() -> None:
    with pytest.raises(ValueError, match="unknown HTTP library"):
        Transport(library="requests")


# ---------------------------------------------------------------- live answers keep every header

# What protocols read from a live answer: an MCP session id, pagination, caching, redirects,
# rate limits, and a header nobody listed in advance.
PROTOCOL = {"mcp-session-id": "sess-42", "link": '<http://127.0.0.1/v1/items?page=2>; rel="next"',
            "etag": '"v1-abc"', "location": "/v1/items/7",
            "x-ratelimit-remaining-requests": "99", "x-vendor-thing": "kept"}
COOKIE = "sid=live-cookie-secret"


def _send(lib: Any, url: str, stream: bool, is_async: bool) -> tuple[int, Any, Any]:
    """Status, headers and body (JSON, or the stream's lines) of one call, read as it comes."""
    body = {**BODY, "stream": stream}

    def sync() -> tuple[int, Any, list[str]]:
        with lib.Client() as c, c.stream("POST", url, json=body) as r:
            return r.status_code, r.headers, list(r.iter_lines())

    async def run() -> tuple[int, Any, list[str]]:
        async with lib.AsyncClient() as c, c.stream("POST", url, json=body) as r:
            return r.status_code, r.headers, [line async for line in r.aiter_lines()]

    status, headers, lines = asyncio.run(run()) if is_async else sync()
    return status, headers, lines if stream else orjson.loads("".join(lines))


@pytest.mark.parametrize("mode", ["record", "auto"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_live_answer_in_a_recording_block_keeps_every_header(
    fake: FakeProvider, tmp_path: Any, lib: Any, is_async: bool, stream: bool, mode: str,
) -> None:
    """The caller of a live call gets the live response untouched (an MCP session failed with
    "Missing session ID" while recording); the cassette keeps every header, credentials
    masked; a replay hands the recorded headers back, never a masked credential."""
    fake.script.append({"headers": {**PROTOCOL, "set-cookie": COOKIE}})
    path = tmp_path / "c.json"
    url = fake.openai_url + "/chat/completions"
    with dejacache.cassette(path, mode=mode):
        status, live, lines = _send(lib, url, stream, is_async)
    assert status == 200
    for name, value in {**PROTOCOL, "set-cookie": COOKIE}.items():
        assert live[name] == value, name
    assert "date" in live
    text = path.read_text()
    assert "live-cookie-secret" not in text
    ((entry),) = orjson.loads(text)["entries"]
    stored = dict(entry["response"]["headers"])
    assert {k: stored[k] for k in PROTOCOL} == PROTOCOL
    assert stored["set-cookie"] == "<REDACTED>"
    assert "date" in stored and "x-request-id" in stored  # volatile: kept, never compared
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        status, again, replayed = _send(lib, url, stream, is_async)
    assert (status, replayed) == (200, lines)
    for name, value in PROTOCOL.items():
        assert again[name] == value, name
    assert "set-cookie" not in again  # a masked credential is not handed to a cookie jar


def test_re_recording_an_unchanged_answer_leaves_the_cassette_as_it_was(
    fake: FakeProvider, tmp_path: Any,
) -> None:
    # The same answer under a fresh Date and request id each time: volatile headers are kept
    # in the file but do not make the re-recording a change (no diff to commit).
    path = tmp_path / "c.json"
    url = fake.openai_url + "/no-such-route"  # a fixed answer (404) with fresh volatile headers
    with dejacache.cassette(path, mode="record"), httpx2.Client() as c:
        first = c.post(url, json=BODY)
    before = path.read_bytes()
    with dejacache.cassette(path, mode="record"), httpx2.Client() as c:
        again = c.post(url, json=BODY)
    assert first.headers["x-request-id"] != again.headers["x-request-id"]
    assert path.read_bytes() == before


class _MCPServer:
    """A real MCP server (the ``mcp`` package) speaking streamable HTTP on loopback."""

    def __init__(self) -> None:
        import uvicorn
        from mcp.server.mcpserver import MCPServer

        app = MCPServer("weather")

        @app.tool()
        def forecast(city: str) -> str:
            return f"sunny in {city}"

        self.server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), host="127.0.0.1",
                                                    port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:  # a condition with a bound: the port is known after
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def mcp_server() -> Iterator[_MCPServer]:
    pytest.importorskip("mcp")
    server = _MCPServer()
    yield server
    server.stop()


async def _mcp_session(url: str) -> str:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write, *_), \
            ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("forecast", {"city": "Paris"})
        return str(result.content[0].text)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["record", "auto"])
def test_an_mcp_session_is_recorded_and_replayed(
    mcp_server: _MCPServer, tmp_path: Any, mode: str,
) -> None:
    """The session id the server sends with its first answer must reach the client while
    recording (it failed with "Bad Request: Missing session ID"), and the recording replays
    the whole session with the server gone. The session is recorded at its own layer
    (dejacache.mcp: calls of kind ``mcp``), not as the transport's HTTP requests, so the
    session id, a transport header, is in no key and no recording."""
    path = tmp_path / "mcp.json"
    with dejacache.cassette(path, mode=mode):
        assert asyncio.run(_mcp_session(mcp_server.url)) == "sunny in Paris"
    text = path.read_text()
    assert '"mcp.tools/call"' in text and "mcp-session-id" not in text
    mcp_server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_mcp_session(mcp_server.url)) == "sunny in Paris"


# ---------------------------------------------------------------- nothing blocks the event loop


def test_async_calls_block_nothing_with_the_default_store(fake: FakeProvider) -> None:
    """Under blockbuster (tests/http/conftest.py): the default SQLite store is created by the
    first call, written on the miss and read on the hit, off the event loop."""

    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as c:
            return [(await c.chat.completions.create(  # type: ignore[call-overload]
                **BODY)).model_dump() for _ in range(2)]

    with dejacache.scope(cache_key="suite"):
        live, again = asyncio.run(run())
    assert live == again and fake.count() == 1
    assert dejacache.config.get_settings().store.url.endswith("cache.db")


_FIRST_ASYNC_CALLS = """
import asyncio, json, sys
sys.path[:0] = {paths!r}
from blockbuster import BlockBuster
from fake_provider import FakeProvider
import openai
import dejacache

fake = FakeProvider().start()


async def main():
    got = []
    async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as c:
        with dejacache.scope(store=dejacache.MemoryStore()):
            watch = BlockBuster(scanned_modules=["dejacache"])
            watch.activate()
            try:
                for i in range(3):
                    try:
                        await c.chat.completions.create(
                            model="m", messages=[{{"role": "user", "content": str(i)}}],
                            extra_body={{"password": "hunter2"}})
                        got.append("ok")
                    except Exception as exc:
                        got.append(type(exc).__name__ + ": " + str(exc)[:80])
            finally:
                watch.deactivate()
    return got


print(json.dumps(asyncio.run(main())))
fake.stop()
"""


def test_the_first_async_calls_of_a_process_block_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh interpreter, under blockbuster, with no masking key yet: provider discovery ran
    on the first intercepted request (``os.stat`` on the event loop) and failed again on every
    request after (only a success was cached); the key a credential in the body needs was
    read or created on the event loop."""
    monkeypatch.delenv("DEJACACHE_SECRET_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    tests = pathlib.Path(__file__).resolve().parents[1]
    code = _FIRST_ASYNC_CALLS.format(paths=[str(tests), str(tests / "http")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["ok", "ok", "ok"]
    assert (tmp_path / "config" / "dejacache" / "secret.key").exists()


def test_an_async_replay_miss_searches_a_sqlite_store_off_the_event_loop(
    fake: FakeProvider, tmp_path: Any,
) -> None:
    """The miss report looks for the nearest recorded call in the store: under blockbuster
    the search of a SQLite store failed ("could not search recorded calls: BlockingError")."""
    store = dejacache.SQLiteStore(tmp_path / "c.db")

    async def ask(text: str) -> Any:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as c:
            return await c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}])

    with dejacache.scope(mode="record", store=store):
        asyncio.run(ask("recorded"))
    with dejacache.scope(mode="replay", store=store), \
            pytest.raises(dejacache.ReplayMiss) as miss:
        asyncio.run(ask("asked now"))
    assert "nearest recorded call of openai.chat.completions" in str(miss.value)
    assert "'recorded' -> 'asked now'" in str(miss.value)
    store.close()


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_a_mock_transport_answer_records_and_replays(lib: Any, gzipped: bool) -> None:
    # A handler's Response(content=...) arrives already read: its wire bytes are gone
    # (iter_raw raised StreamConsumed), so its decoded content is what is kept and served.
    import gzip

    answer = orjson.dumps({"id": "chatcmpl-1", "choices": []})
    calls: list[Any] = []

    def handler(request: Any) -> Any:
        calls.append(request)
        if gzipped:
            return lib.Response(200, content=gzip.compress(answer), headers={
                "content-type": "application/json", "content-encoding": "gzip"})
        return lib.Response(200, content=answer, headers={"content-type": "application/json"})

    def run() -> Any:
        with lib.Client(transport=Transport(lib.MockTransport(handler))) as c:
            r = c.post("http://127.0.0.1:9/v1/chat/completions", json=BODY)
            return r.status_code, r.json()

    async def arun() -> Any:
        async with lib.AsyncClient(transport=AsyncTransport(lib.MockTransport(handler))) as c:
            r = await c.post("http://127.0.0.1:9/v1/chat/completions", json={**BODY, "a": 1})
            return r.status_code, r.json()

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        live, alive = run(), asyncio.run(arun())
    with dejacache.scope(mode="replay", store=store):
        assert (run(), asyncio.run(arun())) == (live, alive)
    assert live == alive == (200, orjson.loads(answer)) and len(calls) == 2


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_body_that_is_not_what_its_encoding_says_replays_as_it_came(
        fake: FakeProvider, lib: Any, encoding: str) -> None:
    # A plain JSON body said to be gzip: decoding the stored copy failed, so recording it
    # did. Said to be br: without brotli the library passes it through, and the copy was
    # stored as if decoded, its header dropped. Either way it is now kept as it came, with
    # its header, and the replay answers as the live call did.
    def ask() -> Any:
        with lib.Client(transport=Transport(lib.HTTPTransport())) as c:
            try:
                r = c.post(fake.url + "/v1/chat/completions", json=BODY)
            except lib.DecodingError as exc:
                return type(exc).__name__
            return r.status_code, r.headers.get("content-encoding"), r.content

    fake.script.append({"headers": {"content-encoding": encoding}})
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        live = ask()
    with dejacache.scope(mode="replay", store=store):
        assert ask() == live
    assert fake.count() == 1
    if isinstance(live, tuple):  # the library could not decode it: what the server sent
        assert live[:2] == (200, encoding) and orjson.loads(live[2])["object"]


# A body as the upstream sends it: (content-encoding, chunks, streamed, kept decoded). Kept
# decoded: the store holds the plain text (events, JSON); else the bytes as they came, with
# their header.
ANSWER = b'{"id":"chatcmpl-enc","object":"chat.completion","choices":[]}'
ENCODED = {
    "sse gzip": ("gzip", pieces(gzipped(PLAIN)), True, True),
    "sse plain said gzip": ("gzip", pieces(PLAIN), True, False),
    "sse gzip cut short": ("gzip", pieces(gzipped(PLAIN)[:-40]), True, False),
    "sse gzip, gzip": ("gzip, gzip", pieces(gzipped(gzipped(PLAIN))), True, True),
    "sse deflate, gzip": ("deflate, gzip", pieces(gzipped(deflated(PLAIN))), True, True),
    "sse br, gzip": ("br, gzip", pieces(gzipped(b"data: not br\n\n")), True, False),
    "json gzip, gzip": ("gzip, gzip", [gzipped(gzipped(ANSWER))], False, True),
    "json deflate, gzip": ("deflate, gzip", [gzipped(deflated(ANSWER))], False, True),
    "json br, gzip": ("br, gzip", [gzipped(b"not br")], False, False),
    "json gzip cut short": ("gzip", [gzipped(ANSWER)[:-12]], False, False),
}


@pytest.fixture
def encoded() -> Iterator[EncodedUpstream]:
    server = EncodedUpstream().start()
    yield server
    server.stop()


def _outcome(lib: Any, url: str, asks_stream: bool, is_async: bool) -> tuple[Any, ...]:
    """What a client makes of the answer: status, content-encoding and the body as its own
    decoder gives it, or the name of the error that decoder raised."""
    body = {**BODY, "stream": asks_stream}

    def sync() -> tuple[Any, ...]:
        with lib.Client(transport=Transport(lib.HTTPTransport())) as c, \
                c.stream("POST", url, json=body) as r:
            try:
                return r.status_code, r.headers.get("content-encoding"), r.read()
            except lib.DecodingError as exc:
                return r.status_code, r.headers.get("content-encoding"), type(exc).__name__

    async def run() -> tuple[Any, ...]:
        async with lib.AsyncClient(transport=AsyncTransport(lib.AsyncHTTPTransport())) as c, \
                c.stream("POST", url, json=body) as r:
            try:
                return r.status_code, r.headers.get("content-encoding"), await r.aread()
            except lib.DecodingError as exc:
                return r.status_code, r.headers.get("content-encoding"), type(exc).__name__

    return asyncio.run(run()) if is_async else sync()


@pytest.mark.parametrize("asks_stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
@pytest.mark.parametrize("case", list(ENCODED))
def test_an_encoded_answer_reaches_the_caller_as_sent_and_replays_alike(
        encoded: EncodedUpstream, tmp_path: pathlib.Path, lib: Any, is_async: bool,
        asks_stream: bool, case: str) -> None:
    # The caller's own decoder reads what the upstream sent, live and replayed alike. Every
    # layer of a stacked coding is undone for the stored copy (RFC 9110 8.4: in reverse
    # order); a body some layer of which cannot be undone (br without brotli, data that is
    # not what its header says, a gzip stream cut short) is kept as it came, with its header.
    encoding, chunks, streamed, plain = ENCODED[case]
    encoded.serve(encoding, chunks, streamed=streamed,
                  content_type="text/event-stream" if streamed else "application/json")
    url = encoded.url + "/v1/chat/completions"
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        live = _outcome(lib, url, asks_stream, is_async)
    assert live[:2] == (200, encoding)
    ((entry),) = orjson.loads(path.read_bytes())["entries"]
    stored = entry["response"]
    if plain:
        assert ("events" in stored if streamed else "json" in stored), stored
        assert "content-encoding" not in dict(stored["headers"])
    else:
        assert dict(stored["headers"])["content-encoding"] == encoding
        assert "events" not in stored and "json" not in stored
    encoded.stop()
    with dejacache.cassette(path, mode="replay"):
        again = _outcome(lib, url, asks_stream, is_async)
    if plain and streamed:  # replayed decoded, without the header of a coding it no longer has
        assert again == (200, None, live[2])
    elif plain:  # (a cassette writes JSON its own way)
        assert again[:2] == (200, None) and orjson.loads(again[2]) == orjson.loads(live[2])
    else:
        assert again == live


SHAPED_KEY = "sk-proj-" + "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6kM9n"


@pytest.mark.parametrize("streamed", [True, False], ids=["sse", "json"])
def test_a_secret_in_a_decoded_body_is_masked_in_the_stored_form(
        encoded: EncodedUpstream, tmp_path: pathlib.Path, streamed: bool) -> None:
    # The stored copy is the decoded text, so the secret-shaped value gzip hid is masked.
    text = {"id": "chatcmpl-k", "object": "chat.completion", "note": f"key {SHAPED_KEY}"}
    body = (b"data: " + orjson.dumps(text) + b"\n\ndata: [DONE]\n\n") if streamed \
        else orjson.dumps(text)
    encoded.serve("gzip, gzip", pieces(gzipped(gzipped(body))), streamed=streamed,
                  content_type="text/event-stream" if streamed else "application/json")
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        _outcome(httpx2, encoded.url + "/v1/chat/completions", streamed, False)
    written = path.read_text()
    assert SHAPED_KEY not in written and "<REDACTED>" in written


# ------------------------------------------------------------------ a driver that writes bytes


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_replayed_whole_answer_comes_as_data_to_a_driver_that_asks(
        fake: FakeProvider, lib: Any, tmp_path: pathlib.Path) -> None:
    """``Options(replayed=True)`` (the proxy's): the status, headers and body a response
    would carry, without building one; streams, and answers an observer watches, stay
    responses."""
    from dejacache.http import observers
    from dejacache.http._libs import lib_of
    from dejacache.http.transport import Options, Replayed, handle_async
    from dejacache.scope import current

    path = tmp_path / "c.json"
    url = fake.openai_url + "/chat/completions"
    with dejacache.cassette(path, mode="record"), \
            lib.Client(transport=Transport(lib.HTTPTransport())) as c:
        live = c.post(url, json=BODY)
        c.post(url, json={**BODY, "stream": True}).read()
    fake.stop()
    handler = lib.AsyncHTTPTransport()

    async def replay(opts: Options, body: Any) -> Any:
        return await handle_async(lib_of(handler), current(), lib.Request(
            "POST", url, json=body), handler.handle_async_request, opts)

    def run(opts: Options) -> tuple[Any, Any]:
        async def both() -> tuple[Any, Any]:
            return await replay(opts, BODY), await replay(opts, {**BODY, "stream": True})
        with dejacache.cassette(path, mode="replay"):
            return asyncio.run(both())

    whole, stream = run(Options(replayed=True))
    plain, _ = run(Options())
    assert isinstance(whole, Replayed) and not isinstance(stream, Replayed)
    assert whole.status == plain.status_code == live.status_code
    assert whole.body == plain.content and orjson.loads(whole.body) == live.json()
    assert [(k, v) for k, v in whole.headers] == [
        (k, v) for k, v in plain.headers.multi_items() if k != "content-length"]

    seen: list[observers.Exchange] = []
    token = observers.watch(seen.append)
    try:
        watched, _ = run(Options(replayed=True))
    finally:
        observers.unwatch(token, seen.append)
    assert not isinstance(watched, Replayed) and watched.status_code == 200
    assert seen and all(ex.local for ex in seen)


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_an_escaped_slash_in_the_path_is_another_resource(lib: Any) -> None:
    # GitLab names a project ``group%2Frepo``: one segment, not the path ``group/repo``
    seen: list[str] = []

    def handler(request: Any) -> Any:
        seen.append(request.url.raw_path.decode())
        return lib.Response(200, json={"path": request.url.raw_path.decode()})

    def get(path: str) -> Any:
        with lib.Client(transport=Transport(lib.MockTransport(handler))) as c:
            return c.get("http://127.0.0.1:9" + path).json()

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        get("/api/v4/projects/group%2Frepo")
    with dejacache.scope(mode="replay", store=store):
        assert get("/api/v4/projects/group%2Frepo") == {"path": "/api/v4/projects/group%2Frepo"}
        with pytest.raises(dejacache.ReplayMiss):
            get("/api/v4/projects/group/repo")
    assert seen == ["/api/v4/projects/group%2Frepo"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_response_header_is_a_credential_by_its_own_spelling(
    fake: FakeProvider, tmp_path: Any, lib: Any, is_async: bool, stream: bool,
) -> None:
    """``X-AccessToken`` says ``access`` and ``token`` only in its capitals: masked in the
    cassette, and not handed back by a replay; the caller of the live call still gets it, and
    the headers next to it come back as they were."""
    fake.script.append({"headers": {"X-AccessToken": "SECRETMARK123", "X-Shown": "Kept-As-Is"}})
    path = tmp_path / "c.json"
    url = fake.openai_url + "/chat/completions"
    with dejacache.cassette(path, mode="record"):
        _, live, lines = _send(lib, url, stream, is_async)
    assert live["x-accesstoken"] == "SECRETMARK123"
    assert "SECRETMARK123" not in path.read_text()
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        _, again, replayed = _send(lib, url, stream, is_async)
    assert replayed == lines
    assert "x-accesstoken" not in again
    assert again["x-shown"] == "Kept-As-Is"


# Named as request headers that carry who is asking are (credential words, ``Set-Cookie``),
# with values that look like nothing secret: only their names say what they are.
_RESPONSE_CREDENTIALS = {"X-Hub-Signature": "sha256=c0ffee1234", "X-Auth": "RESPAUTHMARK-7",
                         "X-RapidAPI-Key": "rapidmark-8", "X-Session-Token": "tokmark-9"}


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_a_response_header_is_a_credential_by_the_request_headers_rule(
    fake: FakeProvider, tmp_path: Any, lib: Any,
) -> None:
    """A response's ``X-Hub-Signature`` and ``X-Auth`` reached the cassette in plain text:
    response header names were judged by the credential-name list alone, request header
    names also by their words. One rule now: masked in the file, not handed back by a
    replay, and ``dejacache scan`` calls the recording clean (and a file that holds them
    plain is not)."""
    from dejacache.cassettes.scan import scan_file

    fake.script.append({"headers": {**_RESPONSE_CREDENTIALS, "X-Shown": "Kept-As-Is"}})
    path = tmp_path / "c.json"
    url = fake.openai_url + "/chat/completions"
    with dejacache.cassette(path, mode="record"):
        _, live, _ = _send(lib, url, False, False)
    assert {k: live[k] for k in _RESPONSE_CREDENTIALS} == _RESPONSE_CREDENTIALS
    text = path.read_text()
    assert not [v for v in _RESPONSE_CREDENTIALS.values() if v in text]
    assert scan_file(path) == []
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        _, again, _ = _send(lib, url, False, False)
    assert not {k.lower() for k in _RESPONSE_CREDENTIALS} & set(again)
    assert again["x-shown"] == "Kept-As-Is"


def test_a_credential_pair_in_a_body_is_keyed_by_its_mask(
    fake: FakeProvider, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JSON body's ``[["api_key", "..."]]`` was keyed as it was: the cassette's ``key`` was
    an unkeyed digest of text holding the credential (guessable offline when weak). Keyed by
    its mask now, as a named field is: alice and bob replay their own answers, the key
    changes with the masking key, and ``substitute=`` replays it on another machine."""
    url = fake.openai_url + "/chat/completions"

    def ask(who: str) -> str:
        body = {**BODY, "params": [["api_key", who], ["q", "x"]]}
        with httpx.Client() as c:
            return str(c.post(url, json=body).json()["choices"][0]["message"]["content"])

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record", substitute={"<KEY>": "k1-local"}):
        live = {who: ask(who) for who in ("alice-pw", "bob-pw", "k1-local")}
    text = path.read_text()
    assert not [v for v in live if v in text]
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        assert {who: ask(who) for who in ("bob-pw", "alice-pw")} == {
            "bob-pw": live["bob-pw"], "alice-pw": live["alice-pw"]}
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "the CI machine")
    with dejacache.cassette(path, mode="replay", substitute={"<KEY>": "k2-ci"}):
        assert ask("k2-ci") == live["k1-local"]
    with pytest.raises(dejacache.ReplayMiss), dejacache.cassette(path, mode="replay"):
        ask("alice-pw")  # keyed by the mask: another masking key, another key


# ---------------------------------------------------------------- echoed credentials


def _quoting(url: str, body: dict[str, Any], is_async: bool) -> str:
    """What the caller reads of the answer, its body streamed as it comes."""
    if is_async:
        async def read() -> str:
            async with dejacache.async_http_client() as c, \
                    c.stream("POST", url, json=body, headers=KeyRefuser.HEADERS) as r:
                return (await r.aread()).decode()

        return asyncio.run(read())
    with dejacache.http_client() as c, \
            c.stream("POST", url, json=body, headers=KeyRefuser.HEADERS) as r:
        return r.read().decode()


@pytest.mark.parametrize(("path", "body"), [
    ("echo", {"q": 1}),  # a whole JSON 200 with an ``error`` field
    ("stream", {"stream": True}),  # handed on as it comes, stored at its end
    ("stream", {"q": 1}),  # a stream the request did not ask for: read whole
], ids=["json", "stream", "stream-read-whole"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_200_answer_quoting_the_requests_key_is_stored_without_it(
        tmp_path: pathlib.Path, path: str, body: dict[str, Any], is_async: bool) -> None:
    # The caller still gets the answer as it came; a replay quotes the placeholder. In the
    # stream each key came cut in two across socket reads.
    cassette = tmp_path / "echo.json"
    with KeyRefuser() as server:
        with dejacache.cassette(cassette, "record"):
            live = _quoting(server.at(path), body, is_async)
        assert all(k in live for k in KeyRefuser.KEYS)
        assert leaked(tmp_path) == []
        with dejacache.cassette(cassette, "replay"):
            again = _quoting(server.at(path), body, is_async)
    assert again.count("<REDACTED>") == 3
    assert again == _placeholders(live)


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("form", FORMS)
def test_an_answer_quoting_the_requests_key_in_another_spelling_is_stored_without_it(
        tmp_path: pathlib.Path, form: str, spelling: str) -> None:
    # The JSON escapes of PHP (``\\/``) and of encoders writing ``\\u002B``, a URL's
    # percent-encoding, where what is kept still spells them so.
    cassette = tmp_path / "spelt.json"
    body = {"stream": True} if form == "stream" else {"q": 1}
    with KeySpeller() as server:
        with dejacache.cassette(cassette, "record"), dejacache.http_client() as c:
            live = c.post(server.at(f"{form}/{spelling}"), json=body,
                          headers=KeySpeller.HEADERS).text
        assert KeySpeller.held(live) == list(KeySpeller.KEYS)
        assert leaked(tmp_path, KeySpeller) == []
        with dejacache.cassette(cassette, "replay"), dejacache.http_client() as c:
            again = c.post(server.at(f"{form}/{spelling}"), json=body,
                           headers=KeySpeller.HEADERS).text
    assert again.count("<REDACTED>") == 3 and KeySpeller.held(again) == []


def _placeholders(text: str) -> str:
    """``text`` as stored: each credential the request sent replaced whole."""
    for sent in (KeyRefuser.HEADERS["authorization"], *KeyRefuser.KEYS):
        text = text.replace(sent, "<REDACTED>")
    return text
