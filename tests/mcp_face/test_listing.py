"""When ``mcp_tool_cache`` lists a session's tools again: on a change the server announces,
on reconnect (another handshake result), when a 2026-07-28 listing's ``ttlMs`` runs out, and
for a tool the listing did not have. The ticket desk over streamable HTTP; the listing's
clock is the test's."""

from __future__ import annotations

import pathlib
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import Ledger
from mcp import ClientSession
from mcp.server.caching import CacheHint
from mcp_servers import READ_TIMEOUT, HttpServer, arrived, on_change, session

import dejacache
from dejacache.mcp import mcp_tool_cache
from dejacache.mcp._listing import Listing


def listed(ledger: Ledger) -> int:
    return ledger.requests().count("tools/list")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_handshake_era_listing_holds_until_the_server_says_otherwise(
    mcp_http: HttpServer,
) -> None:
    changed = anyio.Event()
    async with session(mcp_http, message_handler=on_change(changed)) as s:
        await s.initialize()
        book = Listing(s, clock=(clock := Clock()))
        assert await book.annotations("get_weather") == (True, {
            "readOnlyHint": True, "destructiveHint": False, "openWorldHint": False})
        clock.now += 10 ** 6  # no ttl on this protocol: time alone changes nothing
        assert (await book.annotations("get_weather"))[0] and listed(mcp_http.ledger) == 1
        assert await book.annotations("add_note") == (True, None)  # declares nothing
        assert await book.annotations("ghost") == (False, None)  # listed again: not there
        assert listed(mcp_http.ledger) == 2
        await s.call_tool("redeploy", {"tool": "get_weather", "read_only": False})
        await arrived(changed)
        hints = (await book.annotations("get_weather"))[1]
        assert hints["readOnlyHint"] is False and listed(mcp_http.ledger) == 3


async def test_a_2026_listing_holds_for_its_ttl(tmp_path: pathlib.Path) -> None:
    from mcp.client.streamable_http import streamable_http_client

    ledger = Ledger(tmp_path / "ledger.jsonl")
    server = HttpServer(ledger, "streamable-http",
                        cache_hints={"tools/list": CacheHint(ttl_ms=5_000)}).start()
    try:
        async with streamable_http_client(server.url) as (read, write), ClientSession(
                read, write, read_timeout_seconds=READ_TIMEOUT) as s:
            await s.discover()
            assert s.protocol_version == "2026-07-28"
            book = Listing(s, clock=(clock := Clock()))
            for step in (0.0, 4.9):
                clock.now += step
                assert (await book.annotations("get_weather"))[0]
            assert listed(ledger) == 1
            clock.now += 0.2  # five seconds after the listing: stale
            assert (await book.annotations("get_weather"))[0] and listed(ledger) == 2
    finally:
        server.stop()


async def test_a_session_that_connects_again_is_listed_again(mcp_http: HttpServer) -> None:
    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s)
            first = await cached.call_tool("get_weather", {"city": "Oslo"})
            # Another session redeploys the tool: this one hears nothing...
            async with session(mcp_http) as other:
                await other.initialize()
                await other.call_tool("redeploy", {"tool": "get_weather", "read_only": False})
            again: Any = await cached.call_tool("get_weather", {"city": "Oslo"})
            assert again.content[0].text == first.content[0].text  # (the cache's answer)
            # ...until it connects again: another handshake, another listing.
            assert s.initialize_result is not None
            s.adopt(s.initialize_result.model_copy())
            after = await cached.call_tool("get_weather", {"city": "Oslo"})
    assert after.content[0].text != first.content[0].text
    assert ledger.requests().count("tools/call get_weather") == 2
