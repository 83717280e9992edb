"""Who is asking an MCP server, as a call's key holds it: pinned digests of stdio launches."""

from __future__ import annotations

import pytest

from dejacache.mcp import _wire
from dejacache.mcp._callers import as_sent, stdio_launch

TMP_PATH = "/tmp/pytest-of-root/pytest-12/test_x0"  # a pytest tmp_path
LEDGER = f"{TMP_PATH}/ledger.jsonl"  # a file in it
MKDTEMP = "/tmp/tmpab12cd34"  # a tempfile.mkdtemp()
ARGS = ["desk.py", "--port", "8"]


def key_of(env: dict[str, str] | None, args: list[str] = ARGS) -> str:
    server, callers = stdio_launch("/usr/bin/python3", args, env)
    whom = {**server, "identity": as_sent(callers.items)} if callers.items else server
    key, canonical = _wire.canonical("suite", whom, "tools/call",
                                     {"name": "echo", "arguments": {"text": "hi"}})
    assert b"k-7713" not in canonical and b"sk-" not in canonical
    return key


# As they were before a launch's settings were keyed apart from its per-run paths, and before
# a per-run path's file was keyed (with the suite's fixed masking key, conftest.py): a launch
# whose env= names per-run directories, and no file in one, replays its recordings as it did.
@pytest.mark.parametrize(("env", "key"), [
    (None, "c3147a60a5db35978369d629ce389fe2"),
    ({"HOME": TMP_PATH}, "d4e19c6fd86c12bf47c7ec28e5a0e73f"),
    ({"WORK": MKDTEMP, "HOME": TMP_PATH}, "1896d4f96856d3e2b441dc5db29c798c"),
    ({"HOME": TMP_PATH, "API_KEY": "k-7713-abcdefgh"}, "29ed701c0b948ea69dbc310a0fa026b4"),
    ({"HOME": MKDTEMP, "UPSTREAM": "sk-" + "d4" * 12}, "0db4128a5af0cac44830adae4bd7db84"),
])
def test_the_key_of_a_stdio_launch_is_pinned(env: dict[str, str] | None, key: str) -> None:
    assert key_of(env) == key


# Changed: a file in a per-run directory is keyed by its name, its directory a mapped item
# (the whole path was, so another file stood for it), and so is one on the command line (it
# was keyed as it was, another on every run).
@pytest.mark.parametrize(("env", "args", "key"), [
    ({"LEDGER": LEDGER}, ARGS, "50b66666653cd157df935a617458d040"),
    ({"LEDGER": LEDGER, "API_KEY": "k-7713-abcdefgh"}, ARGS, "ea0be7e21911405b144506b527808656"),
    ({"LEDGER": LEDGER, "REGION": "eu"}, ARGS, "6b15a2cab9ce8590853e0f6f76d1e306"),
    (None, ["desk.py", "--db", f"{MKDTEMP}/desk.db"], "647bd555c4f9c16373876fe51cd05073"),
    (None, ["desk.py", f"--db={TMP_PATH}/desk.db"], "c66287c2db6f986965da73a45f4beac6"),
])
def test_the_key_of_a_launch_naming_a_file_a_run_made_is_pinned(
    env: dict[str, str] | None, args: list[str], key: str,
) -> None:
    assert key_of(env, args) == key


def test_outside_a_recording_a_file_in_another_runs_directory_keys_apart() -> None:
    # A runtime cache keys each item as itself: two runs' databases of one name never share
    # answers, where a replay maps the recording's directory onto this run's.
    other = "/tmp/tmp_9zz81qx"
    assert key_of(None, ["desk.py", "--db", f"{MKDTEMP}/desk.db"]) != \
        key_of(None, ["desk.py", "--db", f"{other}/desk.db"])
    assert key_of({"DATA": f"{MKDTEMP}/eu.json"}) != key_of({"DATA": f"{other}/eu.json"})
