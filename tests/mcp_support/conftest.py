"""The ticket-desk MCP server (fake_mcp_server.py) for the MCP tests, on every transport.

``mcp_server`` is parametrized over stdio, streamable HTTP and SSE; ``mcp_stdio``,
``mcp_http`` and ``mcp_sse`` give one transport. Each test gets its own ledger, so what
reached a server is counted per test. The server needs mcp 2 (``MCPServer``): the modules
are imported by the fixtures, so a venv without it collects the tests and skips them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def mcp_ledger(tmp_path: pathlib.Path) -> Any:
    pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")
    from fake_mcp_server import Ledger

    return Ledger(tmp_path / "mcp-ledger.jsonl")


@pytest.fixture
def mcp_stdio(mcp_ledger: Any, tmp_path: pathlib.Path) -> Any:
    from mcp_servers import StdioServer

    return StdioServer(mcp_ledger, tmp_path / "mcp-server.log")


@pytest.fixture
def mcp_http(mcp_ledger: Any) -> Iterator[Any]:
    from mcp_servers import HttpServer

    server = HttpServer(mcp_ledger, "streamable-http").start()
    yield server
    server.stop()


@pytest.fixture
def mcp_sse(mcp_ledger: Any) -> Iterator[Any]:
    from mcp_servers import HttpServer

    server = HttpServer(mcp_ledger, "sse").start()
    yield server
    server.stop()


@pytest.fixture(params=["stdio", "streamable-http", "sse"])
def mcp_server(request: pytest.FixtureRequest) -> Any:
    name = {"stdio": "mcp_stdio", "streamable-http": "mcp_http", "sse": "mcp_sse"}
    return request.getfixturevalue(name[request.param])
