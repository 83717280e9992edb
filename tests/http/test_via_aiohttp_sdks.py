"""The SDKs' own aiohttp option (``http_client=DefaultAioHttpClient()``): an httpx transport
over aiohttp, intercepted at the httpx layer (``intercept.EXTRA_TRANSPORTS``). With aiohttp's
sessions now intercepted too, the request the transport hands on is not recorded twice.

Recorded in one process, replayed in a fresh one with the provider stopped and a listener on
its port: the same SDK objects, streams included, and no connection.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import orjson
import pytest

pytest.importorskip("aiohttp")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
if not (hasattr(openai, "DefaultAioHttpClient") and hasattr(anthropic, "DefaultAioHttpClient")):
    pytest.skip("these SDKs have no aiohttp option", allow_module_level=True)

from aiohttp_sdk_cases import KEYS  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402

from provider_support import DropListener  # noqa: E402

HERE = pathlib.Path(__file__).parent


def _run(*args: str) -> dict[str, Any]:
    paths = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run([sys.executable, str(HERE / "aiohttp_sdk_cases.py"), *args],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


def test_default_aiohttp_client_replays_in_a_fresh_process(tmp_path: pathlib.Path) -> None:
    cassette = tmp_path / "sdk.json"
    fake = FakeProvider(chunk_delay=0.001).start()
    try:
        recorded = _run("record", str(cassette), fake.url)
    finally:
        fake.stop()
    assert fake.count() == 4
    guard = DropListener(fake.port)
    try:
        replayed = _run("replay", str(cassette), fake.url)
    finally:
        guard.close()
    assert guard.count == 0
    assert replayed == recorded
    assert "httpx_aiohttp" in recorded["transport"]  # the SDK's aiohttp transport was used
    assert len(replayed["openai_stream"]) > 3 and replayed["anthropic_stream"]
    data = orjson.loads(cassette.read_bytes())
    assert len(data["entries"]) == 4  # once each: at the httpx layer, not again in aiohttp
    raw = cassette.read_bytes()
    for key in KEYS.values():
        assert key.encode() not in raw
