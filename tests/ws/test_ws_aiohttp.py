"""aiohttp's ``ClientSession.ws_connect`` inside cassette blocks, against a real
``websockets`` server on loopback: recorded, replayed with the server stopped, the same
``WSMessage`` stream, close code and subprotocol; misses, refusals and failures in aiohttp's
own shapes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")

from ws_support import LoopbackServer, RawServer, count, echo, free_port  # noqa: E402

import dejacache  # noqa: E402
from dejacache.errors import ReplayMiss  # noqa: E402

SECRET = "sk-test-aiohttpSECRET0123456789abcdefgh"


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer(echo, subprotocols=["chat"]).start()
    yield s
    s.stop()


async def _session(url: str) -> list[Any]:
    out: list[Any] = []
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {SECRET}"},
                                     cookie_jar=jar) as s:
        jar.update_cookies({"sid": "cookie-value-xyz"})
        async with s.ws_connect(url, protocols=["chat"], params={"v": "2"}) as ws:
            assert isinstance(ws, aiohttp.ClientWebSocketResponse)
            out.append([ws.protocol, await ws.receive_json()])
            await ws.send_bytes(b"\x00abc")
            out.append(await ws.receive_bytes())
            await ws.send_json({"n": 1})
            out.append(await ws.receive_json())
            await ws.send_str(json.dumps({"parts": ["x", "y"]}))
            out.append(await ws.receive_str())
            await ws.send_json({"close": 4002, "reason": "done"})
            msg = await ws.receive()
            out.append([int(msg.type), msg.data, msg.extra, ws.closed, ws.close_code])
    return out


def test_a_session_replays_with_the_server_gone(tmp_path: pathlib.Path,
                                                server: LoopbackServer) -> None:
    path = tmp_path / "a.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(_session(server.url + "/aio"))
    assert recorded[0] == ["chat", {"hello": "/aio?v=2"}] and recorded[3] == "xy"
    assert recorded[-1] == [int(aiohttp.WSMsgType.CLOSE), 4002, "done", True, 4002]
    server.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        assert asyncio.run(_session(server.url + "/aio")) == recorded
    assert tape.counters.replayed == 5
    data = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    assert SECRET.encode() not in data and b"cookie-value-xyz" not in data


def test_a_message_that_differs_raises_from_send(tmp_path: pathlib.Path,
                                                 server: LoopbackServer) -> None:
    async def run(n: int) -> Any:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.url) as ws:
            await ws.receive_json()
            await ws.send_json({"n": n})
            return await ws.receive_json()

    path = tmp_path / "m.json"
    with dejacache.cassette(path, mode="record"):
        assert asyncio.run(run(1)) == {"ack": 1}
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as info:
        asyncio.run(run(2))
    assert "body.n: 1 -> 2" in str(info.value)


@pytest.mark.parametrize("autoping", [True, False])
def test_server_pings_are_ponged_live_and_need_no_recording(
        tmp_path: pathlib.Path, server: LoopbackServer, autoping: bool) -> None:
    # The server waits for each ping's pong before it answers: live, the pong is sent (by
    # aiohttp, or by the block when autoping is off); the app sees the same messages live
    # and replayed, and no ping is in the file.
    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.url,
                                                              autoping=autoping) as ws:
            out = [await ws.receive_json()]
            for n in range(3):
                await ws.send_json({"n": n, "ping": n != 1})
                out.append(await ws.receive_json(timeout=10))
            return out

    path = tmp_path / "ping.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run())
    assert recorded[1:] == [{"ack": 0}, {"ack": 1}, {"ack": 2}]
    server.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        assert asyncio.run(run()) == recorded
    assert tape.counters.replayed == 4
    assert b"are you there" not in path.read_bytes()


def _typed(value: Any) -> Any:
    """What the app got, with JSON text parsed (a replay writes it compactly) and its type
    kept."""
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, (bytes, str)) and value[:1] in (b"{", "{"):
        return [type(value).__name__, json.loads(value)]
    return value


async def _undecoded(url: str) -> list[Any]:
    """A session with ``decode_text=False``: every way the app reads a TEXT message."""
    async with aiohttp.ClientSession() as s, s.ws_connect(url, decode_text=False) as ws:
        out: list[Any] = [await ws.receive_str()]
        await ws.send_json({"n": 0})
        out.append(await ws.receive_json())
        await ws.send_json({"n": 1})
        msg = await ws.receive()
        out.append([msg.type, msg.data])
        await ws.send_bytes(b"\x00ab")
        out.append(await ws.receive_bytes())
        await ws.send_json({"n": 2})
        async for msg in ws:
            out.append([msg.type, msg.data])
            break
        return _typed(out)


def test_decode_text_false_gets_text_as_bytes_recorded_and_replayed(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    """Live, aiohttp hands TEXT messages over as ``bytes`` when asked not to decode them;
    the block gives the same types while it records and when it replays."""
    live = asyncio.run(_undecoded(server.url))
    text = aiohttp.WSMsgType.TEXT
    assert live == [["bytes", {"hello": "/"}], {"ack": 0}, [text, ["bytes", {"ack": 1}]],
                    b"ba\x00", [text, ["bytes", {"ack": 2}]]]
    path = tmp_path / "undecoded.json"
    with dejacache.cassette(path, mode="record"):
        assert asyncio.run(_undecoded(server.url)) == live
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_undecoded(server.url)) == live


def _shape(msg: Any) -> list[Any]:
    """A received ``WSMessage`` as the app reads it: an ERROR's exception by class, code
    and text (its identity differs from run to run)."""
    data = msg.data
    if isinstance(data, BaseException):
        data = [type(data).__name__, getattr(data, "code", None), str(data)]
    elif isinstance(data, str):
        data = data[:20]
    return [msg.type, data, msg.extra]


async def _over(url: str, bound: int, size: int) -> list[Any]:
    async with aiohttp.ClientSession() as s, s.ws_connect(url, max_msg_size=bound) as ws:
        out = [await ws.receive_json()]
        await ws.send_json({"n": 0})
        out.append(await ws.receive_json())
        await ws.send_json({"big": size})
        out += [_shape(await ws.receive()), ws.closed, ws.close_code]
        if ws.closed:  # (else nothing more comes)
            out.append(_shape(await ws.receive()))
        return out


def test_a_server_message_over_max_msg_size_leaves_its_window_unrecorded(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    """aiohttp's own bound (``max_msg_size``, 4 MiB by default) refuses the message and
    closes the connection with 1009: the app gets aiohttp's ERROR message as it does
    unrecorded; the window it cut is not stored, so a replay misses there rather than
    replaying a close the server never sent."""
    live = asyncio.run(_over(server.url, 1000, 5000))
    assert live[2][:2] == [aiohttp.WSMsgType.ERROR,
                           ["WebSocketError", 1009, "Message size 5000 exceeds limit 1000"]]
    path = tmp_path / "big.json"
    with dejacache.cassette(path, mode="record"):
        assert asyncio.run(_over(server.url, 1000, 5000)) == live
    entries = json.loads(path.read_text())["entries"]
    assert [e["request"].get("body") for e in entries] == [None, {"n": 0}]
    assert "close" not in entries[1]["response"]
    server.stop()
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss):
        asyncio.run(_over(server.url, 1000, 5000))


@pytest.mark.parametrize("size", [999, 1000, 5000])
def test_a_replay_refuses_a_message_over_max_msg_size_as_aiohttp_does(
        tmp_path: pathlib.Path, server: LoopbackServer, size: int) -> None:
    """Recorded with no bound, replayed with ``max_msg_size=1000``: the app sees what
    aiohttp gives it live with that bound (a message of exactly the bound is refused too),
    not the message."""
    live = asyncio.run(_over(server.url, 1000, size))
    path = tmp_path / "unbounded.json"
    with dejacache.cassette(path, mode="record"):
        whole = asyncio.run(_over(server.url, 0, size))
    assert whole[2][:2] == [aiohttp.WSMsgType.TEXT, "y" * min(size, 20)]
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_over(server.url, 1000, size)) == live


@pytest.mark.parametrize(("frame", "code"), [
    (bytes((0xC1, 2)) + b"hi", 1002),  # RSV1 set, no extension negotiated: protocol error
    (bytes((0x81, 2)) + b"\xff\xfe", 1007),  # a text frame that is not UTF-8
], ids=["reserved-bit", "invalid-utf8"])
def test_a_frame_aiohttp_refuses_is_recorded_and_replayed_as_its_error(
        tmp_path: pathlib.Path, frame: bytes, code: int) -> None:
    """A server frame aiohttp refuses reaches the app as aiohttp's ERROR message (and a
    close with that code), live, recorded and replayed alike: the server sent it, so the
    window keeps it, marked as the client's library's error, not the server's close."""
    raw = RawServer(frame)

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as s, s.ws_connect(raw.url) as ws:
            out = [await ws.receive_json()]
            await ws.send_json({"n": 0})
            out += [_shape(await ws.receive()), ws.closed, ws.close_code]
            out.append(_shape(await ws.receive()))
            return out

    try:
        live = asyncio.run(run())
        assert live[1][0] is aiohttp.WSMsgType.ERROR and live[1][1][:2] == ["WebSocketError",
                                                                              code]
        path = tmp_path / "bad.json"
        with dejacache.cassette(path, mode="record"):
            assert asyncio.run(run()) == live
    finally:
        raw.stop()
    close = json.loads(path.read_text())["entries"][1]["response"]["close"]
    assert {k: close[k] for k in ("code", "error")} == {"code": code, "error": True}
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run()) == live


async def _codes(url: str, bound: int) -> list[Any]:
    """The refusal's code as the app reads it, by type too (``WSCloseCode`` or ``int``)."""
    async with aiohttp.ClientSession() as s, s.ws_connect(url, max_msg_size=bound) as ws:
        await ws.receive_json()
        await ws.send_json({"big": 5000})
        msg = await ws.receive()
        if msg.type is not aiohttp.WSMsgType.ERROR:
            return [msg.type]
        code = msg.data.code
        return [msg.type, type(code), code, type(ws.close_code), ws.close_code]


@pytest.mark.parametrize("frame", [bytes((0xC1, 2)) + b"hi", bytes((0x81, 2)) + b"\xff\xfe",
                                   None], ids=["reserved-bit", "invalid-utf8", "too-big"])
def test_aiohttps_refusal_names_its_code_as_live(
        tmp_path: pathlib.Path, server: LoopbackServer, frame: bytes | None) -> None:
    """The code of aiohttp's refusal (the ERROR's ``WebSocketError.code``, the response's
    ``close_code``) is aiohttp's own ``WSCloseCode`` while recorded and replayed, as live:
    an ``int`` equal to it reprs and compares by identity otherwise."""
    raw = RawServer(frame) if frame is not None else None
    url = raw.url if raw is not None else server.url
    path = tmp_path / "codes.json"
    try:
        live = asyncio.run(_codes(url, 1000))
        assert live[1] is aiohttp.WSCloseCode and live[3] is aiohttp.WSCloseCode
        with dejacache.cassette(path, mode="record"):
            # (no bound while recording one too big: it would cut the window it is in)
            recorded = asyncio.run(_codes(url, 0 if raw is None else 1000))
        if raw is not None:
            assert recorded == live
    finally:
        if raw is not None:
            raw.stop()
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_codes(url, 1000)) == live


async def _raw_text(url: str, decode: bool) -> list[Any]:
    async with aiohttp.ClientSession() as s, s.ws_connect(url, decode_text=decode) as ws:
        out = [await ws.receive_json()]
        await ws.send_json({"n": 0})
        out += [_shape(await ws.receive()), ws.closed, ws.close_code]
        return out


def test_text_that_is_not_utf8_reaches_an_undecoding_app_as_its_bytes_replayed_too(
        tmp_path: pathlib.Path) -> None:
    """With ``decode_text=False`` aiohttp reads no TEXT payload as UTF-8, so a text frame
    that is not UTF-8 reaches the app as a TEXT message of its bytes; recorded, it is kept
    as those bytes (marked text), and replayed as the same message. The same recording
    replayed to an app that decodes is refused as aiohttp refuses the frame live (1007)."""
    raw = RawServer(bytes((0x81, 3)) + b"\xff\xfeA")
    try:
        live = asyncio.run(_raw_text(raw.url, False))
        decoding = asyncio.run(_raw_text(raw.url, True))
        assert live[1] == [aiohttp.WSMsgType.TEXT, b"\xff\xfeA", ""]
        assert live[2:] == [False, None]
        path = tmp_path / "raw-text.json"
        with dejacache.cassette(path, mode="record"):
            assert asyncio.run(_raw_text(raw.url, False)) == live
    finally:
        raw.stop()
    stored = json.loads(path.read_text())["entries"][1]["response"]
    assert stored["messages"][0][1] == {"text_bytes": "//5B"} and "close" not in stored
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_raw_text(raw.url, False)) == live
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(_raw_text(raw.url, True)) == decoding
    assert decoding[1][0] is aiohttp.WSMsgType.ERROR and decoding[1][1][1] == 1007


def test_a_client_message_over_the_bound_goes_live_and_is_not_recorded(
        tmp_path: pathlib.Path, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """A message the app sends over the recording's bound (64 MiB; 1,000 bytes here) still
    reaches the server, and so do the app's later ones; the session is recorded up to it
    (the window before it is whole) and not past it, with one warning naming the bound.
    Replayed, that message misses."""
    from dejacache.ws import _message

    monkeypatch.setattr(_message, "MAX_MESSAGE", 1000)
    pad = "p" * 2000

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.url) as ws:
            out = [await ws.receive_json()]
            for msg in ({"n": 0}, {"n": 1, "pad": pad}, {"n": 2}):
                await ws.send_json(msg)
                out.append(await ws.receive_json())
            return out

    path = tmp_path / "huge.json"
    with dejacache.cassette(path, mode="record"), pytest.warns(
            dejacache.DejacacheWarning, match="over the 1000 bytes") as said:
        assert asyncio.run(run())[1:] == [{"ack": 0}, {"ack": 1}, {"ack": 2}]
    assert len([w for w in said if "1000 bytes" in str(w.message)]) == 1
    entries = json.loads(path.read_text())["entries"]
    assert [e["request"].get("body") for e in entries] == [None, {"n": 0}]
    assert entries[1]["response"]["messages"][0][1] == {"json": {"ack": 0}}
    assert pad.encode() not in path.read_bytes()
    server.stop()
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss):
        asyncio.run(run())


_HUGE = 16 * 2**20


async def _send_huge(url: str, kind: str) -> tuple[Any, int]:
    """A 16 MiB message sent (text, or a ``bytearray``): what the server counted, and the
    most memory held meanwhile beyond what was held before."""
    import tracemalloc

    async with aiohttp.ClientSession() as s, s.ws_connect(url) as ws:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        if kind == "text":
            await ws.send_str("x" * _HUGE)
        else:
            await ws.send_bytes(bytearray(_HUGE))
        got = await ws.receive_json()
        return got, tracemalloc.get_traced_memory()[1] - before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["text", "bytearray"])
def test_a_client_message_over_the_bound_is_held_no_more_than_live(
        tmp_path: pathlib.Path, kind: str) -> None:
    """Past the bound an aiohttp app's message goes on as aiohttp handed it over (text as
    its UTF-8), not copied or decoded first: recording holds no more of it than a live
    connection does (a text message was held twice more, a ``bytearray`` once)."""
    import tracemalloc

    server = LoopbackServer(count).start()
    dejacache.configure(max_ws_message=64 * 1024)
    tracemalloc.start()
    try:
        live, live_peak = asyncio.run(_send_huge(server.url, kind))
        with dejacache.cassette(tmp_path / "huge.json", mode="record"), pytest.warns(
                dejacache.DejacacheWarning, match="over the 65536 bytes limit"):
            recorded, peak = asyncio.run(_send_huge(server.url, kind))
    finally:
        tracemalloc.stop()
        server.stop()
    assert live == recorded == {"got": _HUGE}
    assert peak < live_peak + _HUGE // 2, (peak, live_peak)


@pytest.mark.parametrize(("last", "code"), [({"close": 1000}, 1000), ({"drop": True}, 1006)])
def test_a_close_frame_and_a_drop_replay_as_they_ended(
        tmp_path: pathlib.Path, server: LoopbackServer, last: dict[str, Any], code: int
        ) -> None:
    """A close frame's 1000 stays 1000; a connection dropped without one (aiohttp reports
    1000 when it then closes its end cleanly) is stored as 1006, and replayed as aiohttp
    reads a dropped connection. The drop's window is stored although aiohttp never calls
    the writer's ``close()`` after one."""
    async def run(url: str) -> Any:
        async with aiohttp.ClientSession() as s, s.ws_connect(url) as ws:
            await ws.receive_json()
            await ws.send_json(last)
            msg = await ws.receive()
            return [msg.type, msg.data, ws.closed, ws.close_code]

    path = tmp_path / "end.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(server.url))
    closes = [e["response"].get("close") for e in json.loads(path.read_text())["entries"]]
    assert [c and c["code"] for c in closes] == [None, code]
    assert recorded[2:] == [True, code]
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url)) == recorded


def test_a_receive_timeout_is_the_apps_not_the_recordings(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    """``receive_timeout`` times out the app's ``receive()``, and aiohttp goes on reading
    after it: a server silent longer is recorded on, not as a dropped connection."""
    quick = aiohttp.ClientWSTimeout(ws_receive=0.2, ws_close=10.0)

    async def run(url: str) -> list[Any]:
        async with aiohttp.ClientSession() as s, s.ws_connect(url, timeout=quick) as ws:
            out = [await ws.receive_json()]
            await ws.send_json({"n": 0, "wait": 0.6})
            out.append(await ws.receive_json())
            for _ in range(50):
                with contextlib.suppress(TimeoutError):
                    out.append(await ws.receive_json())
                    return out
            return out

    path = tmp_path / "quiet.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(server.url))
    assert recorded[1:] == [{"ack": 0}, {"late": 0}]
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(server.url)) == recorded


def test_a_refusal_and_a_refused_connection_are_aiohttps_errors(
        tmp_path: pathlib.Path) -> None:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    def refuse(conn: Any, request: Any) -> Any:
        return Response(403, "Forbidden", Headers([("Content-Length", "0")]), b"")

    guarded = LoopbackServer(echo, process_request=refuse).start()
    urls = [guarded.url, f"ws://127.0.0.1:{free_port()}/"]

    async def run(url: str) -> Any:
        async with aiohttp.ClientSession() as s:
            try:
                await s.ws_connect(url)
            except aiohttp.WSServerHandshakeError as exc:
                return ["WSServerHandshakeError", exc.status]
            except aiohttp.ClientOSError as exc:
                return ["ClientOSError", exc.errno]
        return "open"

    path = tmp_path / "r.json"
    with dejacache.cassette(path, mode="record"):
        recorded = [asyncio.run(run(u)) for u in urls]
    guarded.stop()
    assert recorded[0] == ["WSServerHandshakeError", 403] and recorded[1][0] == "ClientOSError"
    with dejacache.cassette(path, mode="replay"):
        assert [asyncio.run(run(u)) for u in urls] == recorded


def test_outside_a_block_ws_connect_is_untouched(server: LoopbackServer) -> None:
    async def run() -> Any:
        async with aiohttp.ClientSession() as s, s.ws_connect(server.url) as ws:
            return await ws.receive_json()

    assert asyncio.run(run()) == {"hello": "/"}
    assert not getattr(aiohttp.ClientSession.ws_connect, "__dejacache_patch__", False)


def test_a_recording_made_before_text_bytes_replays_as_it_did(tmp_path: pathlib.Path) -> None:
    """Recorded by the release before the ``text_bytes`` form (``decode_text=False``: text,
    JSON, binary, the server's close): replayed unchanged, no server running."""
    path = tmp_path / "old.json"
    path.write_bytes((pathlib.Path(__file__).parent / "fixtures/aiohttp_undecoded_v1.json")
                     .read_bytes())

    async def run(url: str) -> list[Any]:
        async with aiohttp.ClientSession() as s, s.ws_connect(url, decode_text=False) as ws:
            out = [(await ws.receive()).data]
            await ws.send_json({"n": 0})
            out.append((await ws.receive()).data)
            await ws.send_bytes(b"\x00ab")
            out.append((await ws.receive()).data)
            await ws.send_json({"close": 4001, "reason": "bye"})
            m = await ws.receive()
            return [*out, [m.type, m.data, m.extra]]

    with dejacache.cassette(path, mode="replay"):
        got = asyncio.run(run("ws://127.0.0.1:42525/old"))
    assert got == [b'{"hello":"/old"}', b'{"ack":0}', b"ba\x00",
                   [aiohttp.WSMsgType.CLOSE, 4001, "bye"]]
