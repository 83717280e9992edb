"""Who is asking an MCP server, as a call's key holds it: pinned digests of stdio launches."""

from __future__ import annotations

import pytest

from dejacache.mcp import _wire
from dejacache.mcp._callers import as_sent, stdio_launch

LEDGER = "/tmp/pytest-of-root/pytest-12/test_x0/ledger.jsonl"  # a pytest tmp_path file


def key_of(env: dict[str, str] | None) -> str:
    server, callers = stdio_launch("/usr/bin/python3", ["desk.py", "--port", "8"], env)
    whom = {**server, "identity": as_sent(callers.items)} if callers.items else server
    key, canonical = _wire.canonical("suite", whom, "tools/call",
                                     {"name": "echo", "arguments": {"text": "hi"}})
    assert b"k-7713" not in canonical and b"sk-" not in canonical
    return key


# All but REGION's as they were before a launch's settings were keyed apart from its per-run
# paths: recordings of launches whose env= holds no setting replay as they did (with the
# suite's fixed masking key, conftest.py).
@pytest.mark.parametrize(("env", "key"), [
    (None, "c3147a60a5db35978369d629ce389fe2"),
    ({"LEDGER": LEDGER}, "be099f810538a33aad108019b84a712e"),
    ({"LEDGER": LEDGER, "API_KEY": "k-7713-abcdefgh"}, "0c9eab9663b4494653987d481d48854b"),
    ({"LEDGER": LEDGER, "UPSTREAM": "sk-" + "d4" * 12}, "215480a4edab867fd11eef1490992ca6"),
    ({"LEDGER": LEDGER, "REGION": "eu"}, "77d92de8bfbd10dc4baeff5e9e673590"),  # changed
])
def test_the_key_of_a_stdio_launch_is_pinned(env: dict[str, str] | None, key: str) -> None:
    assert key_of(env) == key
