"""Voice agents on the real SDKs (``realtime_cases.py``): the openai SDK's Realtime API and
google-genai's Live API, against loopback fakes that speak their protocols
(``fake_realtime.py``, ``fake_live.py``). Each agent is recorded in one process, then
replayed in a fresh one with the fake stopped and a listener counting connections on its
port: the events the app receives are equal, nothing connects, no key reaches any file, and
the replay counts the tokens and dollars it saved (audio priced as audio).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

pytest.importorskip("websockets")

from fake_live import FakeLive
from fake_realtime import FakeRealtime
from realtime_cases import GEMINI_KEY, OPENAI_KEY
from ws_support import LoopbackServer, tls_pair

from provider_support import DropListener

HERE = pathlib.Path(__file__).parent


def _run(*args: str) -> dict[str, Any]:
    paths = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env.pop("CI", None)
    env.pop("DEJACACHE_MODE", None)
    # (websockets 17 warns when its threads client is not used as a context manager, as
    # the openai SDK's sync Realtime API uses it, live and replayed alike)
    warn = ["-W", "error", "-W", "ignore:connect() must be used as a context manager"
            ":DeprecationWarning"]
    proc = subprocess.run([sys.executable, *warn, str(HERE / "realtime_cases.py"), *args],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


def _record_then_replay(case: str, fake: LoopbackServer, url: str, cassette: pathlib.Path,
                        *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        recorded = _run(case, "record", str(cassette), url, *extra)
    finally:
        fake.stop()
    guard = DropListener(fake.port)
    try:
        replayed = _run(case, "replay", str(cassette), url, *extra)
    finally:
        guard.close()
    assert guard.count == 0  # replay opened no connection
    assert replayed["events"] == recorded["events"]
    assert replayed["recorded"] == 0 and replayed["replayed"] == recorded["recorded"]
    return recorded, replayed


def _no_key(folder: pathlib.Path, *keys: str) -> None:
    files = [f for f in folder.rglob("*") if f.is_file() and f.suffix != ".pem"]
    assert files
    for f in files:
        data = f.read_bytes()
        for k in keys:
            assert k.encode() not in data, (f, k)


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    fake = FakeRealtime().start()
    yield fake
    fake.stop()


def test_openai_realtime_voice_agent_replays_with_no_connection(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    cassette = tmp_path / "cassettes" / "openai.json"
    recorded, replayed = _record_then_replay("openai", realtime, realtime.base_url, cassette)
    assert realtime.connections == 1
    types = [e["type"] for e in recorded["events"]]
    assert types[:2] == ["session.created", "session.updated"]
    assert types.count("response.done") == 3
    assert "response.function_call_arguments.done" in types
    assert "response.output_audio.delta" in types
    # the session's Authorization went to the server live, and is in no file
    sent = dict((k.lower(), v) for k, v in realtime.requests[0]["headers"])
    assert sent["authorization"] == f"Bearer {OPENAI_KEY}"
    _no_key(tmp_path, OPENAI_KEY)
    # tokens and dollars saved, the audio tokens at audio prices
    assert replayed["tokens"] > 0 and replayed["dollars"] > 0.01
    doc = orjson.loads(cassette.read_bytes())
    assert {e["name"] for e in doc["entries"]} == {"openai.realtime"}
    assert len(list((cassette.parent / "blobs").rglob("*"))) > 10  # audio kept beside it


def test_openai_realtime_sync_client_replays_with_no_connection(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    recorded, _ = _record_then_replay("openai-sync", realtime, realtime.base_url,
                                      tmp_path / "sync.json")
    assert recorded["events"][-1]["type"] == "response.done"
    _no_key(tmp_path, OPENAI_KEY)


def test_two_realtime_sessions_at_once_each_get_their_own(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    recorded, _ = _record_then_replay("pair", realtime, realtime.base_url,
                                      tmp_path / "pair.json")
    alice, bob = recorded["events"]
    said = [[e["transcript"] for e in events
             if e["type"] == "response.output_audio_transcript.done"] for events in (alice, bob)]
    assert all(t.startswith("Answer as Alice") for t in said[0])
    assert all(t.startswith("Answer as Bob") for t in said[1])


@pytest.fixture
def live(tmp_path: pathlib.Path) -> Iterator[tuple[FakeLive, pathlib.Path]]:
    ctx, ca = tls_pair(tmp_path / "tls")
    fake = FakeLive(ctx).start()
    yield fake, ca
    fake.stop()


def test_gemini_live_voice_agent_replays_with_no_connection(
        tmp_path: pathlib.Path, live: tuple[FakeLive, pathlib.Path]) -> None:
    fake, ca = live
    cassette = tmp_path / "cassettes" / "gemini.json"
    recorded, replayed = _record_then_replay("gemini", fake, fake.base_url, cassette, str(ca))
    events = recorded["events"]
    assert any(e.get("tool_call") for e in events)
    assert sum(1 for e in events if (e.get("server_content") or {}).get("turn_complete")) == 2
    sent = dict((k.lower(), v) for k, v in fake.requests[0]["headers"])
    assert sent["x-goog-api-key"] == GEMINI_KEY
    _no_key(tmp_path, GEMINI_KEY)
    assert replayed["tokens"] > 0 and replayed["dollars"] > 0
    doc = orjson.loads(cassette.read_bytes())
    assert {e["name"] for e in doc["entries"]} == {"gemini.live"}


def test_gemini_live_key_in_the_url_reaches_no_file(
        tmp_path: pathlib.Path, live: tuple[FakeLive, pathlib.Path]) -> None:
    fake, ca = live
    recorded, _ = _record_then_replay("gemini-key", fake, fake.url, tmp_path / "key.json",
                                      str(ca))
    assert recorded["events"][0] == {"setupComplete": {}}
    assert "?key=" + GEMINI_KEY in fake.requests[0]["path"]
    _no_key(tmp_path, GEMINI_KEY)


def test_a_re_recorded_session_keys_alike_though_every_id_changed(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    # The fake names items, responses and calls afresh on every connection, and the agent
    # sends the call id back: aliased by position, the keys of two recordings agree.
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    a = _run("openai", "record", str(first), realtime.base_url)
    b = _run("openai", "record", str(second), realtime.base_url)
    calls = [[e["call_id"] for e in run["events"]
              if e["type"] == "response.function_call_arguments.done"] for run in (a, b)]
    assert calls[0] != calls[1]
    keys = [[e["key"] for e in orjson.loads(p.read_bytes())["entries"]]
            for p in (first, second)]
    assert keys[0] == keys[1]
