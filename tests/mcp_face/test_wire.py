"""The pure part of MCP recording: server identities, request keys, stored notifications."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import orjson
import pytest

from dejacache.mcp import _wire

# A pytest ``tmp_path``, and a file in it, as a launch's env= names them: another on every run.
TMP_PATH = "/tmp/pytest-of-root/pytest-12/test_x0"
TMP_LEDGER = f"{TMP_PATH}/ledger.jsonl"
SK = "sk-" + "c3" * 12



def test_a_stdio_server_is_its_command_name_and_arguments_with_portable_paths() -> None:
    here = os.path.join(os.getcwd(), "servers", "desk.py")
    ident = _wire.stdio_identity("/opt/venv/bin/python3", [here, "--flag"])
    assert ident == {"transport": "stdio", "command": "python3",
                     "args": [os.path.join(".", "servers", "desk.py"), "--flag"]}
    assert _wire.stdio_identity("npx", ["-y", "@x/server"]) == {
        "transport": "stdio", "command": "npx", "args": ["-y", "@x/server"]}


@pytest.mark.parametrize(("url", "expected"), [
    ("http://127.0.0.1:51234/mcp", "http://127.0.0.1/mcp"),
    ("http://localhost:8000/mcp?x=1", "http://localhost/mcp?x=1"),
    ("https://user:pw@mcp.example.com:8443/mcp?api_key=s3cret&team=a",
     "https://user@mcp.example.com:8443/mcp?team=a"),
    ("https://mcp.example.com/sse?token=abc", "https://mcp.example.com/sse"),
    ("https://alice@mcp.example.com/mcp", "https://alice@mcp.example.com/mcp"),
    ("http://[::1]:9000/mcp?client_secret=x&q=1", "http://[::1]/mcp?q=1"),
])
def test_an_http_server_is_its_url_without_credentials_or_a_loopback_port(
    url: str, expected: str,
) -> None:
    assert _wire.http_identity(url, "streamable-http") == {"transport": "streamable-http",
                                                           "url": expected}


@pytest.mark.parametrize(("url", "expected"), [
    ("https://mcp.example.com/mcp?team=a", ()),
    ("https://alice@mcp.example.com/mcp", ()),  # a user name alone is who, not a secret
    ("https://mcp.example.com/mcp?token=alice&team=a", (("query:token", "alice"),)),
    ("https://h/mcp?access_token=a&api-key=b&clientSecret=c",
     (("query:access_token", "a"), ("query:api-key", "b"), ("query:clientSecret", "c"))),
    ("https://h/mcp?key=a&key=b,c", (("query:key", "a,b\\,c"),)),
    ("https://al%40ce:pw@h/mcp", (("password:al%2540ce", "pw"),)),
])
def test_an_http_servers_credentials_are_who_is_asking(
    url: str, expected: tuple[tuple[str, str], ...],
) -> None:
    # Everything the identity leaves out of the URL, and nothing else.
    assert _wire.http_credentials(url) == expected


def test_credentials_apply_to_the_servers_host_and_path() -> None:
    assert _wire.http_scope("http://127.0.0.1:5123/mcp?token=a") == "mcp.127.0.0.1/mcp"
    assert _wire.http_scope("https://u:p@gw.example.com:8443/a b") == (
        "mcp.gw.example.com:8443/a%20b")


SERVER = {"transport": "stdio", "command": "python", "args": ["desk.py"]}


def test_ids_progress_tokens_trace_context_and_the_client_version_are_not_keyed() -> None:
    a = {"name": "get_ticket", "arguments": {"id": 1},
         "_meta": {"progressToken": 7, "traceparent": "00-aa-bb-01",
                   "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "2.3.0"}}}
    b = {"name": "get_ticket", "arguments": {"id": 1},
         "_meta": {"progressToken": 12, "traceparent": "00-cc-dd-01",
                   "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "2.4.0"}}}
    ka, ca = _wire.canonical("ns", SERVER, "tools/call", a)
    kb, _ = _wire.canonical("ns", SERVER, "tools/call", b)
    assert ka == kb
    assert b"progressToken" not in ca and b"traceparent" not in ca and b"2.3.0" not in ca
    init = {"protocolVersion": "2025-11-25", "clientInfo": {"name": "mcp", "version": "9"}}
    assert orjson.loads(_wire.canonical("ns", SERVER, "initialize", init)[1])["params"] == {
        "protocolVersion": "2025-11-25", "clientInfo": {"name": "mcp"}}


def test_server_method_params_and_namespace_each_change_the_key() -> None:
    base = _wire.canonical("ns", SERVER, "tools/call", {"name": "t", "arguments": {"id": 1}})[0]
    assert base != _wire.canonical("ns", SERVER, "tools/call",
                                   {"name": "t", "arguments": {"id": 2}})[0]
    assert base != _wire.canonical("ns", {**SERVER, "args": ["other.py"]}, "tools/call",
                                   {"name": "t", "arguments": {"id": 1}})[0]
    assert base != _wire.canonical("ns2", SERVER, "tools/call",
                                   {"name": "t", "arguments": {"id": 1}})[0]
    assert base != _wire.canonical("ns", SERVER, "prompts/get",
                                   {"name": "t", "arguments": {"id": 1}})[0]


def test_the_blocks_volatile_paths_apply_under_params() -> None:
    a = {"name": "t", "arguments": {"when": "2026-01-01", "id": 1}}
    b = {"name": "t", "arguments": {"when": "2027-01-01", "id": 1}}
    vol = ("params.arguments.when",)
    assert _wire.canonical("", SERVER, "tools/call", a, vol)[0] == \
        _wire.canonical("", SERVER, "tools/call", b, vol)[0]
    assert _wire.canonical("", SERVER, "tools/call", a)[0] != \
        _wire.canonical("", SERVER, "tools/call", b)[0]


def test_progress_is_stored_without_its_token_and_replayed_with_the_new_one() -> None:
    stored = _wire.recorded_notifications([
        {"method": "notifications/progress",
         "params": {"progressToken": 3, "progress": 1, "total": 2, "message": "half"}}])
    assert stored == [{"method": "notifications/progress",
                       "params": {"progress": 1, "total": 2, "message": "half"}}]
    assert _wire.replayed_notifications(stored, 41) == [
        {"jsonrpc": "2.0", "method": "notifications/progress",
         "params": {"progress": 1, "total": 2, "message": "half", "progressToken": 41}}]
    assert _wire.replayed_notifications(stored, None) == []  # nobody asked for progress


def test_messages_are_told_apart() -> None:
    assert _wire.classify({"id": 1, "method": "tools/list"}) == "request"
    assert _wire.classify({"method": "notifications/initialized"}) == "notification"
    assert _wire.classify({"id": 1, "result": {}}) == "response"
    assert _wire.classify({"id": 1, "error": {"code": 1, "message": "x"}}) == "error"


# ---------------------------------------------------------------- credentials in identities


def _mark(secret: str) -> str:
    return f"<{secret[:2]}>"


@pytest.mark.parametrize(("args", "expected"), [
    (["--api-key", "abc123", "--port", "8"], ["--api-key", "<ab>", "--port", "8"]),
    (["--token=abc123", "-v"], ["--token=<ab>", "-v"]),
    (["GITHUB_TOKEN=abc123", "server"], ["GITHUB_TOKEN=<ab>", "server"]),
    (["--password", "--verbose"], ["--password", "--verbose"]),  # a flag, not a value
    (["--header", "Authorization: Bearer abcdefghijklmnop1234"],
     ["--header", "Authorization: Bearer <ab>"]),
    (["https://bob:pw@mcp.example.com/mcp?token=t0k&team=a"],
     ["https://<bo>@mcp.example.com/mcp?token=<t0>&team=a"]),
    (["--model", "gpt-5", "./desk.py"], ["--model", "gpt-5", "./desk.py"]),
])
def test_credentials_on_a_command_line_are_hidden(args: list[str], expected: list[str]) -> None:
    assert _wire.hidden_args(args, _mark) == expected


def test_a_recorded_stdio_identity_redacts_credentials_so_another_key_replays() -> None:
    a = _wire.stdio_identity("npx", ["-y", "@x/server", "--api-key", "key-one"])
    b = _wire.stdio_identity("npx", ["-y", "@x/server", "--api-key", "key-two"])
    assert a == b and a["args"] == ["-y", "@x/server", "--api-key", _wire.REDACTED]


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["desk.py", "--port", "8"], None, ()),  # nobody in particular
    (["--api-key", "k1", "--token=t2", "x", "sk-" + "a1" * 12], None,
     (("arg:1", "k1"), ("arg:2", "t2"), ("arg:3", "sk-" + "a1" * 12))),
    (["desk.py"], {"API_KEY": "k1", "UPSTREAM": "sk-" + "b2" * 12,
                   "DB": "postgres://app:pw@db/x", "REGION": "eu", "DEBUG": "1"},
     (("env:API_KEY", "k1"), ("env:DB", "postgres://app:pw@db/x"),
      ("env:UPSTREAM", "sk-" + "b2" * 12))),  # the settings are keyed in plain
    (["desk.py"], {"HOME": TMP_PATH, "LEDGER": TMP_LEDGER, "REGION": "eu"},
     (("env", f'{{"HOME":"{TMP_PATH}","LEDGER":"{TMP_PATH}"}}'),)),  # the run's directories
    (["desk.py", "--db", TMP_LEDGER, "/tmp/tmpab12cd34"], None,
     (("paths", f'["{TMP_PATH}","/tmp/tmpab12cd34"]'),)),  # on its command line too
    (["desk.py"], {}, ()),
])
def test_who_launched_a_stdio_server_is_its_credentials_and_its_per_run_paths(
    args: list[str], env: dict[str, str] | None, expected: tuple[tuple[str, str], ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("API_KEY", "inherited-k9")  # the inherited environment is never read
    assert _wire.stdio_credentials(args, _wire.stdio_env(env)) == expected


@pytest.mark.parametrize(("value", "part", "keyed"), [
    ("eu", "settings", "eu"),
    ("1", "settings", "1"),
    ("", "settings", ""),
    (TMP_PATH, "per_run", TMP_PATH),  # a run's directory: mapped, as it always was
    ("/tmp/tmpab12cd34", "per_run", "/tmp/tmpab12cd34"),
    ("/tmp/pytest-of-ci/pytest-3/popen-gw1/test_x12", "per_run",
     "/tmp/pytest-of-ci/pytest-3/popen-gw1/test_x12"),
    ("/tmp/pytest-of-root/pytest-12", "per_run", "/tmp/pytest-of-root/pytest-12"),
    ("file:///tmp/tmpab12cd34", "per_run", "file:///tmp/tmpab12cd34"),
    (os.pathsep.join(["/tmp/tmpab12cd34", TMP_PATH]), "per_run",
     os.pathsep.join(["/tmp/tmpab12cd34", TMP_PATH])),
    # A file or a directory in one: which one is keyed, under a run's directory spelt <tmp>
    # (a test's tmp_path by its name, without the number pytest gave it).
    (TMP_LEDGER, "settings", "<tmp>/test_x/ledger.jsonl"),
    ("/tmp/pytest-of-ci/pytest-3/popen-gw1/test_x12/a/b.db", "settings", "<tmp>/test_x/a/b.db"),
    ("/tmp/pytest-of-root/pytest-12/data/x", "settings", "<tmp>/data/x"),
    ("/tmp/tmpab12cd34/store.db", "settings", "<tmp>/store.db"),
    ("file:///tmp/tmpab12cd34/store.db", "settings", "file://<tmp>/store.db"),
    ("sqlite:////tmp/tmpab12cd34/store.db", "settings", "sqlite://<tmp>/store.db"),
    ("file://localhost/tmp/tmpab12cd34/x", "settings", "file://localhost<tmp>/x"),
    ("sqlite:////tmp/tmpab12cd34?mode=ro", "settings", "sqlite://<tmp>?mode=ro"),
    (os.pathsep.join(["/tmp/tmpab12cd34/src", "/srv/app/src"]), "settings",
     os.pathsep.join(["<tmp>/src", "/srv/app/src"])),
    ("--db=/tmp/tmpab12cd34", "settings", "--db=<tmp>"),
    # Made by no run: the same path every time, keyed as it is.
    ("/tmp/eu.json", "settings", "/tmp/eu.json"),
    ("/tmp/app/data", "settings", "/tmp/app/data"),  # a temp directory of no run's shape
    ("/tmp/tmpsettings.json", "settings", "/tmp/tmpsettings.json"),
    ("/tmp/pytest-of-root", "settings", "/tmp/pytest-of-root"),
    ("http://files.example.com/tmp/tmpab12cd34/x", "settings",
     "http://files.example.com/tmp/tmpab12cd34/x"),  # another host's /tmp
    ("/tmp", "settings", "/tmp"),  # the temp directory itself is the same on every run
    ("/tmp/../etc/app/eu.toml", "settings", "/tmp/../etc/app/eu.toml"),  # not under /tmp
    ("/var/tmpx/tmpab12cd34", "settings", "/var/tmpx/tmpab12cd34"),
    ("/etc/app/eu.toml", "settings", "/etc/app/eu.toml"),  # may say what is asked
    ("tmp/relative", "settings", "tmp/relative"),
    (SK, "credentials", SK),  # a secret-shaped value under a harmless name
    ("postgres://app:pw@db/x", "credentials", "postgres://app:pw@db/x"),
    ("file:///tmp/tmpab12cd34/x?token=" + "t" * 20, "credentials",
     "file:///tmp/tmpab12cd34/x?token=" + "t" * 20),
])
def test_a_launchs_env_is_credentials_per_run_paths_or_settings(
    value: str, part: str, keyed: str,
) -> None:
    parts = _wire.stdio_env({"SOME_VALUE": value})
    found = {"credentials": dict(parts.credentials).get("env:SOME_VALUE"),
             "per_run": parts.per_run.get("SOME_VALUE"),
             "settings": parts.settings.get("SOME_VALUE")}
    expected = {k: keyed if k == part else None for k in found}
    if part == "settings" and keyed != value:  # a file in a run's directory: that, mapped
        dirs = found["per_run"] or ""
        assert dirs and all(d in value and d not in keyed for d in dirs.split(os.pathsep))
        expected["per_run"] = dirs
    assert found == expected


@pytest.mark.parametrize(("recorded", "replayed", "same"), [
    # Another run's directory: the same file; another file, or another directory in the
    # run's: another key.
    (TMP_LEDGER, "/tmp/pytest-of-ci/pytest-7/popen-gw3/test_x2/ledger.jsonl", True),
    ("/tmp/tmpab12cd34/eu.json", "/tmp/tmp_9zz81qx/eu.json", True),
    ("/tmp/tmpab12cd34/eu.json", "/tmp/tmp_9zz81qx/us.json", False),
    (f"{TMP_PATH}/eu.json", "/tmp/pytest-of-root/pytest-13/test_x0/us.json", False),
    (f"{TMP_PATH}/eu/data.json", "/tmp/pytest-of-root/pytest-13/test_x0/us/data.json", False),
    (f"{TMP_PATH}/data.json", "/tmp/pytest-of-root/pytest-13/test_y0/data.json", False),
])
def test_a_file_in_a_runs_directory_is_keyed_by_which_file_it_is(
    recorded: str, replayed: str, same: bool,
) -> None:
    for args, env in (([], {"DATA": recorded}), (["--data", recorded], None)):
        a = _wire.stdio_identity("python3", args, None, _wire.stdio_env(env).settings)
        swapped = [replayed if x == recorded else x for x in args]
        b = _wire.stdio_identity("python3", swapped, None,
                                 _wire.stdio_env(env and {"DATA": replayed}).settings)
        assert (a == b) is same, (a, b)
        assert recorded not in repr(a)


def test_the_directory_a_launch_starts_in_is_spelt_as_its_paths_are() -> None:
    ident = _wire.stdio_identity("python3", [], f"{TMP_PATH}/srv")
    assert ident["cwd"] == "<tmp>/test_x/srv"
    assert ident == _wire.stdio_identity("python3", [], "/tmp/pytest-of-ci/pytest-9/test_x0/srv")


def test_a_credentials_name_makes_any_value_a_credential() -> None:
    parts = _wire.stdio_env({"API_KEY": "eu", "DB_PASSWORD": TMP_LEDGER})
    assert parts.credentials == (("env:API_KEY", "eu"), ("env:DB_PASSWORD", TMP_LEDGER))
    assert parts == (parts.credentials, {}, {})


def test_the_temp_directory_is_read_as_given_and_with_its_links_resolved(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path / "real")  # the temp directory itself: its paths stay per-run
    monkeypatch.setenv("TMPDIR", str(tmp_path / "link"))
    for path in (tmp_path / "link" / "tmpab12cd34", real / "tmpab12cd34"):
        assert _wire.stdio_env({"WORK": str(path)}).per_run == {"WORK": str(path)}
        assert _wire.stdio_env({"DB": str(path / "x.db")}).settings == {"DB": "<tmp>/x.db"}
    monkeypatch.setenv("TMPDIR", "/")  # a file system's root is never a temp directory
    assert _wire.stdio_env({"CONFIG": "/srv/app/eu.toml"}).settings


def test_a_checkout_inside_a_temp_directory_names_its_own_files_as_settings(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CI cloning into /tmp: the project's config is the same file every run, and eu.toml
    # must never stand for us.toml; a pytest tmp_path beside the clone is still per-run.
    checkout, run = tmp_path / "clone", tmp_path / "pytest-of-ci" / "pytest-7" / "test0"
    checkout.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.chdir(checkout)
    for config in (checkout / "conf" / "eu.toml", checkout, f"file://{checkout}/eu.db"):
        parts = _wire.stdio_env({"CONFIG": str(config), "WORK": str(run)})
        assert parts.settings == {"CONFIG": str(config)} and parts.per_run == {"WORK": str(run)}
    monkeypatch.chdir(tmp_path)  # the temp directory itself: a run's directory is per-run
    assert _wire.stdio_env({"WORK": str(run)}).per_run


def test_a_launchs_settings_are_in_its_plain_identity_and_nothing_else_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])  # the checkout, wherever
    env = {"REGION": "eu", "API_KEY": "k-7713", "UPSTREAM": SK, "LEDGER": TMP_LEDGER,
           "HOME": TMP_PATH, "CONFIG": os.path.join(os.getcwd(), "conf", "eu.toml")}
    ident = _wire.stdio_identity("/usr/bin/python3", ["desk.py"],
                                 settings=_wire.stdio_env(env).settings)
    assert ident["env"] == {"CONFIG": os.path.join(".", "conf", "eu.toml"), "REGION": "eu",
                            "LEDGER": "<tmp>/test_x/ledger.jsonl"}
    assert "k-7713" not in repr(ident) and SK not in repr(ident)
    assert TMP_PATH not in repr(ident)
    # No settings, no "env": such a launch keys as it did before settings were keyed apart.
    plain = _wire.stdio_identity("/usr/bin/python3", ["desk.py"])
    other = _wire.stdio_env({"API_KEY": "k", "HOME": TMP_PATH})
    assert _wire.stdio_identity("/usr/bin/python3", ["desk.py"], None, other.settings) == plain
    assert "env" not in plain and _wire.stdio_env(None) == _wire.stdio_env({}) == _wire.NO_ENV


def test_a_stdio_launchs_credentials_apply_to_its_command_line() -> None:
    a = _wire.stdio_identity("/usr/bin/python3", ["a.py", "--token", "t1"])
    b = _wire.stdio_identity("/usr/bin/python3", ["b.py", "--token", "t1"])
    scope = _wire.stdio_scope(a)
    assert scope.startswith("mcp.stdio.python3.") and scope != _wire.stdio_scope(b)
    assert scope == _wire.stdio_scope(_wire.stdio_identity("python3", ["a.py", "--token", "t2"]))


# ---------------------------------------------------------------- answered by content


@pytest.mark.parametrize(("method", "params", "expected"), [
    ("tools/list", None, True),
    ("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}, True),
    ("tools/list", {"cursor": "page-2"}, False),  # a caller walking pages
    ("ping", None, True),
    ("tools/call", {"name": "t"}, False),
    ("prompts/list", None, False),
])
def test_what_a_session_makes_on_its_own_is_answered_by_content(
    method: str, params: dict[str, Any] | None, expected: bool,
) -> None:
    assert _wire.by_content(method, params) is expected


# ---------------------------------------------------------------- subscriptions/listen


def test_a_listen_acknowledgement_is_stored_without_its_request_id_and_replayed_with_the_new(
) -> None:
    sent = {"notifications": {"toolsListChanged": True},
            "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-4"}}
    frame = {"method": _wire.ACKNOWLEDGED, "params": sent}
    assert _wire.subscription_of(frame) == "listen-4"
    assert _wire.subscription_of({"method": "x", "params": {}}) is None
    stored = _wire.recorded_ack(sent)
    assert stored == {"notifications": {"toolsListChanged": True}}
    assert _wire.replayed_ack(stored, "listen-9") == {
        "jsonrpc": "2.0", "method": _wire.ACKNOWLEDGED,
        "params": {"notifications": {"toolsListChanged": True},
                   "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-9"}}}


# ---------------------------------------------------------------- 2026-07-28 cache hints

MODERN = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}


@pytest.mark.parametrize(("params", "result", "ttl"), [
    (MODERN, {"tools": [], "ttlMs": 30_000, "cacheScope": "public"}, 30.0),
    (MODERN, {"tools": [], "ttlMs": 0, "cacheScope": "public"}, 0.0),  # immediately stale
    (MODERN, {"tools": [], "ttlMs": 30_000, "cacheScope": "private"}, 0.0),
    (MODERN, {"tools": [], "ttlMs": 10**12, "cacheScope": "public"}, 86_400.0),  # the cap
    (MODERN, {"content": []}, None),  # a tool's answer carries no hint
    (None, {"tools": [], "ttlMs": 30_000, "cacheScope": "public"}, None),  # handshake era
])
def test_a_store_that_answers_by_key_keeps_an_answer_no_longer_than_its_hints(
    params: dict[str, Any] | None, result: dict[str, Any], ttl: float | None,
) -> None:
    assert _wire.hinted_ttl(params, {"result": result}) == ttl


def test_a_tools_own_trace_id_is_keyed_and_meta_telemetry_is_not() -> None:
    """``get_trace(trace_id=...)`` served the first trace's answer to every trace: the name
    was dropped wherever it appeared. Under ``_meta`` it is still telemetry."""
    def key(arg: str, meta: str) -> str:
        params = {"name": "get_trace", "arguments": {"trace_id": arg},
                  "_meta": {"trace_id": meta, "otel_span_id": meta}}
        return _wire.canonical("ns", SERVER, "tools/call", params)[0]

    assert key("abc", "m1") != key("def", "m1")
    assert key("abc", "m1") == key("abc", "m2")


def test_a_kept_default_name_is_keyed() -> None:
    """MCP read ``!name`` only for telemetry ids: ``!idempotency-key`` was a silent no-op."""
    def key(value: str, volatile: tuple[str, ...] = ()) -> str:
        params = {"name": "pay", "arguments": {"idempotency-key": value, "amount": 1}}
        return _wire.canonical("ns", SERVER, "tools/call", params, volatile)[0]

    assert key("a") == key("b")
    assert key("a", ("!idempotency-key",)) != key("b", ("!idempotency-key",))
    assert key("a", ("!Idempotency_Key",)) != key("b", ("!Idempotency_Key",))
