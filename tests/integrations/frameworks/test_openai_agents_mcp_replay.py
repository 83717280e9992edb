"""openai-agents (``.venv-fw3``) running an agent whose tool comes from an MCP server, recorded
whole (model calls over HTTP, MCP calls at the session layer) and replayed in a fresh process
under ``CI`` with the MCP server gone and the model provider stopped: no process started, no
connection made, the same answer.

On mcp 2 the SDK connects through ``mcp.Client`` (the modern handshake: ``server/discover``,
no ``initialize``), over the transports' names it imported at its own import
(``from mcp import stdio_client``).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents runs in .venv-fw3 (make test-frameworks)")
pytest.importorskip("mcp.server.mcpserver", reason="the MCP server needs mcp 2")

from agents_mcp_flow import ask
from fake_mcp_server import LEDGER_ENV, Ledger
from mcp_servers import SCRIPT, HttpServer

ROOT = pathlib.Path(__file__).resolve().parents[3]


def fresh(*argv: str) -> dict[str, Any]:
    tests = ROOT / "tests"
    path = os.pathsep.join(str(p) for p in (ROOT / "src", tests, tests / "http",
                                            tests / "mcp_support",
                                            tests / "integrations" / "frameworks"))
    env = {**os.environ, "PYTHONPATH": path, "CI": "1"}
    env.pop("DEJACACHE_MODE", None)  # the cassette's default under CI: replay
    done = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name(
        "agents_mcp_flow.py")), *argv], capture_output=True, text=True, env=env, timeout=300,
        check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_an_agent_with_a_stdio_mcp_tool_replays_whole_with_no_server_and_no_model(
    provider: Any, tmp_path: pathlib.Path,
) -> None:
    import asyncio

    ledger = Ledger(tmp_path / "ledger.jsonl")
    (tmp_path / "server").mkdir()
    script = tmp_path / "server" / "desk.py"
    shutil.copy(SCRIPT, script)
    spec = {"transport": "stdio", "command": sys.executable, "args": [str(script)],
            "env": {LEDGER_ENV: ledger.path}}
    tape = str(tmp_path / "agent.json")
    recorded = asyncio.run(ask(spec, tape, "record", provider.openai_url))
    assert "sunny in Paris (#1 " in recorded["answer"], recorded
    assert ledger.starts() == 1
    assert ledger.requests() == ["server/discover", "tools/list", "tools/call get_weather",
                                 "tools/list"]
    model_calls = len(provider.requests)
    seen = ledger.events()
    shutil.rmtree(tmp_path / "server")
    provider.stop()

    replayed = fresh(json.dumps(spec), tape, "default", provider.openai_url)
    assert replayed["answer"] == recorded["answer"]
    assert ledger.events() == seen and len(provider.requests) == model_calls
    kinds = [e["kind"] for e in json.loads(pathlib.Path(tape).read_text())["entries"]]
    assert kinds.count("mcp") == 4 and kinds.count("http") == 2  # one recording, both faces


def test_an_agent_with_a_streamable_http_mcp_tool_replays_whole_with_the_port_closed(
    provider: Any, tmp_path: pathlib.Path,
) -> None:
    import asyncio

    ledger = Ledger(tmp_path / "ledger.jsonl")
    desk = HttpServer(ledger, "streamable-http").start()
    try:
        spec = {"transport": "streamable-http", "url": desk.url}
        tape = str(tmp_path / "agent.json")
        recorded = asyncio.run(ask(spec, tape, "record", provider.openai_url))
    finally:
        desk.stop()
    assert "sunny in Paris (#1 " in recorded["answer"], recorded
    seen = ledger.events()
    provider.stop()
    with desk.held() as drops:
        replayed = fresh(json.dumps(spec), tape, "default", provider.openai_url)
        assert drops.count == 0
    assert replayed["answer"] == recorded["answer"]
    assert ledger.events() == seen
