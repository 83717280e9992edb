"""A realtime session in a test using the pytest plugin's ``dejacache_cassette`` fixture:
recorded on a developer's machine, replayed under ``CI`` with the server gone; its audio in
``blobs/`` beside the test's cassette."""

from __future__ import annotations

import pathlib

import pytest
from ws_support import LoopbackServer, echo

_QUIET = ("-p", "no:xdist", "-p", "no:randomly", "-p", "no:cacheprovider")

INNER = """
import asyncio, base64, json, os
from websockets.asyncio.client import connect

AUDIO = base64.b64encode(bytes(range(256)) * 16).decode()

def test_voice(dejacache_cassette):
    async def run():
        async with connect(os.environ["WS_URL"]) as ws:
            await ws.recv()
            await ws.send(json.dumps({"n": 1, "audio": AUDIO}))
            return json.loads(await ws.recv())
    assert asyncio.run(run()) == {"ack": 1}
"""


def test_the_fixture_records_and_ci_replays_a_session(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    server = LoopbackServer(echo).start()
    monkeypatch.setenv("WS_URL", server.url + "/voice")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    pytester.makepyfile(test_inner=INNER)
    try:
        pytester.runpytest_subprocess(*_QUIET, "--dejacache-mode=record").assert_outcomes(
            passed=1)
    finally:
        server.stop()
    assert server.connections == 1
    cassette = pathlib.Path(pytester.path, "cassettes", "test_inner", "test_voice.json")
    assert cassette.exists() and b"@ref:blob:" in cassette.read_bytes()
    assert len([p for p in (cassette.parent / "blobs").rglob("*") if p.is_file()]) == 1
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_subprocess(*_QUIET)
    result.assert_outcomes(passed=1)
    assert server.connections == 1
