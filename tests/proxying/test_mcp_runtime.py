"""``dejacache mcp-proxy --cache``: ``mcp_tool_cache``'s rules for any MCP client. A
read-only tool's result is served again from the store, a destructive tool invalidates it,
a tool that declares nothing is never cached, and an error is never kept (the real
``mcp`` client against the ticket desk, through the proxy as a stdio server)."""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Any

import anyio
import pytest
from proxy_support import proxy_env

SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "mcp_support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import LEDGER_ENV, Ledger  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

ENTRY = "import sys; from dejacache.cli import main; sys.exit(main(sys.argv[1:]))"


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


async def call(s: Any, name: str, args: dict[str, Any]) -> str:
    try:
        return text(await s.call_tool(name, args))
    except Exception as exc:  # a JSON-RPC error: the client raises it
        return str(getattr(exc, "message", None) or exc)


def test_read_only_tools_are_cached_and_writers_invalidate_them(tmp_path: pathlib.Path
                                                                ) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    env = {**proxy_env(tmp_path), LEDGER_ENV: ledger.path}
    store = f"sqlite:///{tmp_path / 'cache.db'}"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", ENTRY, "mcp-proxy", "--cache", "--store", store, "--",
              sys.executable, os.fspath(SUPPORT / "fake_mcp_server.py")], env=env)

    async def session() -> list[str]:
        out = []
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for name, args in (("get_weather", {"city": "Paris"}),
                               ("get_weather", {"city": "Paris"}),  # cached
                               ("add_note", {"id": 1, "text": "hi"}),  # no annotations
                               ("get_weather", {"city": "Paris"}),  # a writer ran: live
                               ("get_ticket", {"id": 99}),  # an error: never kept
                               ("get_ticket", {"id": 99}),
                               ("get_weather", {"city": "Rome"})):
                out.append(await call(s, name, args))
        return out

    got = anyio.run(session)
    assert got[0] == got[1] != got[3]
    assert got[4] == got[5] == "no ticket 99"
    calls = [r for r in ledger.requests() if r.startswith("tools/call")]
    assert calls == ["tools/call get_weather", "tools/call add_note", "tools/call get_weather",
                     "tools/call get_ticket", "tools/call get_ticket", "tools/call get_weather"]

    again = anyio.run(session)  # another client, the same store: Paris is still cached
    assert again[0] == got[3]
    assert ledger.starts() == 2


def test_launches_with_other_credentials_never_share_the_store(tmp_path: pathlib.Path) -> None:
    # Two IDE configurations, one per account: the server's token goes in as --env, and
    # each account's results stay its own though both proxies share one store.
    ledger = Ledger(tmp_path / "ledger.jsonl")
    store = tmp_path / "cache.db"
    alice, bob = "tok-alice-5531", "tok-bob-7702"
    log = tmp_path / "stderr.log"

    async def weather(token: str) -> str:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-c", ENTRY, "mcp-proxy", "--cache", "--store", f"sqlite:///{store}",
                  "--env", f"API_KEY={token}", "--env", "REGION", "--",
                  sys.executable, os.fspath(SUPPORT / "fake_mcp_server.py")],
            env={**proxy_env(tmp_path), LEDGER_ENV: ledger.path, "REGION": "eu"})
        with log.open("a") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w), \
                    ClientSession(r, w) as s:
                await s.initialize()
                return await call(s, "get_weather", {"city": "Paris"})

    got = [anyio.run(weather, token) for token in (alice, bob, alice)]
    assert got[0] != got[1] and got[2] == got[0]  # bob's is his own; alice's is a hit
    assert ledger.requests().count("tools/call get_weather") == 2
    kept = b"".join(p.read_bytes() for p in tmp_path.glob("cache.db*")) + log.read_bytes()
    assert b"sunny in Paris" in kept
    assert alice.encode() not in kept and bob.encode() not in kept
