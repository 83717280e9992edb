"""openai-agents (``.venv-fw3``) running an agent whose tool comes from an MCP server.

The ticket-desk server of the MCP tests (tests/mcp_support/fake_mcp_server.py), started
over stdio by the agents SDK's own ``MCPServerStdio`` and reached over streamable HTTP by its
``MCPServerStreamableHttp``; the model is the loopback provider. No dejacache here: this is
the setup whose MCP calls dejacache is to record and replay, shown to work on its own (on
mcp 2 the SDK connects through ``mcp.Client``, which probes ``server/discover`` first).
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents runs in .venv-fw3 (make test-frameworks)")
pytest.importorskip("mcp.server.mcpserver", reason="the MCP server needs mcp 2")

from fake_mcp_server import Ledger
from mcp_servers import HttpServer, StdioServer

from conftest import KEY


async def _ask(mcp_server: Any, base_url: str) -> str:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    async with mcp_server, AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
        agent = Agent(name="weather", instructions="Answer with the tool.",
                      mcp_servers=[mcp_server],
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        result = await Runner.run(agent, "Weather in Paris?")
        return str(result.final_output)


def _only_the_weather() -> Any:
    # The loopback model calls the first tool it is offered, with {"city": "Paris"}.
    from agents.mcp import create_static_tool_filter

    return create_static_tool_filter(allowed_tool_names=["get_weather"])


def test_an_agent_uses_a_tool_of_a_stdio_mcp_server(provider: Any, tmp_path: pathlib.Path) -> None:
    from agents.mcp import MCPServerStdio

    desk = StdioServer(Ledger(tmp_path / "ledger.jsonl"), tmp_path / "server.log")
    params = desk.params
    # A loaded machine can take seconds to start a Python process that imports mcp.
    server = MCPServerStdio(params={"command": params.command, "args": params.args,
                                    "env": params.env or {}},
                            tool_filter=_only_the_weather(), client_session_timeout_seconds=30)
    answer = asyncio.run(_ask(server, provider.openai_url))
    # The tool's text content reaches the model as the call's output (a list of input_text
    # parts): the first call this server process answered.
    assert answer.startswith("Tool said") and "sunny in Paris (#1 " in answer, answer
    assert desk.ledger.starts() == 1
    # The modern handshake: one server/discover, no initialize; the tools are listed for each
    # turn of the run (two model calls).
    assert desk.ledger.requests() == ["server/discover", "tools/list", "tools/call get_weather",
                                      "tools/list"]


def test_an_agent_uses_a_tool_of_a_streamable_http_mcp_server(
    provider: Any, tmp_path: pathlib.Path,
) -> None:
    from agents.mcp import MCPServerStreamableHttp

    desk = HttpServer(Ledger(tmp_path / "ledger.jsonl"), "streamable-http").start()
    try:
        server = MCPServerStreamableHttp(params={"url": desk.url}, tool_filter=_only_the_weather(),
                                         client_session_timeout_seconds=30)
        answer = asyncio.run(_ask(server, provider.openai_url))
    finally:
        desk.stop()
    assert answer.startswith("Tool said") and "sunny in Paris (#1 " in answer, answer
    assert desk.ledger.requests() == ["server/discover", "tools/list", "tools/call get_weather",
                                      "tools/list"]
    assert {r["path"] for r in desk.ledger.events("http")} == {"/mcp"}
