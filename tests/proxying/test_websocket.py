"""WebSocket routes through ``dejacache proxy`` (``proxying/_websocket.py``): a realtime voice
turn on the OpenAI Realtime protocol (tests/ws's loopback fake) through the proxy, by the
Python ``websockets`` client and by Node's ``ws`` (what openai-node's Realtime client runs
on): recorded, then replayed with the fake stopped (no connection reaches its port), every
event the same, no file holding the key; a session recorded through the proxy replays
in-process and one recorded in-process replays through the proxy; a handshake or a message
the recording lacks is said in the client's terms."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import pathlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from proxy_support import NODE_DIR, files_text, need_node, run_node

WS_TESTS = pathlib.Path(__file__).resolve().parents[1] / "ws"
if str(WS_TESTS) not in sys.path:
    sys.path.insert(0, str(WS_TESTS))

from fake_realtime import FakeRealtime  # noqa: E402
from ws_support import LoopbackServer, echo  # noqa: E402

import dejacache  # noqa: E402
from dejacache.proxying.handle import ProxyProcess, ProxySession  # noqa: E402
from provider_support import DropListener  # noqa: E402

KEY = "sk-proxy-realtime-7c1e0b9a44d2f8"
NODE_KEY = "sk-node-realtime-3b5d7f9a1c"
PATH = "/v1/realtime?model=gpt-realtime"


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    fake = FakeRealtime().start()
    yield fake
    fake.stop()


def _open(proxy: ProxyProcess, name: str, fake: FakeRealtime, **kw: Any) -> ProxySession:
    return proxy.session(name, upstreams={"openai": f"http://127.0.0.1:{fake.port}"}, **kw)


def _ws(session: ProxySession) -> str:
    return session.url.replace("http", "ws", 1) + "/openai" + PATH


def _audio(n: int) -> str:
    return base64.b64encode(bytes((i * 31 + n * 7) & 0xFF for i in range(4800))).decode()


async def _turn(url: str, *, chunks: int = 3, key: str = KEY) -> dict[str, Any]:
    """One voice turn by the Python ``websockets`` client: what it received."""
    from websockets.asyncio.client import connect

    out: dict[str, Any] = {"types": [], "deltas": [], "transcript": None}
    async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        out["types"].append(json.loads(await ws.recv())["type"])
        for n in range(chunks):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": _audio(n)}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send(json.dumps({"type": "response.create"}))
        async for raw in ws:
            event = json.loads(raw)
            out["types"].append(event["type"])
            if event["type"] == "response.output_audio.delta":
                out["deltas"].append(event["delta"])
            elif event["type"] == "response.output_audio_transcript.done":
                out["transcript"] = event["transcript"]
            elif event["type"] == "response.done":
                break
    return out


def _stopped(fake: FakeRealtime) -> DropListener:
    """The fake stopped, its port held by a listener that counts connections."""
    fake.stop()
    return DropListener(fake.port)


def _no_key(folder: pathlib.Path, *keys: str) -> None:
    for path, text in files_text(folder):
        for key in keys:
            assert key not in text, f"{key} in {path}"


def test_python_client_records_then_replays_through_the_proxy_with_no_connection(
        proxy_process: ProxyProcess, proxy_dir: pathlib.Path, realtime: FakeRealtime) -> None:
    name = "ws-python/voice.json"
    s = _open(proxy_process, name, realtime, mode="record")
    recorded = asyncio.run(_turn(_ws(s)))
    summary = s.close(ok=True)
    assert summary["saved"] and summary["recorded"] == 6 and summary["missed"] == 0, summary
    assert recorded["types"][0] == "session.created" and recorded["deltas"]
    assert realtime.connections == 1
    assert realtime.requests[0]["path"] == PATH  # the upstream was asked what the client asked
    stopped = _stopped(realtime)
    try:
        s = _open(proxy_process, name, realtime, mode="replay")
        replayed = asyncio.run(_turn(_ws(s)))
        summary = s.close(ok=True)
    finally:
        stopped.close()
    assert replayed == recorded
    assert stopped.count == 0
    assert (summary["replayed"], summary["recorded"], summary["missed"]) == (6, 0, 0)
    doc = json.loads((proxy_dir / name).read_text())
    assert {e["name"] for e in doc["entries"]} == {"openai.realtime"}
    assert (proxy_dir / "ws-python" / "blobs").is_dir()  # the audio, once, beside it
    _no_key(proxy_dir, KEY)


def test_a_session_recorded_through_the_proxy_replays_in_process_and_back(
        proxy_process: ProxyProcess, proxy_dir: pathlib.Path, realtime: FakeRealtime,
        tmp_path: pathlib.Path) -> None:
    direct = f"ws://127.0.0.1:{realtime.port}{PATH}"
    s = _open(proxy_process, "ws-interchange/proxied.json", realtime, mode="record")
    through_proxy = asyncio.run(_turn(_ws(s)))
    assert s.close(ok=True)["saved"]
    in_process = tmp_path / "in_process.json"
    with dejacache.cassette(in_process, mode="record"):
        recorded_here = asyncio.run(_turn(direct, chunks=2))
    stopped = _stopped(realtime)
    try:
        with dejacache.cassette(proxy_dir / "ws-interchange" / "proxied.json", mode="replay"):
            assert asyncio.run(_turn(direct)) == through_proxy
        target = proxy_dir / "ws-interchange" / "in_process.json"
        target.write_bytes(in_process.read_bytes())
        for blob in (tmp_path / "blobs").rglob("*"):
            if blob.is_file():
                dest = target.parent / "blobs" / blob.relative_to(tmp_path / "blobs")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(blob.read_bytes())
        s = _open(proxy_process, "ws-interchange/in_process.json", realtime, mode="replay")
        assert asyncio.run(_turn(_ws(s), chunks=2)) == recorded_here
        assert s.close(ok=True)["missed"] == 0
    finally:
        stopped.close()
    assert stopped.count == 0


def test_node_ws_client_records_then_replays_through_the_proxy(
        proxy_process: ProxyProcess, proxy_dir: pathlib.Path, realtime: FakeRealtime) -> None:
    need_node()
    if not (NODE_DIR / "node_modules" / "ws").is_dir():
        pytest.skip("the ws package is not installed: make node-deps (npm ci in tests/node)")
    script = NODE_DIR / "ws_realtime.mjs"
    name = "ws-node/voice.json"
    s = _open(proxy_process, name, realtime, mode="record")
    recorded = run_node(script, _ws(s), NODE_KEY)
    assert s.close(ok=True)["recorded"] == 6
    assert recorded["error"] is None and recorded["close"] == [1000, "done"], recorded
    assert recorded["types"][0] == "session.created" and recorded["types"][-1] == "response.done"
    stopped = _stopped(realtime)
    try:
        s = _open(proxy_process, name, realtime, mode="replay")
        replayed = run_node(script, _ws(s), NODE_KEY)
        summary = s.close(ok=True)
        # Another chunk of audio: the recording has no such message.
        s = _open(proxy_process, name, realtime, mode="replay")
        missed = run_node(script, _ws(s), NODE_KEY, "2")
        miss_summary = s.close(ok=False)
    finally:
        stopped.close()
    assert replayed == recorded
    assert stopped.count == 0
    assert (summary["replayed"], summary["recorded"], summary["missed"]) == (6, 0, 0)
    assert missed["close"][0] == 1011 and "replay miss" in missed["close"][1]
    assert miss_summary["missed"] == 1
    assert "body.audio" in miss_summary["misses"][0]
    _no_key(proxy_dir, NODE_KEY)


async def _miss_then_more(url: str, extra: int) -> list[Any]:
    """A message the recording lacks, then ``extra`` more sent before reading anything:
    the close the client reads, with what it read before it."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    got: list[Any] = []
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"},
                       close_timeout=10) as ws:
        got.append(json.loads(await ws.recv())["type"])
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": _audio(9)}))
        for n in range(extra):
            await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                      "audio": _audio(10 + n)}))
        await asyncio.sleep(0.3)  # the proxy has met the miss and closed by now
        try:
            while True:
                await ws.recv()
        except ConnectionClosed as exc:
            got.append([exc.rcvd.code, exc.rcvd.reason] if exc.rcvd else None)
    return got


def test_a_miss_closes_1011_even_with_the_clients_later_messages_unread(
        proxy_process: ProxyProcess, realtime: FakeRealtime) -> None:
    """The proxy reads what the client sent after the message that missed until the client
    answers its close: a socket closed with bytes unread is reset, and a reset can cost the
    client the close frame (1006 instead of 1011)."""
    name = "ws-miss-more/voice.json"
    s = _open(proxy_process, name, realtime, mode="record")
    asyncio.run(_turn(_ws(s)))
    assert s.close(ok=True)["saved"]
    stopped = _stopped(realtime)
    try:
        for _ in range(3):
            s = _open(proxy_process, name, realtime, mode="replay")
            got = asyncio.run(_miss_then_more(_ws(s), extra=40))
            s.close(ok=False)
            assert got[0] == "session.created"
            assert got[-1] is not None and got[-1][0] == 1011, got
            assert "replay miss" in got[-1][1]
    finally:
        stopped.close()
    assert stopped.count == 0


def test_a_handshake_the_recording_lacks_is_a_404_in_the_providers_shape(
        proxy_process: ProxyProcess, realtime: FakeRealtime) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    s = _open(proxy_process, "ws-miss/none.json", realtime, mode="replay")

    async def run() -> Any:
        with pytest.raises(InvalidStatus) as info:
            await connect(_ws(s), additional_headers={"Authorization": f"Bearer {KEY}"})
        return info.value.response

    try:
        response = asyncio.run(run())
    finally:
        summary = s.close(ok=False)
    assert response.status_code == 404
    body = json.loads(response.body)
    assert "no recording of openai.realtime" in body["error"]["message"]
    assert summary["missed"] == 1 and realtime.connections == 0


async def _echo_session(url: str) -> list[Any]:
    """tests/ws's echo protocol: a subprotocol, text, binary, a fragmented message, a ping
    the client's library answers, the server's close; then a connection the server drops."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    out: list[Any] = []
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(url, additional_headers=headers, subprotocols=["chat.v2"]) as ws:
        out += [ws.subprotocol, json.loads(await ws.recv())]
        for m in ({"n": 0}, b"\x00\x01binary", {"parts": ["frag", "ment"]},
                  {"ping": True, "n": 1}, {"close": 4001, "reason": "bye now"}):
            await ws.send(m if isinstance(m, bytes) else json.dumps(m))
            if "close" in str(m):
                break
            got = await ws.recv()  # JSON comes back equal, written compactly
            out.append(json.loads(got) if isinstance(got, str) and got[:1] == "{" else got)
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            out.append([exc.rcvd.code, exc.rcvd.reason] if exc.rcvd else None)
    async with connect(url + "/again", additional_headers=headers) as ws:
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"drop": True}))
        try:
            await ws.recv()
        except ConnectionClosed as exc:
            out.append(["dropped", exc.rcvd])
    return out


def test_closes_drops_pings_and_subprotocols_replay_through_the_proxy(
        proxy_process: ProxyProcess, proxy_dir: pathlib.Path) -> None:
    server = LoopbackServer(echo, subprotocols=["chat.v2"]).start()
    ups = {"chat": f"http://127.0.0.1:{server.port}"}
    try:
        s = proxy_process.session("ws-echo/echo.json", upstreams=ups, mode="record")
        recorded = asyncio.run(_echo_session(s.url.replace("http", "ws", 1) + "/chat/room"))
        assert s.close(ok=True)["saved"]
    finally:
        server.stop()
    assert recorded[:2] == ["chat.v2", {"hello": "/room"}]
    assert recorded[-3] == [4001, "bye now"] and recorded[-1] == ["dropped", None]
    assert server.connections == 2
    stopped = DropListener(server.port)
    try:
        s = proxy_process.session("ws-echo/echo.json", upstreams=ups, mode="replay")
        replayed = asyncio.run(_echo_session(s.url.replace("http", "ws", 1) + "/chat/room"))
        summary = s.close(ok=True)
    finally:
        stopped.close()
    assert replayed == recorded
    assert stopped.count == 0 and summary["missed"] == 0
    assert {e["name"] for e in json.loads((proxy_dir / "ws-echo/echo.json").read_text())[
        "entries"]} == {"ws.127.0.0.1"}
    _no_key(proxy_dir, KEY)


def test_a_session_open_when_the_proxy_stops_is_closed_1001_and_kept(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    """The proxy's default cassette (``--cassette``), a WebSocket still open when the proxy
    stops: the client is told it is going away at once (not after the grace period), and
    the cassette keeps what the session had heard."""
    from proxy_support import proxy_env
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    cassette = tmp_path / "open.json"
    p = dejacache.proxy(cassette, mode="record", env=proxy_env(tmp_path),
                        upstreams={"openai": f"http://127.0.0.1:{realtime.port}"})

    async def run() -> Any:
        url = p.url.replace("http", "ws", 1) + "/openai" + PATH
        async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            created = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": _audio(0)}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            await ws.recv()  # committed: the window is open
            await asyncio.to_thread(p.close)  # SIGTERM: the proxy stops
            try:
                while True:
                    await ws.recv()  # what the session had heard, then the close
            except ConnectionClosed as exc:
                return created, exc.rcvd

    with p:
        created, closed = asyncio.run(run())
    assert closed is not None and closed.code == 1001
    doc = json.loads(cassette.read_text())
    assert [e["request"].get("body", {}).get("type") for e in doc["entries"]] == [
        None, "input_audio_buffer.append", "input_audio_buffer.commit"]
    heard = [m[1]["json"]["type"] for m in doc["entries"][-1]["response"]["messages"]]
    assert heard[0] == "input_audio_buffer.committed"
    assert created["type"] == "session.created"
    assert KEY not in cassette.read_text()


def test_the_openai_sdks_realtime_client_replays_through_the_proxy(
        proxy_process: ProxyProcess, realtime: FakeRealtime) -> None:
    pytest.importorskip("openai")
    from audio_session import voice_session

    s = _open(proxy_process, "ws-sdk/voice.json", realtime, mode="record")
    recorded = asyncio.run(voice_session(s.base_url("openai") + "/v1", 2.0))
    assert s.close(ok=True)["recorded"] == 1 + 20 + 2
    stopped = _stopped(realtime)
    try:
        s = _open(proxy_process, "ws-sdk/voice.json", realtime, mode="replay")
        replayed = asyncio.run(voice_session(s.base_url("openai") + "/v1", 2.0))
        summary = s.close(ok=True)
    finally:
        stopped.close()
    assert replayed == recorded and recorded["deltas"]
    assert stopped.count == 0 and summary["missed"] == 0


def test_a_refused_handshake_passes_through_and_replays(proxy_process: ProxyProcess,
                                                        fake: Any) -> None:
    """An upstream that refuses the upgrade (an HTTP server: 404): the client gets its
    answer, status and body, recording and replaying (with the upstream stopped)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async def refused(url: str) -> Any:
        with pytest.raises(InvalidStatus) as info:
            await connect(url, additional_headers={"Authorization": f"Bearer {KEY}"})
        r = info.value.response
        return r.status_code, json.loads(r.body)

    got = []
    for mode in ("record", "replay"):
        s = proxy_process.session("ws-refused/r.json", upstreams={"openai": fake.url},
                                  mode=mode)
        try:
            got.append(asyncio.run(refused(_ws(s))))
        finally:
            summary = s.close(ok=True)
        if mode == "record":
            fake.stop()
    assert got[0] == got[1] and got[0][0] == 404, got
    assert summary["replayed"] == 1 and summary["missed"] == 0


def _answering_as(tag: str) -> Any:
    """A server that says who it is in every message (``hello``, then each message's
    echo), so a session replayed from the other server's recording shows."""

    async def serve(ws: Any) -> None:
        await ws.send(json.dumps({"hello": tag}))
        async for raw in ws:
            await ws.send(json.dumps({"from": tag, "got": json.loads(raw)}))

    return serve


async def _ask(url: str) -> list[Any]:
    from websockets.asyncio.client import connect

    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        out = [json.loads(await ws.recv())]
        await ws.send(json.dumps({"n": 1}))
        out.append(json.loads(await ws.recv()))
    return out


def test_upstreams_of_the_users_opened_alike_replay_each_their_own_session(
        proxy_process: ProxyProcess, proxy_dir: pathlib.Path) -> None:
    # Keys leave the host out: sessions to "a" and "b" with the same handshake and
    # messages keyed alike, and replayed in the other order "b" was answered "a"'s.
    servers = {n: LoopbackServer(_answering_as(n)).start() for n in "ab"}
    ups = {n: f"http://127.0.0.1:{srv.port}" for n, srv in servers.items()}
    name = "ws-two-upstreams/two.json"
    try:
        s = proxy_process.session(name, upstreams=ups, mode="record")
        ws_url = s.url.replace("http", "ws", 1)
        live = {n: asyncio.run(_ask(f"{ws_url}/{n}/room")) for n in "ab"}
        assert s.close(ok=True)["saved"]
    finally:
        for srv in servers.values():
            srv.stop()
    assert live["a"][0] == {"hello": "a"} and live["b"][0] == {"hello": "b"}
    stopped = [DropListener(srv.port) for srv in servers.values()]
    try:
        r = proxy_process.session(name, upstreams=ups, mode="replay")
        ws_url = r.url.replace("http", "ws", 1)
        again = {n: asyncio.run(_ask(f"{ws_url}/{n}/room")) for n in "ba"}
        summary = r.close(ok=True)
    finally:
        for listener in stopped:
            listener.close()
    assert again == live and summary["missed"] == 0
    assert [listener.count for listener in stopped] == [0, 0]
    recorded = [e["request"]["headers"].get("x-dejacache-upstream")
                for e in json.loads((proxy_dir / name).read_text())["entries"]
                if "headers" in e["request"]]  # the handshakes (messages key by theirs)
    assert recorded == ["a", "b"]
    sent = [k.lower() for srv in servers.values() for r in srv.requests
            for k, _ in r["headers"]]
    assert "authorization" in sent and "x-dejacache-upstream" not in sent  # keyed, not sent
    _no_key(proxy_dir, KEY)


# ---------------------------------------------------------------- the message bound
#
# A proxy with a 4 KiB bound (``max_message=``): the side that sends a larger message is
# closed with 1009, the other one as a side the proxy leaves; no cut window is recorded.

_BOUND = 4096
_RAISE = "raise --max-message (max_message= of dejacache.proxy())"


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[ProxyProcess, pathlib.Path]]:
    from proxy_support import proxy_env

    folder = tmp_path_factory.mktemp("bounded")
    with dejacache.proxy(cassette_dir=folder, env=proxy_env(folder),
                         max_message=_BOUND) as p:
        yield p, folder


class _Closes:
    """tests/ws's echo protocol, keeping the close code and reason each connection got."""

    def __init__(self) -> None:
        self.got: list[tuple[int | None, str | None]] = []
        self._closed = threading.Event()

    async def __call__(self, ws: Any) -> None:
        # (a close other than 1000/1001 ends its loop with an error)
        with contextlib.suppress(Exception):
            await echo(ws)
        self.got.append((ws.close_code, ws.close_reason))
        self._closed.set()

    def wait(self, seconds: float = 5.0) -> list[tuple[int | None, str | None]]:
        """What the connections got once one has closed, or within ``seconds``."""
        self._closed.wait(seconds)
        return list(self.got)  # (stopping the server closes the others later)


def _bodies(path: pathlib.Path) -> list[Any]:
    return [e["request"].get("body") for e in json.loads(path.read_text())["entries"]]


async def _client_over(url: str, fragmented: bool) -> list[Any]:
    """Whole and fragmented messages under the bound answered; then one over it."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosedError

    out: list[Any] = []
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"n": 0, "pad": "a" * 4000}))  # one frame, under it
        out.append(json.loads(await ws.recv()))
        whole = json.dumps({"n": 1, "pad": "b" * 4000})  # three frames, under it in all
        await ws.send(iter([whole[:1500], whole[1500:3000], whole[3000:]]))
        out.append(json.loads(await ws.recv()))
        with pytest.raises(ConnectionClosedError) as info:
            if fragmented:  # each frame under it, the third takes the total over
                await ws.send(iter(["x" * 1500] * 3))
            else:
                await ws.send("x" * (_BOUND + 1))
            await ws.recv()
        rcvd = info.value.rcvd
        out.append(None if rcvd is None else [rcvd.code, rcvd.reason])
    return out


@pytest.mark.parametrize("fragmented", [False, True], ids=["whole", "fragmented"])
def test_a_client_message_over_the_bound_closes_it_1009_and_the_upstream_1001(
        bounded: tuple[ProxyProcess, pathlib.Path], fragmented: bool) -> None:
    proxy, folder = bounded
    closes = _Closes()
    server = LoopbackServer(closes).start()
    name = f"ws-bound/client-{fragmented}.json"
    try:
        s = proxy.session(name, upstreams={"chat": f"http://127.0.0.1:{server.port}"},
                          mode="record")
        got = asyncio.run(_client_over(s.url.replace("http", "ws", 1) + "/chat/room",
                                       fragmented))
        assert s.close(ok=True)["saved"]
        upstream = closes.wait()
    finally:
        server.stop()
    assert got[:3] == [{"hello": "/room"}, {"ack": 0}, {"ack": 1}]
    assert got[3] == [1009, f"dejacache: the client's message over the 4096 bytes limit; "
                            f"{_RAISE}"]
    assert upstream == [(1001, "dejacache proxy: the client's message was over its limit")]
    assert [b and b["n"] for b in _bodies(folder / name)] == [None, 0, 1]


async def _upstream_over(url: str) -> list[Any]:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosedError

    out: list[Any] = []
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"n": 0}))
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"big": _BOUND + 1}))
        with pytest.raises(ConnectionClosedError) as info:
            await ws.recv()
        rcvd = info.value.rcvd
        out.append(None if rcvd is None else [rcvd.code, rcvd.reason])
    return out


def test_an_upstream_message_over_the_bound_closes_it_1009_the_client_1011_unrecorded(
        bounded: tuple[ProxyProcess, pathlib.Path]) -> None:
    proxy, folder = bounded
    closes = _Closes()
    server = LoopbackServer(closes).start()
    ups = {"chat": f"http://127.0.0.1:{server.port}"}
    name = "ws-bound/upstream.json"
    try:
        s = proxy.session(name, upstreams=ups, mode="record")
        got = asyncio.run(_upstream_over(s.url.replace("http", "ws", 1) + "/chat/room"))
        assert s.close(ok=True)["saved"]
        upstream = closes.wait()
    finally:
        server.stop()
    assert got[:2] == [{"hello": "/room"}, {"ack": 0}]
    assert got[2] == [1011, f"dejacache: the server's message over the 4096 bytes limit; "
                            f"{_RAISE}"]
    assert upstream and upstream[0][0] == 1009
    # The window the message cut is not stored: a replay misses there (1011), never
    # replaying a session shorter than the live one as if whole.
    assert _bodies(folder / name) == [None, {"n": 0}]
    r = proxy.session(name, upstreams=ups, mode="replay")
    again = asyncio.run(_upstream_over(r.url.replace("http", "ws", 1) + "/chat/room"))
    summary = r.close(ok=False)
    assert again[:2] == got[:2] and again[2] is not None and again[2][0] == 1011
    assert "replay miss" in again[2][1] and summary["missed"] == 1


# ---------------------------------------------------------------- a client that vanishes
#
# The proxy passes the client's close on to the upstream; a close that carries no code it may
# send (RFC 6455 7.4.1 reserves 1005, 1006 and 1015 for reporting) goes on as 1001. Sent as
# it came, ``websockets`` refused it and the upstream connection stayed open (a live realtime
# session held, and billed, until the upstream itself timed it out).

_EMPTY_CLOSE = b"\x88\x80\x00\x00\x00\x00"  # a masked close frame with no status code


async def _vanish(url: str, how: str) -> Any:
    """Opens a session, has one message answered, then leaves: its socket reset with no
    close frame (``drop``) or a close frame with no code (``empty``, as browsers and Node's
    ws send for ``close()``), then its socket reset."""
    from websockets.asyncio.client import connect

    ws = await connect(url, additional_headers={"Authorization": f"Bearer {KEY}"})
    hello = json.loads(await ws.recv())
    await ws.send(json.dumps({"n": 0}))
    ack = json.loads(await ws.recv())
    if how == "empty":
        ws.transport.write(_EMPTY_CLOSE)
        await asyncio.sleep(0.2)  # read by the proxy before the reset
    ws.transport.abort()
    return hello, ack


@pytest.mark.parametrize("how", ["drop", "empty"])
def test_a_client_that_leaves_without_a_close_code_closes_the_upstream_1001(
        proxy_process: ProxyProcess, how: str) -> None:
    closes = _Closes()
    server = LoopbackServer(closes).start()
    try:
        s = proxy_process.session(f"ws-vanish/{how}.json", mode="record",
                                  upstreams={"chat": f"http://127.0.0.1:{server.port}"})
        got = asyncio.run(_vanish(s.url.replace("http", "ws", 1) + "/chat/room", how))
        started = time.monotonic()
        upstream = closes.wait(5.0)  # before the session ends: nothing else closes it
        took = time.monotonic() - started
        assert s.close(ok=True)["saved"]
    finally:
        server.stop()
    assert got == ({"hello": "/room"}, {"ack": 0})
    assert upstream == [(1001, "")], upstream
    assert took < 2.0, took


async def _first_op(ws: Any) -> None:
    """Answers each message with the ``op`` it reads, the first of a repeated key."""

    def first(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        return dict(reversed(pairs))

    async for raw in ws:
        await ws.send(json.dumps({"did": json.loads(raw, object_pairs_hook=first)["op"]}))


async def _ops(url: str, text: str) -> Any:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(url) as ws:
        await ws.send(text)
        try:
            return json.loads(await ws.recv())
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd else None


def test_a_message_repeating_a_key_replays_only_for_itself_through_the_proxy(
        proxy_process: ProxyProcess) -> None:
    server = LoopbackServer(_first_op).start()
    ups = {"trade": f"http://127.0.0.1:{server.port}"}
    repeated = '{"op":"buy","op":"sell"}'
    try:
        s = proxy_process.session("ws-repeat/r.json", upstreams=ups, mode="record")
        assert asyncio.run(_ops(s.url.replace("http", "ws", 1) + "/trade/", repeated)) == {
            "did": "buy"}
        assert s.close(ok=True)["saved"]
    finally:
        server.stop()
    for text, answer in (('{"op":"sell"}', 1011), (repeated, {"did": "buy"})):
        s = proxy_process.session("ws-repeat/r.json", upstreams=ups, mode="replay")
        assert asyncio.run(_ops(s.url.replace("http", "ws", 1) + "/trade/", text)) == answer
        s.close(ok=answer != 1011)
