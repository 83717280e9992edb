"""The seam adapters and proxies drive (``dejacache.ws.AsyncSession`` / ``SyncSession``): a
session opened, sent to and read from directly, its live side any client the caller has
(here the ``websockets`` clients, to a loopback server)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ws_support import LoopbackServer, echo

import dejacache
from dejacache.errors import ReplayMiss
from dejacache.http.aliases import AliasTable
from dejacache.scope import current
from dejacache.ws import Answer, AsyncSession, Closed, Handshake, Message, SyncSession


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer(echo).start()
    yield s
    s.stop()


class _AsyncLive:
    """A live side as a proxy would make it: a websockets connection upstream."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.answer = Answer(101, list(conn.response.headers.raw_items()), conn.subprotocol)

    async def send(self, m: Message) -> None:
        await self.conn.send(m.data)

    async def recv(self) -> Message | Closed:
        from websockets.exceptions import ConnectionClosed

        try:
            return Message(await self.conn.recv())
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            return Closed(rcvd.code, rcvd.reason) if rcvd else Closed(1006)

    async def close(self, code: int, reason: str) -> None:
        await self.conn.close(code, reason)


async def _proxied(url: str, live: bool) -> list[Any]:
    async def open_live() -> _AsyncLive:
        from websockets.asyncio.client import connect

        return _AsyncLive(await connect(url))

    hs = Handshake(url, [("Authorization", "Bearer sk-proxy-0123456789abcdefghijklmn")])
    session = AsyncSession(current(), hs, open_live if live else None)
    answer = await session.open()
    got: list[Any] = [answer.status, await session.receive()]
    for n in range(2):
        await session.send(Message(json.dumps({"n": n})))
        got.append(await session.receive())
    await session.send(Message(json.dumps({"close": 1001, "reason": "later"})))
    got.append(await session.receive())
    await session.close()
    return got


def test_a_proxy_route_records_and_replays_through_the_seam(
        tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    path = tmp_path / "proxy.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(_proxied(server.url + "/p", live=True))
    assert recorded[0] == 101 and recorded[-1] == Closed(1001, "later")
    assert json.loads(recorded[2].data) == {"ack": 0}
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        replayed = asyncio.run(_proxied(server.url + "/p", live=False))
    assert replayed[0] == 101 and replayed[-1] == recorded[-1]
    assert [json.loads(x.data) for x in replayed[1:-1]] == [
        json.loads(x.data) for x in recorded[1:-1]]


def test_with_no_live_side_a_call_that_must_go_live_is_a_miss(tmp_path: pathlib.Path) -> None:
    with dejacache.cassette(tmp_path / "none.json", mode="auto"), \
            pytest.raises(ReplayMiss) as info:
        asyncio.run(_proxied("ws://127.0.0.1:9/x", live=False))
    assert "no live side" in str(info.value)


class _SyncLive:
    """A threads-side live leg: a ``websockets`` threads connection to ``url``."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.conn = connect(url, legacy=True)
        self.answer = Answer(101, [], None)

    def send(self, m: Message) -> None:
        self.conn.send(m.data)

    def recv(self) -> Message | Closed:
        from websockets.exceptions import ConnectionClosed

        try:
            return Message(self.conn.recv())
        except ConnectionClosed:
            return Closed(1000)

    def close(self, code: int, reason: str) -> None:
        self.conn.close(code, reason)


def test_the_threads_twin(tmp_path: pathlib.Path, server: LoopbackServer) -> None:
    def Live() -> _SyncLive:
        return _SyncLive(server.url + "/t")

    def run(live: bool) -> list[Any]:
        s = SyncSession(current(), Handshake(server.url + "/t", []), Live if live else None)
        s.open()
        got = [s.receive(timeout=5)]
        s.send(Message(json.dumps({"n": 4})))
        got.append(s.receive(timeout=5))
        assert s.receive(timeout=0.05) is None  # nothing more is owed
        s.close()
        return [json.loads(x.data) for x in got if isinstance(x, Message)]

    path = tmp_path / "t.json"
    with dejacache.cassette(path, mode="record"):
        recorded = run(True)
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert run(False) == recorded == [{"hello": "/t"}, {"ack": 4}]


def test_what_the_server_says_while_the_next_message_is_keyed_is_recorded(
        tmp_path: pathlib.Path, server: LoopbackServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends twice without reading (the sync Realtime client's commit, then
    response.create): the answer to the first can arrive while the second is being keyed,
    between one window and the next. It is kept, and replays where it came."""
    import time

    from dejacache.ws import _drive

    def Live() -> _SyncLive:
        return _SyncLive(server.url + "/k")

    sessions: list[SyncSession] = []
    keyed = _drive.message_key

    def slow_key(eff: Any, route: Any, sid: str, m: Message, tree: Any) -> Any:
        if tree == {"n": 2} and sessions and sessions[0].live is not None:
            # the second message is keyed only once the first one's answer was heard
            deadline = time.monotonic() + 5
            while len(sessions[0].state.pending) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
        return keyed(eff, route, sid, m, tree)

    monkeypatch.setattr(_drive, "message_key", slow_key)

    def run(live: bool) -> list[Any]:
        s = SyncSession(current(), Handshake(server.url + "/k", []), Live if live else None)
        sessions[:] = [s]
        s.open()
        s.send(Message(json.dumps({"n": 1})))
        s.send(Message(json.dumps({"n": 2})))
        got = [s.receive(timeout=5) for _ in range(3)]
        s.close()
        return [json.loads(x.data) for x in got if isinstance(x, Message)]

    path = tmp_path / "k.json"
    with dejacache.cassette(path, mode="record"):
        recorded = run(True)
    assert recorded == [{"hello": "/k"}, {"ack": 1}, {"ack": 2}]
    server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert run(False) == recorded


class _Turns:
    """Which session takes the next step: live, cats answered late, so dogs' steps all came
    first; on replay nothing is late and the two sessions take turns."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.changed = asyncio.Condition()

    async def take(self, who: str) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: not self.order or self.order[0] == who)
            if not self.order:
                raise RuntimeError("the other session failed")

    async def done(self, failed: bool = False) -> None:
        async with self.changed:
            del self.order[:len(self.order) if failed else 1]
            self.changed.notify_all()


class _Raw:
    """A Realtime session on the ``websockets`` client: events as dicts."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def recv(self) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(await self.ws.recv())
        return event


class _Sdk(_Raw):
    """The same on the openai SDK's ``AsyncRealtimeConnection`` (events parsed and sent by
    its models)."""

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(event)

    async def recv(self) -> dict[str, Any]:
        event: dict[str, Any] = (await self.ws.recv()).model_dump()
        return event


async def _until(conn: _Raw, kind: str) -> dict[str, Any]:
    while True:
        event = await conn.recv()
        if event["type"] == kind:
            return event


async def _items(conn: _Raw, topic: str, turns: _Turns, said: list[str]) -> None:
    """Two conversation items created, then read back by the ids the server gave them
    (what each read gets goes in ``said``)."""
    try:
        ids = []
        for text in (topic, topic + " again"):
            await turns.take(topic)
            await conn.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]}})
            ids.append((await _until(conn, "conversation.item.done"))["item"]["id"])
            await turns.done()
        for item in reversed(ids):
            await turns.take(topic)
            await conn.send({"type": "conversation.item.retrieve", "item_id": item})
            got = await _until(conn, "conversation.item.retrieved")
            said.append(got["item"]["content"][0]["text"])
            await turns.done()
    except BaseException:
        await turns.done(failed=True)
        raise


_ITEMS = {"cats": ["cats again", "cats"], "dogs": ["dogs again", "dogs"]}
_KEY = "sk-proj-wsalias0123456789abcdefghijkl"


async def _connect(stack: contextlib.AsyncExitStack, base_url: str, sdk: bool) -> _Raw:
    if sdk:
        import openai

        client = openai.AsyncOpenAI(base_url=base_url, api_key=_KEY, max_retries=0)
        stack.push_async_callback(client.close)
        return _Sdk(await stack.enter_async_context(
            client.realtime.connect(model="gpt-realtime")))
    from websockets.asyncio.client import connect

    url = base_url.replace("http", "ws") + "/realtime?model=gpt-realtime"
    return _Raw(await stack.enter_async_context(
        connect(url, additional_headers={"Authorization": f"Bearer {_KEY}"})))


def _gathered_items(path: pathlib.Path, *, sdk: bool = False,
                    keep: Callable[..., Any] | None = None
                    ) -> tuple[dict[str, list[str]], list[Any]]:
    """Two Realtime sessions (the real ``websockets`` client or the openai SDK on it, to the
    loopback fake) recorded with dogs' steps first, then replayed taking turns: what each
    read back, and what failed (``keep``: how the recording stores a window's ids, when not
    as it does now)."""
    from fake_realtime import FakeRealtime

    fake = FakeRealtime().start()

    async def agent(order: list[str]) -> tuple[dict[str, list[str]], list[Any]]:
        turns = _Turns(order)
        said: dict[str, list[str]] = {"cats": [], "dogs": []}
        async with contextlib.AsyncExitStack() as stack:
            conns = {}
            for topic in ("cats", "dogs"):
                conn = conns[topic] = await _connect(stack, fake.base_url, sdk)
                await _until(conn, "session.created")
                await conn.send({"type": "session.update", "session": {
                    "type": "realtime", "instructions": f"talk about {topic}"}})
                await _until(conn, "session.updated")
            failed = await asyncio.gather(
                *(_items(conns[t], t, turns, said[t]) for t in ("cats", "dogs")),
                return_exceptions=True)
        return said, [e for e in failed if e is not None]

    try:
        with pytest.MonkeyPatch.context() as mp, dejacache.cassette(path, mode="record"):
            if keep is not None:
                mp.setattr(AliasTable, "keep", keep)
            assert asyncio.run(agent(["dogs"] * 4 + ["cats"] * 4)) == (_ITEMS, [])
    finally:
        fake.stop()
    with dejacache.cassette(path, mode="replay"):
        return asyncio.run(agent(["cats", "dogs"] * 4))


@pytest.mark.parametrize("sdk", [False, True], ids=["websockets", "openai"])
def test_items_read_back_by_id_in_gathered_sessions_replay_their_own(
        tmp_path: pathlib.Path, sdk: bool) -> None:
    """Ids the server named were numbered in the order the block learned them, across
    sessions: replayed in another interleaving, the id of ``cats again`` took the number the
    id of ``cats`` had live, and reading it back was served the ``cats`` item."""
    said, failed = _gathered_items(tmp_path / "items.json", sdk=sdk)
    assert said == _ITEMS and not failed, failed


def test_a_recording_without_tags_misses_where_its_ids_are_quoted(
        tmp_path: pathlib.Path) -> None:
    """Recorded before ids were tagged (numbered by position): the messages that quote no
    id replay, each read by id misses, and none is answered with another item."""
    def untagged(self: AliasTable, key: str, value: dict[str, Any]) -> dict[str, Any]:
        self.learn(value.get("ids") or ())  # as recordings were made before tags
        return value

    said, failed = _gathered_items(tmp_path / "old.json", keep=untagged)
    assert said == {"cats": [], "dogs": []}
    assert failed and all(isinstance(e, (ReplayMiss, RuntimeError)) for e in failed)
    assert any(isinstance(e, ReplayMiss) and "conversation.item.retrieve" in str(e)
               for e in failed)


# ---------------------------------------------------------------- echoed credentials

_KEYS = ("plain-ws-key-5e81a0", "bearer-ws-token-c27f94", "query-ws-key-0b6d3e")


def _quoted(request: Any) -> str:
    """What a server refusing the handshake's key quotes of it: both headers and the URL."""
    h = request.headers
    return f"{h.get('x-api-key')} {h.get('authorization')} {request.path}"


async def _refuses_in_a_frame(ws: Any) -> None:
    """Takes the connection, then refuses the key in an error event and in the close."""
    await ws.recv()
    await ws.send(json.dumps({"type": "error", "error": {
        "message": f"Incorrect API key provided: {_quoted(ws.request)}"}}))
    await ws.close(4001, f"bad key {ws.request.headers.get('x-api-key')}")


def _refused_at_the_handshake(conn: Any, request: Any) -> Any:
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    body = json.dumps({"error": f"Incorrect API key provided: {_quoted(request)}"}).encode()
    return Response(401, "Unauthorized", Headers([
        ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
        ("X-Error-Detail", f"no such key {request.headers.get('x-api-key')}")]), body)


async def _refused_session(url: str) -> list[Any]:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    headers = {"x-api-key": _KEYS[0], "Authorization": f"Bearer {_KEYS[1]}"}
    try:
        async with connect(f"{url}/v1/live?key={_KEYS[2]}", additional_headers=headers,
                           open_timeout=5) as ws:
            await ws.send(json.dumps({"n": 0}))
            got: list[Any] = [json.loads(await ws.recv())]
            try:
                await ws.recv()
            except ConnectionClosed as exc:
                assert exc.rcvd is not None
                got.append([exc.rcvd.code, exc.rcvd.reason])
            return got
    except InvalidStatus as exc:
        resp = exc.response
        return [resp.status_code, resp.headers.get("x-error-detail"), json.loads(resp.body)]


# Keys holding a session token's characters; each ends in a run no spelling changes.
_SPELT = ("plain/ws+key=5e81a0qx", "query/ws+key=0b6d3eqz")


async def _quotes_spelt(ws: Any) -> None:
    """Quotes the handshake's keys as servers spell them: a text frame that is not JSON
    escaping ``/`` (PHP's JSON of the key, embedded), a JSON frame echoing the URL
    (percent-encoded)."""
    await ws.recv()
    escaped = ws.request.headers["x-api-key"].replace("/", "\\/")
    await ws.send(f'error: {{"message": "bad key {escaped}"}}')
    await ws.send(json.dumps({"type": "error", "url": ws.request.path}))
    await ws.close()


async def _spelt_session(url: str) -> list[Any]:
    from urllib.parse import quote

    from websockets.asyncio.client import connect

    async with connect(f"{url}/v1/live?key={quote(_SPELT[1], safe='')}",
                       additional_headers={"x-api-key": _SPELT[0]}, open_timeout=5) as ws:
        await ws.send(json.dumps({"n": 0}))
        return [await ws.recv(), await ws.recv()]


def test_a_frame_quoting_the_handshakes_key_in_another_spelling_is_stored_without_it(
        tmp_path: pathlib.Path) -> None:
    server = LoopbackServer(_quotes_spelt).start()
    cassette = tmp_path / "spelt.json"
    try:
        with dejacache.cassette(cassette, mode="record"):
            live = asyncio.run(_spelt_session(server.url))
    finally:
        server.stop()
    tails = [k.rsplit("=", 1)[1] for k in _SPELT]
    assert all(t in json.dumps(live) for t in tails)
    stored = cassette.read_text()
    assert "bad key" in stored and [t for t in tails if t in stored] == []
    with dejacache.cassette(cassette, mode="replay"):
        again = asyncio.run(_spelt_session(server.url))
    assert again[0] == 'error: {"message": "bad key <REDACTED>"}'
    assert json.loads(again[1]) == {"type": "error", "url": "/v1/live?key=<REDACTED>"}


async def _echoes_in_binary(ws: Any) -> None:
    """Echoes the handshake's key inside a binary frame (kept as base64) and inside a text
    frame's base64 blob."""
    await ws.recv()
    key = ws.request.headers["x-api-key"].encode()
    await ws.send(b"\x00\x01echo:" + key + b"\xff")
    await ws.send(json.dumps({"data": base64.b64encode(b"\x02" + key).decode()}))
    await ws.close()


async def _binary_session(url: str) -> list[Any]:
    from websockets.asyncio.client import connect

    async with connect(f"{url}/v1/live", additional_headers={"x-api-key": _SPELT[0]},
                       open_timeout=5) as ws:
        await ws.send(json.dumps({"n": 0}))
        return [await ws.recv(), await ws.recv()]


def test_a_frame_quoting_the_handshakes_key_inside_base64_is_stored_without_it(
        tmp_path: pathlib.Path) -> None:
    server = LoopbackServer(_echoes_in_binary).start()
    cassette = tmp_path / "binary.json"
    try:
        with dejacache.cassette(cassette, mode="record"):
            live = asyncio.run(_binary_session(server.url))
    finally:
        server.stop()
    key = _SPELT[0].encode()
    assert key in live[0] and key in base64.b64decode(json.loads(live[1])["data"])
    stored = cassette.read_text()
    readings = [base64.b64decode(run + "=" * (-len(run) % 4)) for k in range(4)
                for run in (r[k:][:len(r) - k - ((len(r) - k) % 4 == 1)]
                            for r in re.findall(r"[A-Za-z0-9+/]{8,}", stored))]
    assert "<REDACTED>" in stored and not any(key in r for r in readings)


@pytest.mark.parametrize("refuse", ["frame", "handshake"])
def test_a_refusal_quoting_the_handshakes_key_is_stored_without_it(
        tmp_path: pathlib.Path, refuse: str) -> None:
    # Keys of no known shape, quoted in an error event, a close reason, a refused
    # handshake's body and header: only the handshake knows them. The client still gets
    # what the server said; a replay quotes the placeholder.
    server = (LoopbackServer(_refuses_in_a_frame) if refuse == "frame" else
              LoopbackServer(echo, process_request=_refused_at_the_handshake)).start()
    cassette = tmp_path / "refused.json"
    try:
        with dejacache.cassette(cassette, mode="record"):
            live = asyncio.run(_refused_session(server.url))
    finally:
        server.stop()
    assert all(k in json.dumps(live) for k in _KEYS[:2 if refuse == "frame" else 3])
    stored = b"".join(f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    assert b"Incorrect API key provided" in stored
    assert [k for k in _KEYS if k.encode() in stored] == []
    with dejacache.cassette(cassette, mode="replay"):
        again = asyncio.run(_refused_session(server.url))
    assert "<REDACTED>" in json.dumps(again) and not [k for k in _KEYS if k in json.dumps(again)]
