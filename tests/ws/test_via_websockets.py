"""The ``websockets`` clients (asyncio, threads, legacy) inside cassette blocks, against a
real ``websockets`` server on loopback (``ws_support.echo``): recorded, then replayed with
the server stopped; what the app received is what it receives again, and nothing connects.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect as sconnect  # bound before any block opens
from ws_support import LoopbackServer, RawServer, count, echo, free_port

import dejacache
from dejacache.cassettes.rehash import rehash
from dejacache.errors import NetworkBlocked, ReplayMiss

SECRET = "sk-test-wsSECRET0123456789abcdefghijkl"
HEADERS = {"Authorization": f"Bearer {SECRET}"}


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer(echo).start()
    yield s
    s.stop()


def _script() -> list[Any]:
    return [{"n": 0}, b"\x00\x01\x02binary", {"parts": ["frag", "ment", "ed"]}, {"n": 1},
            {"close": 4001, "reason": "bye now"}]


async def _async_session(url: str, **kw: Any) -> list[Any]:
    out: list[Any] = []
    async with aconnect(url, additional_headers=HEADERS, **kw) as ws:
        out.append(json.loads(await ws.recv()))
        for m in _script():
            await ws.send(m if isinstance(m, bytes) else json.dumps(m))
            if "close" in str(m):
                break
            got = await ws.recv()
            out.append(got if isinstance(got, bytes) else json.loads(got) if got[0] == "{"
                       else got)
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            assert exc.rcvd is not None
            out.append([type(exc).__name__, exc.rcvd.code, exc.rcvd.reason])
    return out


def _sync_session(url: str) -> list[Any]:
    out: list[Any] = []
    with sconnect(url, additional_headers=HEADERS) as ws:
        out.append(json.loads(ws.recv()))
        for m in _script():
            ws.send(m if isinstance(m, bytes) else json.dumps(m))
            if "close" in str(m):
                break
            got = ws.recv()
            out.append(got if isinstance(got, bytes) else json.loads(got) if got[0] == "{"
                       else got)
        try:
            ws.recv()
        except ConnectionClosed as exc:
            assert exc.rcvd is not None
            out.append([type(exc).__name__, exc.rcvd.code, exc.rcvd.reason])
    return out


def _no_secret(folder: pathlib.Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_asyncio_client_session_replays_with_the_server_gone(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    path = tmp_path / "a.json"
    url = server.url + "/chat?room=1"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(_async_session(url))
    assert server.connections == 1
    assert recorded[-1] == ["ConnectionClosedError", 4001, "bye now"]
    assert recorded[2] == b"yranib\x02\x01\x00" and recorded[3] == "fragmented"
    server.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        assert asyncio.run(_async_session(url)) == recorded
    assert tape.counters.replayed == 6 and tape.counters.recorded == 0  # with the handshake
    _no_secret(tmp_path)


def test_threads_client_bound_before_the_block_replays_too(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    path = tmp_path / "s.json"
    with dejacache.cassette(path, mode="record"):
        recorded = _sync_session(server.url + "/s")
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert _sync_session(server.url + "/s") == recorded
    assert recorded[-1] == ["ConnectionClosedError", 4001, "bye now"]
    _no_secret(tmp_path)


def test_legacy_client_replays(tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    async def run(url: str) -> list[Any]:
        out = []
        async with lconnect(url, extra_headers=HEADERS) as ws:
            out.append(await ws.recv())
            await ws.send(json.dumps({"n": 5}))
            out.append(await ws.recv())
        return out

    path = tmp_path / "l.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(server.url + "/legacy"))
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert [json.loads(x) for x in asyncio.run(run(server.url + "/legacy"))] == [
            json.loads(x) for x in recorded]


def test_a_message_that_differs_is_a_replay_miss_naming_the_field(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    path = tmp_path / "m.json"

    async def run(n: int) -> Any:
        async with aconnect(server.url, additional_headers=HEADERS) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 0}))
            await ws.recv()
            try:
                await ws.send(json.dumps({"n": n, "note": "x"}))
            except ReplayMiss as miss:
                with pytest.raises(ConnectionClosedError) as closed:
                    await ws.recv()
                return miss, closed.value
            return json.loads(await ws.recv())

    with dejacache.cassette(path, mode="record"):
        assert asyncio.run(run(1)) == {"ack": 1}
    with dejacache.cassette(path, mode="replay") as tape:
        miss, closed = asyncio.run(run(7))
    text = str(miss)
    assert "no recording of ws.127.0.0.1" in text and "body.n: 1 -> 7" in text
    assert closed.rcvd is not None and closed.rcvd.code == 1011
    assert tape.misses and tape.misses[0].key == miss.key


def test_refusals_and_failures_replay_as_raised(tmp_path: pathlib.Path) -> None:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    def refuse(conn: Any, request: Any) -> Any:
        return Response(401, "Unauthorized", Headers([("Content-Type", "text/plain"),
                                                      ("Content-Length", "6")]), b"no key")

    guarded = LoopbackServer(echo, process_request=refuse).start()
    closed_port = free_port()

    async def run(url: str) -> Any:
        try:
            async with aconnect(url, open_timeout=5):
                return "open"
        except InvalidStatus as exc:
            return ["InvalidStatus", exc.response.status_code, bytes(exc.response.body)]
        except OSError as exc:
            return [type(exc).__name__, exc.errno]

    path = tmp_path / "r.json"
    urls = [guarded.url + "/x", f"ws://127.0.0.1:{closed_port}/y"]
    with dejacache.cassette(path, mode="record"):
        recorded = [asyncio.run(run(u)) for u in urls]
    guarded.stop()
    assert recorded[0] == ["InvalidStatus", 401, b"no key"]
    assert recorded[1][0] == "ConnectionRefusedError"
    with dejacache.cassette(path, mode="replay"):
        assert [asyncio.run(run(u)) for u in urls] == recorded


def test_realtime_replays_at_the_recorded_pace(tmp_path: pathlib.Path,
                                               server: LoopbackServer) -> None:
    async def run(url: str) -> float:
        async with aconnect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 3, "wait": 0.8}))
            assert json.loads(await ws.recv()) == {"ack": 3}
            t0 = time.perf_counter()
            assert json.loads(await ws.recv()) == {"late": 3}
            return time.perf_counter() - t0

    path = tmp_path / "p.json"
    with dejacache.cassette(path, mode="record"):
        asyncio.run(run(server.url))
    server.stop()
    # Bounds far apart (the recorded gap is 0.8 s): a loaded machine delays a replay by
    # milliseconds of work, never by the gap.
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url)) < 0.6
    with dejacache.cassette(path, mode="replay"), dejacache.intercept(realtime=True):
        assert asyncio.run(run(server.url)) >= 0.7


def _three_acks_replay(path: pathlib.Path, server: LoopbackServer,
                       run: Callable[[str], Awaitable[list[Any]]]) -> None:
    """``run`` (a greeting, then three acknowledged messages) recorded, then replayed with
    the server stopped: the same four messages, each replayed."""
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(server.url))
    assert recorded[1:] == [{"ack": 0}, {"ack": 1}, {"ack": 2}]
    server.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        assert asyncio.run(run(server.url)) == recorded
    assert tape.counters.replayed == 4


def test_server_pings_are_answered_live_and_need_no_recording(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    # A ping frame is the connection's, not the app's: the client's library pongs it live
    # (the server waits for that pong before it answers) and the app never sees it, so the
    # recording holds only the messages, and a replay, with no server, is the same.
    async def run(url: str) -> list[Any]:
        async with aconnect(url) as ws:
            out = [json.loads(await ws.recv())]
            for n in range(3):
                await ws.send(json.dumps({"n": n, "ping": n != 1}))
                out.append(json.loads(await ws.recv()))
            return out

    path = tmp_path / "ping.json"
    _three_acks_replay(path, server, run)
    assert b"are you there" not in path.read_bytes()


def test_client_pings_and_fragments_between_whole_messages_replay(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    # The in-memory end reads whole messages itself and hands pings and fragments to the
    # server protocol; a replay answers each as the recording did, the ping ponged.
    async def run(url: str) -> list[Any]:
        async with aconnect(url) as ws:
            out = [json.loads(await ws.recv())]
            await ws.send(json.dumps({"n": 0}))
            out.append(json.loads(await ws.recv()))
            await asyncio.wait_for(await ws.ping(b"still there?"), 5)
            await ws.send(iter(['{"n": ', '1}']))  # one message in two frames
            out.append(json.loads(await ws.recv()))
            await ws.send(json.dumps({"n": 2}))
            out.append(json.loads(await ws.recv()))
            return out

    _three_acks_replay(tmp_path / "mixed.json", server, run)


def test_a_dropped_connection_replays_as_1006(tmp_path: pathlib.Path,
                                              server: LoopbackServer) -> None:
    async def run(url: str) -> Any:
        async with aconnect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"drop": True}))
            with pytest.raises(ConnectionClosedError) as info:
                await ws.recv()
            return info.value.rcvd, ws.close_code

    path = tmp_path / "d.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(server.url))
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url)) == recorded == (None, 1006)


async def _too_big_async(connect: Callable[..., Any], url: str, bound: int | None
                         ) -> list[Any]:
    async with connect(url, max_size=bound) as ws:
        out = [json.loads(await ws.recv())]
        await ws.send(json.dumps({"n": 0}))
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"big": 5000}))
        with pytest.raises(ConnectionClosed) as info:
            await ws.recv()
        return [*out, _closed(info.value)]


def _too_big_asyncio(url: str, bound: int | None = 1000) -> list[Any]:
    return asyncio.run(_too_big_async(aconnect, url, bound))


def _too_big_threads(url: str, bound: int | None = 1000) -> list[Any]:
    with sconnect(url, max_size=bound) as ws:
        out = [json.loads(ws.recv())]
        ws.send(json.dumps({"n": 0}))
        out.append(json.loads(ws.recv()))
        ws.send(json.dumps({"big": 5000}))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv()
        return [*out, _closed(info.value)]


def _too_big_legacy(url: str, bound: int | None = 1000) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    return asyncio.run(_too_big_async(lconnect, url, bound))


@pytest.mark.parametrize("run", [_too_big_asyncio, _too_big_threads, _too_big_legacy],
                         ids=["asyncio", "threads", "legacy"])
def test_a_server_message_over_the_clients_max_size_replays_as_its_1009(
        tmp_path: pathlib.Path, server: LoopbackServer, run: Callable[[str], list[Any]]
        ) -> None:
    """The client's own bound (``max_size``) refuses the message from its frame's header:
    live, its library fails the connection with 1009 and raises ``ConnectionClosedError``
    (that close sent, none received). Recorded, the window keeps it as the client library's
    error, as the frames it refuses for other reasons; replayed, the app gets the same
    exception (class, closes, text), the message itself never read nor stored."""
    live = run(server.url)
    assert live[1] == {"ack": 0} and live[2][0] == "ConnectionClosedError"
    assert live[2][1] is None and live[2][2][0] == 1009
    path = tmp_path / "big.json"
    with dejacache.cassette(path, mode="record"):
        assert run(server.url) == live
    entries = json.loads(path.read_text())["entries"]
    assert [e["request"].get("body") for e in entries] == [None, {"n": 0}, {"big": 5000}]
    close = entries[2]["response"]["close"]
    assert {k: close[k] for k in ("code", "error")} == {"code": 1009, "error": True}
    assert "y" * 1000 not in path.read_text()
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert run(server.url) == live


_TOO_BIG = {"asyncio": _too_big_asyncio, "threads": _too_big_threads,
            "legacy": _too_big_legacy}


@pytest.mark.parametrize("replayer", list(_TOO_BIG))
@pytest.mark.parametrize("recorder", list(_TOO_BIG))
def test_a_recorded_1009_replays_as_recorded_to_a_client_with_no_bound(
        tmp_path: pathlib.Path, server: LoopbackServer, recorder: str, replayer: str) -> None:
    """The bound lived in the client that recorded (``max_size=1000``): its 1009 is the
    session's end as recorded, so a client with none (``max_size=None``) replaying it gets
    that end (code and reason, the recording client's library's), not one of its own making
    (the legacy client replayed it as 1002, a protocol error)."""
    path = tmp_path / "big.json"
    with dejacache.cassette(path, mode="record"):
        live = _TOO_BIG[recorder](server.url)
    assert live[2][2][0] == 1009
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert _TOO_BIG[replayer](server.url, None) == live


_PAD = "p" * 2000
_OVER = ({"n": 0}, {"n": 1, "pad": _PAD}, {"n": 2})


def _over_asyncio(url: str) -> list[Any]:
    async def run() -> list[Any]:
        async with aconnect(url) as ws:
            out = [json.loads(await ws.recv())]
            for msg in _OVER:
                await ws.send(json.dumps(msg))
                out.append(json.loads(await ws.recv()))
            return out

    return asyncio.run(run())


def _over_threads(url: str) -> list[Any]:
    with sconnect(url) as ws:
        out = [json.loads(ws.recv())]
        for msg in _OVER:
            ws.send(json.dumps(msg))
            out.append(json.loads(ws.recv()))
        return out


def _over_legacy(url: str) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    async def run() -> list[Any]:
        async with lconnect(url) as ws:
            out = [json.loads(await ws.recv())]
            for msg in _OVER:
                await ws.send(json.dumps(msg))
                out.append(json.loads(await ws.recv()))
            return out

    return asyncio.run(run())


@pytest.mark.parametrize("run", [_over_asyncio, _over_threads, _over_legacy],
                         ids=["asyncio", "threads", "legacy"])
def test_a_client_message_over_the_bound_goes_live_and_is_not_recorded(
        tmp_path: pathlib.Path, server: LoopbackServer, run: Callable[[str], list[Any]]
        ) -> None:
    """A message the app sends over the recording's bound (64 MiB;
    ``configure(max_ws_message=1000)`` here) still reaches the server, and so do the app's
    later ones: the session is recorded up to it (the window before it whole) and not past
    it, with one warning naming the bound and how to raise it. Replayed, it misses."""
    dejacache.configure(max_ws_message=1000)
    path = tmp_path / "over.json"
    with dejacache.cassette(path, mode="record"), pytest.warns(
            dejacache.DejacacheWarning, match="over the 1000 bytes limit") as said:
        assert run(server.url)[1:] == [{"ack": 0}, {"ack": 1}, {"ack": 2}]
    warned = [str(w.message) for w in said if "1000 bytes" in str(w.message)]
    assert len(warned) == 1 and "dejacache.configure(max_ws_message=...)" in warned[0]
    entries = json.loads(path.read_text())["entries"]
    assert [e["request"].get("body") for e in entries] == [None, {"n": 0}]
    assert entries[1]["response"]["messages"][0][1] == {"json": {"ack": 0}}
    assert _PAD.encode() not in path.read_bytes()
    server.stop()
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss,
                                                                match="max_ws_message"):
        run(server.url)


def _closed(exc: ConnectionClosed) -> list[Any]:
    """A ``ConnectionClosed`` as the app reads it: its class, both closes and its text."""
    rcvd, sent = exc.rcvd, exc.sent
    return [type(exc).__name__, rcvd and [rcvd.code, rcvd.reason],
            sent and [sent.code, sent.reason], exc.rcvd_then_sent, str(exc)]


def _refused_asyncio(url: str) -> list[Any]:
    async def run() -> list[Any]:
        async with aconnect(url) as ws:
            out: list[Any] = [await ws.recv()]
            await ws.send(json.dumps({"n": 0}))
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            return [*out, _closed(info.value)]

    return asyncio.run(run())


def _refused_threads(url: str) -> list[Any]:
    with sconnect(url) as ws:
        out: list[Any] = [ws.recv()]
        ws.send(json.dumps({"n": 0}))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv()
        return [*out, _closed(info.value)]


def _refused_legacy(url: str) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    async def run() -> list[Any]:
        async with lconnect(url) as ws:
            out: list[Any] = [await ws.recv()]
            await ws.send(json.dumps({"n": 0}))
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            return [*out, _closed(info.value)]

    return asyncio.run(run())


@pytest.mark.parametrize("run", [_refused_asyncio, _refused_threads, _refused_legacy],
                         ids=["asyncio", "threads", "legacy"])
@pytest.mark.parametrize(("frame", "code"), [
    (bytes((0xC1, 2)) + b"hi", 1002),  # RSV1 set, no extension negotiated: protocol error
    (bytes((0x81, 2)) + b"\xff\xfe", 1007),  # a text frame that is not UTF-8
], ids=["reserved-bit", "invalid-utf8"])
def test_a_frame_the_client_refuses_is_recorded_and_replayed_as_its_error(
        tmp_path: pathlib.Path, frame: bytes, code: int, run: Callable[[str], list[Any]]
        ) -> None:
    """A server frame the websockets client refuses fails the connection from the client's
    side: ``ConnectionClosedError`` with the close it sent (that code, its library's reason)
    and none received. Recorded and replayed, the app gets the same: the window keeps it as
    the client library's error, and a replay has the client's own library refuse a frame
    again, failing with the recorded code and reason."""
    raw = RawServer(frame)
    try:
        live = run(raw.url)
        assert live[1][2][0] == code and live[1][1] is None
        path = tmp_path / "bad.json"
        with dejacache.cassette(path, mode="record"):
            assert run(raw.url) == live
    finally:
        raw.stop()
    close = json.loads(path.read_text())["entries"][1]["response"]["close"]
    assert {k: close[k] for k in ("code", "error")} == {"code": code, "error": True}
    with dejacache.cassette(path, mode="replay"):
        assert run(raw.url) == live


@pytest.mark.parametrize("run", [_refused_asyncio, _refused_threads, _refused_legacy],
                         ids=["asyncio", "threads", "legacy"])
def test_text_kept_as_its_bytes_replays_to_a_websockets_client_as_its_1007(
        tmp_path: pathlib.Path, run: Callable[[str], list[Any]]) -> None:
    """A text frame that is not UTF-8 kept as it came (``text_bytes``: recorded by an
    aiohttp app that does not decode text) and replayed to a websockets client: the client
    refuses it as it refuses the frame live (``ConnectionClosedError``, 1007 sent with its
    library's reason, none received), its own parser reading the same bytes."""
    raw = RawServer(bytes((0x81, 3)) + b"\xff\xfeA")
    path = tmp_path / "raw-text.json"
    try:
        live = run(raw.url)
        with dejacache.cassette(path, mode="record"):
            assert run(raw.url) == live
    finally:
        raw.stop()
    assert live[1][2][0] == 1007 and live[1][1] is None
    doc = json.loads(path.read_text())
    # The window as aiohttp's ``decode_text=False`` recording keeps it: the frame's bytes,
    # no close (aiohttp handed the message on and the session went on).
    doc["entries"][1]["response"] = {"messages": [[0.0, {"text_bytes": "//5B"}]]}
    path.write_bytes(rehash(json.dumps(doc).encode(), path)[0])
    with dejacache.cassette(path, mode="replay"):
        assert run(raw.url) == live


def test_another_key_in_ci_still_replays(tmp_path: pathlib.Path,
                                         server: LoopbackServer) -> None:
    async def run(url: str, token: str) -> Any:
        async with aconnect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 2}))
            return json.loads(await ws.recv())

    path = tmp_path / "k.json"
    with dejacache.cassette(path, mode="record"):
        asyncio.run(run(server.url + "/k?key=" + SECRET, SECRET))
    server.stop()
    other = "sk-test-ciKEY9999999999999999999999999999"
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url + "/k?key=" + other, other)) == {"ack": 2}
    _no_secret(tmp_path)
    assert b"authorization@ws.127.0.0.1#" in path.read_bytes()  # keyed as a digest


def test_auto_mode_continues_a_session_live_after_a_miss(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    async def run(url: str, upto: int) -> list[Any]:
        out = []
        async with aconnect(url) as ws:
            out.append(json.loads(await ws.recv()))
            for n in range(upto):
                await ws.send(json.dumps({"n": n}))
                out.append(json.loads(await ws.recv()))
        return out

    path = tmp_path / "auto.json"
    with dejacache.cassette(path, mode="record"):
        asyncio.run(run(server.url, 2))
    assert server.connections == 1
    with dejacache.cassette(path, mode="auto") as tape:
        got = asyncio.run(run(server.url, 3))
    assert got[-1] == {"ack": 2} and server.connections == 2
    assert tape.counters.replayed == 3 and tape.counters.recorded == 1
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url, 3)) == got


def test_a_session_open_at_block_exit_keeps_what_it_heard(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    path = tmp_path / "open.json"

    async def run(url: str, mode: str) -> Any:
        with dejacache.cassette(path, mode=mode):
            ws = await aconnect(url)
            await ws.recv()
            await ws.send(json.dumps({"n": 9}))
            got = json.loads(await ws.recv())
        await ws.close()  # after its block: what it had heard by then is in the file
        return got

    assert asyncio.run(run(server.url, "record")) == {"ack": 9}
    server.stop()
    assert asyncio.run(run(server.url, "replay")) == {"ack": 9}


def test_two_concurrent_sessions_each_get_their_own(tmp_path: pathlib.Path) -> None:
    import secrets

    async def handler(ws: Any) -> None:
        token = secrets.token_hex(4)  # differs per connection and per run
        async for raw in ws:
            await ws.send(json.dumps({"to": json.loads(raw)["who"], "token": token}))

    srv = LoopbackServer(handler).start()

    async def one(who: str) -> list[Any]:
        async with aconnect(srv.url) as ws:
            out = []
            for _ in range(3):
                await ws.send(json.dumps({"who": "same"}))  # identical in both sessions
                out.append(json.loads(await ws.recv()))
                await asyncio.sleep(0)
            await ws.send(json.dumps({"who": who}))
            out.append(json.loads(await ws.recv()))
            return out

    async def both() -> list[Any]:
        return list(await asyncio.gather(one("alice"), one("bob")))

    path = tmp_path / "pair.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(both())
    srv.stop()
    assert recorded[0][0]["token"] != recorded[1][0]["token"]
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(both()) == recorded


def test_patched_only_while_a_block_is_open(tmp_path: pathlib.Path,
                                           server: LoopbackServer) -> None:
    from websockets.asyncio import client as module
    from websockets.sync import client as sync_module

    plain = module.connect.__dict__["__await__"]
    with dejacache.cassette(tmp_path / "none.json", mode="replay"):
        assert module.connect.__dict__["__await__"] is not plain
        assert getattr(sync_module.reconnect.connect, "__dejacache_patch__", False)
        with pytest.raises(ReplayMiss) as info:
            asyncio.run(_async_session(server.url))
        assert not isinstance(info.value, NetworkBlocked)  # answered from the cassette
    assert module.connect.__dict__["__await__"] is plain
    assert asyncio.run(_async_session(server.url))[0] == {"hello": "/"}


_WAIT = 10  # seconds a client waits for the end before the test fails (not hangs)


def _ended_asyncio(url: str) -> str:
    async def run() -> str:
        async with aconnect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 0}))
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), _WAIT)
            return type(info.value).__name__

    return asyncio.run(run())


def _ended_threads(url: str) -> str:
    with sconnect(url) as ws:
        ws.recv()
        ws.send(json.dumps({"n": 0}))
        with pytest.raises(ConnectionClosed) as info:
            ws.recv(timeout=_WAIT)
        return type(info.value).__name__


def _ended_legacy(url: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    async def run() -> str:
        async with lconnect(url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 0}))
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), _WAIT)
            return type(info.value).__name__

    return asyncio.run(run())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("run", [_ended_asyncio, _ended_threads, _ended_legacy],
                         ids=["asyncio", "threads", "legacy"])
@pytest.mark.parametrize("close", [
    {"code": 1005, "error": True},  # a refusal with a code no close frame may carry
    {"code": 1002, "reason": "r" * 200, "error": True},  # ... a reason no frame holds
    {"code": 4000, "reason": "r" * 200, "error": False},  # the server's close, the same
], ids=["unsendable-code", "refusal-reason-too-long", "close-reason-too-long"])
def test_a_replayed_end_no_protocol_can_act_out_ends_the_connection(
        tmp_path: pathlib.Path, run: Callable[[str], str], close: dict[str, Any]) -> None:
    """A recorded end the in-memory connection cannot act out (a cassette edited by hand, or
    written elsewhere) raises where dejacache drives a protocol: the client's own parser
    (a refusal it replays) or the server end's (a close it writes). The connection ends as
    the client's library ends one whose transport failed, and the app's ``recv()`` raises
    ``ConnectionClosed``: it never waits forever."""
    raw = RawServer(bytes((0xC1, 2)) + b"hi")
    path = tmp_path / "bad.json"
    try:
        with dejacache.cassette(path, mode="record"):
            assert _ended_asyncio(raw.url) == "ConnectionClosedError"
    finally:
        raw.stop()
    doc = json.loads(path.read_text())
    doc["entries"][1]["response"]["close"].update(close)
    path.write_bytes(rehash(json.dumps(doc).encode(), path)[0])
    with dejacache.cassette(path, mode="replay"):
        assert run(raw.url) == "ConnectionClosedError"


_FRAGMENT = 64 * 1024
_FRAGMENTS = 256  # 16 MiB in all: 256 times the bound below


def _parts() -> Iterator[bytes]:
    for _ in range(_FRAGMENTS):
        yield bytes(_FRAGMENT)


def _huge_asyncio(url: str) -> Any:
    async def run() -> Any:
        async with aconnect(url, max_size=None) as ws:
            await ws.send(json.dumps({"n": 0}))
            before = json.loads(await ws.recv())
            await ws.send(_parts())
            return before, json.loads(await ws.recv())

    return asyncio.run(run())


def _huge_threads(url: str) -> Any:
    with sconnect(url, max_size=None) as ws:
        ws.send(json.dumps({"n": 0}))
        before = json.loads(ws.recv())
        ws.send(_parts())
        return before, json.loads(ws.recv())


def _huge_legacy(url: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from websockets.legacy.client import connect as lconnect

    async def run() -> Any:
        async with lconnect(url, max_size=None) as ws:
            await ws.send(json.dumps({"n": 0}))
            before = json.loads(await ws.recv())
            await ws.send(_parts())
            return before, json.loads(await ws.recv())

    return asyncio.run(run())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("run", [_huge_asyncio, _huge_threads, _huge_legacy],
                         ids=["asyncio", "threads", "legacy"])
def test_a_fragmented_message_over_the_bound_is_never_held_whole(
        tmp_path: pathlib.Path, run: Callable[[str], Any]) -> None:
    """A client message sent in fragments is bounded as they come: past the bound
    (``configure(max_ws_message=)``, 64 KiB here) its fragments go on to the server as they
    arrive, the session unrecorded from it on, as for a whole message over it (a replay
    misses there). 16 MiB went through with 1.3-1.7 MB held at the peak, the loopback
    server's included (50-60 MB before)."""
    import tracemalloc

    server = LoopbackServer(count).start()
    dejacache.configure(max_ws_message=_FRAGMENT)
    path = tmp_path / "huge.json"
    try:
        tracemalloc.start()
        try:
            with dejacache.cassette(path, mode="record"), pytest.warns(
                    dejacache.DejacacheWarning, match="over the 65536 bytes limit"):
                got = run(server.url)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        server.stop()
    assert got == ({"got": 8}, {"got": _FRAGMENT * _FRAGMENTS})
    assert peak < _FRAGMENT * _FRAGMENTS // 4, peak  # (1.3-1.7 MB, the server's share too)
    entries = json.loads(path.read_text())["entries"]
    assert [e["request"].get("body") for e in entries] == [None, {"n": 0}]
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss,
                                                                match="max_ws_message"):
        run(server.url)


async def _first_wins(ws: Any) -> None:
    """Answers each message with the ``op`` it reads, taking the first of a repeated key (as
    a parser that keeps the first does), so ``{"op":"buy","op":"sell"}`` is a buy."""

    def first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            out.setdefault(k, v)
        return out

    async for raw in ws:
        await ws.send(json.dumps({"did": json.loads(raw, object_pairs_hook=first)["op"]}))


def test_a_message_repeating_a_key_never_replays_for_one_without_the_repeat(
        tmp_path: pathlib.Path) -> None:
    server = LoopbackServer(_first_wins).start()
    repeated, plain = '{"op":"buy","op":"sell"}', '{"op":"sell"}'

    async def run(*sent: str) -> list[Any]:
        out: list[Any] = []
        async with aconnect(server.url + "/trade") as ws:
            for text in sent:
                try:
                    await ws.send(text)
                except ReplayMiss:
                    out.append("miss")
                    break
                out.append(json.loads(await ws.recv()))
        return out

    try:
        with dejacache.cassette(tmp_path / "r.json", mode="record"):
            assert asyncio.run(run(repeated)) == [{"did": "buy"}]
        with dejacache.cassette(tmp_path / "p.json", mode="record"):
            assert asyncio.run(run(plain)) == [{"did": "sell"}]
    finally:
        server.stop()
    with dejacache.cassette(tmp_path / "r.json", mode="replay"):
        assert asyncio.run(run(plain)) == ["miss"]  # not the buy the repeat was answered
    with dejacache.cassette(tmp_path / "p.json", mode="replay"):
        assert asyncio.run(run(repeated)) == ["miss"]
    with dejacache.cassette(tmp_path / "r.json", mode="replay"):  # itself, however spaced
        assert asyncio.run(run('{"op": "buy",  "op": "sell"}')) == [{"did": "buy"}]
