"""lm15's transports (dspy's native engine) under dejacache, below dspy (``.venv-fw2``).

The same requests the engine sends, through ``StdlibTransport``/``StdlibAsyncTransport``
directly: the key equals the one httpx gets for the same bytes (recorded through one,
replayed through the other), streams replay event by event, failures replay as lm15's own
errors, and the API key never reaches the cassette.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

pytest.importorskip("dspy", reason="dspy runs in .venv-fw2 (make test-frameworks)")

import httpx
from dspy._vendor.lm15 import transports as lt
from fw_provider import DropListener, FrameworkProvider

import dejacache
from conftest import KEY


@pytest.fixture
def fake() -> Iterator[FrameworkProvider]:
    server = FrameworkProvider().start()
    yield server
    server.stop()


def _body(stream: bool = False, text: str = "Say hi") -> bytes:
    return orjson.dumps({"model": "gpt-4o-mini", "stream": stream,
                         "messages": [{"role": "user", "content": text}]})


def _headers() -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {KEY}"), ("Content-Type", "application/json")]


def _request(url: str, body: bytes) -> Any:
    return lt.TransportRequest("POST", url + "/chat/completions", headers=_headers(), body=body)


def _lm15(url: str, body: bytes, is_async: bool) -> tuple[int, bytes]:
    """One exchange through lm15's transport: (status, body). (A JSON body replays as the
    same JSON, not the same bytes: compare it parsed.)"""
    if is_async:
        async def go() -> tuple[int, bytes]:
            async with lt.StdlibAsyncTransport() as t, t.stream(_request(url, body)) as resp:
                return resp.status, await resp.read()

        return asyncio.run(go())
    with lt.StdlibTransport() as t, t.stream(_request(url, body)) as resp:
        return resp.status, resp.read()


def _httpx(url: str, body: bytes) -> tuple[int, bytes]:
    with httpx.Client() as c:
        r = c.post(url + "/chat/completions", content=body, headers=_headers())
        return r.status_code, r.content


class _Replay:
    """Replays ``path`` under CI with the provider stopped and its port counting."""

    def __init__(self, fake: FrameworkProvider, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fake, self.monkeypatch = fake, monkeypatch

    def __enter__(self) -> _Replay:
        self.recorded = self.fake.count()
        self.fake.stop()
        self.drop = DropListener(self.fake.port)
        self.monkeypatch.setenv("CI", "true")
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop.close()
        assert self.drop.count == 0, f"{self.drop.count} connections reached the provider"
        assert self.fake.count() == self.recorded


@pytest.mark.parametrize("first", ["lm15", "httpx"])
def test_key_equals_httpx_for_the_same_bytes(first: str, fake: FrameworkProvider,
                                             tmp_path: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path, url, body = tmp_path / "c.json", fake.openai_url, _body()
    via = {"lm15": lambda: _lm15(url, body, False), "httpx": lambda: _httpx(url, body)}
    with dejacache.cassette(path):
        status, live = via[first]()
    assert status == 200 and fake.count() == 1
    other = "httpx" if first == "lm15" else "lm15"
    with _Replay(fake, monkeypatch), dejacache.cassette(path) as tape:
        assert tape.mode == "replay"
        status, replayed = via[other]()
    assert (status, orjson.loads(replayed)) == (200, orjson.loads(live))


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_streams_record_and_replay_event_by_event(is_async: bool, fake: FrameworkProvider,
                                                  tmp_path: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path, url = tmp_path / "c.json", fake.openai_url
    with dejacache.cassette(path):
        status, live = _lm15(url, _body(stream=True), is_async)
    assert status == 200 and live.count(b"data: ") >= 3 and live.rstrip().endswith(b"[DONE]")
    stored = orjson.loads(path.read_bytes())
    assert "events" in str(stored)  # kept as a stream, not one opaque body
    with _Replay(fake, monkeypatch), dejacache.cassette(path):
        assert _lm15(url, _body(stream=True), is_async) == (200, live)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_failures_replay_as_lm15_failures(is_async: bool, fake: FrameworkProvider,
                                          tmp_path: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path, url = tmp_path / "c.json", fake.openai_url
    fake.script.extend([{"status": 500}, {"drop": True}])
    with dejacache.cassette(path):
        status, text = _lm15(url, _body(text="one"), is_async)
        with pytest.raises(lt.TransportError) as live:
            _lm15(url, _body(text="two"), is_async)
    assert status == 500 and b"fake failure 500" in text
    with _Replay(fake, monkeypatch), dejacache.cassette(path):
        status, again = _lm15(url, _body(text="one"), is_async)
        assert (status, orjson.loads(again)) == (500, orjson.loads(text))
        with pytest.raises(lt.TransportError) as replayed:
            _lm15(url, _body(text="two"), is_async)
    assert type(live.value) is not lt.TransportError  # a specific class, kept on replay
    assert type(replayed.value) is type(live.value)
    assert str(replayed.value) == str(live.value)


def test_the_api_key_never_reaches_the_cassette(fake: FrameworkProvider, tmp_path: Any) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        _lm15(fake.openai_url, _body(), False)
    assert fake.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"  # it was sent
    assert KEY not in path.read_text()


def test_requests_outside_blocks_are_untouched(fake: FrameworkProvider) -> None:
    assert lt.StdlibTransport.stream.__name__ == "stream"
    assert not getattr(lt.StdlibTransport.stream, "__dejacache_patch__", False)
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
        assert getattr(lt.StdlibTransport.stream, "__dejacache_patch__", False)
        assert getattr(lt.StdlibAsyncTransport.stream, "__dejacache_patch__", False)
    assert not getattr(lt.StdlibTransport.stream, "__dejacache_patch__", False)
    assert _lm15(fake.openai_url, _body(), False)[0] == 200
    assert fake.count() == 1


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_unrecorded_request_is_a_replay_miss_not_a_live_call(
    is_async: bool, fake: FrameworkProvider, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, url = tmp_path / "c.json", fake.openai_url
    with dejacache.cassette(path):
        _lm15(url, _body(text="recorded"), is_async)
    with _Replay(fake, monkeypatch), dejacache.cassette(path), \
            pytest.raises(dejacache.ReplayMiss) as miss:
        _lm15(url, _body(text="never recorded"), is_async)
    assert "never recorded" in str(miss.value)
