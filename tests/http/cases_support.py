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

__all__ = ["MODELS", "OTHER_MACHINE", "case_command", "case_env", "free_port",
           "record_then_replay_cases", "rotated", "run_cases"]

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


#: The request model a case script's process restates requests in: httpx2's (imported before
#: the script runs), or dejacache's own with httpx and httpx2 not importable at all, as after
#: ``pip install dejacache requests`` (``src/dejacache/http/_plain.py``).
MODELS = ("httpx2", "plain")
_PRELUDE = {
    "httpx2": "import httpx2",
    "plain": "import sys; sys.modules['httpx'] = sys.modules['httpx2'] = None",
}


def case_command(script: str, *args: str, model: str = "httpx2") -> list[str]:
    """The command running ``script`` (in this directory) with ``args`` under ``model``."""
    path = str(HERE / script)
    code = (f"{_PRELUDE[model]}\nimport runpy, sys\nsys.argv[0] = {path!r}\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    return [sys.executable, "-c", code, *args]


def run_cases(script: str, *args: str, env: dict[str, str] | None = None,
              model: str = "httpx2") -> dict[str, Any]:
    proc = subprocess.run(case_command(script, *args, model=model),
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
                             other_machine: bool = False, model: str = "httpx2",
                             replay_model: str | None = None) -> dict[str, Any]:
    """Record every case, stop the servers, replay them in a fresh process (with
    ``other_machine``, under :data:`OTHER_MACHINE`), restating requests in ``model`` (the
    replay in ``replay_model`` when given)."""
    tool, chat = ToolAPI().start(), FakeProvider(chunk_delay=0.001).start()
    refused = f"http://127.0.0.1:{free_port()}"
    args = [str(cassette), tool.url, chat.url + "/v1", refused]
    try:
        recorded = run_cases(script, "record", *args, model=model)
        seen = (tool.connections, chat.count())
    finally:
        tool.stop()
        chat.stop()
    guards = [DropListener(tool.port), DropListener(chat.port)]
    try:
        replayed = run_cases(script, "replay", *args,
                             env=OTHER_MACHINE if other_machine else None,
                             model=replay_model or model)
    finally:
        for g in guards:
            g.close()
    return {"recorded": recorded, "replayed": replayed, "seen": seen, "cassette": cassette,
            "connections": [g.count for g in guards], "model": model}
