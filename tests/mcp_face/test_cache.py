"""``mcp_tool_cache``: an MCP session's read-only tools cached by their own annotations.

The ticket desk over streamable HTTP (one desk shared by every session, so a write in one
session is seen by the next): ``get_ticket``/``get_weather``/``search_docs`` are read-only,
``close_ticket`` destructive, ``add_note`` declares nothing. Every answer carries the server's
call number and a nonce, so a cached answer is told from a fresh one by its text. Caches are
shared per server name for the process, so each test names its server.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import Ledger
from mcp.shared.exceptions import MCPError
from mcp_servers import HttpServer, session

import dejacache
from dejacache.mcp import CachedSession, mcp_tool_cache
from dejacache.mcp._cache import tool_role


def calls(ledger: Ledger, tool: str) -> int:
    return ledger.requests().count(f"tools/call {tool}")


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize(("hints", "opted_in", "role"), [
    ({"readOnlyHint": True}, False, "read"),
    ({"read_only_hint": True, "destructive_hint": False}, False, "read"),
    ({"readOnlyHint": False, "destructiveHint": True}, False, "write"),
    ({"readOnlyHint": False, "destructiveHint": False}, False, "write"),  # additive: a write
    ({"destructiveHint": False}, False, "write"),  # readOnlyHint defaults to false
    ({"openWorldHint": True}, False, "write"),
    (None, False, "write"),  # no annotations: may write, never cached
    (None, True, "read"),  # unless the caller opts in
    ({"readOnlyHint": False}, True, "read"),
])
def test_the_annotation_rules(hints: Any, opted_in: bool, role: str) -> None:
    assert tool_role(hints, opted_in) == role


async def test_read_only_tools_hit_and_a_destructive_tool_invalidates_them(
    mcp_http: HttpServer,
) -> None:
    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s)
            assert isinstance(cached, CachedSession) and cached.server_name() == "ticket-desk"
            first = await cached.call_tool("get_ticket", {"id": 1})
            again = await cached.call_tool("get_ticket", {"id": 1})
            assert again.structured_content == first.structured_content  # the same nonce
            assert calls(ledger, "get_ticket") == 1
            other = await cached.call_tool("get_ticket", {"id": 2})  # other arguments
            assert other.structured_content["id"] == 2 and calls(ledger, "get_ticket") == 2

            closed = await cached.call_tool("close_ticket", {"id": 1})
            assert not closed.is_error
            after = await cached.call_tool("get_ticket", {"id": 1})
            assert after.structured_content["status"] == "closed"  # no stale read
            assert calls(ledger, "get_ticket") == 3
            # The server's other cached results went too: one resource per server.
            await cached.call_tool("get_ticket", {"id": 2})
            assert calls(ledger, "get_ticket") == 4
            # Delegation: the session's own methods are there.
            assert (await cached.list_tools()).tools


async def test_a_tool_without_annotations_is_a_write_unless_opted_in(
    mcp_http: HttpServer,
) -> None:
    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s, server="desk-notes")
            await cached.call_tool("get_ticket", {"id": 2})
            notes = [await cached.call_tool("add_note", {"id": 2, "text": "x"})
                     for _ in range(2)]
            assert text(notes[0]) != text(notes[1]) and calls(ledger, "add_note") == 2
            seen = await cached.call_tool("get_ticket", {"id": 2})  # add_note invalidated it
            assert seen.structured_content["notes"] == ["x", "x"]
            assert calls(ledger, "get_ticket") == 2

            opted = mcp_tool_cache(s, server="desk-optin", cacheable=["add_note"])
            a = await opted.call_tool("add_note", {"id": 2, "text": "y"})
            b = await opted.call_tool("add_note", {"id": 2, "text": "y"})
            assert text(a) == text(b) and calls(ledger, "add_note") == 3


async def test_tenants_never_share_results(mcp_http: HttpServer) -> None:
    ledger = mcp_http.ledger
    async with session(mcp_http) as s:
        await s.initialize()
        cached = mcp_tool_cache(s, server="desk-tenants")
        answers = {}
        for tenant in ("acme", "globex", "acme"):
            with dejacache.agent_session(tenant=tenant):
                answers.setdefault(tenant, []).append(
                    text(await cached.call_tool("get_weather", {"city": "Paris"})))
        assert answers["acme"][0] == answers["acme"][1]
        assert answers["globex"][0] != answers["acme"][0]
        assert calls(ledger, "get_weather") == 2
        # A write in one tenant leaves the other tenant's entries alone.
        with dejacache.agent_session(tenant="globex"):
            await cached.call_tool("close_ticket", {"id": 2})
        with dejacache.agent_session(tenant="acme"):
            assert text(await cached.call_tool("get_weather", {"city": "Paris"})) == \
                answers["acme"][0]
        with pytest.raises(dejacache.ScopeError):  # per tenant, and no tenant here
            await cached.call_tool("get_weather", {"city": "Paris"})


async def test_error_results_and_json_rpc_errors_are_never_cached(
    mcp_http: HttpServer,
) -> None:
    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s, server="desk-errors",
                                    resources={"get_ticket": "tickets"})
            for _ in range(2):
                with pytest.raises(MCPError):
                    await cached.call_tool("get_ticket", {"id": 99})
            assert calls(ledger, "get_ticket") == 2
            opted = mcp_tool_cache(s, server="desk-errors", cacheable=["close_ticket"])
            for _ in range(2):
                refused = await opted.call_tool("close_ticket", {"id": 3})
                assert refused.is_error
            assert calls(ledger, "close_ticket") == 2


async def test_a_named_resource_keeps_other_tools_cached(mcp_http: HttpServer) -> None:
    ledger = mcp_http.ledger
    tickets = {"get_ticket": "tickets", "close_ticket": "tickets"}
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s, server="desk-named", resources=tickets)
            weather = text(await cached.call_tool("get_weather", {"city": "Oslo"}))
            await cached.call_tool("get_ticket", {"id": 2})
            await cached.call_tool("close_ticket", {"id": 2})
            assert text(await cached.call_tool("get_weather", {"city": "Oslo"})) == weather
            assert (await cached.call_tool("get_ticket", {"id": 2})).structured_content[
                "status"] == "closed"
            assert calls(ledger, "get_weather") == 1 and calls(ledger, "get_ticket") == 2


def test_without_mcp_installed_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mcp", None)  # ``import mcp`` raises ImportError
    with pytest.raises(dejacache.ConfigurationError, match=r"pip install 'dejacache\[mcp\]'"):
        mcp_tool_cache(object())


async def test_a_write_not_named_in_resources_invalidates_the_named_ones_too(
    mcp_http: HttpServer,
) -> None:
    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s, server="desk-unnamed", resources={"get_ticket": "tickets"})
            await cached.call_tool("get_ticket", {"id": 1})
            await cached.call_tool("close_ticket", {"id": 1})  # a write nobody placed
            after = await cached.call_tool("get_ticket", {"id": 1})
            assert after.structured_content["status"] == "closed"  # no stale read
            assert calls(ledger, "get_ticket") == 2
