"""``mcp_tool_cache``: an MCP session's read-only tools cached by their own annotations.

The ticket desk over streamable HTTP (one desk shared by every session, so a write in one
session is seen by the next): ``get_ticket``/``get_weather``/``search_docs`` are read-only,
``close_ticket`` destructive, ``add_note`` declares nothing, ``redeploy`` changes another
tool's annotations. Every answer carries the server's call number and a nonce, so a cached
answer is told from a fresh one by its text. Caches are shared per server identity for the
process; every test's server is a fresh one on a fresh port.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from fake_mcp_server import LEDGER_ENV, Ledger
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_servers import READ_TIMEOUT, SCRIPT, HttpServer, arrived, on_change, session

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
    ({"destructiveHint": False}, True, "read"),  # declares it adds, not that it changes
    ({"readOnlyHint": True}, True, "read"),
])
def test_the_annotation_rules(hints: Any, opted_in: bool, role: str) -> None:
    assert tool_role(hints, opted_in) == role


@pytest.mark.parametrize("opted_in", [False, True])
def test_a_tool_the_server_does_not_list_is_never_cached(opted_in: bool) -> None:
    assert tool_role(None, opted_in, tool="ghost", listed=False) == "write"
    assert tool_role({"readOnlyHint": True}, opted_in, tool="ghost", listed=False) == "write"


@pytest.mark.parametrize(("hints", "said"), [
    ({"readOnlyHint": False}, "readOnlyHint: false"),
    ({"destructiveHint": True}, "destructiveHint: true"),
    ({"read_only_hint": False, "destructive_hint": True}, "destructiveHint: true"),
])
def test_cacheable_never_overrides_a_tool_that_says_it_changes_things(
    hints: Any, said: str,
) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=f"'close_ticket'.*{said}"):
        tool_role(hints, True, tool="close_ticket")


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
            opted = mcp_tool_cache(s, server="desk-errors", cacheable=["add_note"])
            for _ in range(2):
                refused = await opted.call_tool("add_note", {"id": 3, "text": " "})
                assert refused.is_error
            assert calls(ledger, "add_note") == 2


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


# ---------------------------------------------------------------- whose cache


async def _search(server: Any, **options: Any) -> str:
    """One ``search_docs`` through a fresh ``mcp.Client`` to ``server`` (a URL or stdio
    parameters), cached."""
    from mcp import Client

    async with Client(server, read_timeout_seconds=READ_TIMEOUT) as client:
        cached = mcp_tool_cache(client, **options)
        return text(await cached.call_tool("search_docs", {"query": "timeout"}))


async def test_two_servers_with_one_name_never_share_a_cache(tmp_path: pathlib.Path) -> None:
    ledgers = [Ledger(tmp_path / "a.jsonl"), Ledger(tmp_path / "b.jsonl")]
    servers = [HttpServer(ledger, "streamable-http").start() for ledger in ledgers]
    try:
        with dejacache.agent_session(tenant="acme"):
            first = [await _search(srv.url) for srv in servers]  # both say "ticket-desk"
            assert [calls(x, "search_docs") for x in ledgers] == [1, 1]
            assert first[0] != first[1]  # each server answered for itself
            assert await _search(servers[0].url) == first[0]  # the same server: a hit
            # A ClientSession cannot tell what it is connected to: a cache of its own...
            async with session(servers[1]) as s:
                await s.initialize()
                own = mcp_tool_cache(s)
                assert text(await own.call_tool("search_docs", {"query": "timeout"})) \
                    != first[1]
                # ...unless it says: then it shares the server's.
                named = mcp_tool_cache(s, server=servers[1].url)
                assert text(await named.call_tool("search_docs", {"query": "timeout"})) \
                    == first[1]
        assert [calls(x, "search_docs") for x in ledgers] == [1, 2]
    finally:
        for srv in servers:
            srv.stop()


async def test_two_stdio_servers_with_one_name_never_share_a_cache(
    tmp_path: pathlib.Path,
) -> None:
    from mcp import StdioServerParameters

    ledger = Ledger(tmp_path / "ledger.jsonl")
    scripts = []
    for name in ("desk_a.py", "desk_b.py"):
        scripts.append(tmp_path / name)
        shutil.copy(SCRIPT, scripts[-1])
    params = [StdioServerParameters(command=sys.executable, args=[str(p)],
                                    env={LEDGER_ENV: ledger.path}) for p in scripts]
    with dejacache.agent_session(tenant="acme"):
        answers = [await _search(p) for p in params]
    assert answers[0] != answers[1] and calls(ledger, "search_docs") == 2
    assert ledger.starts() == 2


async def test_two_callers_of_one_url_never_share_a_cache(mcp_http: HttpServer) -> None:
    # A gateway scoping tools and data by ``?token=``: one URL, a server per token.
    alice, bob = (f"{mcp_http.url}?token=tok-{who}&team=a" for who in ("alice", "bob"))
    with dejacache.agent_session(tenant="acme"):
        answers = [await _search(url) for url in (alice, bob, alice, bob)]
    assert answers[0] != answers[1] and answers[2:] == answers[:2]
    assert calls(mcp_http.ledger, "search_docs") == 2


async def test_credentials_in_a_url_or_command_line_never_reach_a_key_or_a_store(
    mcp_http: HttpServer, tmp_path: pathlib.Path,
) -> None:
    from mcp import StdioServerParameters

    secrets = ["pw-hunter2-0451", "tok-s3cret-7781", "plain-secret-value", "tok-other-9932"]
    store = dejacache.MemoryStore()
    port = mcp_http.port
    urls = [f"http://alice:{secrets[0]}@127.0.0.1:{port}/mcp?token={secrets[1]}&team=a",
            f"http://alice:{secrets[0]}@127.0.0.1:{port}/mcp?token=another&team=a"]
    ledger = Ledger(tmp_path / "stdio.jsonl")
    stdio = StdioServerParameters(
        command=sys.executable, env={LEDGER_ENV: ledger.path},
        args=[str(SCRIPT), "--api-key", secrets[2], f"--token={secrets[3]}"])
    names = []
    with dejacache.agent_session(tenant="acme"):
        for server in (urls[0], urls[0], urls[1], stdio, stdio):
            from mcp import Client

            async with Client(server, read_timeout_seconds=READ_TIMEOUT) as client:
                cached = mcp_tool_cache(client, store=store)
                await cached.call_tool("get_weather", {"city": "Paris"})
                names.append(cached.server_name())
    # Masked, not dropped: another token is another identity (its answers may differ).
    assert calls(mcp_http.ledger, "get_weather") == 2 and calls(ledger, "get_weather") == 1
    entries = [(k, r.name, r.request, r.value) for k, r in store.iterate()]
    assert len(entries) == 3  # two URLs, one command line
    kept = repr(entries) + repr(names) + repr(dejacache.stats())
    assert "sunny in Paris" in kept and set(names) == {"ticket-desk"}
    for secret in secrets:
        assert secret not in kept


# ---------------------------------------------------------------- what the tools say now


async def test_a_tool_redeployed_as_destructive_is_no_longer_cached(
    mcp_http: HttpServer,
) -> None:
    ledger = mcp_http.ledger
    changed = anyio.Event()
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http, message_handler=on_change(changed)) as s:
            await s.initialize()
            cached = mcp_tool_cache(s)
            first = text(await cached.call_tool("get_weather", {"city": "Paris"}))
            assert text(await cached.call_tool("get_weather", {"city": "Paris"})) == first
            # The server says its tools changed (notifications/tools/list_changed)...
            await s.call_tool("redeploy", {"tool": "get_weather", "read_only": False})
            await arrived(changed)
            after = [text(await cached.call_tool("get_weather", {"city": "Paris"}))
                     for _ in range(2)]
    # ...so the tool is listed again: now destructive, it runs every time.
    assert first not in after and after[0] != after[1]
    assert calls(ledger, "get_weather") == 3


async def test_cacheable_naming_a_destructive_tool_is_refused_before_it_runs(
    mcp_http: HttpServer,
) -> None:
    with dejacache.agent_session(tenant="acme"):
        async with session(mcp_http) as s:
            await s.initialize()
            cached = mcp_tool_cache(s, cacheable=["close_ticket", "add_note"])
            with pytest.raises(dejacache.ConfigurationError, match=r"'close_ticket'"):
                await cached.call_tool("close_ticket", {"id": 1})
            noted = [await cached.call_tool("add_note", {"id": 1, "text": "x"})
                     for _ in range(2)]  # declares nothing: the caller's call to cache it
    assert calls(mcp_http.ledger, "close_ticket") == 0
    assert text(noted[0]) == text(noted[1]) and calls(mcp_http.ledger, "add_note") == 1


# ---------------------------------------------------------------- protocol 2026-07-28


async def test_on_2026_07_28_a_listing_is_trusted_no_longer_than_its_ttl(
    mcp_http: HttpServer,
) -> None:
    from mcp import Client

    ledger = mcp_http.ledger
    with dejacache.agent_session(tenant="acme"):
        async with Client(mcp_http.url, read_timeout_seconds=READ_TIMEOUT) as client:
            assert client.protocol_version == "2026-07-28"
            cached = mcp_tool_cache(client)
            first = text(await cached.call_tool("get_weather", {"city": "Paris"}))
            assert text(await cached.call_tool("get_weather", {"city": "Paris"})) == first
            # A stateless 2026-07-28 client hears of no change without a listen stream;
            # the listing said ttlMs 0 (immediately stale), so it is read again per call.
            await client.call_tool("redeploy", {"tool": "get_weather", "read_only": False})
            after = text(await cached.call_tool("get_weather", {"city": "Paris"}))
    assert after != first and calls(ledger, "get_weather") == 2
    reqs = [r for r in ledger.requests() if r in ("tools/list", "tools/call get_weather")]
    assert reqs == ["tools/list", "tools/call get_weather", "tools/list", "tools/list",
                    "tools/call get_weather"]


async def test_on_2026_07_28_a_listen_stream_says_when_a_long_lived_listing_changed(
    tmp_path: pathlib.Path,
) -> None:
    from mcp import Client
    from mcp.server.caching import CacheHint

    ledger = Ledger(tmp_path / "ledger.jsonl")
    hints = {"tools/list": CacheHint(ttl_ms=600_000, scope="public")}
    server = HttpServer(ledger, "streamable-http", cache_hints=hints).start()
    try:
        with dejacache.agent_session(tenant="acme"):
            async with Client(server.url, read_timeout_seconds=READ_TIMEOUT) as client:
                cached = mcp_tool_cache(client)
                first = [text(await cached.call_tool("get_weather", {"city": "Oslo"}))
                         for _ in range(3)]
                assert ledger.requests().count("tools/list") == 1  # the server's ten minutes
                async with client.listen(tools_list_changed=True) as changes:
                    await client.call_tool("redeploy", {"tool": "get_weather",
                                                        "read_only": False})
                    assert isinstance(await changes.__anext__(), ToolsListChanged)
                    after = text(await cached.call_tool("get_weather", {"city": "Oslo"}))
    finally:
        server.stop()
    assert len(set(first)) == 1 and after != first[0]
    assert calls(ledger, "get_weather") == 2


async def test_a_session_known_by_no_connection_takes_its_cache_with_it(
    mcp_http: HttpServer,
) -> None:
    import gc
    import weakref

    from dejacache.mcp import _cache

    async def one_session() -> weakref.ref[Any]:
        async with session(mcp_http) as s:
            await s.initialize()
            with dejacache.agent_session(tenant="acme"):
                await mcp_tool_cache(s).call_tool("get_weather", {"city": "Oslo"})
            assert len(_cache._OWNED.get(s) or {}) == 1  # its reader, kept for it alone
            return weakref.ref(s)

    gc.collect()
    before = len(_cache._OWNED)
    gone = await one_session()
    gc.collect()
    assert gone() is None and len(_cache._OWNED) == before  # a session per request leaks none


@pytest.mark.parametrize("how", ["arg", "arg=", "env", "env-shaped"])
async def test_two_stdio_launches_with_other_credentials_never_share_a_cache(
    tmp_path: pathlib.Path, how: str,
) -> None:
    from mcp import StdioServerParameters

    ledger = Ledger(tmp_path / "ledger.jsonl")
    store = dejacache.MemoryStore()
    tokens = ["tok-alice-5531", "tok-bob-7702"]
    if how == "env-shaped":  # a name that says nothing, a value shaped like a key
        tokens = ["sk-" + "a1" * 12, "sk-" + "b2" * 12]

    def launch(token: str) -> Any:
        args, env = [str(SCRIPT)], {LEDGER_ENV: ledger.path}
        if how == "arg":
            args += ["--token", token]
        elif how == "arg=":
            args += [f"--api-key={token}"]
        else:
            env["API_KEY" if how == "env" else "UPSTREAM"] = token
        return StdioServerParameters(command=sys.executable, args=args, env=env)

    names = []
    with dejacache.agent_session(tenant="acme"):
        answers = []
        for token in (*tokens, *tokens):
            from mcp import Client

            async with Client(launch(token), read_timeout_seconds=READ_TIMEOUT) as client:
                cached = mcp_tool_cache(client, store=store)
                answers.append(text(await cached.call_tool("search_docs",
                                                           {"query": "timeout"})))
                names.append(cached.server_name())
    assert answers[0] != answers[1] and answers[2:] == answers[:2]  # each its own, then hits
    assert calls(ledger, "search_docs") == 2
    kept = repr([(k, r.name, r.request, r.value) for k, r in store.iterate()])
    kept += repr(names) + repr(dejacache.stats())
    for token in tokens:
        assert token not in kept


async def test_a_stdio_launchs_other_settings_in_its_environment_are_another_server(
    tmp_path: pathlib.Path,
) -> None:
    # REGION=eu and REGION=us answer differently: the environment a launch names is keyed.
    from mcp import StdioServerParameters

    ledger = Ledger(tmp_path / "ledger.jsonl")
    params = [StdioServerParameters(command=sys.executable, args=[str(SCRIPT)],
                                    env={LEDGER_ENV: ledger.path, "REGION": region})
              for region in ("eu", "us", "eu")]
    with dejacache.agent_session(tenant="acme"):
        answers = [await _search(p) for p in params]
    assert answers[0] != answers[1] and answers[2] == answers[0]
    assert calls(ledger, "search_docs") == 2


@pytest.mark.parametrize("where", ["env", "args"])
async def test_one_file_name_in_two_runs_directories_never_shares_a_cache(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, where: str,
) -> None:
    # Two runs' desk.db may hold other data: a replay maps the recording's directory onto
    # this run's, a runtime cache keys each run's directory as itself.
    from mcp import StdioServerParameters
    from mcp_servers import run_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    ledger = Ledger(tmp_path / "ledger.jsonl")

    def launch(run: int) -> Any:
        path = str(run_dir(tmp_path, run, "mkdtemp") / "desk.db")
        args, env = [str(SCRIPT)], {LEDGER_ENV: ledger.path}
        if where == "args":
            args += ["--db", path]
        else:
            env["DB"] = path
        return StdioServerParameters(command=sys.executable, args=args, env=env)

    with dejacache.agent_session(tenant="acme"):
        answers = [await _search(p) for p in (launch(1), launch(2), launch(1))]
    assert answers[0] != answers[1] and answers[2] == answers[0]
    assert calls(ledger, "search_docs") == 2


# ---------------------------------------------------------------- credentials a server quotes

KEY = "plain-echoed-credential-7d41c0ffee93b2"  # no known shape: found as the session's own


@pytest.mark.parametrize("how", ["stdio-env", "url"])
async def test_a_credential_a_cached_result_quotes_is_stored_redacted(
    tmp_path: pathlib.Path, mcp_http: HttpServer, how: str,
) -> None:
    # A GitHub server started with GITHUB_TOKEN answering "Bad credentials: KEY"; a server
    # echoing its URL's ?api_key=. The caller who ran the tool gets it as it came.
    from mcp import Client, StdioServerParameters

    ledger = Ledger(tmp_path / "ledger.jsonl")
    server: Any = f"{mcp_http.url}?api_key={KEY}"
    if how == "stdio-env":
        server = StdioServerParameters(command=sys.executable, args=[str(SCRIPT)],
                                       env={LEDGER_ENV: ledger.path, "GITHUB_TOKEN": KEY})
    store = dejacache.SQLiteStore(tmp_path / "tools.db")
    answers = []
    with dejacache.agent_session(tenant="acme"):
        for _ in range(2):
            async with Client(server, read_timeout_seconds=READ_TIMEOUT) as client:
                cached = mcp_tool_cache(client, store=store)
                answers.append(text(await cached.call_tool("whoami", {})))
    live, hit = answers
    assert live.startswith(f"Bad credentials: {KEY} (") and hit == live.replace(KEY, "<REDACTED>")
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("tools.db*"))
