"""What the proxy holds at once, across its connections, over real loopback sockets: a
connection over ``max_connections`` is answered 503 with Retry-After and closed while the
others are served, and one is taken again once another closes; a body that would take the
bytes held over ``max_buffered`` is refused so too, and what a request held is given back on
every path (answered, refused, its client gone mid-body or mid-answer, its upstream failed,
timed out), so the proxy recovers."""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from proxy_support import RawUpstream

from dejacache.proxying._limits import Budget
from dejacache.proxying._server import ProxyConfig, ProxyServer
from dejacache.proxying._sessions import SessionSpec
from dejacache.proxying.upstreams import parse_upstream

STATUS = b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"
BUFFERED = 1000  # bytes of bodies the proxies here hold at once


def test_a_budget_takes_up_to_its_limit_and_gets_back_what_was_given() -> None:
    budget = Budget(10)
    assert budget.take(6) and budget.take(4) and budget.held == 10
    assert not budget.take(1) and budget.held == 10  # refused: nothing taken
    budget.give(4)
    assert not budget.take(5) and budget.take(4) and budget.held == 10


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (the proxy runs in this loop: it is checked between its steps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not condition():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.005)


class Gate(RawUpstream):
    """A loopback upstream that reads a request and answers it (200, a small JSON body) only
    once :attr:`release` is set: an answer in flight for as long as a test needs."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.arrived = 0

    async def answer(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        self.arrived += 1
        await self.release.wait()
        answer = b'{"id": "chatcmpl-1", "choices": []}'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()


def dead_url() -> str:
    """A loopback URL nothing listens on (a port just let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class Proxy:
    """An in-process proxy with small limits: its server, address, and the path prefix of a
    recording session on it (``openai`` goes to a :class:`Gate`, ``dead`` nowhere)."""

    def __init__(self, server: ProxyServer, prefix: str, gate: Gate) -> None:
        self.server, self.prefix, self.gate = server, prefix, gate
        url = urlsplit(server.url)
        self.address = (str(url.hostname), int(url.port or 0))

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(*self.address)

    @property
    def held(self) -> int:
        return self.server.buffered.held


@pytest.fixture
async def make_proxy(tmp_path: pathlib.Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[tuple[ProxyServer, Gate]] = []

    async def make(**limits: Any) -> Proxy:
        gate = Gate()
        ups = {name: parse_upstream(f"{name}={url}", "test")
               for name, url in (("openai", await gate.start()), ("dead", dead_url()))}
        server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "default.json"),
                                         upstreams=ups, cassette_dir=tmp_path, **limits))
        await server.start()
        made.append((server, gate))
        s = await server.sessions.open(SessionSpec(cassette=tmp_path / "limits.json",
                                                   mode="record"))
        return Proxy(server, f"/_dejacache/s/{s.id}", gate)

    yield make
    for server, gate in made:
        gate.release.set()
        await server.stop()
        await gate.stop()


async def answer(reader: asyncio.StreamReader) -> bytes:
    """One answer framed by Content-Length, its head included."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head + await reader.readexactly(length)


async def served(proxy: Proxy, writer: asyncio.StreamWriter, reader: asyncio.StreamReader
                 ) -> bool:
    writer.write(STATUS)
    return (await answer(reader)).startswith(b"HTTP/1.1 200 ")


def busy(data: bytes, setting: str) -> bool:
    """Whether ``data`` is the proxy's 503 naming ``setting``, retry in a second."""
    head = data.partition(b"\r\n\r\n")[0].lower()
    return (data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            and b"\r\nretry-after: 1" in head and setting.encode() in data)


def upload(path: str, length: int, *, chunked: bool = False) -> bytes:
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % length
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer sk-test\r\n%s\r\n\r\n" % (path.encode(), framing))


def chat(length: int) -> bytes:
    """A chat completion request body of exactly ``length`` bytes."""
    body = json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": ""}]})
    return body.replace('""', '"' + "x" * (length - len(body)) + '"').encode()


# ---------------------------------------------------------------- connections


async def test_a_connection_over_the_limit_is_refused_while_the_others_are_served(
        make_proxy: Callable[..., Any]) -> None:
    proxy = await make_proxy(max_connections=2, max_buffered=BUFFERED)
    (r1, w1), (r2, w2) = await proxy.connect(), await proxy.connect()
    try:
        assert await served(proxy, w1, r1) and await served(proxy, w2, r2)
        # A third is answered at once, before it asks anything, and closed; the body it
        # goes on to send is never held.
        r3, w3 = await proxy.connect()
        w3.write(upload(f"{proxy.prefix}/openai/v1/chat/completions", 500) + chat(500))
        refused = await asyncio.wait_for(r3.read(), 10)
        w3.close()
        assert busy(refused, "--max-connections"), refused
        assert b"limit of 2 open connections is reached" in refused and proxy.held == 0
        # The two open ones are served on; once one closes, a new one is taken.
        assert await served(proxy, w1, r1) and await served(proxy, w2, r2)
        w1.close()
        await until(lambda: proxy.server.admitted.held == 1, "the closed one let go")
        r4, w4 = await proxy.connect()
        assert await served(proxy, w4, r4)
        w4.close()
    finally:
        w1.close()
        w2.close()


async def test_a_websocket_counts_as_a_connection(make_proxy: Callable[..., Any],
                                                  tmp_path: pathlib.Path) -> None:
    from websockets.asyncio.client import connect

    ws_tests = str(pathlib.Path(__file__).resolve().parents[1] / "ws")
    if ws_tests not in sys.path:
        sys.path.insert(0, ws_tests)
    from ws_support import LoopbackServer, echo

    ws_server = LoopbackServer(echo).start()
    try:
        proxy = await make_proxy(max_connections=1)
        s = await proxy.server.sessions.open(SessionSpec(
            cassette=tmp_path / "ws.json", mode="record",
            upstreams={"chat": parse_upstream(f"chat=http://127.0.0.1:{ws_server.port}",
                                              "test")}))
        host, port = proxy.address
        async with connect(f"ws://{host}:{port}/_dejacache/s/{s.id}/chat/room") as ws:
            assert json.loads(await ws.recv()) == {"hello": "/room"}
            reader, writer = await proxy.connect()
            refused = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert busy(refused, "--max-connections")
        await until(lambda: proxy.server.admitted.held == 0, "the WebSocket let go")
        reader, writer = await proxy.connect()
        assert await served(proxy, writer, reader)
        writer.close()
    finally:
        ws_server.stop()


# ---------------------------------------------------------------- bytes of bodies


async def test_a_body_over_the_budget_is_refused_until_the_budget_frees(
        make_proxy: Callable[..., Any]) -> None:
    proxy = await make_proxy(max_buffered=BUFFERED)
    path = f"{proxy.prefix}/openai/v1/chat/completions"
    r1, w1 = await proxy.connect()
    w1.write(upload(path, 600) + chat(600)[:10])  # 600 declared: held while it arrives
    await until(lambda: proxy.held == 600, "the first body held")
    for second in (upload(path, 600),  # declared: refused before its body is sent
                   upload(path, 0, chunked=True) + b"12c\r\n" + b"x" * 300 + b"\r\n"
                   + b"12c\r\n"):  # chunks: the second would pass it
        r2, w2 = await proxy.connect()
        w2.write(second)
        refused = await asyncio.wait_for(r2.read(), 10)
        w2.close()
        assert busy(refused, "--max-buffered"), refused
        assert b"held at once over 1000 bytes (" in refused
        assert proxy.held == 600  # what the refused one took is given back
    w1.write(chat(600)[10:])  # the first one arrives whole, and is answered
    proxy.gate.release.set()
    assert (await answer(r1)).startswith(b"HTTP/1.1 200 ")
    await until(lambda: proxy.held == 0, "the answered body let go")
    w1.write(upload(path, 600) + chat(600))  # now one fits again
    assert (await answer(r1)).startswith(b"HTTP/1.1 200 ")
    w1.close()
    await until(lambda: proxy.held == 0, "the second body let go")


async def test_a_body_the_budget_could_never_hold_is_too_large(
        make_proxy: Callable[..., Any]) -> None:
    # 413, not 503: sent again, it would be refused again.
    proxy = await make_proxy(max_buffered=BUFFERED)
    reader, writer = await proxy.connect()
    writer.write(upload(f"{proxy.prefix}/openai/v1/chat/completions", BUFFERED + 1))
    refused = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert refused.startswith(b"HTTP/1.1 413 ") and b"over 1000" in refused


async def left_mid_body(proxy: Proxy) -> None:
    _, writer = await proxy.connect()
    writer.write(upload(f"{proxy.prefix}/openai/v1/chat/completions", 600) + chat(600)[:50])
    await until(lambda: proxy.held == 600, "the body held")
    writer.close()


async def timed_out_mid_body(proxy: Proxy) -> None:
    reader, writer = await proxy.connect()
    writer.write(upload(f"{proxy.prefix}/openai/v1/chat/completions", 600) + chat(600)[:50])
    assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 408 ")
    writer.close()


async def upstream_failed(proxy: Proxy) -> None:
    reader, writer = await proxy.connect()
    writer.write(upload(f"{proxy.prefix}/dead/v1/chat/completions", 600) + chat(600))
    failed = await answer(reader)
    writer.close()
    assert failed.startswith(b"HTTP/1.1 502 ") and b"dejacache_upstream_error" in failed


async def left_mid_answer_with_one_queued(proxy: Proxy) -> None:
    # One request in flight upstream, one pipelined behind it; the client leaves. The
    # queued one is dropped at once, the one in flight lets go when its answer ends.
    _, writer = await proxy.connect()
    path = f"{proxy.prefix}/openai/v1/chat/completions"
    writer.write((upload(path, 300) + chat(300)) * 2)
    await until(lambda: proxy.gate.arrived == 1 and proxy.held == 600, "both held")
    writer.close()
    await until(lambda: proxy.held == 300, "the queued one let go")
    proxy.gate.release.set()


@pytest.mark.parametrize("path", [left_mid_body, timed_out_mid_body, upstream_failed,
                                  left_mid_answer_with_one_queued])
async def test_what_a_request_held_is_given_back_however_it_ends(
        make_proxy: Callable[..., Any], path: Callable[[Proxy], Any]) -> None:
    proxy = await make_proxy(max_buffered=BUFFERED, read_timeout=0.3)
    await path(proxy)
    await until(lambda: proxy.held == 0, f"{path.__name__}: all let go")
    # The budget is whole again: a body of all of it is taken.
    reader, writer = await proxy.connect()
    proxy.gate.release.set()
    writer.write(upload(f"{proxy.prefix}/openai/v1/chat/completions", BUFFERED)
                 + chat(BUFFERED))
    assert (await answer(reader)).startswith(b"HTTP/1.1 200 ")
    writer.close()
    await until(lambda: proxy.held == 0 and proxy.server.admitted.held == 0, "all let go")
