"""The ticket-desk MCP server, driven by the real ``mcp.ClientSession`` with no dejacache
involved, over stdio, streamable HTTP and SSE: what makes it a trustworthy stand-in for the
MCP servers an agent uses in the record and replay tests.

A stdio session starts a process (about a second, most of it importing ``mcp``), so the
checks are grouped by concern rather than one per call.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import SERVER_NAME
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from mcp_servers import HttpServer, StdioServer, session


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_handshake_names_the_server_and_tools_carry_their_annotations(
    mcp_server: StdioServer | HttpServer,
) -> None:
    async with session(mcp_server) as s:
        init = await s.initialize()
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert init.server_info.name == SERVER_NAME and init.instructions
    caps = init.capabilities
    assert caps.tools is not None and caps.resources is not None and caps.prompts is not None
    assert set(tools) == {"search_docs", "get_ticket", "close_ticket", "add_note", "get_weather",
                          "echo", "redeploy", "whoami"}
    for name in ("search_docs", "get_ticket", "get_weather", "echo", "whoami"):
        hints = tools[name].annotations
        assert hints is not None and hints.read_only_hint is True, name
    for name in ("close_ticket", "redeploy"):
        closing = tools[name].annotations
        assert closing is not None and closing.destructive_hint is True, name
        assert closing.read_only_hint is False
    assert tools["add_note"].annotations is None
    schema = tools["get_ticket"].output_schema  # a structured result, validated by the client
    assert schema is not None and "status" in schema["properties"]
    assert mcp_server.ledger.requests() == ["initialize", "notifications/initialized",
                                            "tools/list"]


async def test_answers_vary_per_call_and_a_destructive_tool_changes_what_reads_see(
    mcp_server: StdioServer | HttpServer,
) -> None:
    async with session(mcp_server) as s:
        await s.initialize()
        first = await s.call_tool("get_ticket", {"id": 1})
        again = await s.call_tool("get_ticket", {"id": 1})
        closed = await s.call_tool("close_ticket", {"id": 1})
        noted = await s.call_tool("add_note", {"id": 1, "text": "dup of 7"})
        after = await s.call_tool("get_ticket", {"id": 1})
        weather = [await s.call_tool("get_weather", {"city": "Paris"}) for _ in range(2)]
        resource = await s.read_resource("ticket://1")
        still_open = await s.read_resource("tickets://open")
    assert first.structured_content is not None and again.structured_content is not None
    assert first.structured_content["status"] == "open"
    assert first.structured_content["seen"] < again.structured_content["seen"]
    assert first.structured_content["nonce"] != again.structured_content["nonce"]
    assert _text(first) != _text(again)
    assert not closed.is_error and "closed ticket 1" in _text(closed)
    assert not noted.is_error
    assert after.structured_content == {**after.structured_content, "status": "closed",
                                        "notes": ["dup of 7"]}
    assert _text(weather[0]).startswith("sunny in Paris") and _text(weather[0]) != _text(weather[1])
    assert json.loads(resource.contents[0].text)["status"] == "closed"  # type: ignore[union-attr]
    assert json.loads(still_open.contents[0].text)["open"] == [2]  # type: ignore[union-attr]


async def test_a_tool_error_result_and_a_json_rpc_error(
    mcp_server: StdioServer | HttpServer,
) -> None:
    async with session(mcp_server) as s:
        await s.initialize()
        refused = await s.call_tool("close_ticket", {"id": 3})  # already closed
        with pytest.raises(MCPError) as missing:
            await s.call_tool("get_ticket", {"id": 99})
        with pytest.raises(MCPError) as unreadable:
            await s.read_resource("ticket://99")
        empty = await s.call_tool("add_note", {"id": 1, "text": " "})
        after = await s.call_tool("get_weather", {"city": "Oslo"})  # the session carries on
    assert refused.is_error and "ticket 3 is already closed" in _text(refused)
    assert empty.is_error and "a note needs some text" in _text(empty)
    assert refused.structured_content is None
    assert missing.value.error.code == INVALID_PARAMS
    assert missing.value.error.message == "no ticket 99"
    assert missing.value.error.data == {"id": 99}
    assert "no ticket 99" in unreadable.value.error.message
    assert not after.is_error
    # The first successful call of a tool the session has not listed makes ClientSession list
    # the tools itself, after the call, to validate the result against the tool's output
    # schema: a request no caller wrote, which a recording must hold too.
    assert mcp_server.ledger.requests()[2:] == [
        "tools/call close_ticket", "tools/call get_ticket", "resources/read ticket://99",
        "tools/call add_note", "tools/call get_weather", "tools/list"]


async def test_echo_answers_late_and_redeploy_changes_a_tools_annotations_and_says_so(
    mcp_server: StdioServer | HttpServer,
) -> None:
    import time

    seen: list[str] = []

    async def on_message(message: Any) -> None:
        seen.append(getattr(message, "method", type(message).__name__))

    async with session(mcp_server, message_handler=on_message) as s:
        await s.initialize()
        t0 = time.perf_counter()
        late = await s.call_tool("echo", {"text": "hi", "delay_ms": 300})
        waited = time.perf_counter() - t0
        before = {t.name: t.annotations for t in (await s.list_tools()).tools}
        done = await s.call_tool("redeploy", {"tool": "get_weather", "read_only": False})
        after = {t.name: t.annotations for t in (await s.list_tools()).tools}
        weather = await s.call_tool("get_weather", {"city": "Oslo"})  # the same function
    assert _text(late).startswith("hi (#") and waited >= 0.3
    assert before["get_weather"] is not None and before["get_weather"].read_only_hint is True
    assert not done.is_error and after["get_weather"] is not None
    assert after["get_weather"].read_only_hint is False
    assert after["get_weather"].destructive_hint is True
    assert seen == ["notifications/tools/list_changed"]  # the session that asked is told
    assert _text(weather).startswith("sunny in Oslo")


async def test_resources_prompts_and_progress(mcp_server: StdioServer | HttpServer) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with session(mcp_server) as s:
        await s.initialize()
        listed = await s.list_resources()
        templates = await s.list_resource_templates()
        read = [await s.read_resource("ticket://2") for _ in range(2)]
        prompts = await s.list_prompts()
        prompt = await s.get_prompt("triage", {"id": "2"})
        found = await s.call_tool("search_docs", {"query": "timeout"},
                                  progress_callback=on_progress)
    assert [str(r.uri) for r in listed.resources] == ["tickets://open"]
    assert [t.uri_template for t in templates.resource_templates] == ["ticket://{id}"]
    texts = [r.contents[0].text for r in read]  # type: ignore[union-attr]
    assert json.loads(texts[0])["title"] == "Export drops the last row" and texts[0] != texts[1]
    assert [p.name for p in prompts.prompts] == ["triage"]
    assert prompts.prompts[0].arguments and prompts.prompts[0].arguments[0].name == "id"
    text = prompt.messages[0].content.text  # type: ignore[union-attr]
    assert text.startswith("Triage ticket 2 (open): Export drops the last row.")
    assert "3 documents match 'timeout'" in _text(found)
    assert progress == [(1, 2, "searching"), (2, 2, "ranked")]


async def test_each_stdio_session_is_a_fresh_process(mcp_stdio: StdioServer) -> None:
    statuses = []
    for _ in range(2):
        async with session(mcp_stdio) as s:
            await s.initialize()
            await s.call_tool("close_ticket", {"id": 1})
            statuses.append((await s.call_tool("close_ticket", {"id": 1})).is_error)
    assert statuses == [True, True]  # the second process had ticket 1 open again
    starts = mcp_stdio.ledger.events("start")
    assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]
    assert {r["pid"] for r in mcp_stdio.ledger.events("request")} == {s["pid"] for s in starts}


async def test_http_sessions_share_one_desk_and_a_held_port_counts_connections(
    mcp_http: HttpServer,
) -> None:
    async with session(mcp_http) as s:
        await s.initialize()
        await s.call_tool("close_ticket", {"id": 2})
    async with session(mcp_http) as s:
        await s.initialize()
        seen = await s.call_tool("get_ticket", {"id": 2})
    assert seen.structured_content is not None and seen.structured_content["status"] == "closed"
    assert mcp_http.ledger.starts() == 1
    assert {r["path"] for r in mcp_http.ledger.events("http")} == {"/mcp"}
    mcp_http.stop()
    with mcp_http.held() as drops:
        assert drops.count == 0
        with socket.create_connection(("127.0.0.1", mcp_http.port), timeout=10) as c:
            assert c.recv(1) == b""  # accepted, counted, closed unanswered
        assert drops.count == 1
