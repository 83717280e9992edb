"""``dejacache mcp-proxy`` under the MCP TypeScript SDK's stdio client: the ticket desk of
tests/mcp_support recorded through it (started as a stdio command, or reached over
streamable HTTP), then replayed with no server started and no connection made."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import orjson
import pytest
from proxy_support import NODE_DIR, entries, need_node, proxy_env

SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "mcp_support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import LEDGER_ENV, Ledger  # noqa: E402

from dejacache.cli import main  # noqa: E402

SERVER = SUPPORT / "fake_mcp_server.py"
ENTRY = "import sys; from dejacache.cli import main; sys.exit(main(sys.argv[1:]))"
PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "other-languages.md"


def documented(cassette: pathlib.Path) -> list[str]:
    """The docs page's IDE configuration, as that client runs it: its command, the cassette
    and server made this test's."""
    block = re.findall(r"```json\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)[0]
    server = json.loads(block)["mcpServers"]["tickets"]
    assert server["command"] == "dejacache"
    args = [str(cassette) if a == "cassettes/tickets.json" else a for a in server["args"]]
    assert args[-2:] == ["python", "server.py"]
    return [sys.executable, "-c", ENTRY, *args[:-2], sys.executable, str(SERVER)]


def proxy_command(cassette: pathlib.Path, *options: str) -> list[str]:
    return [sys.executable, "-c", ENTRY, "mcp-proxy", "--cassette", str(cassette), *options]


def client(command: list[str], tmp_path: pathlib.Path, ledger: Ledger, city: str = "Paris",
           **env: str) -> dict[str, Any]:
    """tests/node/mcp_client.mjs with ``command`` as its server: what it got."""
    need_node()
    environ = {**proxy_env(tmp_path, **env), LEDGER_ENV: ledger.path}
    out = subprocess.run(["node", str(NODE_DIR / "mcp_client.mjs"), json.dumps(command), city],
                         capture_output=True, text=True, timeout=120, cwd=NODE_DIR,
                         env=environ)
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = orjson.loads(out.stdout.strip().splitlines()[-1])
    got["stderr"] = out.stderr
    return got


def answers(got: dict[str, Any]) -> dict[str, Any]:
    # Progress reaches the SDK's callback or not by the timing of the answer behind it (live
    # and replayed alike); the recording's are checked in the file.
    return {k: v for k, v in got.items() if k not in ("progress", "stderr")}


@pytest.fixture
def ledger(tmp_path: pathlib.Path) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")


def test_an_mcp_clients_stdio_server_records_then_replays_without_starting(
        tmp_path: pathlib.Path, ledger: Ledger) -> None:
    cassette = tmp_path / "desk.json"
    command = documented(cassette)
    recorded = client(command, tmp_path, ledger)
    assert "error" not in recorded, recorded
    assert recorded["unknown"] == "MCP error -32602: no ticket 99"
    assert ledger.starts() == 1 and "8 recorded" in recorded["stderr"]
    calls = len(ledger.requests())
    search = [e for e in entries(cassette) if "search_docs" in orjson.dumps(e["request"]).decode()]
    assert [n["params"]["progress"] for n in search[0]["response"]["notifications"]] == [1, 2]

    replayed = client(command, tmp_path, ledger, CI="1")
    assert answers(replayed) == answers(recorded)
    assert (ledger.starts(), len(ledger.requests())) == (1, calls)
    assert "8 replayed, 0 recorded, 0 missed" in replayed["stderr"]

    # A miss is the client's own error, naming the argument that changed.
    error = client(command, tmp_path, ledger, city="Lisbon", CI="1")["error"]
    assert "dejacache replay miss" in error and "'Paris' -> 'Lisbon'" in error
    assert "dejacache mcp-proxy" in error and "--mode record" in error
    assert ledger.starts() == 1


def test_a_streamable_http_server_records_then_replays_with_it_stopped(
        tmp_path: pathlib.Path, ledger: Ledger) -> None:
    from mcp_servers import HttpServer

    server = HttpServer(ledger, "streamable-http").start()
    try:
        cassette = tmp_path / "desk-http.json"
        command = proxy_command(cassette, "--upstream", server.url)
        recorded = client(command, tmp_path, ledger)
        assert "error" not in recorded, recorded
    finally:
        server.stop()
    with server.held() as held:
        replayed = client(command, tmp_path, ledger, CI="1")
    assert answers(replayed) == answers(recorded)
    assert held.count == 0


@pytest.mark.parametrize(("args", "says"), [
    (["--cassette", "c.json"], "give the server as -- CMD"),
    (["--cassette", "c.json", "--upstream", "http://127.0.0.1:9/mcp", "--", "srv"],
     "one of them"),
    (["--", "srv"], "give --cassette PATH (record and replay) or --cache"),
    (["--cassette", "c.json", "--cache", "--", "srv"], "give --cassette PATH"),
    (["--cassette", "c.json", "--mode", "later", "--", "srv"], "invalid choice: 'later'"),
])
def test_a_bad_command_line_is_one_line(args: list[str], says: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:  # refused before anything starts
        main(["mcp-proxy", *args])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1 and says in lines[0], lines


def test_a_server_that_cannot_start_is_one_line(tmp_path: pathlib.Path) -> None:
    out = subprocess.run(proxy_command(tmp_path / "c.json", "--mode", "record", "--",
                                       os.fspath(tmp_path / "no-such-server")),
                         capture_output=True, text=True, timeout=60, env=proxy_env(tmp_path),
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "dejacache mcp-proxy: error:" in out.stderr and "no-such-server" in out.stderr
    assert not (tmp_path / "c.json").exists()


# ---------------------------------------------------------------- who launched the server


def echo(cassette: pathlib.Path, tmp_path: pathlib.Path, ledger: Ledger, mode: str,
         options: list[str], said: str = "hi") -> Any:
    """One client session through the proxy (``options``: what follows ``--cassette FILE
    --mode MODE``) asking ``echo``: its text, or the error it got."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def one() -> Any:
        params = StdioServerParameters(
            command=sys.executable, args=proxy_command(cassette, "--mode", mode, *options)[1:],
            env={**proxy_env(tmp_path), LEDGER_ENV: ledger.path})
        with (tmp_path / "stderr.log").open("a") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w), \
                    ClientSession(r, w) as s:
                try:
                    await s.initialize()
                    return (await s.call_tool("echo", {"text": said})).content[0].text
                except Exception as exc:
                    return {"error": str(getattr(exc, "message", None) or exc)}

    return anyio.run(one)


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_who_launched_or_reached_the_server_is_keyed_and_never_written(
        tmp_path: pathlib.Path, ledger: Ledger, transport: str) -> None:
    from mcp_servers import HttpServer

    token = "tok-alice-5531"
    server = HttpServer(ledger, "streamable-http").start() if transport != "stdio" else None
    options = (["--env", f"API_KEY={token}", "--", sys.executable, str(SERVER)]
               if server is None else ["--upstream", f"{server.url}?token={token}&team=a"])
    cassette = tmp_path / "desk.json"
    try:
        recorded = echo(cassette, tmp_path, ledger, "record", options)
    finally:
        if server is not None:
            server.stop()
    assert echo(cassette, tmp_path, ledger, "replay", options) == recorded
    item = "env:API_KEY@mcp.stdio." if server is None else "query:token@mcp.127.0.0.1/mcp#"
    assert item in cassette.read_text()  # another token is another caller
    miss = echo(cassette, tmp_path, ledger, "replay", options, said="bye")["error"]
    assert "dejacache replay miss" in miss and "--mode record" in miss
    kept = cassette.read_text() + (tmp_path / "stderr.log").read_text() + miss
    assert token not in kept


def test_a_setting_the_server_is_launched_with_is_keyed_as_itself(
        tmp_path: pathlib.Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    # REGION=us is never served REGION=eu's answers; this run's temp directories stand for
    # the recording's (another directory each run), as in a cassette block.
    from mcp_servers import run_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the proxy's too

    def launched(region: str, run: int) -> list[str]:
        return ["--env", f"REGION={region}", "--env", f"WORKDIR={run_dir(tmp_path, run)}",
                "--", sys.executable, str(SERVER)]

    cassette = tmp_path / "desk.json"
    recorded = echo(cassette, tmp_path, ledger, "record", launched("eu", 1))
    assert echo(cassette, tmp_path, ledger, "replay", launched("eu", 2)) == recorded
    miss = echo(cassette, tmp_path, ledger, "replay", launched("us", 2))
    assert "dejacache replay miss" in miss["error"], miss
    assert ledger.starts() == 1
    assert '"REGION": "eu"' in cassette.read_text() and "pytest-1" not in cassette.read_text()


@pytest.mark.parametrize("where", ["env", "args"])
def test_a_file_a_run_made_is_keyed_by_its_name_under_the_runs_directory(
        tmp_path: pathlib.Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch,
        where: str) -> None:
    # The next run's tmp_path holds the same eu.json: it replays; us.json misses.
    from mcp_servers import run_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the proxy's too

    def launched(run: int, name: str) -> list[str]:
        path = str(run_dir(tmp_path, run, "mkdtemp") / name)
        if where == "env":
            return ["--env", f"DATA={path}", "--", sys.executable, str(SERVER)]
        return ["--", sys.executable, str(SERVER), "--data", path]

    cassette = tmp_path / "desk.json"
    recorded = echo(cassette, tmp_path, ledger, "record", launched(1, "eu.json"))
    assert echo(cassette, tmp_path, ledger, "replay", launched(2, "eu.json")) == recorded
    miss = echo(cassette, tmp_path, ledger, "replay", launched(2, "us.json"))
    assert "dejacache replay miss" in miss["error"] and "us.json" in miss["error"], miss
    assert ledger.starts() == 1
    assert "<tmp>/eu.json" in cassette.read_text() and "tmprun" not in cassette.read_text()


@pytest.mark.parametrize(("args", "says"), [
    (["--cassette", "c.json", "--env", "=x", "--", "srv"], "--env '': give NAME=VALUE"),
    (["--cassette", "c.json", "--env", "DEJACACHE_NO_SUCH_VAR", "--", "srv"],
     "DEJACACHE_NO_SUCH_VAR is not set"),
    (["--cache", "--env", "A=1", "--upstream", "http://127.0.0.1:9/mcp"],
     "--env is for a stdio server"),
])
def test_a_bad_env_is_one_line(args: list[str], says: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["mcp-proxy", *args])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1 and says in lines[0], lines
