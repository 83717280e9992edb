"""A client connection to the proxy, over a raw socket: requests pipelined in one write are
answered in order, a client waiting for ``100 Continue`` gets it before sending its body, a
request the proxy cannot read ends the connection with its status, and a client that goes
away leaves the proxy serving others. In-process: a replay hit is answered before the bytes
that asked for it return to the event loop, with the bytes a task would have answered,
however the requests arrive; a request that stops arriving is refused (408), a connection
with nothing asked is closed quietly, never a WebSocket or an answer still coming, and a
client that stops reading its answer is cut off, never one that reads slowly."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import pathlib
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
import pytest
from fake_provider import FakeProvider
from proxy_support import RawUpstream, read_to_end, small_window_client, writes_waiting

from dejacache import DejacacheWarning
from dejacache.proxying import _server
from dejacache.proxying._connection import start
from dejacache.proxying._server import ProxyConfig, ProxyServer
from dejacache.proxying._sessions import SessionSpec
from dejacache.proxying.handle import ProxyProcess
from dejacache.proxying.upstreams import parse_upstream

T = TypeVar("T")


def connect(process: ProxyProcess) -> socket.socket:
    url = urlsplit(process.url)
    return socket.create_connection((url.hostname, url.port), timeout=30)


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` answers framed by Content-Length: (status, body) each."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    while len(out) < count:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1").split("\r\n")
            length = next((int(line.split(":", 1)[1]) for line in head[1:]
                           if line.lower().startswith("content-length:")), 0)
            if len(buf) >= end + 4 + length:
                out.append((int(head[0].split()[1]), buf[end + 4:end + 4 + length]))
                buf = buf[end + 4 + length:]
                continue
        data = sock.recv(65536)
        assert data, f"connection closed after {len(out)} answers"
        buf += data
    return out


def test_pipelined_requests_are_answered_in_order(proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /_dejacache/nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = read_answers(sock, 3)
    assert [status for status, _ in answers] == [200, 404, 200]
    assert json.loads(answers[0][1])["url"] == proxy_process.url


def test_a_client_waiting_for_100_continue_gets_it_first(proxy_process: ProxyProcess) -> None:
    body = b'{"cassette": "continue-test"}'
    with connect(proxy_process) as sock:
        sock.sendall(b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\n"
                     b"Expect: 100-continue\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        interim = sock.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        [(status, data)] = read_answers(sock, 1)
    assert status == 201, data
    opened = json.loads(data)
    closed = httpx2.post(f"{proxy_process.url}/_dejacache/sessions/{opened['id']}/close",
                         json={"ok": False}, timeout=30)
    assert closed.status_code == 200


def test_an_unreadable_request_ends_the_connection_with_its_status(
        proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked"
                     b"\r\n\r\n")
        answers = read_answers(sock, 2)
        assert sock.recv(65536) == b""  # closed: nothing after the refusal is read
    assert [status for status, _ in answers] == [200, 400]
    assert b"both Content-Length and Transfer-Encoding" in answers[1][1]


def test_a_client_that_leaves_mid_request_leaves_the_proxy_serving(
        proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 100\r\n\r\n{\"cass")
    assert httpx2.get(f"{proxy_process.url}/_dejacache", timeout=30).status_code == 200


# ---------------------------------------------------------------- in-process: the fast path
# A replay hit is answered inside ``data_received`` (``_connection.start``): these drive a
# connection of an in-process proxy through a fake transport, so "answered before the loop
# ran again" and "bytes split anywhere" are exact.


class Wire:
    """The proxy's side of a client connection: what it wrote, and whether it closed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    abort = close

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def split_answers(data: bytes) -> list[bytes]:
    """Whole answers framed by Content-Length, each with its head."""
    out = []
    while data:
        end = data.index(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in data[:end].split(b"\r\n")[1:]
                      if line.lower().startswith(b"content-length:"))
        out.append(data[:end + 4 + length])
        data = data[end + 4 + length:]
    return out


def post(path: str, question: str, *, close: bool = False) -> bytes:
    body = json.dumps({"model": "gpt-4o-mini",
                       "messages": [{"role": "user", "content": question}]}).encode()
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer sk-test\r\n%sContent-Length: %d\r\n\r\n%s" % (
                path.encode(), b"Connection: close\r\n" if close else b"", len(body), body))


QUESTIONS = [f"Question {i}." for i in range(4)]


def body_json(answer: bytes) -> Any:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


async def settle(conn: Any) -> None:
    """Until the request being answered in a task (a live one) is done."""
    for _ in range(2000):
        if conn.task is None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the answer never came")


@pytest.fixture
async def recorded(tmp_path: pathlib.Path
                   ) -> AsyncIterator[tuple[Any, list[Any], pathlib.Path]]:
    """An in-process proxy, what the provider answered each of QUESTIONS (the JSON, in
    order), and the cassette recorded through the proxy."""
    fake = FakeProvider().start()
    up = parse_upstream(f"openai={fake.url}", "test")
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "default.json"),
                                     upstreams={"openai": up}, cassette_dir=tmp_path))
    await server.start()
    try:
        cassette = tmp_path / "fast.json"
        s = await server.sessions.open(SessionSpec(cassette=cassette, mode="record"))
        conn, wire = server._connection(), Wire()
        conn.connection_made(wire)
        for q in QUESTIONS:
            conn.data_received(post(f"/_dejacache/s/{s.id}/openai/v1/chat/completions", q))
            await settle(conn)
        assert (await server.sessions.close(s.id, ok=True))["recorded"] == len(QUESTIONS)
        yield server, [body_json(a) for a in split_answers(bytes(wire.data))], cassette
    finally:
        await server.stop()
        fake.stop()


async def replay(server: Any, cassette: pathlib.Path, pieces: Callable[[str], list[bytes]]
                 ) -> tuple[bytes, dict[str, Any], list[int]]:
    """What a replay session of ``cassette`` answers the bytes ``pieces(path)`` arrive as,
    one ``data_received`` each; what it did; after which piece each answer was written."""
    s = await server.sessions.open(SessionSpec(cassette=cassette, mode="replay"))
    conn, wire = server._connection(), Wire()
    conn.connection_made(wire)
    written = []
    for i, piece in enumerate(pieces(f"/_dejacache/s/{s.id}/openai/v1/chat/completions")):
        before = len(split_answers(bytes(wire.data)))
        conn.data_received(piece)
        written += [i] * (len(split_answers(bytes(wire.data))) - before)
        await settle(conn)
    summary = await server.sessions.close(s.id, ok=False)
    return bytes(wire.data), summary, written


def one_by_one(path: str) -> list[bytes]:
    return [post(path, q) for q in QUESTIONS]


async def test_a_replay_hit_is_answered_before_data_received_returns(recorded: Any) -> None:
    server, live, cassette = recorded
    data, summary, written = await replay(server, cassette, one_by_one)
    assert summary["replayed"] == len(QUESTIONS) and summary["missed"] == 0
    assert written == [0, 1, 2, 3]  # each answer written in the call that brought its request
    answers = split_answers(data)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 200 OK"] * len(QUESTIONS)
    assert [body_json(a) for a in answers] == live  # each question's own answer


async def test_a_replay_hit_builds_no_library_request(
        recorded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request is keyed as the proxy restated it; the library's is built only to be
    sent (or carried by a stream or a recorded error): a tenth of a hit's work."""
    from dejacache.http._pending import Pending

    server, live, cassette = recorded
    builds = []
    request = Pending.request
    monkeypatch.setattr(Pending, "request", lambda self: builds.append(1) or request(self))
    data, summary, _ = await replay(server, cassette, one_by_one)
    assert summary["replayed"] == len(QUESTIONS) and builds == []
    assert [body_json(a) for a in split_answers(data)] == live


async def test_the_fast_path_answers_the_bytes_a_task_answers(
        recorded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, _, cassette = recorded
    fast, _, _ = await replay(server, cassette, one_by_one)

    def in_a_task(coro: Any, ctx: contextvars.Context | None = None) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_task(
            coro, context=ctx if ctx is not None else contextvars.copy_context())

    monkeypatch.setattr(_server, "start", in_a_task)
    slow, summary, written = await replay(server, cassette, one_by_one)
    assert summary["replayed"] == len(QUESTIONS)
    assert written == []  # each answered after data_received returned: by its task
    assert slow == fast


async def test_pipelined_split_and_piecemeal_requests_are_answered_alike(recorded: Any) -> None:
    server, _, cassette = recorded
    whole, _, _ = await replay(server, cassette, one_by_one)

    def pipelined(path: str) -> list[bytes]:  # all four in one read
        return [b"".join(one_by_one(path))]

    def byte_by_byte(path: str) -> list[bytes]:  # heads and bodies split at every byte
        data = b"".join(one_by_one(path))
        return [data[i:i + 1] for i in range(len(data))]

    def uneven(path: str) -> list[bytes]:  # reads that end mid-head, mid-body, across two
        data = b"".join(one_by_one(path))
        cuts = [0, 7, 90, 91, len(data) // 2, len(data) - 3, len(data)]
        return [data[a:b] for a, b in itertools.pairwise(cuts)]

    for pieces in (pipelined, byte_by_byte, uneven):
        data, summary, written = await replay(server, cassette, pieces)
        assert summary["replayed"] == len(QUESTIONS), pieces.__name__
        assert data == whole, pieces.__name__
        if pieces is pipelined:
            assert written == [0, 0, 0, 0]


async def test_keep_alive_until_a_request_asks_to_close(recorded: Any) -> None:
    server, _, cassette = recorded
    s = await server.sessions.open(SessionSpec(cassette=cassette, mode="replay"))
    path = f"/_dejacache/s/{s.id}/openai/v1/chat/completions"
    conn, wire = server._connection(), Wire()
    conn.connection_made(wire)
    conn.data_received(post(path, QUESTIONS[0]))
    conn.data_received(post(path, QUESTIONS[1]))
    assert len(split_answers(bytes(wire.data))) == 2 and not wire.closed
    # A request asking to close, pipelined with one after it: answered, then closed, and
    # the one after it is not answered.
    conn.data_received(post(path, QUESTIONS[2], close=True) + post(path, QUESTIONS[3]))
    assert len(split_answers(bytes(wire.data))) == 3 and wire.closed
    assert (await server.sessions.close(s.id, ok=False))["replayed"] == 3


async def test_a_miss_is_answered_on_the_fast_path_too(recorded: Any) -> None:
    server, _, cassette = recorded

    def unknown(path: str) -> list[bytes]:
        return [post(path, "Never recorded."), *one_by_one(path)[:1]]

    data, summary, written = await replay(server, cassette, unknown)
    assert summary["missed"] == 1 and summary["replayed"] == 1
    assert written == [0, 1]
    miss, hit = split_answers(data)
    assert miss.startswith(b"HTTP/1.1 404 ") and b"dejacache_replay_miss" in miss
    assert hit.startswith(b"HTTP/1.1 200 ")


async def test_start_runs_a_coroutine_in_its_context_and_hands_a_wait_to_a_task() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "inside")

    async def at_once() -> None:
        assert var.get() == "inside"

    assert start(at_once(), ctx) is None
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def waits() -> tuple[str, str, bool]:
        got = await gate
        return got, var.get(), asyncio.current_task() is not None

    task = start(waits(), ctx)
    assert task is not None and not task.done()
    gate.set_result("opened")
    assert await task == ("opened", "inside", True)

    async def fails() -> None:
        raise ValueError("at once")

    failed = start(fails())
    assert failed is not None and isinstance(failed.exception(), ValueError)

    cancelled: list[bool] = []

    async def cancelled_while_waiting() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = start(cancelled_while_waiting())
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]  # the cancel reached the coroutine where it waited


# ---------------------------------------------------------------- clients that stop sending
# A request begun and never finished (a truncated body, a head without its blank line, one
# byte now and then) is refused with a 408 once it stops arriving, and its connection closed.

READ_TIMEOUT = 0.5


@pytest.fixture
async def strict_reader(tmp_path: pathlib.Path) -> AsyncIterator[tuple[str, int]]:
    """An in-process proxy whose requests must arrive within READ_TIMEOUT (and whose bodies
    are 1 MiB at most); its address."""
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "default.json"),
                                     upstreams={}, cassette_dir=tmp_path,
                                     read_timeout=READ_TIMEOUT, max_body=1 << 20))
    url = urlsplit(await server.start())
    try:
        yield str(url.hostname), int(url.port or 0)
    finally:
        await server.stop()


async def answer_to(address: tuple[str, int], pieces: list[bytes], pause: float = 0.0
                    ) -> tuple[bytes, float]:
    """What the proxy answers ``pieces`` sent ``pause`` seconds apart (up to its close), and
    how long after the last piece it closed."""
    reader, writer = await asyncio.open_connection(*address)
    answer = asyncio.ensure_future(reader.read())  # read as it comes: a close ends sending
    try:
        for piece in pieces:
            if answer.done():
                break
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause)
        sent = time.monotonic()
        data = await asyncio.wait_for(answer, 10 * READ_TIMEOUT + 5)
        return data, time.monotonic() - sent
    finally:
        writer.close()


@pytest.mark.parametrize("raw", [
    b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"cass",
    b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3\r\nabc\r\n",
    b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n",
    b"GET /_dejacache HTTP/1.1\r\n\r\nGET /_dejacache HTT",  # the second one stops
])
async def test_a_request_that_stops_arriving_is_refused_in_time(
        strict_reader: tuple[str, int], raw: bytes) -> None:
    data, took = await answer_to(strict_reader, [raw])
    assert data.count(b"HTTP/1.1 ") == raw.count(b"\r\n\r\nGET") + 1
    assert data.split(b"HTTP/1.1 ")[-1].startswith(b"408 Request Timeout")
    assert b"did not arrive within 0.5 s" in data
    assert took < READ_TIMEOUT + 2.0


async def test_a_head_that_trickles_in_is_refused_in_time(strict_reader: tuple[str, int]
                                                          ) -> None:
    # Slowloris: a byte now and then, each well within the timeout, the head never ending.
    pieces = [b"GET /_dejacache HTTP/1.1\r\n"] + [b"X-%d: 1\r\n" % i for i in range(40)]
    data, _ = await answer_to(strict_reader, pieces, pause=READ_TIMEOUT / 5)
    assert data.startswith(b"HTTP/1.1 408 ") and b"head did not arrive" in data


async def test_a_body_that_keeps_coming_is_read_however_long_it_takes(
        strict_reader: tuple[str, int]) -> None:
    body = b'{"cassette": "' + b"a" * 16 + b'", "strict": "no"}'
    pieces = [b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body)]
    pieces += [body[at:at + 4] for at in range(0, len(body), 4)]

    def send() -> bytes:  # its own time, in a thread (see client_thread)
        with socket.create_connection(strict_reader, timeout=10) as sock:
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(READ_TIMEOUT / 4)
            data = b""
            while part := sock.recv(65536):
                data += part
            return data

    data = await client_thread(send)
    assert data.startswith(b"HTTP/1.1 400 ")  # read whole: the field's type is refused
    assert b"field 'strict' has the wrong type" in data


async def test_a_client_still_sending_reads_its_refusal(strict_reader: tuple[str, int]) -> None:
    # The 413 comes while the upload goes on: closed with those bytes unread, the socket
    # sent a reset, which could reach the client before the 413 did.
    head = b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    pieces = [head % (64 << 20)] + [b"x" * (256 << 10)] * 16
    data, _ = await answer_to(strict_reader, pieces)
    assert data.startswith(b"HTTP/1.1 413 ") and b"over 1048576" in data


# ---------------------------------------------------------------- clients that send nothing
# A connection with nothing asked and nothing being answered is closed after the idle
# timeout, quietly (nothing was asked): from its opening, or from its last answer. Answers
# that take long and WebSockets are never cut by it; a request arriving has the read timeout.

IDLE = 0.4
SLACK = 2.0  # a loaded machine's lateness, still well short of "never"


@pytest.fixture
async def idler(tmp_path: pathlib.Path) -> AsyncIterator[tuple[tuple[str, int], str, Any]]:
    """An in-process proxy whose connections may idle for IDLE seconds (its requests may
    take 2 s to arrive), routing ``openai`` to a FakeProvider and ``chat`` to tests/ws's echo
    server: its address, the path prefix of a recording session on it, the FakeProvider."""
    ws_tests = str(pathlib.Path(__file__).resolve().parents[1] / "ws")
    if ws_tests not in sys.path:
        sys.path.insert(0, ws_tests)
    from ws_support import LoopbackServer, echo

    fake = FakeProvider().start()
    ws_server = LoopbackServer(echo).start()
    ups = {name: parse_upstream(f"{name}={url}", "test") for name, url in (
        ("openai", fake.url), ("chat", f"http://127.0.0.1:{ws_server.port}"))}
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "default.json"),
                                     upstreams=ups, cassette_dir=tmp_path,
                                     idle_timeout=IDLE, read_timeout=2.0))
    url = urlsplit(await server.start())
    try:
        s = await server.sessions.open(SessionSpec(cassette=tmp_path / "idle.json",
                                                   mode="record"))
        yield (str(url.hostname), int(url.port or 0)), f"/_dejacache/s/{s.id}", fake
    finally:
        await server.stop()
        ws_server.stop()
        fake.stop()


STATUS = b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"


async def client_thread(client: Callable[[], T]) -> T:
    """``client``, keeping its own time in a thread, as a client process does. Paced in the
    proxy's event loop, a client that meant to leave a gap the timeout allows left a longer
    one whenever the loop ran late (a loaded box): the proxy's timer, due by then, ran in
    the same pass of the loop as the client's wake-up, before the client could send."""
    return await asyncio.to_thread(client)


async def answer(reader: asyncio.StreamReader) -> bytes:
    """One answer framed by Content-Length, its head included."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head + await reader.readexactly(length)


async def closed_after(reader: asyncio.StreamReader, began: float) -> tuple[bytes, float]:
    """What else the proxy sends until it closes, and how long after ``began`` it closed.
    ``began`` is taken before the proxy's idle time can start (before connecting, before
    asking): the client learns of that moment only later, by however late a loaded box
    runs it, so time counted from then came up short of the timeout."""
    rest = await asyncio.wait_for(reader.read(), IDLE + SLACK)
    return rest, time.monotonic() - began


async def test_a_connection_that_never_asks_is_closed_quietly(idler: Any) -> None:
    began = time.monotonic()
    reader, writer = await asyncio.open_connection(*idler[0])
    try:
        rest, took = await closed_after(reader, began)
    finally:
        writer.close()
    assert rest == b""  # no 408: nothing was asked
    assert IDLE <= took < IDLE + SLACK


async def test_a_kept_alive_connection_is_closed_quietly_once_idle(idler: Any) -> None:
    reader, writer = await asyncio.open_connection(*idler[0])
    try:
        began = time.monotonic()
        writer.write(STATUS)
        assert (await answer(reader)).startswith(b"HTTP/1.1 200 ")
        rest, took = await closed_after(reader, began)
    finally:
        writer.close()
    assert rest == b"" and IDLE <= took < IDLE + SLACK


async def test_a_client_reusing_its_connection_within_the_timeout_is_served(
        idler: Any) -> None:
    # Four calls spaced at 0.6 of the timeout: 1.0 s on one connection, each gap allowed.
    def calls() -> list[int]:
        with socket.create_connection(idler[0], timeout=10) as sock:
            statuses = []
            for _ in range(4):
                time.sleep(IDLE * 0.6)
                sock.sendall(STATUS)
                statuses += [status for status, _ in read_answers(sock, 1)]
            return statuses

    assert await client_thread(calls) == [200] * 4


async def test_a_request_arriving_slowly_has_the_read_timeout_not_the_idle_one(
        idler: Any) -> None:
    def request() -> list[int]:
        with socket.create_connection(idler[0], timeout=10) as sock:
            for piece in (STATUS[:10], STATUS[10:20], STATUS[20:]):
                sock.sendall(piece)
                time.sleep(IDLE * 0.8)  # 1.0 s in all: over the idle timeout
            return [status for status, _ in read_answers(sock, 1)]

    assert await client_thread(request) == [200]


@pytest.mark.parametrize(("script", "stream"), [
    ({"end_delay": 2.5 * IDLE}, True),  # events, then a pause before the last
    ({"sleep": 2.5 * IDLE}, False),  # nothing at all until the answer
])
async def test_an_answer_slower_than_the_idle_timeout_is_not_cut(
        idler: Any, script: dict[str, float], stream: bool) -> None:
    address, prefix, fake = idler
    fake.script.append(script)
    body = json.dumps({"model": "gpt-4o-mini", "stream": stream,
                       "messages": [{"role": "user", "content": "Take your time."}]}).encode()
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(b"POST %s/openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nAuthorization: Bearer sk-test\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (
                         prefix.encode(), len(body), body))
        began = time.monotonic()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert time.monotonic() - began >= 2.5 * IDLE * 0.9
    assert data.startswith(b"HTTP/1.1 200 ")
    assert (b"data: [DONE]" in data) if stream else data.rstrip().endswith(b"}")


async def test_a_websocket_quiet_for_longer_than_the_idle_timeout_stays_open(
        idler: Any) -> None:
    from websockets.asyncio.client import connect

    (host, port), prefix, _ = idler
    async with connect(f"ws://{host}:{port}{prefix}/chat/room") as ws:
        assert json.loads(await ws.recv()) == {"hello": "/room"}
        await asyncio.sleep(2.5 * IDLE)
        await ws.send(json.dumps({"n": 1}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"ack": 1}


# ---------------------------------------------------------------- clients that stop reading
# A client that takes nothing of its answer for the write timeout (its socket buffer full)
# is cut off: its connection aborted, the upstream stream feeding it closed, the cut stream
# not recorded. One that reads slowly, but reads, gets all of it.

WRITE_TIMEOUT = 0.5
EVENT = 1024  # bytes of text per streamed event


class Streamer(RawUpstream):
    """A loopback upstream speaking OpenAI's chat stream over HTTP/1.1: ``max_tokens`` events
    of EVENT bytes each, one chunk apiece, as fast as its client takes them, then the one
    that finishes the answer and ``[DONE]``. ``released`` is set once a connection of its
    ends before its answer did. (What it has sent tells nothing of what the proxy's client
    took: the proxy's socket from it grew its receive buffer to over a MiB under load, and
    took a whole 6 MiB answer while the client had read 40 KiB of it.)"""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def answer(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        await self._answer(writer, int(json.loads(body)["max_tokens"]))

    def gone(self) -> None:
        self.released.set()

    async def _answer(self, writer: asyncio.StreamWriter, count: int) -> None:
        def chunk(data: dict[str, Any] | str) -> bytes:
            text = data if isinstance(data, str) else json.dumps(data)
            event = b"data: %s\n\n" % text.encode()
            return b"%x\r\n%s\r\n" % (len(event), event)

        def delta(content: str, finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                    "model": "gpt-test", "choices": [{"index": 0, "delta": {"content": content},
                                                      "finish_reason": finish}]}

        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(count):
            writer.write(chunk(delta("x" * EVENT)))
            await writer.drain()
        writer.write(chunk(delta("", "stop")) + chunk("[DONE]") + b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture
async def cutter(tmp_path: pathlib.Path) -> AsyncIterator[tuple[ProxyServer, Streamer, str]]:
    """An in-process proxy whose clients may stall for WRITE_TIMEOUT seconds, routing
    ``openai`` to a Streamer; the session path prefix of a recording session on it."""
    streamer = Streamer()
    ups = {"openai": parse_upstream(f"openai={await streamer.start()}", "test")}
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "default.json"),
                                     upstreams=ups, cassette_dir=tmp_path,
                                     write_timeout=WRITE_TIMEOUT))
    await server.start()
    try:
        s = await server.sessions.open(SessionSpec(cassette=tmp_path / "cut.json",
                                                   mode="record"))
        yield server, streamer, s.id
    finally:
        await server.stop()
        await streamer.stop()


def stream_request(prefix: str, events: int, what: str) -> bytes:
    body = json.dumps({"model": "gpt-test", "stream": True, "max_tokens": events,
                       "messages": [{"role": "user", "content": what}]}).encode()
    return (b"POST %s/openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer sk-test\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (
                prefix.encode(), len(body), body))


def dechunked(data: bytes) -> bytes:
    """The body of an answer framed in chunks, its head left out."""
    rest = data[data.index(b"\r\n\r\n") + 4:]
    body = bytearray()
    while (size := int(rest[:rest.index(b"\r\n")], 16)):
        start = rest.index(b"\r\n") + 2
        body += rest[start:start + size]
        rest = rest[start + size + 2:]
    return bytes(body)


async def test_a_client_that_stops_reading_is_cut_off_and_its_stream_not_recorded(
        cutter: tuple[ProxyServer, Streamer, str], tmp_path: pathlib.Path) -> None:
    server, streamer, sid = cutter
    prefix = f"/_dejacache/s/{sid}"
    with pytest.warns(DejacacheWarning, match="closed before the end of the answer"):
        stuck = await small_window_client(server, stream_request(prefix, 1 << 16, "stuck"))
        # Never read: over 64 MiB to come, far more than the sockets between hold. The
        # timeout counts from when the proxy's writes began to wait, not from the request.
        began = (await writes_waiting(server))._stalled_since
        await asyncio.wait_for(streamer.released.wait(), 2 * WRITE_TIMEOUT + 5)
        took = asyncio.get_running_loop().time() - began
        with stuck:
            cut = await read_to_end(stuck)
    assert WRITE_TIMEOUT <= took < 2 * WRITE_TIMEOUT + 3
    assert not cut.endswith(b"0\r\n\r\n")  # (what it held before the reset, if any)
    # The proxy serves on, and the session closes at once: nothing of it is in flight.
    with await small_window_client(server, stream_request(prefix, 8, "served")) as served:
        whole = await read_to_end(served)
    assert whole.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    closed = await asyncio.wait_for(server.sessions.close(sid, ok=True), 5)
    assert closed["recorded"] == 1 and closed["error"] is None
    # Replayed, the stream that was cut misses; a truncated answer is never served.
    s = await server.sessions.open(SessionSpec(cassette=tmp_path / "cut.json", mode="replay"))
    for what, events, status in (("served", 8, b"200"), ("stuck", 1 << 16, b"404")):
        request = stream_request(f"/_dejacache/s/{s.id}", events, what)
        with await small_window_client(server, request) as again:
            assert (await read_to_end(again)).startswith(b"HTTP/1.1 %s " % status), what


async def test_a_slow_reader_is_served_in_full(cutter: tuple[ProxyServer, Streamer, str]
                                               ) -> None:
    server, streamer, sid = cutter
    # More than the proxy's socket to the client holds (its send buffer grows to ~3 MiB on
    # loopback), so the proxy's writes wait on the client. Once they do, it reads 4 KiB
    # every fifth of a write timeout (keeping its own time: see client_thread) while they
    # wait, for four timeouts, then the rest at once.
    events = 5 << 10
    request = stream_request(f"/_dejacache/s/{sid}", events, "slowly")
    with await small_window_client(server, request) as sock:
        conn = await writes_waiting(server)
        until = conn._stalled_since + 4 * WRITE_TIMEOUT

        def slowly() -> bytes:
            sock.settimeout(10)
            head = b""
            while time.monotonic() < until:  # (the loop's clock)
                head += sock.recv(4096)
                time.sleep(WRITE_TIMEOUT / 5)
                assert conn._stalled_since, "the proxy's writes stopped waiting on the client"
            sock.setblocking(False)
            return head

        data = await client_thread(slowly) + await read_to_end(sock)
    assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert dechunked(data).count(b"x" * EVENT) == events
    assert not streamer.released.is_set()
