"""MCP sessions recorded at the session layer and replayed in a fresh process with the server
gone: no process started, no connection made, the same answers (errors included).

The real ``mcp`` client and the ticket-desk server (tests/mcp_support) over stdio,
streamable HTTP and SSE. The flow of calls is ``mcp_flow.py``'s, run here to record and in a
fresh interpreter to replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import LEDGER_ENV, SPELLINGS, Ledger
from mcp_flow import ask, desk_session, run
from mcp_servers import SCRIPT, HttpServer, run_dir

import dejacache
from dejacache.mcp import _arming, _patch

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
    # This run's directory is not keyed, which file in it the env= names is.
    text = pathlib.Path(tape).read_text()
    assert str(tmp_path) not in text and f'"{LEDGER_ENV}": "<tmp>/' in text


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

    assert _arming.active() == 0 and _patch.patched() == []
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


# ---------------------------------------------------------------- concurrent calls


def listings(tape: str) -> int:
    entries = json.loads(pathlib.Path(tape).read_text())["entries"]
    return [e["name"] for e in entries].count("mcp.tools/list")


@pytest.mark.parametrize(("transport", "kind"), [
    ("stdio", "session"), ("streamable-http", "session"), ("streamable-http", "client")])
async def test_gathered_calls_replay_however_often_the_session_listed_the_tools(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, transport: str, kind: str,
) -> None:
    from mcp_flow import gathered

    tape = str(tmp_path / "desk.json")
    if transport == "stdio":
        spec = stdio_spec(tmp_path, mcp_ledger)
        recorded = await gathered(spec, tape, "record", kind)
        shutil.rmtree(tmp_path / "server")
    else:
        server = HttpServer(mcp_ledger, "streamable-http").start()  # type: ignore[arg-type]
        spec = {"transport": transport, "url": server.url}
        try:
            recorded = await gathered(spec, tape, "record", kind)
        finally:
            server.stop()
    assert [r["content"][0]["text"][:1] for r in recorded] == ["a", "b", "c"]
    assert listings(tape) == 1  # the premise: live, the session listed once
    seen = mcp_ledger.events()
    # Replayed, every answer is there at once and each call lists the tools for itself:
    # the listings past the one recorded are answered by content, never a miss.
    for _ in range(5):
        assert await gathered(spec, tape, "replay", kind) == recorded
    assert mcp_ledger.events() == seen


@pytest.mark.parametrize("made", ["now", "before"])
@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_strict_cassette_lets_the_sessions_own_requests_come_when_they_come(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, transport: str, made: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A strict cassette holds each task to its recorded order, but the listings and pings a
    session makes on its own come when the server's answers do: answered in reverse order
    live, they must not read as calls out of order in replay. ``before``: recorded as earlier
    versions did, with the listing in its task's chain of calls."""
    from mcp_flow import GATHERED, gathered

    from dejacache.mcp import _proxy

    calls = list(reversed(GATHERED))  # c (1200 ms), b (600 ms), a (0 ms): answers in reverse
    tape = str(tmp_path / "desk.json")
    if made == "before":
        monkeypatch.setattr(_proxy, "_UNORDERED", frozenset())
    if transport == "stdio":
        spec = stdio_spec(tmp_path, mcp_ledger)
        recorded = await gathered(spec, tape, "record", calls=calls, strict=True)
        shutil.rmtree(tmp_path / "server")
    else:
        server = HttpServer(mcp_ledger, "streamable-http").start()  # type: ignore[arg-type]
        spec = {"transport": transport, "url": server.url}
        try:
            recorded = await gathered(spec, tape, "record", calls=calls, strict=True)
        finally:
            server.stop()
    monkeypatch.undo()
    for _ in range(3):
        assert await gathered(spec, tape, "replay", calls=calls, strict=True) == recorded


async def test_pings_replay_however_many_the_session_sends(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    from mcp_flow import client_of

    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")

    async def pinging(mode: str, pings: int) -> Any:
        with dejacache.cassette(tape, mode=mode):
            async with client_of(spec, "session") as s:
                await asyncio.gather(*(s.send_ping() for _ in range(pings)))
                return (await s.call_tool("get_weather", {"city": "Oslo"})).content[0].text

    recorded = await pinging("record", 1)
    shutil.rmtree(tmp_path / "server")
    assert await pinging("replay", 3) == recorded  # a keep-alive's count is the clock's
    assert await pinging("replay", 0) == recorded


# ---------------------------------------------------------------- protocol 2026-07-28


async def _listening(spec: dict[str, Any], tape: str, mode: str,
                     calls: list[tuple[str, dict[str, Any]]], events: int = 0) -> Any:
    """``calls`` made inside a ``subscriptions/listen`` stream of tool-list changes, over
    an ``mcp.Client`` (2026-07-28): the honored filter, each call's text, and the first
    ``events`` events of the stream."""
    from mcp_flow import client_of

    with dejacache.cassette(tape, mode=mode):
        async with client_of(spec, "client") as c:
            assert c.protocol_version == "2026-07-28"
            async with c.listen(tools_list_changed=True) as sub:
                texts = [(await c.call_tool(n, a)).content[0].text for n, a in calls]
                got = []
                with anyio.fail_after(20):
                    for _ in range(events):
                        got.append(type(await sub.__anext__()).__name__)
                return {"honored": sub.honored.model_dump(), "texts": texts, "events": got}


async def test_a_listen_stream_records_and_replays_its_acknowledgement(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    redeploy = ("redeploy", {"tool": "get_weather", "read_only": False})
    recorded = await _listening(spec, tape, "record", [redeploy], events=1)
    assert recorded["events"] == ["ToolsListChanged"]  # passed on live while recording
    assert recorded["honored"]["tools_list_changed"] is True
    shutil.rmtree(tmp_path / "server")
    seen = mcp_ledger.events()
    replayed = await _listening(spec, tape, "replay", [redeploy])
    assert replayed == {**recorded, "events": []}  # events outside a request do not replay
    assert mcp_ledger.events() == seen
    names = [e["name"] for e in json.loads(pathlib.Path(tape).read_text())["entries"]]
    assert names[:2] == ["mcp.server/discover", "mcp.subscriptions/listen"]


async def test_a_server_started_late_is_sent_the_open_listen_streams(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    paris = ("get_weather", {"city": "Paris"})
    recorded = await _listening(spec, tape, "record", [paris])
    assert await _listening(spec, tape, "auto", [paris]) == recorded  # all hits:
    assert mcp_ledger.starts() == 1  # nothing started
    # The listen and Paris replay; Oslo misses and starts the server, which gets the
    # handshake and the listen again, so the redeploy's change reaches the stream live.
    out = await _listening(spec, tape, "auto", [
        paris, ("get_weather", {"city": "Oslo"}),
        ("redeploy", {"tool": "get_weather", "read_only": False})], events=1)
    assert out["events"] == ["ToolsListChanged"] and mcp_ledger.starts() == 2
    second = [r for r in mcp_ledger.events("request")
              if r["pid"] == mcp_ledger.events("start")[1]["pid"]]
    assert [r["method"] for r in second][:2] == ["server/discover", "subscriptions/listen"]


async def test_a_late_2026_server_over_http_gets_the_discover_with_its_headers(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    from mcp_flow import gathered

    server = HttpServer(mcp_ledger, "streamable-http").start()  # type: ignore[arg-type]
    try:
        spec = {"transport": "streamable-http", "url": server.url}
        tape = str(tmp_path / "desk.json")
        oslo = [("get_weather", {"city": "Oslo"})]
        await gathered(spec, tape, "record", "client", oslo)
        out = await gathered(spec, tape, "auto", "client", [("get_weather", {"city": "Rome"})])
    finally:
        server.stop()
    assert out[0]["content"][0]["text"].startswith("sunny in Rome")
    # The discover sent again is the one the session sent: with its 2026-07-28 headers
    # (without them the server refused it before reading it).
    assert mcp_ledger.requests().count("server/discover") == 2


async def test_a_store_that_answers_by_key_keeps_2026_answers_as_their_hints_allow(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    from mcp.server.caching import CacheHint
    from mcp_flow import client_of

    async def twice(server: HttpServer) -> list[str]:
        store = dejacache.MemoryStore()
        spec = {"transport": "streamable-http", "url": server.url}
        out = []
        for _ in range(2):
            with dejacache.scope(cache_key="desk", store=store, mode="auto"):
                async with client_of(spec, "client") as c:
                    await c.list_tools()
                    out.append((await c.call_tool("echo", {"text": "x"})).content[0].text)
        return out

    plain = HttpServer(mcp_ledger, "streamable-http").start()  # type: ignore[arg-type]
    try:
        answers = await twice(plain)
    finally:
        plain.stop()
    assert answers[0] == answers[1]  # a tool's answer has no hint: kept as any other
    # The handshake and the listing said ttlMs 0, private: asked again, never kept.
    assert [r for r in mcp_ledger.requests() if r != "tools/call echo"] == [
        "server/discover", "tools/list", "server/discover", "tools/list"]

    public = Ledger(tmp_path / "public.jsonl")
    hints = {m: CacheHint(ttl_ms=600_000, scope="public")
             for m in ("server/discover", "tools/list")}
    hinted = HttpServer(public, "streamable-http", cache_hints=hints).start()
    try:
        await twice(hinted)
    finally:
        hinted.stop()
    assert public.requests() == ["server/discover", "tools/list", "tools/call echo"]


async def test_credentials_on_a_stdio_servers_command_line_are_not_recorded(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    spec = stdio_spec(tmp_path, mcp_ledger)
    tape = str(tmp_path / "desk.json")
    secret = "plain-secret-value-3317"
    with_key = {**spec, "args": [*spec["args"], "--api-key", secret, f"--token={secret}x"]}
    recorded = await ask(with_key, tape, "record", "get_ticket", {"id": 1})
    assert "result" in recorded and secret not in pathlib.Path(tape).read_text()
    shutil.rmtree(tmp_path / "server")
    # Another key on the command line names the same server: the recording replays.
    other = {**spec, "args": [*spec["args"], "--api-key", "another", "--token=another"]}
    assert await ask(other, tape, "replay", "get_ticket", {"id": 1}) == recorded


# ---------------------------------------------------------------- who is asking


ALICE, BOB = "tok-alice-5531", "tok-bob-7702"


def _by_query(url: str, token: str) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(f"{url}?token={token}&team=a")


async def _echoes(url: str, tokens: list[str], tape: str, mode: str,
                  connect: Any = _by_query, entered: str = "with") -> list[Any]:
    """One session per token to the server at ``url`` (opened by ``connect(url, token)``),
    one after another in one block (``entered`` ``with`` or ``async with``): each one's
    echo of ``hi`` (its text), or its failure."""
    from mcp import ClientSession
    from mcp_flow import failure

    out: list[Any] = []
    async with contextlib.AsyncExitStack() as stack:
        block = dejacache.cassette(tape, mode=mode)
        if entered == "with":
            stack.enter_context(block)
        else:
            await stack.enter_async_context(block)
        for token in tokens:
            async with connect(url, token) as (read, write, *_), \
                    ClientSession(read, write, read_timeout_seconds=30) as s:
                try:
                    await s.initialize()
                    out.append((await s.call_tool("echo", {"text": "hi"})).content[0].text)
                except Exception as exc:
                    out.append(failure(exc))
    return out


async def test_two_callers_of_one_url_each_replay_their_own_answers(
    tmp_path: pathlib.Path, mcp_http: HttpServer,
) -> None:
    # A per-user server (a hosted gateway scoping tools and data by ``?token=``): alice's
    # and bob's sessions differ only by their token, and are recorded apart.
    tape = str(tmp_path / "gateway.json")
    recorded = await _echoes(mcp_http.url, [ALICE, BOB], tape, "record")
    assert recorded[0] != recorded[1]  # each answer carries the server's call number
    text = pathlib.Path(tape).read_text()
    assert ALICE not in text and BOB not in text and "team=a" in text
    mcp_http.stop()
    assert await _echoes(mcp_http.url, [BOB, ALICE], tape, "replay") == recorded[::-1]


async def test_other_credentials_at_replay_stand_for_the_recorded_ones_one_to_one(
    tmp_path: pathlib.Path, mcp_http: HttpServer,
) -> None:
    alone, both = str(tmp_path / "alice.json"), str(tmp_path / "both.json")
    [alice] = await _echoes(mcp_http.url, [ALICE], alone, "record")
    recorded = await _echoes(mcp_http.url, [ALICE, BOB], both, "record")
    mcp_http.stop()
    # CI's token is not the developer's: the one recorded caller is the one replaying...
    assert await _echoes(mcp_http.url, ["tok-ci-0001"], alone, "replay") == [alice]
    # ...but a second one is not: a recorded value never stands for two.
    first, second = await _echoes(mcp_http.url, ["tok-ci-0001", "tok-ci-0002"], alone,
                                  "replay")
    assert first == alice and second["replay_miss"] is True
    # Two recorded callers and a token that is neither: which one it stands for is not
    # known, so it misses, and says why, never served alice's or bob's answer.
    [carol] = await _echoes(mcp_http.url, ["tok-carol-3310"], both, "replay")
    assert carol["replay_miss"] is True and "one to one" in carol["text"]
    assert await _echoes(mcp_http.url, [ALICE, BOB], both, "replay") == recorded


@contextlib.asynccontextmanager
async def _by_client_header(url: str, token: str) -> Any:
    """mcp 2's streamable HTTP over a client of the caller's own, carrying its token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers) as client, \
            streamable_http_client(url, http_client=client) as streams:
        yield streams


def _by_sse_header(url: str, token: str) -> Any:
    from mcp.client.sse import sse_client

    return sse_client(url, headers={"X-Api-Key": token})


@pytest.mark.parametrize(("transport", "connect"), [
    ("streamable-http", _by_client_header), ("sse", _by_sse_header)])
async def test_callers_told_apart_by_a_header_each_replay_their_own_answers(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, transport: Any, connect: Any,
) -> None:
    server = HttpServer(mcp_ledger, transport).start()
    tape = str(tmp_path / "gateway.json")
    try:
        recorded = await _echoes(server.url, [ALICE, BOB], tape, "record", connect)
    finally:
        server.stop()
    assert recorded[0] != recorded[1]
    text = pathlib.Path(tape).read_text()
    assert ALICE not in text and BOB not in text
    assert await _echoes(server.url, [BOB, ALICE], tape, "replay", connect) == recorded[::-1]
    # Two recorded callers and a token that is neither: a miss, as for HTTP.
    [carol] = await _echoes(server.url, ["tok-carol-3310"], tape, "replay", connect)
    assert carol["replay_miss"] is True


# ---------------------------------------------------------------- who launched a stdio server


def _stdio_by(how: str, ledger: Ledger) -> Any:
    """``connect(_, token)`` for ``_echoes``: the ticket desk launched with ``token`` on its
    command line (``--token T``) or in its environment (``API_KEY=T``)."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    def connect(_: str, token: str) -> Any:
        args, env = [str(SCRIPT)], {LEDGER_ENV: ledger.path}
        if how == "arg":
            args += ["--token", token]
        else:
            env["API_KEY"] = token
        return stdio_client(StdioServerParameters(command=sys.executable, args=args, env=env))

    return connect


@pytest.mark.parametrize("how", ["arg", "env"])
async def test_two_stdio_launches_with_other_credentials_each_replay_their_own_answers(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, how: str,
) -> None:
    connect = _stdio_by(how, mcp_ledger)
    tape = str(tmp_path / "launches.json")
    recorded = await _echoes("", [ALICE, BOB], tape, "record", connect)
    assert recorded[0] != recorded[1]  # each process answers with a nonce of its own
    text = pathlib.Path(tape).read_text()
    assert ALICE not in text and BOB not in text
    starts = mcp_ledger.starts()
    assert await _echoes("", [BOB, ALICE], tape, "replay", connect) == recorded[::-1]
    # Two recorded launches and a token that is neither: a miss, never alice's answer.
    [carol] = await _echoes("", ["tok-carol-3310"], tape, "replay", connect)
    assert carol["replay_miss"] is True and "one to one" in carol["text"]
    assert "tok-carol-3310" not in carol["text"]  # the miss names the digest, never the value
    assert mcp_ledger.starts() == starts  # a replay starts no process


# ---------------------------------------------------------------- what a launch's env= says


def _stdio_with(ledger: Ledger, name: str) -> Any:
    """``connect(_, value)`` for ``_echoes``: the desk launched with ``name=value`` in its
    ``env=`` beside its ledger's path."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    def connect(_: str, value: str) -> Any:
        env = {LEDGER_ENV: ledger.path, name: value}
        return stdio_client(StdioServerParameters(command=sys.executable, args=[str(SCRIPT)],
                                                  env=env))

    return connect


@pytest.mark.parametrize("entered", ["with", "async with"])
@pytest.mark.parametrize(("recorded_in", "replayed_in"), [("eu", "us"), ("us", "eu")])
async def test_a_setting_in_a_launchs_env_never_replays_another_settings_answers(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, recorded_in: str, replayed_in: str,
    entered: str,
) -> None:
    # REGION=eu and REGION=us may answer differently: a setting is keyed as itself, never
    # stood for by the recording's one value as a credential is.
    connect = _stdio_with(mcp_ledger, "REGION")
    tape = str(tmp_path / "regions.json")

    async def echo(region: str, mode: str) -> Any:
        [got] = await _echoes("", [region], tape, mode, connect, entered)
        return got

    recorded = await echo(recorded_in, "record")
    starts = mcp_ledger.starts()
    other = await echo(replayed_in, "replay")
    assert other != recorded and other["replay_miss"] is True, other  # never eu's for us
    assert f"server.env.REGION: '{recorded_in}' -> '{replayed_in}'" in other["text"]
    assert mcp_ledger.starts() == starts  # and no process started
    live = await echo(replayed_in, "auto")
    assert live != recorded and mcp_ledger.starts() == starts + 1  # auto: asked live
    assert await echo(recorded_in, "replay") == recorded


@pytest.mark.parametrize("made_by", ["pytest", "mkdtemp"])
@pytest.mark.parametrize("spelt", [str, pathlib.Path.as_uri])
async def test_a_per_run_directory_in_a_launchs_env_replays_from_another_runs(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, spelt: Any,
    made_by: Any,
) -> None:
    # A pytest tmp_path differs on every run: the recording's stands for this run's.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    connect = _stdio_with(mcp_ledger, "WORKDIR")
    tape = str(tmp_path / "workdir.json")
    recorded = await _echoes("", [spelt(run_dir(tmp_path, 1, made_by))], tape, "record",
                             connect)
    starts = mcp_ledger.starts()
    again = await _echoes("", [spelt(run_dir(tmp_path, 2, made_by))], tape, "replay", connect)
    assert again == recorded
    assert str(tmp_path) not in pathlib.Path(tape).read_text()
    assert mcp_ledger.starts() == starts


def _stdio_naming(ledger: Ledger, where: str) -> Any:
    """``connect(_, path)`` for ``_echoes``: the desk launched naming ``path`` in its
    ``env=`` (``DATA=path``) or on its command line (``--data path``)."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    def connect(_: str, path: str) -> Any:
        args, env = [str(SCRIPT)], {LEDGER_ENV: ledger.path}
        if where == "args":
            args += ["--data", path]
        else:
            env["DATA"] = path
        return stdio_client(StdioServerParameters(command=sys.executable, args=args, env=env))

    return connect


@pytest.mark.parametrize("where", ["env", "args"])
@pytest.mark.parametrize("made_by", ["pytest", "mkdtemp"])
async def test_a_file_a_run_made_replays_from_the_next_runs_directory_and_no_other_file(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, monkeypatch: pytest.MonkeyPatch, where: str,
    made_by: Any,
) -> None:
    # The next run's tmp_path is another directory holding the same eu.json: it replays.
    # us.json is another file, which may answer otherwise: it misses, never eu's answers.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    connect = _stdio_naming(mcp_ledger, where)
    tape = str(tmp_path / "data.json")

    async def echo(run: int, name: str, mode: str) -> Any:
        [got] = await _echoes("", [str(run_dir(tmp_path, run, made_by) / name)], tape, mode,
                              connect)
        return got

    recorded = await echo(1, "eu.json", "record")
    starts = mcp_ledger.starts()
    assert await echo(2, "eu.json", "replay") == recorded
    other = await echo(2, "us.json", "replay")
    assert other != recorded and other["replay_miss"] is True, other
    assert "eu.json' -> '" in other["text"] and "us.json'" in other["text"], other["text"]
    assert mcp_ledger.starts() == starts  # and no process started
    text = pathlib.Path(tape).read_text()
    assert "eu.json" in text and str(tmp_path) not in text


# ---------------------------------------------------------------- credentials a server quotes

# No known shape, under whatever name the session gives it: found only as the session's own.
KEY = "plain-echoed-credential-7d41c0ffee93b2"
SAID = f"Bad credentials: {KEY}"


def _stdio_with_token(ledger: Ledger) -> Any:
    """``connect(_, token)`` for ``_whoami``: the desk started with ``GITHUB_TOKEN=token``."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    def connect(_: str, token: str) -> Any:
        env = {LEDGER_ENV: ledger.path, "GITHUB_TOKEN": token}
        return stdio_client(StdioServerParameters(command=sys.executable, args=[str(SCRIPT)],
                                                  env=env))

    return connect


def _by_api_key(url: str, token: str) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(f"{url}?api_key={token}")


async def _whoami(url: str, connect: Any, block: Any) -> list[Any]:
    """In ``block``, one session to ``url`` (``connect(url, KEY)``): ``whoami`` answered as a
    result, an ``isError`` result and a JSON-RPC error, each as the caller got it."""
    from mcp import ClientSession
    from mcp_flow import failure

    out: list[Any] = []
    with block:
        async with connect(url, KEY) as (read, write, *_), \
                ClientSession(read, write, read_timeout_seconds=30) as s:
            await s.initialize()
            for fail in ("", "tool"):
                result = await s.call_tool("whoami", {"fail": fail})
                out.append((result.is_error, result.content[0].text))
            try:
                await s.call_tool("whoami", {"fail": "rpc"})
            except Exception as exc:
                out.append(failure(exc))
    return out


def _said(answers: list[Any], said: str) -> None:
    """``answers`` (``_whoami``'s) each quote ``said``."""
    (ok, text), (bad, error), rpc = answers
    assert not ok and text.startswith(said) and bad and said in error
    assert rpc["message"] == said and rpc["data"] == {"said": said}


@pytest.mark.parametrize("how", ["stdio-env", "bearer", "api_key"])
async def test_a_credential_the_server_quotes_is_never_recorded_and_replays_redacted(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, how: str,
) -> None:
    # A GitHub server started with the token answering "Bad credentials: KEY"; a gateway
    # echoing the Authorization header or the URL's ?api_key=. Its caller gets the answer
    # as it came; the cassette, and so the replay, the placeholder.
    server = None
    if how == "stdio-env":
        url, connect = "", _stdio_with_token(mcp_ledger)
    else:
        server = HttpServer(mcp_ledger, "streamable-http").start()
        url, connect = server.url, _by_client_header if how == "bearer" else _by_api_key
    tape = tmp_path / "whoami.json"
    try:
        live = await _whoami(url, connect, dejacache.cassette(str(tape), mode="record"))
    finally:
        if server is not None:
            server.stop()
    _said(live, f"Bad credentials: {'Bearer ' if how == 'bearer' else ''}{KEY}")
    assert KEY not in tape.read_text() and "<REDACTED>" in tape.read_text()
    starts = mcp_ledger.starts()
    replayed = await _whoami(url, connect, dejacache.cassette(str(tape), mode="replay"))
    _said(replayed, "Bad credentials: <REDACTED>")  # ``Bearer KEY`` whole
    assert mcp_ledger.starts() == starts


async def test_a_store_that_answers_by_key_keeps_no_credential_the_server_quotes(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    connect = _stdio_with_token(mcp_ledger)
    db = tmp_path / "mcp.db"
    block = dejacache.scope(cache_key="desk", store=dejacache.SQLiteStore(db), mode="auto")
    _said(await _whoami("", connect, block), SAID)
    again = await _whoami("", connect, block)
    assert again[0] == (False, again[0][1]) and "<REDACTED>" in again[0][1]  # a hit
    assert mcp_ledger.starts() == 2  # the errors are never kept: asked again, live
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("mcp.db*"))


async def _whoami_by(url: str, headers: dict[str, str], spell: str, block: Any) -> str:
    """In ``block``, what ``whoami(spell=spell)`` says to a session sending ``headers``."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with block:
        async with httpx2.AsyncClient(headers=headers) as client, \
                streamable_http_client(url, http_client=client) as (read, write, *_), \
                ClientSession(read, write, read_timeout_seconds=30) as s:
            await s.initialize()
            result = await s.call_tool("whoami", {"spell": spell})
    return str(result.content[0].text)


# A session token's characters, each spelt otherwise by some writer; the tail is what every
# spelling writes as it is.
SPELT_KEY, TAIL = "plain/echoed+credential=7d41c0ffee93b2", "7d41c0ffee93b2"


_TEXT_SPELLINGS = [s for s in SPELLINGS if s and s != "base64"]


@pytest.mark.parametrize(("headers", "spell"), [
    *[({"Authorization": f"Bearer {SPELT_KEY}"}, s) for s in _TEXT_SPELLINGS],
    ({"Cookie": f"sid={SPELT_KEY}"}, ""),  # the cookie's value alone
], ids=[*_TEXT_SPELLINGS, "cookie-value"])
async def test_a_credential_the_server_quotes_in_another_spelling_is_never_recorded(
    tmp_path: pathlib.Path, mcp_ledger: Ledger, headers: dict[str, str], spell: str,
) -> None:
    # A tool relaying an upstream's JSON text (``\\/``, ``\\u002B``) or URL (``%2F``).
    server = HttpServer(mcp_ledger, "streamable-http").start()
    tape = tmp_path / "spelt.json"
    try:
        live = await _whoami_by(server.url, headers, spell,
                                dejacache.cassette(str(tape), mode="record"))
    finally:
        server.stop()
    assert live.startswith("Bad credentials: ") and TAIL in live
    assert TAIL not in tape.read_text() and "<REDACTED>" in tape.read_text()
    replayed = await _whoami_by(server.url, headers, spell,
                                dejacache.cassette(str(tape), mode="replay"))
    assert replayed.startswith("Bad credentials: <REDACTED> (")


async def test_a_credential_the_server_quotes_inside_base64_is_never_recorded(
    tmp_path: pathlib.Path, mcp_ledger: Ledger,
) -> None:
    # A tool relaying an echo of the request's bytes, base64-encoded.
    import base64

    server = HttpServer(mcp_ledger, "streamable-http").start()
    tape = tmp_path / "b64.json"
    headers = {"Authorization": f"Bearer {SPELT_KEY}"}
    try:
        live = await _whoami_by(server.url, headers, "base64",
                                dejacache.cassette(str(tape), mode="record"))
    finally:
        server.stop()
    coded = live.removeprefix("Bad credentials: ").split(" ")[0]
    assert SPELT_KEY.encode() in base64.b64decode(coded)
    stored = tape.read_text()
    assert coded not in stored and "<REDACTED>" in stored
    replayed = await _whoami_by(server.url, headers, "base64",
                                dejacache.cassette(str(tape), mode="replay"))
    kept = replayed.removeprefix("Bad credentials: ").split("<REDACTED>")
    assert len(kept) == 2 and SPELT_KEY.encode() not in base64.b64decode(kept[0] + "==")
