"""MCP sessions recorded at the session layer and replayed in a fresh process with the server
gone: no process started, no connection made, the same answers (errors included).

The real ``mcp`` client and the ticket-desk server (tests/mcp_support) over stdio,
streamable HTTP and SSE. The flow of calls is ``mcp_flow.py``'s, run here to record and in a
fresh interpreter to replay.
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

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import LEDGER_ENV, Ledger
from mcp_flow import ask, desk_session, run
from mcp_servers import SCRIPT, HttpServer

import dejacache
from dejacache.mcp import _patch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fresh(*argv: str) -> dict[str, Any]:
    """``mcp_flow.py`` in a new interpreter (under ``CI``, as a replay in CI runs)."""
    tests = ROOT / "tests"
    path = os.pathsep.join(str(p) for p in (ROOT / "src", tests, tests / "mcp_face",
                                            tests / "mcp_support"))
    env = {**os.environ, "PYTHONPATH": path, "CI": "1"}
    env.pop("DEJACACHE_MODE", None)  # the cassette's default under CI: replay
    done = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("mcp_flow.py")),
                           *argv], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def stdio_spec(tmp_path: pathlib.Path, ledger: Ledger) -> dict[str, Any]:
    """The server as a script of its own in a directory the test can remove."""
    home = tmp_path / "server"
    home.mkdir()
    script = home / "desk.py"
    shutil.copy(SCRIPT, script)
    return {"transport": "stdio", "command": sys.executable, "args": [str(script)],
            "env": {LEDGER_ENV: ledger.path}}


def same_answers(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    assert "failed" not in replayed, replayed
    assert {k: v for k, v in replayed.items() if k != "seconds"} == \
        {k: v for k, v in recorded.items() if k != "seconds"}


def check_recorded(out: dict[str, Any]) -> None:
    assert "failed" not in out, out
    assert out["initialize"]["serverInfo"]["name"] == "ticket-desk"
    assert out["get_ticket"]["structuredContent"]["status"] == "open"
    assert out["close_closed"]["isError"] is True
    assert out["missing"] == {"raised": "MCPError", "replay_miss": False, "code": -32602,
                              "message": "no ticket 99", "data": {"id": 99}}
    assert out["progress"] == [[1, 2, "searching"], [2, 2, "ranked"]]
    assert "3 documents match 'timeout'" in out["search"]["content"][0]["text"]


async def test_a_stdio_session_replays_in_a_fresh_process_without_its_server(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    recorded = await run(spec, tape, "record")
    check_recorded(recorded)
    assert mcp_ledger.starts() == 1
    seen = mcp_ledger.events()
    shutil.rmtree(tmp_path / "server")  # the server's script is gone

    replayed = fresh(json.dumps(spec), tape, "default")
    same_answers(recorded, replayed)
    assert mcp_ledger.events() == seen  # no process started, no request reached one
    entries = json.loads(pathlib.Path(tape).read_text())["entries"]
    assert {e["kind"] for e in entries} == {"mcp"}
    assert [e["name"] for e in entries][:2] == ["mcp.initialize", "mcp.tools/list"]
    assert LEDGER_ENV not in pathlib.Path(tape).read_text()  # the environment is not keyed


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_an_http_session_replays_in_a_fresh_process_with_the_port_closed(
    mcp_ledger: Ledger, tmp_path: pathlib.Path, transport: str,
) -> None:
    server = HttpServer(mcp_ledger, transport).start()  # type: ignore[arg-type]
    try:
        spec = {"transport": transport, "url": server.url}
        tape = str(tmp_path / "desk.json")
        recorded = await run(spec, tape, "record")
    finally:
        server.stop()
    check_recorded(recorded)
    seen = mcp_ledger.events()
    assert {e["path"] for e in mcp_ledger.events("http")} <= {"/mcp", "/sse", "/messages/"}
    with server.held() as drops:
        replayed = fresh(json.dumps(spec), tape, "default")
        assert drops.count == 0  # no connection reached the port
    same_answers(recorded, replayed)
    assert mcp_ledger.events() == seen
    kinds = {e["kind"] for e in json.loads(pathlib.Path(tape).read_text())["entries"]}
    assert kinds == {"mcp"}  # the transport's own HTTP requests are not recorded twice


async def test_a_miss_in_replay_raises_replay_miss_naming_the_params_that_differ(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    assert "result" in await ask(spec, tape, "record", "get_ticket", {"id": 1})
    shutil.rmtree(tmp_path / "server")

    out = fresh(json.dumps(spec), tape, "replay", "get_ticket", json.dumps({"id": 2}))
    failed = out["failed"]
    assert failed["replay_miss"] is True
    # Also an MCPError, as frameworks that catch the session's errors expect.
    assert failed["raised"] == "ReplayMiss[mcp.shared.exceptions.MCPError]"
    text = failed["text"]
    assert "no recording of mcp.tools/call matches" in text
    assert "params.arguments.id: 1 -> 2" in text
    assert mcp_ledger.starts() == 1


async def test_auto_mode_starts_the_server_only_at_the_first_miss_and_sends_it_the_handshake(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    first = await ask(spec, tape, "auto", "get_ticket", {"id": 1})
    assert mcp_ledger.starts() == 1
    again = await ask(spec, tape, "auto", "get_ticket", {"id": 1})
    assert again == first and mcp_ledger.starts() == 1  # all hits: nothing started
    other = await ask(spec, tape, "auto", "get_ticket", {"id": 2})
    assert other["result"]["structuredContent"]["title"] == "Export drops the last row"
    assert mcp_ledger.starts() == 2
    # The late server got the session's handshake before the call that missed.
    assert mcp_ledger.requests()[-3:] == ["initialize", "notifications/initialized",
                                          "tools/call get_ticket"]


async def test_outside_a_block_the_transports_are_untouched(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    from mcp.client.stdio import stdio_client

    assert _patch.active() == 0 and _patch.patched() == []
    plain = stdio_client.__wrapped__  # type: ignore[attr-defined]
    with dejacache.scope(cache_key="t", store=dejacache.MemoryStore()):
        assert "mcp.client.stdio" in _patch.patched()
        assert stdio_client.__wrapped__ is not plain  # type: ignore[attr-defined]
    assert stdio_client.__wrapped__ is plain  # type: ignore[attr-defined]
    out = await desk_session(stdio_spec(tmp_path, mcp_ledger))
    assert out["get_ticket"]["structuredContent"]["seen"] >= 1
    assert mcp_ledger.starts() == 1


async def test_a_scope_with_a_store_serves_repeated_sessions_but_not_their_errors(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    store = dejacache.MemoryStore()
    with dejacache.scope(cache_key="desk", store=store, mode="auto"):
        first = await desk_session(spec)
        second = await desk_session(spec)
    assert second["get_ticket"] == first["get_ticket"]
    assert second["search"] == first["search"] and second["progress"] == first["progress"]
    # A JSON-RPC error is handed back but never kept by a store that answers by key (the
    # next call may succeed): the second session asked a server for it, started for it alone.
    assert second["missing"]["message"] == "no ticket 99"
    assert mcp_ledger.starts() == 2
    second_pid = mcp_ledger.events("start")[1]["pid"]
    assert [f"{r['method']} {r.get('name', '')}".strip() for r in mcp_ledger.events("request")
            if r["pid"] == second_pid] == ["initialize", "notifications/initialized",
                                           "tools/call get_ticket"]


async def test_strict_replay_checks_the_order_of_mcp_calls_as_of_any_other(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    from mcp import ClientSession
    from mcp_flow import transport

    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    calls = [("get_weather", {"city": "Paris"}), ("get_ticket", {"id": 1})]

    async def session_of(mode: str, order: list[Any]) -> list[str]:
        with dejacache.cassette(tape, mode=mode, strict=True):
            async with transport(spec) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                return [(await s.call_tool(n, a)).content[0].text for n, a in order]

    recorded = await session_of("record", calls)
    assert await session_of("replay", calls) == recorded
    with pytest.raises(BaseException) as caught:  # the session's task group may wrap it
        await session_of("replay", calls[::-1])
    found = caught.value
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    assert isinstance(found, dejacache.ReplayDivergence), caught.value
    assert "mcp.tools/call" in str(found) and "out of order" in str(found)
    assert mcp_ledger.starts() == 1


def test_a_patched_transport_keeps_its_name_and_signature() -> None:
    import inspect

    from mcp.client.stdio import stdio_client

    before = inspect.signature(stdio_client)
    with dejacache.scope(cache_key="t", store=dejacache.MemoryStore()):
        assert inspect.signature(stdio_client) == before
        assert stdio_client.__name__ == "stdio_client"
    assert inspect.signature(stdio_client) == before


async def test_a_session_that_raises_leaves_no_stream_open(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    import gc
    import warnings

    from mcp import ClientSession
    from mcp_flow import transport

    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    await ask(spec, tape, "record", "get_ticket", {"id": 1})

    async def failing() -> str:
        try:
            with dejacache.cassette(tape, mode="replay"):
                async with transport(spec) as (read, write), ClientSession(read, write) as s:
                    await s.initialize()
                    raise KeyError("the test's own failure")
        except BaseException as exc:  # dropped here, with the frames that hold the streams
            return type(exc).__name__
        return "nothing raised"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert await failing() != "nothing raised"
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
