"""The record-stop-replay routine of the transport case scripts (``urllib3_cases.py``,
``aiohttp_cases.py``): record every case in a process of its own, stop the servers, then
replay in a fresh process with a listener on their ports counting any connection."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from typing import Any

import orjson
from fake_provider import FakeProvider
from fake_tool_api import ToolAPI

from provider_support import DropListener

__all__ = ["OTHER_MACHINE", "case_env", "free_port", "record_then_replay_cases", "rotated",
           "run_cases"]

HERE = pathlib.Path(__file__).parent


def case_env() -> dict[str, str]:
    paths = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


#: What a replay "on another machine" changes: the masking key (so every credential digest
#: differs) and the credentials the case scripts send (``rotated`` in their ``SECRETS``).
OTHER_MACHINE = {"DEJACACHE_SECRET_KEY": "another-machine", "DEJACACHE_TEST_ROTATED": "1"}


def rotated(secrets: dict[str, str]) -> dict[str, str]:
    """A case script's credentials, as another machine (CI, a rotated token) holds them."""
    if not os.environ.get("DEJACACHE_TEST_ROTATED"):
        return secrets
    return {k: v + "-ROTATED" for k, v in secrets.items()}


def run_cases(script: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(HERE / script), *args],
                          capture_output=True, text=True, env={**case_env(), **(env or {})},
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_then_replay_cases(script: str, cassette: pathlib.Path, *,
                             other_machine: bool = False) -> dict[str, Any]:
    """Record every case, stop the servers, replay them in a fresh process (with
    ``other_machine``, under :data:`OTHER_MACHINE`)."""
    tool, chat = ToolAPI().start(), FakeProvider(chunk_delay=0.001).start()
    refused = f"http://127.0.0.1:{free_port()}"
    args = [str(cassette), tool.url, chat.url + "/v1", refused]
    try:
        recorded = run_cases(script, "record", *args)
        seen = (tool.connections, chat.count())
    finally:
        tool.stop()
        chat.stop()
    guards = [DropListener(tool.port), DropListener(chat.port)]
    try:
        replayed = run_cases(script, "replay", *args,
                             env=OTHER_MACHINE if other_machine else None)
    finally:
        for g in guards:
            g.close()
    return {"recorded": recorded, "replayed": replayed, "seen": seen, "cassette": cassette,
            "connections": [g.count for g in guards]}
