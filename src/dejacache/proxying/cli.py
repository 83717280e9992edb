"""``dejacache proxy`` and ``dejacache mcp-proxy``: their arguments, checked before anything
starts.

Registering the commands imports nothing but ``argparse`` and the modes' vocabulary: the
server (asyncio, httpx, the cassettes) is imported when the command runs. A bad argument is
one line on stderr and exit status 2, as a port in use or a damaged cassette is one line and
status 1: never a traceback.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
from typing import Any, NoReturn

from .._core.modes import MODES, option_mode

__all__ = ["add_proxy_commands"]

# Left out of the command a miss report says re-records: the mode it sets itself, and what
# belonged to that one run (a ready file in a temporary directory, a port then free).
_NOT_AGAIN = frozenset({"--mode", "--ready-file", "--port"})


def _one_line_errors(p: argparse.ArgumentParser) -> None:
    def error(message: str) -> NoReturn:
        p.exit(2, f"{p.prog}: error: {message}\n")

    p.error = error  # type: ignore[method-assign]


def _add_cassette_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", type=option_mode, choices=MODES, default=None,
                   help="auto (replay hits, record misses), replay (vcrpy's none), record, off "
                        "(default: DEJACACHE_MODE, replay when CI is set, else auto)")
    p.add_argument("--strict", action="store_true",
                   help="calls must follow the recorded order; a divergence is a miss")
    p.add_argument("--live", metavar="KINDS", default=None,
                   help="calls that go live while the rest replay, e.g. 'model' "
                        "(recorded into <cassette>.live.json)")
    p.add_argument("--replay-until", metavar="N", type=int, default=None,
                   help="the first N calls replay in order, later ones go live")
    p.add_argument("--max-age", metavar="DURATION", default=None,
                   help="entries recorded longer ago replay with a warning (e.g. 30d)")
    p.add_argument("--on-expiry", choices=("warn", "rerecord"), default=None,
                   help="with --max-age: warn (default) or re-record expired entries")
    p.add_argument("--redact", metavar="NAME", action="append", default=[],
                   help="another header, field or query name to keep out of the file")
    p.add_argument("--volatile", metavar="ITEM", action="append", default=[],
                   help="a field, path or header left out of matching")


def _add_proxy(sub: Any) -> None:
    p = sub.add_parser(
        "proxy", help="record and replay any language's agent: an HTTP proxy in front of "
        "its providers, answering from cassettes",
        description="Serves http://HOST:PORT/<NAME>/<rest>, forwarded to the upstream NAME "
        "when recording and answered from the cassette when replaying, through the same "
        "keys, redaction and streams as in-process interception. Prints its base URL when "
        "ready. With -- CMD, runs CMD with DEJACACHE_PROXY (and OPENAI_BASE_URL, "
        "ANTHROPIC_BASE_URL) pointing at it and exits with its status.")
    _one_line_errors(p)
    p.add_argument("--cassette", metavar="PATH", default=None,
                   help="the cassette requests without a session go to (written on exit)")
    p.add_argument("--cassette-dir", metavar="DIR", default=None,
                   help="where sessions opened per test keep their cassettes (default: the "
                        "--cassette file's directory, else the current one)")
    _add_cassette_options(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (loopback unless --allow-remote)")
    p.add_argument("--port", type=int, default=0, help="port (0: a free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the proxy then serves your recordings "
                        "and forwards with your callers' credentials to anyone who reaches it)")
    p.add_argument("--upstream", metavar="NAME=URL", action="append", default=[],
                   help="add or replace an upstream (built in: openai, anthropic, gemini, "
                        "bedrock, cohere, groq, mistral, ollama)")
    p.add_argument("--ready-file", metavar="FILE", default=None,
                   help="write the base URL here once listening (removed on exit)")
    p.add_argument("--realtime", action="store_true",
                   help="replay streams at their recorded pace")
    p.add_argument("--read-timeout", metavar="SECONDS", type=float, default=None,
                   help="a request must arrive within this (its head whole, no pause in "
                        "its body as long), else 408 and a close (default: 30)")
    p.add_argument("--idle-timeout", metavar="SECONDS", type=float, default=None,
                   help="a connection with nothing asked or being answered for this long "
                        "is closed (default: 75; WebSockets excepted)")
    p.add_argument("--write-timeout", metavar="SECONDS", type=float, default=None,
                   help="a client that takes nothing of what it is sent for this long is "
                        "cut off, its answer unfinished and not recorded (default: 60)")
    p.add_argument("--max-connections", metavar="N", type=int, default=None,
                   help="connections open at once (WebSockets included); one more is "
                        "answered 503 with Retry-After and closed (default: 256)")
    p.add_argument("--max-buffered", metavar="BYTES", type=int, default=None,
                   help="bytes of request bodies held at once across connections; a body "
                        "that would pass it is answered 503 with Retry-After (default: "
                        "1073741824, 1 GiB)")
    p.add_argument("--max-message", metavar="BYTES", type=int, default=None,
                   help="bytes of one WebSocket message, all its frames together, either "
                        "way; the side sending a larger one is closed with 1009 (default: "
                        "67108864, 64 MiB)")
    p.add_argument("--max-recorded-stream", metavar="BYTES", type=int, default=None,
                   help="bytes one live answer's recording may hold; a longer stream or "
                        "download still reaches the client whole, as it arrives, but is not "
                        "recorded, with a warning (default: 67108864, 64 MiB)")
    p.add_argument("--node-helper", metavar="DIR", default=None,
                   help="copy the helper for Node test runners (dejacache-proxy.mjs, a "
                        "cassette per test; and its types) into DIR, and exit")
    # (not "command": the dejacache parser keeps the subcommand's name there)
    p.add_argument("run", nargs=argparse.REMAINDER, metavar="-- CMD",
                   help="run CMD under the proxy and exit with its status")
    p.set_defaults(func=_cmd_proxy, passthrough="run")


def _command(args: argparse.Namespace, prog: str) -> list[str]:
    """The command after ``--`` (anything else left over is an unknown argument)."""
    cmd = list(args.run)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
        if not cmd:
            _fail(prog, "-- must be followed by a command")
    elif cmd:
        _fail(prog, f"unrecognized arguments: {shlex.join(cmd)} (a command to run goes "
                    "after --)")
    return cmd


def _rerecord(cassette: pathlib.Path | None) -> str:
    """The command that re-records: the one this proxy was started with, in record mode."""
    argv = sys.argv[1:]
    if argv[:1] in (["proxy"], ["mcp-proxy"]):
        from ..mcp import _wire

        head, sep, tail = _split(argv)
        kept: list[str] = []
        skip = False
        for a in head:
            if skip:
                skip = False
            elif a in _NOT_AGAIN:
                skip = True
            elif a.startswith("--env="):  # one spelling, whose value hidden_args reads
                kept += ["--env", a[len("--env="):]]
            elif a.partition("=")[0] not in _NOT_AGAIN:
                kept.append(a)
        # Shown in miss messages: credentials on the command line (a server's --token, an
        # --env API_KEY=...) are left for the user to fill in.
        line = _wire.hidden_args([*kept, "--mode", "record", *sep, *tail],
                                 lambda _: _wire.REDACTED)
        return shlex.join(["dejacache", *line])
    return f"dejacache proxy --cassette {shlex.quote(str(cassette))} --mode record"


def _split(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], ["--"], argv[i + 1:]
    return argv, [], []


def _cmd_proxy(args: argparse.Namespace) -> int:
    if args.node_helper is not None:
        return _copy_node_helper(pathlib.Path(args.node_helper))
    from ._config import config_from_args
    from ._server import serve

    command = _command(args, "dejacache proxy")
    cassette = pathlib.Path(args.cassette) if args.cassette else None
    config = config_from_args(args, _rerecord(cassette))
    ready = pathlib.Path(args.ready_file) if args.ready_file else None
    return serve(config, ready_file=ready, command=command)


def _copy_node_helper(directory: pathlib.Path) -> int:
    import shutil

    if not directory.is_dir():
        _fail("dejacache proxy", f"--node-helper {directory}: no such directory")
    for source in sorted((pathlib.Path(__file__).parent / "node").glob("dejacache-proxy.*")):
        print(shutil.copyfile(source, directory / source.name))
    return 0


def _fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _add_mcp_proxy(sub: Any) -> None:
    p = sub.add_parser(
        "mcp-proxy", help="record and replay any MCP client's server: a stdio MCP server in "
        "front of the real one, answering from a cassette",
        description="A stdio MCP server. Recording, it starts the stdio server CMD (or "
        "connects to --upstream URL, a streamable-HTTP server) and forwards the session; "
        "replaying, it answers from the cassette without starting CMD.")
    _one_line_errors(p)
    p.add_argument("--cassette", metavar="PATH", default=None,
                   help="the cassette file (record and replay)")
    _add_cassette_options(p)
    p.add_argument("--upstream", metavar="URL", default=None,
                   help="a streamable-HTTP MCP server instead of a stdio CMD")
    p.add_argument("--env", metavar="NAME[=VALUE]", action="append", default=[],
                   help="an environment variable CMD is launched with, part of its identity "
                   "(credentials as keyed digests): two launches with other values never "
                   "share answers. NAME alone takes the value this proxy was started with; "
                   "the rest of the proxy's environment is passed on, never keyed")
    runtime = p.add_argument_group(
        "runtime cache (instead of --cassette)",
        "mcp_tool_cache through the proxy: read-only tools cached by their annotations, "
        "every other tool invalidating them; nothing recorded")
    runtime.add_argument("--cache", action="store_true", help="cache instead of recording")
    runtime.add_argument("--store", metavar="URL", default=None,
                         help="the cache's store (default: the project's SQLite cache)")
    runtime.add_argument("--ttl", metavar="DURATION", default="1h",
                         help="how long a result is kept (default 1h)")
    runtime.add_argument("--cacheable", metavar="TOOL", action="append", default=[],
                         help="a tool without annotations to cache all the same")
    runtime.add_argument("--tenant", default="default",
                         help="whose cache (results are never shared between tenants)")
    p.add_argument("run", nargs=argparse.REMAINDER, metavar="-- CMD",
                   help="the stdio MCP server to start when a call must go live")
    p.set_defaults(func=_cmd_mcp_proxy, passthrough="run")


def _cmd_mcp_proxy(args: argparse.Namespace) -> int:
    from ._mcp_link import require_mcp

    prog = "dejacache mcp-proxy"
    command = _command(args, prog)
    if bool(command) == bool(args.upstream):
        _fail(prog, "give the server as -- CMD [ARGS...] or as --upstream URL (one of them)")
    if (args.cassette is None) == (not args.cache):
        _fail(prog, "give --cassette PATH (record and replay) or --cache (the runtime cache)")
    args.env = _launch_env(prog, args.env, bool(args.upstream))
    require_mcp()
    if args.cache:
        from .mcp_runtime import run_cached

        return run_cached(args, command)
    from .mcp_stdio import run_mcp_proxy

    return run_mcp_proxy(args, command, _rerecord(pathlib.Path(args.cassette)))


def _launch_env(prog: str, given: list[str], upstream: bool) -> dict[str, str]:
    """``--env NAME=VALUE`` / ``--env NAME`` (the proxy's own value) as a mapping."""
    if given and upstream:
        _fail(prog, "--env is for a stdio server launched as -- CMD, not for --upstream URL")
    out: dict[str, str] = {}
    for item in given:
        name, eq, value = item.partition("=")
        if not name or "\x00" in item:
            _fail(prog, f"--env {item.partition('=')[0]!r}: give NAME=VALUE or NAME")
        if not eq:
            found = os.environ.get(name)
            if found is None:
                _fail(prog, f"--env {name}: {name} is not set in this proxy's environment")
            value = found
        out[name] = value
    return out


def add_proxy_commands(sub: Any) -> None:
    """Register ``proxy`` and ``mcp-proxy`` on the ``dejacache`` command line."""
    _add_proxy(sub)
    _add_mcp_proxy(sub)
