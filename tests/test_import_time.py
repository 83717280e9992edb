"""``import dejacache`` is cheap and does no I/O nobody asked for.

Every check runs in a fresh interpreter and asserts on ``sys.modules`` and on the files that
exist afterwards, never on milliseconds, so it is deterministic on a busy machine
(``benchmarks/bench_import.py`` has the timings).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import dejacache

# Modules a bare ``import dejacache`` must not load: the faces (loaded on first use) and the
# heavy standard-library modules that used to come with them.
FACES = ("dejacache.http", "dejacache.runtime", "dejacache.cassettes", "dejacache.report",
         "dejacache.cli", "dejacache.pytest_plugin", "dejacache.integrations",
         "dejacache.proxying",
         "dejacache.stores.sqlite", "dejacache.stores.redis", "dejacache.demo")
HEAVY = ("asyncio", "sqlite3", "ssl", "socket", "subprocess", "logging", "concurrent.futures",
         "pickle", "zoneinfo", "secrets", "tempfile", "shutil", "httpx", "httpx2", "openai",
         "anthropic", "redis", "hypothesis", "pytest")


def _run(code: str, *, env: dict[str, str] | None = None, cwd: pathlib.Path | None = None,
         ) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON document as its last line."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_LOADED = """
import json, sys
{stmt}
names = {names!r}
print(json.dumps(sorted(n for n in names if n in sys.modules)))
"""


def test_bare_import_loads_no_face_and_no_heavy_module() -> None:
    got = _run(_LOADED.format(stmt="import dejacache", names=FACES + HEAVY))
    assert got == []


def test_bare_import_loads_only_the_package() -> None:
    got = _run("import json, sys, dejacache\n"
               "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dejacache'))))")
    assert got == ["dejacache", "dejacache._lazy"]


def test_the_cache_face_loads_no_other_face() -> None:
    # What a test or an agent imports first: the decorator, scopes and configuration.
    stmt = "from dejacache import cache, configure, scope, MemoryStore, ReplayMiss"
    got = _run(_LOADED.format(stmt=stmt, names=FACES + HEAVY))
    assert got == []


# Standard-library modules the cache face used to load for rarer paths: credential masks and
# the key file (hashlib's OpenSSL, pathlib with urllib.parse and ipaddress), tagged values
# (base64, decimal) and PickleCodec (hmac). ~12 ms of ``from dejacache import cache, scope``.
DEFERRED = ("pathlib", "urllib.parse", "ipaddress", "hashlib", "_hashlib", "hmac", "base64",
            "decimal", "_decimal")


@pytest.mark.parametrize("stmt", [
    "from dejacache import cache, scope",
    "from dejacache import cache, configure, scope, MemoryStore, ReplayMiss",
    "import dejacache.keys, dejacache.codec, dejacache.config, dejacache.decorators",
])
def test_the_cache_face_defers_rare_standard_modules(stmt: str) -> None:
    # The stats() snapshot classes too (two dataclasses, ~1.3 ms).
    got = _run(_LOADED.format(stmt=stmt, names=(*DEFERRED, "dejacache._stats_view")))
    assert got == []


def test_a_plain_call_key_and_value_load_none_of_them() -> None:
    got = _run(_LOADED.format(stmt="""
import dejacache.keys as keys, dejacache.codec as codec
def f(request, n=1, *a, **k): pass
b = keys.KeyBuilder(f, "f")
for _ in range(2):
    b.bind_key(({"messages": [{"role": "user", "content": "hi", "x": None}] * 3}, 2), {},
               keys.key_seed("n", "f"))
c = codec.JsonCodec()
assert c.decode(c.encode({"a": [1, 2.5, None]}, key="k"), key="k") == {"a": [1, 2.5, None]}
""", names=DEFERRED))
    assert got == []


# What keying needs only for some arguments: a method's receiver or a model's data, a
# closure's (or a class made at run time's) captured values.
_KEY_MACHINERY = ("dejacache._receiver", "dejacache._captures")


def test_a_plain_function_keyed_on_data_loads_no_receiver_or_closure_rules() -> None:
    got = _run(_LOADED.format(stmt="""
import dejacache.keys as keys
def f(request, n=1, *a, **k): pass
b = keys.KeyBuilder(f, "f")
for args in (({"messages": [{"role": "user", "content": "hi", "x": None}] * 3}, 2),
             ({"prompt": "hi", "n": 1.5, "b": b"raw", "password": "pw"}, float("nan"))):
    b.bind_key(args, {}, keys.key_seed("n", "f"))
    keys.call_key("n", "f", args, fn=f)
""", names=_KEY_MACHINERY))
    assert got == []


@pytest.mark.parametrize(("stmt", "loaded"), [
    ("class C:\n    def m(self, x): pass\nkeys.call_key('n', 'f', (C(), 1), fn=C.m)",
     list(_KEY_MACHINERY)),
    ("def make(v):\n    return lambda x: v\nkeys.call_key('n', 'f', (1,), fn=make(2))",
     ["dejacache._captures"]),
    ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int\n"
     "keys.call_key('n', 'f', (P(1),))", ["dejacache._captures"]),
])
def test_the_receiver_and_closure_rules_load_when_a_call_needs_them(
    stmt: str, loaded: list[str],
) -> None:
    got = _run(_LOADED.format(stmt="import dejacache.keys as keys\n" + stmt,
                              names=_KEY_MACHINERY))
    assert got == sorted(loaded)


def test_a_receivers_set_keys_as_a_set_whoever_loaded_the_receiver_rules() -> None:
    # Loaded by another module than keys, the receiver's set type is still told apart from
    # a tuple (the order of a set's members would otherwise be in its key).
    got = _run("""
import json
import dejacache._receiver as receiver
import dejacache.keys as keys
members = receiver.Members((2, 1))
print(json.dumps([keys.call_key("n", "f", (members,)) == keys.call_key("n", "f", ({1, 2},)),
                  keys.call_key("n", "f", ({"a": members},))
                  == keys.call_key("n", "f", ({"a": {1, 2}},))]))
""")
    assert got == [True, True]


def test_the_command_line_loads_the_proxy_only_to_run_it() -> None:
    # Registering ``proxy`` and ``mcp-proxy`` is argparse; the server, asyncio and the HTTP
    # stacks come with the command, not with every other one.
    stmt = "from dejacache.cli import build_parser; build_parser()"
    got = _run(_LOADED.format(stmt=stmt, names=(
        "dejacache.proxying._server", "dejacache.proxying._forward",
        "dejacache.proxying.mcp_stdio", "dejacache.proxying.handle", "httpx", "httpx2",
        "mcp")))
    assert got == []


def test_tool_cache_loads_the_runtime_only() -> None:
    got = _run(_LOADED.format(stmt="from dejacache import tool_cache",
                              names=("dejacache.http", "dejacache.cassettes",
                                     "dejacache.runtime.pool", "dejacache.runtime.prefix")))
    assert got == []


def test_every_public_name_is_reachable_from_a_fresh_interpreter() -> None:
    got = _run("""
        import json, dejacache
        ns = {}
        exec("from dejacache import *", ns)
        missing = [n for n in dejacache.__all__ if n not in ns]
        print(json.dumps({"missing": missing, "dir": sorted(set(dejacache.__all__)
                                                             - set(dir(dejacache)))}))
    """)
    assert got == {"missing": [], "dir": []}


def test_lazy_table_and_all_agree() -> None:
    table = {name for names in dejacache._WHERE.values() for name in names}
    assert table == set(dejacache.__all__) - {"__version__"}
    assert sum(len(names) for names in dejacache._WHERE.values()) == len(table)  # no twice


def test_names_shared_with_submodules_stay_the_public_objects() -> None:
    # dejacache.scope / dejacache.stats are both submodules and public names; a submodule
    # loaded by the library first must not hide the class and the function.
    got = _run("""
        import json, sys
        import dejacache
        import dejacache.decorators  # loads the scope and stats modules
        from dejacache import stats as via_from
        print(json.dumps([isinstance(dejacache.scope, type), callable(dejacache.stats),
                          dejacache.stats is via_from, dejacache.scope.__name__,
                          type(sys.modules["dejacache.scope"]).__name__]))
    """)
    assert got == [True, True, True, "scope", "module"]


def test_submodules_are_reachable_as_attributes() -> None:
    # The eager imports made ``dejacache.config`` and ``dejacache.runtime`` reachable after a
    # bare import; docs rely on ``dejacache.runtime.PrometheusCollector``.
    got = _run("""
        import json, dejacache
        print(json.dumps([dejacache.config.__name__, dejacache.runtime.LoopGuard.__name__,
                          hasattr(dejacache, "no_such_name")]))
    """)
    assert got == ["dejacache.config", "LoopGuard", False]


# ---------------------------------------------------------------- no I/O nobody asked for


def _fresh_env(tmp: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEJACACHE_", "XDG_")) and k != "CI"}
    env.update(HOME=str(tmp / "home"), XDG_CONFIG_HOME=str(tmp / "xdg-config"),
               XDG_CACHE_HOME=str(tmp / "xdg-cache"), XDG_DATA_HOME=str(tmp / "xdg-data"),
               DEJACACHE_DIR=str(tmp / "dejacache-dir"))
    return env


def _created(tmp: pathlib.Path, work: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")
                  if p != work and not p.is_relative_to(work / "__pycache__"))


@pytest.fixture
def sandbox(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, str], pathlib.Path]:
    work = tmp_path / "work"  # the current directory, with a pyproject.toml: a project root
    work.mkdir()
    (work / "pyproject.toml").write_text("")
    return tmp_path, _fresh_env(tmp_path), work


_NO_IO = """
import json, sys
import dejacache
from dejacache import *  # every public name loaded

calls = []

@dejacache.cache
def f(x):
    calls.append(x)
    return {"x": x}

with dejacache.scope(store=dejacache.MemoryStore()):
    assert f(1) == f(1) == {"x": 1}
with dejacache.scope(store="memory://", mode="record"):
    f(2)
dejacache.configure(store=dejacache.MemoryStore())
f(3)
dejacache.configure(store=None)
from dejacache.config import get_settings
print(get_settings().store.url, file=sys.stderr)
print(json.dumps({"calls": calls,
                  "hooks": "dejacache.http.intercept" in sys.modules}))
"""


def test_memory_store_blocks_create_no_file_or_directory(
    sandbox: tuple[pathlib.Path, dict[str, str], pathlib.Path],
) -> None:
    tmp, env, work = sandbox
    got = _run(_NO_IO, env=env, cwd=work)
    assert got == {"calls": [1, 2, 3], "hooks": True}
    # No default SQLite file, no cache directory, no masking key in the (fresh) config dir.
    assert _created(tmp, work) == ["work/pyproject.toml"]


def test_the_default_store_is_created_when_first_used(
    sandbox: tuple[pathlib.Path, dict[str, str], pathlib.Path],
) -> None:
    tmp, env, work = sandbox
    got = _run("""
        import json, os, dejacache
        from dejacache.config import get_settings
        @dejacache.cache
        def f(x):
            return x
        before = os.path.exists(os.environ["DEJACACHE_DIR"])
        eff = get_settings()
        with dejacache.scope(cache_key="ns"):
            pass
        during = os.path.exists(os.environ["DEJACACHE_DIR"])
        f(1)
        print(json.dumps([before, during, eff.store.url]))
    """, env=env, cwd=work)
    db = tmp / "dejacache-dir" / "cache.db"
    assert got == [False, False, f"sqlite:///{db}"]
    assert db.exists()


def test_the_masking_key_is_created_only_when_a_credential_is_masked(
    sandbox: tuple[pathlib.Path, dict[str, str], pathlib.Path],
) -> None:
    tmp, env, work = sandbox
    code = """
        import json, os, dejacache
        @dejacache.cache
        def f(x, api_key=None):
            return x
        with dejacache.scope(store=dejacache.MemoryStore()):
            f(1)
            plain = sorted(os.listdir(os.environ["XDG_CONFIG_HOME"])) if os.path.exists(
                os.environ["XDG_CONFIG_HOME"]) else []
            f(1, api_key="sk-test-0123456789abcdefghij")
        print(json.dumps(plain))
    """
    assert _run(code, env=env, cwd=work) == []
    assert (tmp / "xdg-config" / "dejacache" / "secret.key").exists()


# ---------------------------------------------------------------- interception stays on time


_INTERCEPT = """
import json, sys
import dejacache
{before}
assert "dejacache.http" not in sys.modules
try:
    with dejacache.scope(store=dejacache.MemoryStore(), mode="replay"):
        {inside}
        httpx.get("http://127.0.0.1:9/v1/models", timeout=2)
except dejacache.ReplayMiss:
    print(json.dumps("intercepted"))
except Exception as exc:
    print(json.dumps(type(exc).__name__))
"""


@pytest.mark.parametrize(("before", "inside"), [
    ("import httpx", "pass"),  # the SDK was imported first
    ("pass", "import httpx"),  # imported inside the very first block: the import hook
])
def test_the_first_block_intercepts_http(before: str, inside: str) -> None:
    pytest.importorskip("httpx")
    got = _run(_INTERCEPT.format(before=before, inside=inside))
    assert got == "intercepted"


# ---------------------------------------------------------------- the first block

# What the first block used to load for HTTP interception: asyncio (~40 ms with ssl,
# concurrent.futures and logging) and importlib.abc (~9 ms of importlib.resources, tempfile and
# shutil). None of them runs before an async call or a stream, each of which loads them
# itself. A cassette block takes its lock (tempfile) and cleans temp files (glob) when it
# writes; difflib only compares trajectories. Interception itself (the transports, the
# providers, the socket guard: 30-90 ms) loads only once a module it patches is imported.
FIRST_BLOCK = ("asyncio", "ssl", "concurrent.futures", "logging",
               "importlib.abc", "importlib.resources", "subprocess", "tempfile", "shutil",
               "glob", "difflib", "pkgutil", "importlib.util", "socket")


@pytest.mark.parametrize("block", [
    "dejacache.scope(store=dejacache.MemoryStore())",
    "dejacache.scope(store=dejacache.MemoryStore(), mode='replay')",
    "dejacache.cassette(tmp + '/c.json')",
    "dejacache.cassette(tmp + '/c.json', mode='replay')",
])
@pytest.mark.parametrize("before", ["pass", "import socket"])
def test_the_first_block_loads_interception_only_when_there_is_something_to_patch(
    block: str, before: str, tmp_path: pathlib.Path,
) -> None:
    # ``socket`` alone (every pytest process has it) sets a tripwire: interception loads at
    # the first connection or lookup made inside a block, not when the block opens.
    got = _run(f"""
import json, sys
import dejacache
{before}
tmp = {str(tmp_path)!r}
with {block}:
    inside = sorted(m for m in {FIRST_BLOCK!r} if m in sys.modules and m != "socket")
    armed = "dejacache.http.intercept" in sys.modules
    if "socket" in sys.modules:
        sys.modules["socket"].getaddrinfo("127.0.0.1", 9)
    tripped = "dejacache.http.intercept" in sys.modules
print(json.dumps([inside, armed, tripped, "socket" in sys.modules]))
""")
    socket = before == "import socket"
    assert got == [[], False, socket, socket]


@pytest.mark.parametrize("mode", ["replay", "auto"])
def test_the_first_connection_of_a_block_meets_the_backstop(
    mode: str, tmp_path: pathlib.Path,
) -> None:
    # Only ``socket`` is loaded when the block opens, so interception is not loaded then; the
    # first connection (an HTTP request to loopback that went round interception) loads it
    # and is judged like any other: refused in replay, let through with a warning else.
    got = _run(f"""
import http.client, json, socket, warnings
import dejacache
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
port = srv.getsockname()[1]
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with dejacache.cassette({str(tmp_path / "c.json")!r}, mode={mode!r}):
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=5).connect()
            got = "connected"
        except dejacache.NetworkBlocked:
            got = "blocked"
print(json.dumps([got, any("did not go through" in str(w.message) for w in seen)]))
""")
    assert got == (["blocked", False] if mode == "replay" else ["connected", True])


# ---------------------------------------------------------------- what each entry point loads

# Each face's machinery, by the modules that make it up.
_MACHINERY = {
    "interception": ("dejacache.http.intercept", "dejacache.http.transport",
                     "dejacache.http.providers", "dejacache.http.socketguard"),
    "cassette blocks": ("dejacache.cassettes.block", "dejacache.cassettes.store"),
    "saving": ("dejacache.cassettes.merge", "dejacache.cassettes.splice",
               "dejacache.cassettes.lock"),
    "partial replay": ("dejacache.cassettes.partial",),
    "trajectories": ("dejacache.cassettes.trajectory",),
    "the report": ("dejacache.report.model", "dejacache.report.html"),
    "the runtime": ("dejacache.runtime",),
    "the planner": ("dejacache.planner",),
    "the CLI": ("dejacache.cli",),
    "other commands": ("dejacache._learn.command", "dejacache.cassettes.commands",
                       "dejacache.planner.cli", "dejacache.report.cli",
                       "dejacache.cassettes.importers.cli", "dejacache.proxying.cli"),
    "MCP recording": ("dejacache.mcp._proxy", "dejacache.mcp._wire"),
    "the default store": ("dejacache.stores.sqlite",),
}
# Recorded in a process of its own: the entry point's process starts from a fresh interpreter.
_RECORD = """
@dejacache.cache
def f(x):
    return x
with dejacache.cassette(TMP + "/c.json", mode="record"):
    f(1)
"""
_F = "@dejacache.cache\ndef f(x):\n    return x\n"
_ENTRY_POINTS = {
    # entry point: (the code, the faces it loads; every other face must stay unloaded)
    "@cache": (_F + "f(1)", {"the default store"}),
    "a replay block": (_F + "with dejacache.cassette(TMP + '/c.json', mode='replay'):\n"
                       "    f(1)", {"cassette blocks"}),
    "a recording block": (_F + "with dejacache.cassette(TMP + '/n.json', mode='record'):\n"
                          "    f(1)", {"cassette blocks", "saving"}),
    "a block with an HTTP client": (
        "import urllib3\nwith dejacache.cassette(TMP + '/c.json'):\n    pass",
        {"cassette blocks", "interception"}),
    "a partial block": (_F + "with dejacache.cassette(TMP + '/c.json', live=['tool']):\n"
                        "    f(1)", {"cassette blocks", "partial replay"}),
    "intercept()": ("import httpx\nwith dejacache.intercept():\n    pass", {"interception"}),
    # MCP's recording loads with the first session a block sees (mcp imports httpx).
    "a block with mcp imported": (
        "import mcp.client.stdio\nwith dejacache.cassette(TMP + '/c.json'):\n    pass",
        {"cassette blocks", "interception"}),
    "a trajectory": ("dejacache.load_cassette(TMP + '/c.json')", {"trajectories"}),
    "the report": ("import dejacache.report.model", {"the report"}),
    "tool_cache": ("from dejacache import tool_cache", {"the runtime"}),
    # one command's parser only (building them all imported 87 modules for `stats --help`)
    "a CLI command": ("import contextlib, io\nfrom dejacache.cli import main\n"
                      "with contextlib.redirect_stdout(io.StringIO()), "
                      "contextlib.suppress(SystemExit):\n    main(['stats', '--help'])",
                      {"the CLI"}),
}


@pytest.mark.parametrize("entry", list(_ENTRY_POINTS))
def test_each_entry_point_loads_only_its_own_machinery(
    entry: str, tmp_path: pathlib.Path,
) -> None:
    code, faces = _ENTRY_POINTS[entry]
    for lib in ("httpx", "urllib3", "mcp"):
        if f"import {lib}" in code:
            pytest.importorskip(lib)
    head = f"import json, sys\nimport dejacache\nTMP = {str(tmp_path)!r}\n"
    _run(head + _RECORD + "print(1)")
    got = _run(head + code + f"""
machinery = {_MACHINERY!r}
print(json.dumps(sorted(face for face, mods in machinery.items()
                        if any(m in sys.modules for m in mods))))
""")
    assert got == sorted(faces)


# What a replay hit never needs (a cassette without blobs, no miss, nothing recorded): the
# recording side (writer, blob folders), the miss and audit reports (findings, diffs, blob
# audit, prices), VCR-style matching, the ReDoS checker of declared patterns, form-body
# masking, and the two public records made only by stats() and explain(). Then what only a
# miss, a recording or a tool needs of the modules a hit does load: packing and atomic writes,
# rehash, step and shape lookups, the miss and divergence explanations, expiry, declared
# volatile paths, type tags, pickling, text-secret shapes, the redactor's write side, the
# tripwire's records, configure(), store protocols, async wrappers and MCP patching; and what
# a block arms only once a module it patches is imported (HTTP interception, MCP recording,
# the executor's context carry, the import hook's loader wrapping), and verify's reading of
# the usage record.
_NOT_ON_A_REPLAY_HIT = (
    "dejacache.cassettes.writer", "dejacache.cassettes.blobs", "dejacache.cassettes.blob_audit",
    "dejacache.cassettes.findings", "dejacache.cassettes.kinds", "dejacache.cassettes.prices",
    "dejacache.cassettes.vcr_match", "dejacache._core.diff", "dejacache._core.redos",
    "dejacache._formtext", "dejacache.stores._store_stats", "dejacache._key_parts",
    "dejacache.cassettes.pack", "dejacache.cassettes.atomic", "dejacache.cassettes.rehash",
    "dejacache.cassettes.recall", "dejacache.cassettes.shapes", "dejacache._replay_miss",
    "dejacache.cassettes.divergence", "dejacache.cassettes.expiry",
    "dejacache._core.volatile_apply", "dejacache._core.volatile_watch",
    "dejacache.cassettes.recording", "dejacache._tags", "dejacache._pickle_codec",
    "dejacache._secret_shapes", "dejacache.cassettes.redacting", "dejacache.cassettes.attempts",
    "dejacache._configure", "dejacache.stores._protocols", "dejacache._async_and_generators",
    "dejacache.mcp._patch", "dejacache.http", "dejacache.mcp", "dejacache._threads",
    "dejacache._importhook", "dejacache.cassettes.orphans",
    # nor the key rules of a method's receiver or a model's data and of a closure's
    # captured values: a plain function called with JSON data needs neither (~0.5 ms)
    "dejacache._receiver", "dejacache._captures",
    # nor the worker-thread hand-offs of async calls that wait on a file or a lock
    "dejacache.stores._off_loop",
    # nor where `dejacache learn` sends recordings (a run it starts sets its variable)
    "dejacache.cassettes.scratch",
    # nor ``typing`` (~12M instructions of a fresh process): the modules a hit loads import
    # it for the type checker only, their run-time pieces are ``_hints``' stand-ins
    "typing", "dejacache._codec_protocol",
    # nor ``pathlib``, with the ``urllib.parse`` and ``ipaddress`` it imports (~16.7M
    # instructions): a block works on its file's path as text, a Path is made when asked for
    "pathlib", "urllib.parse", "ipaddress",
    # nor ``threading`` (~2.5M instructions): a hit takes locks and thread-locals, which
    # ``_thread`` gives; a thread is started or named only off the hit
    "threading",
    # nor the ageing rules: a block without ``max_age`` has no entry that can expire, and
    # ``on_expiry``'s default is applied where one can (~0.5M instructions)
    "dejacache._core.ageing",
    # nor the redaction rules (a block without redact= or substitute= restores nothing; its
    # tape makes the default rules when it writes), the errors only stores and the runtime
    # raise, nor ``contextvars``, which only re-exports ``_contextvars`` (~0.7-0.9M
    # instructions each)
    "dejacache.cassettes.redact", "dejacache._errors_rare", "contextvars",
    # nor the masking of credentials (secret-shaped text, URL queries, the masking key, the
    # stores' scrubbing): a key asks only the rules of ``_secrets`` (~1M instructions)
    "dejacache._secret_masks")


# A late hit: a non-strict block replays the last of three recorded calls only. It is out
# of order and the two before it were never made; both are reported when
# ``tape.divergences`` is read, not at the block's exit (the report modules cost a small
# cassette's block 15M instructions there).
_LATE = _F + """
with dejacache.cassette(TMP + "/c.json", mode="record"):
    f(1), f(2), f(3)
"""


@pytest.mark.parametrize("record", [_RECORD, _LATE], ids=["first", "late"])
def test_a_replay_hit_loads_none_of_the_recording_or_reporting_modules(
    tmp_path: pathlib.Path, record: str,
) -> None:
    head = f"import json, sys\nimport dejacache\nTMP = {str(tmp_path)!r}\n"
    _run(head + record + "print(1)")
    hit = 3 if record is _LATE else 1
    got = _run(head + _F + f"""
with dejacache.cassette(TMP + '/c.json', mode='replay'):
    assert f({hit}) == {hit}
print(json.dumps(sorted(m for m in {_NOT_ON_A_REPLAY_HIT!r} if m in sys.modules)))
""")
    assert got == []


# Every module a replay hit adds to a process that has imported pytest (a test's first cassette
# block): pytest has loaded ``re``, ``inspect``, ``dataclasses`` and ``enum`` by then, so
# nearly all of the block's import cost is these, each ~0.3-0.4M instructions to find and load
# before its body runs. A module joining the list is a cost every test suite pays once. (Run
# without DEJACACHE_* variables: with one set, the table of known ones is loaded to check it.)
_PYTEST_REPLAY_HIT = [
    "_contextvars", "mmap", "orjson", "orjson.orjson", "xxhash", "xxhash._xxhash",
    "xxhash.version",
    "dejacache", "dejacache._blockwatch", "dejacache._core", "dejacache._core.flow",
    "dejacache._core.modes", "dejacache._core.strict", "dejacache._core.volatile",
    "dejacache._engine", "dejacache._flights", "dejacache._hints", "dejacache._keys_segments",
    "dejacache._lazy", "dejacache._paths", "dejacache._project", "dejacache._pytest_imports",
    "dejacache._secrets", "dejacache._slots", "dejacache.cassettes",
    "dejacache.cassettes._events", "dejacache.cassettes.ageing", "dejacache.cassettes.block",
    "dejacache.cassettes.calls", "dejacache.cassettes.format", "dejacache.cassettes.netguard",
    "dejacache.cassettes.order", "dejacache.cassettes.reader", "dejacache.cassettes.store",
    "dejacache.cassettes.tape", "dejacache.codec", "dejacache.config", "dejacache.decorators",
    "dejacache.errors", "dejacache.keys", "dejacache.scope", "dejacache.stats",
    "dejacache.stores", "dejacache.stores._base",
    # a file this small is one JSON document without a cross-reference index: read whole
    "dejacache.cassettes.document", "dejacache.cassettes.render",
]


def test_a_replay_hit_in_a_pytest_process_loads_exactly_these_modules(
    tmp_path: pathlib.Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEJACACHE_")}
    head = f"import json, sys\nimport dejacache\nTMP = {str(tmp_path)!r}\n"
    _run(head + _LATE + "print(1)", env=env)
    got = _run(f"""
import json, sys
import pytest
before = set(sys.modules)
import dejacache
TMP = {str(tmp_path)!r}
{_F}
with dejacache.cassette(TMP + '/c.json', mode='replay'):
    assert f(3) == 3
print(json.dumps(sorted(set(sys.modules) - before)))
""", env=env)
    assert got == sorted(_PYTEST_REPLAY_HIT)


# Registered before dejacache is imported, so it runs after the settings' own exit hook.
_AT_EXIT = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(
    m for m in ("pathlib", "urllib.parse", "ipaddress") if m in sys.modules))))
import dejacache.config
"""


def test_the_settings_exit_check_loads_no_pathlib_when_nothing_is_declared(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert _run(_AT_EXIT, cwd=tmp_path) == []


_GUARDED = """
import json, sys
import dejacache
{before}
try:
    with dejacache.scope(store=dejacache.MemoryStore(), mode="replay"):
        {inside}
        urllib.request.urlopen("http://127.0.0.1:9/", timeout=2)  # past interception
except Exception as exc:
    out = [type(exc).__name__]
import socket
out.append(socket.socket.connect.__qualname__)  # put back when the block closes
print(json.dumps(out))
"""


@pytest.mark.parametrize(("before", "inside"), [
    ("import urllib.request", "pass"),  # socket loaded before the block: patched on entry
    ("pass", "import urllib.request"),  # loaded inside the very first block
])
def test_the_first_replay_block_refuses_connections_made_past_interception(
    before: str, inside: str,
) -> None:
    got = _run(_GUARDED.format(before=before, inside=inside))
    assert got == ["NetworkBlocked", "socket.connect"]

