"""Which server a session talks to, as ``mcp_tool_cache`` names it: the connection plus the
name and version from the handshake, credentials masked (real ``ClientSession`` objects,
their handshake adopted from results built here: no server is needed to name one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp.server.mcpserver", reason="the MCP tests need mcp 2")

from mcp import ClientSession, StdioServerParameters, types

from dejacache.mcp._identity import connection_of, handshake_of, identify


@pytest.fixture
def sessions() -> Iterator[Any]:
    """Makes unconnected ``ClientSession``s whose handshake said ``name`` and ``version``."""
    streams: list[Any] = []

    def make(name: str = "mcp-server", version: str = "1.0") -> ClientSession:
        send, receive = anyio.create_memory_object_stream[Any](1)
        streams.extend((send, receive))
        s = ClientSession(receive, send)
        s.adopt(types.InitializeResult(
            protocol_version="2025-11-25", capabilities=types.ServerCapabilities(),
            server_info=types.Implementation(name=name, version=version)))
        return s

    yield make
    for stream in streams:
        stream.close()


URL = "https://alice:pw-4471@mcp.example.com:8443/mcp?token=tok-9921&team=a"


def test_a_url_keeps_its_host_port_and_path_and_masks_its_credentials(sessions: Any) -> None:
    s = sessions()
    conn, owner = connection_of(s, URL)
    assert owner is None  # any session may name it
    assert conn["url"].startswith("https://<secret:") and "@mcp.example.com:8443/mcp?" in conn[
        "url"]
    assert "pw-4471" not in repr(conn) and "tok-9921" not in repr(conn) and "team=a" in conn[
        "url"]
    other, _ = connection_of(s, URL.replace("tok-9921", "tok-0000"))
    assert other != conn  # masked with a key, not dropped: another token, another server


def test_a_command_line_is_its_command_and_arguments_without_environment(sessions: Any) -> None:
    params = StdioServerParameters(command="/usr/bin/npx", args=["-y", "@x/server", "--token",
                                                                 "t-5512"],
                                   env={"API_KEY": "k-7713"})
    conn, _ = connection_of(sessions(), params)
    assert conn["command"] == "npx" and conn["args"][:3] == ["-y", "@x/server", "--token"]
    assert "t-5512" not in repr(conn) and "k-7713" not in repr(conn)


def test_a_launchs_credentials_are_who_is_asking_as_digests_and_its_settings_plain(
    sessions: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def conn(args: list[str], env: dict[str, str] | None) -> Any:
        params = StdioServerParameters(command="npx", args=["-y", "@x/server", *args], env=env)
        return connection_of(sessions(), params)[0]

    alice = conn(["--token", "t-alice-1"], {"API_KEY": "k-alice-2", "REGION": "eu"})
    assert alice["args"][-1] == "<REDACTED>" and len(alice["identity"]) == 2
    assert "t-alice-1" not in repr(alice) and "k-alice-2" not in repr(alice)
    assert alice["env"] == {"REGION": "eu"}  # a setting: what is asked, keyed as itself
    others = [conn(["--token", "t-bob-1"], {"API_KEY": "k-alice-2", "REGION": "eu"}),
              conn(["--token", "t-alice-1"], {"API_KEY": "k-bob-2", "REGION": "eu"}),
              conn(["--token", "t-alice-1"], {"API_KEY": "k-alice-2", "REGION": "us"}),
              conn(["--token", "t-alice-1"], None)]
    assert all(o != alice for o in others) and len({repr(o) for o in others}) == 4
    monkeypatch.setenv("API_KEY", "k-inherited-3")  # never read
    assert conn(["--token", "t-alice-1"], {"API_KEY": "k-alice-2", "REGION": "eu"}) == alice
    assert conn([], None) == conn([], None) and "identity" not in conn([], None)


def test_a_session_that_cannot_say_what_it_is_connected_to_is_its_own_server(
    sessions: Any,
) -> None:
    a, b = sessions(), sessions()
    assert connection_of(a, None) == connection_of(a, None) != connection_of(b, None)
    assert connection_of(a, None)[1] is a  # its cache goes with it
    assert connection_of(a, "desk") == connection_of(b, "desk") == ({"label": "desk"}, None)


def test_the_name_and_version_from_the_handshake_are_part_of_the_identity(
    sessions: Any,
) -> None:
    one, same, newer, other = (sessions("desk", "1.0"), sessions("desk", "1.0"),
                               sessions("desk", "1.1"), sessions("mcp-server", "1.0"))
    keys = [identify(s, URL).key for s in (one, same, newer, other)]
    assert keys[0] == keys[1] and len(set(keys)) == 3
    assert identify(one, URL).name == "desk" and identify(one, "my-label").name == "my-label"
    assert identify(one, URL).key.startswith("mcp:desk#") and "pw-4471" not in keys[0]
    assert handshake_of(one) is one.initialize_result
