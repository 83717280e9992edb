"""The ``dejacache`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import DejacacheError

if TYPE_CHECKING:
    import pathlib

    from .stores._protocols import Store

__all__ = ["build_parser", "main"]

_Sub = Any  # argparse's _SubParsersAction is private; commands only call add_parser on it


# Each command is one ``_add_<name>(sub)`` function that registers its parser and sets
# ``func``; ``main`` calls them in order, so adding a command is one function and one line.


def _store(args: argparse.Namespace, *, readonly: bool = False) -> Store:
    """The store a command works on: ``--store URL`` or the configured default.

    ``readonly``: the command only reads, so it must not create, migrate or move aside
    anything (``stats --store sqlite:///u.db`` used to create an empty u.db). An SQLite
    file is then opened read-only, and a missing one reads as empty.
    """
    from .config import get_settings, store_from_url

    url = getattr(args, "store", None)
    if readonly:
        from .stores.sqlite import SQLiteStore

        path = _sqlite_path(url) if url else _default_path()
        if path is not None:
            return SQLiteStore(path, readonly=True)
    store = store_from_url(url) if url else get_settings().store
    # Calls fail open (Redis down reads as a miss); a person asking what the store holds
    # must hear that it cannot be reached, not "entries: 0" (exit 1, the URL named).
    if getattr(store, "fail_open", None) is True:
        store.fail_open = False  # type: ignore[attr-defined]
    return store


def _sqlite_path(url: str) -> str | None:
    """The file of an ``sqlite:`` URL, as ``store_from_url`` reads it (None: another kind)."""
    import urllib.parse

    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() != "sqlite":
        return None
    if parsed.netloc:  # sqlite://relative/path.db
        return parsed.netloc + parsed.path
    return parsed.path or _default_path()


def _default_path() -> str | None:
    """Where the default store lives (None when ``DEJACACHE_DIR`` turns persistence off)."""
    from ._paths import default_cache_dir

    d = default_cache_dir()
    return None if d is None else str(d / "cache.db")


def _add_store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="URL", default=None,
                   help="store URL (default: DEJACACHE_DIR or <project>/.dejacache/cache.db)")


# ---------------------------------------------------------------- stats


def _collect(store: Store, namespace: str | None) -> dict[tuple[str, str], list[float]]:
    """(namespace, name) -> [entries, bytes, recorded seconds, tokens]."""
    from .stats import token_total

    per: dict[tuple[str, str], list[float]] = {}
    for _, rec in store.iterate(namespace=namespace):
        row = per.setdefault((rec.namespace, rec.name), [0, 0, 0.0, 0])
        row[0] += 1
        row[1] += rec.size
        row[2] += rec.duration
        row[3] += token_total(rec.usage) if rec.usage else 0
    return per


def _cmd_stats(args: argparse.Namespace) -> int:
    store = _store(args, readonly=True)
    st = store.stats()
    per = _collect(store, args.cache_key)
    totals = [sum(r[i] for r in per.values()) for i in range(4)]
    if args.json:
        import orjson

        doc = {
            "store": st.backend,
            "entries": st.entries,
            "bytes": st.bytes,
            "extra": dict(st.extra),
            "recorded_seconds": totals[2],
            "tokens": int(totals[3]),
            "by_name": [
                {"namespace": ns, "name": name, "entries": int(r[0]), "bytes": int(r[1]),
                 "recorded_seconds": r[2], "tokens": int(r[3])}
                for (ns, name), r in sorted(per.items())
            ],
        }
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return 0
    path = getattr(store, "path", None)
    missing = " (no such file; nothing was created)" if (
        path is not None and not path.exists()) else ""
    print(f"store:    {st.backend}{missing}")
    if "file_bytes" in st.extra:
        print(f"file:     {int(st.extra['file_bytes']):,} bytes on disk")
    print(f"entries:  {st.entries:,}   bytes: {st.bytes:,}")
    print(f"recorded: {totals[2]:,.3f} s of calls, {int(totals[3]):,} tokens "
          "(what a full replay saves)")
    if per:
        print()
        print(f"{'entries':>7} {'bytes':>11} {'recorded s':>11} {'tokens':>9}  namespace / name")
        for (ns, name), (n, size, dur, tok) in sorted(per.items(), key=lambda kv: -kv[1][0]):
            print(f"{int(n):>7,} {int(size):>11,} {dur:>11.3f} {int(tok):>9,}  {ns} / {name}")
    return 0


def _add_stats(sub: _Sub) -> None:
    p = sub.add_parser("stats", help="what the store holds: entries, bytes, time and tokens")
    _add_store_option(p)
    p.add_argument("--cache-key", default=None, metavar="NS", help="only this namespace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_stats)


# ---------------------------------------------------------------- clear


def _cmd_clear(args: argparse.Namespace) -> int:
    path = _sqlite_path(args.store) if args.store else _default_path()
    if path is not None and not os.path.exists(path):
        # Opening it would create it (and its directories): a misspelt --store answered
        # "removed 0 entries" with a new empty database, the real one left full.
        if args.store:
            print(f"dejacache clear: {args.store}: no such file (nothing was cleared or "
                  "created)", file=sys.stderr)
            return 1
        print(f"nothing to clear: {path} does not exist yet")
        return 0
    store = _store(args)
    from ._core.counts import counted

    n = store.clear(namespace=args.cache_key)
    where = f"namespace {args.cache_key!r} of " if args.cache_key is not None else ""
    print(f"removed {counted(n, 'entry', 'entries')} from {where}{store.url}")
    return 0


def _add_clear(sub: _Sub) -> None:
    p = sub.add_parser("clear", help="remove stored entries (all, or one namespace)")
    _add_store_option(p)
    p.add_argument("--cache-key", default=None, metavar="NS", help="only this namespace")
    p.set_defaults(func=_cmd_clear)


# ---------------------------------------------------------------- demo


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(live=args.live, plain=args.plain or None)


def _add_demo(sub: _Sub) -> None:
    p = sub.add_parser("demo", help="run a small agent twice: live, then from the store")
    p.add_argument("--live", action="store_true", help="record against the real API")
    p.add_argument("--plain", action="store_true", help="plain text output (no colours)")
    p.set_defaults(func=_cmd_demo)


# ---------------------------------------------------------------- verify


def _duration(text: str) -> float:
    # Parsed by argparse so a malformed one is a usage error (exit 2), as the docs promise.
    from ._core.durations import seconds

    try:
        return seconds(text, "--max-age")
    except DejacacheError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_verify(args: argparse.Namespace) -> int:
    import pathlib
    import time

    from .cassettes import ageing, orphans, verify

    # --max-age, else what `dejacache config` says is in force (DEJACACHE_MAX_AGE, then the
    # project file): a limit written once must not need the flag too.
    max_age = ageing.resolve(args.max_age, None)[0]
    record_path = pathlib.Path(args.usage) if args.usage else _usage_path()
    if args.usage and record_path is not None and record_path.is_dir():  # (a usage error)
        print(f"dejacache verify: --usage {args.usage} is a directory, not a usage record "
              "(.dejacache/usage.json)", file=sys.stderr)
        return 2
    record = orphans.UsageRecord.read(record_path) if record_path is not None else None
    if args.usage and record is None:
        print(f"dejacache verify: no usage record at {args.usage}", file=sys.stderr)
        return 2
    try:
        files = list(verify.cassette_files(args.paths or ["."]))
    except DejacacheError as exc:  # a misspelt path must not come back "clean"
        print(f"dejacache verify: {getattr(exc, 'path', '')}: no such file or directory",
              file=sys.stderr)
        return 2
    rows = verify.verify_files(files, usage=record, max_age=max_age, now=time.time(),
                               fix=args.fix)
    lines = verify.table(rows, verbose=args.verbose)
    if args.fix:  # before the summary, which stays the last line
        lines[-1:-1] = verify.fix_report(rows)
    for line in lines:
        print(line)
    return 1 if any(r.verdict == verify.FAIL for r in rows) else 0


def _usage_path() -> pathlib.Path | None:
    """Where the pytest plugin writes its usage record (None: persistence is off)."""
    import pathlib

    from .cassettes.usage import FILE_NAME

    d = _default_path()
    return None if d is None else pathlib.Path(d).parent / FILE_NAME


def _add_verify(sub: _Sub) -> None:
    p = sub.add_parser(
        "verify", help="exit 1 on damaged, secret-bearing, orphaned, expired or too-new "
        "cassettes (CI, pre-commit)",
        description="Checks cassette files (those named, and the *.json files in a "
        "'cassettes' directory under the directories named; default: the current "
        "directory) and prints a table of file, check, verdict and detail. Orphans are "
        "judged by the usage record the pytest plugin writes at the end of a run.")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="cassettes, or directories searched for cassettes/ folders "
                        "(default: .)")
    p.add_argument("--fix", action="store_true",
                   help="remove orphaned entries and files, rewrite older formats and hand "
                        "layouts with fresh checksums (damage is never accepted)")
    p.add_argument("--usage", metavar="FILE", default=None,
                   help="the usage record (default: .dejacache/usage.json, or in DEJACACHE_DIR)")
    p.add_argument("--max-age", metavar="DURATION", default=None, type=_duration,
                   help="entries recorded longer ago fail (e.g. 30d), unless the cassette "
                        "sets its own max_age")
    p.add_argument("-v", "--verbose", action="store_true", help="every row, not only problems")
    p.set_defaults(func=_cmd_verify)


# ---------------------------------------------------------------- config


def _cmd_config(args: argparse.Namespace) -> int:
    from . import _project

    project = _project.current()
    rows = _project.describe(project)
    if args.json:
        import orjson

        print(orjson.dumps({"file": str(project.path) if project.path else None,
                            "settings": [{"key": k, "value": v, "source": src}
                                         for k, v, src in rows]},
                           option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"project file: {project.path or 'none found (no pyproject.toml at the root)'}")
    for key, value, source in rows:
        if isinstance(value, (list, tuple)):
            print(f"{key}: ({source})" if value else f"{key}: [] ({source})")
            for item in value:
                print(f"    {item}")
        else:
            print(f"{key}: {value} ({source})")
    return 0


def _add_config(sub: _Sub) -> None:
    p = sub.add_parser("config", help="the settings in force and where each comes from "
                       "([tool.dejacache] in pyproject.toml, the environment, defaults)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_config)


# One example per command, shown at the end of its --help.
EXAMPLES: dict[str, str] = {
    "stats": "dejacache stats --json",
    "clear": "dejacache clear --cache-key my-suite-v2",
    "demo": "dejacache demo",
    "verify": "dejacache verify tests/            (in CI, after pytest)",
    "show": "dejacache show tests/cassettes/test_agent/test_plan.json --name openai",
    "diff": ("git show HEAD:tests/cassettes/test_agent/test_plan.json > /tmp/old.json\n"
             "  dejacache diff /tmp/old.json tests/cassettes/test_agent/test_plan.json"),
    "scan": "dejacache scan tests/cassettes     (or as a pre-commit hook)",
    "prune": "dejacache prune -q tests/",
    "rehash": "dejacache rehash tests/cassettes/test_agent/test_plan.json",
    "prefix-report": "dejacache prefix-report tests/cassettes --top 5",
    "report": ("dejacache report tests/cassettes -o report.html\n"
               "  dejacache report old.json new.json -o drift.html"),
    "import": "dejacache import tests/cassettes/test_plan.yaml -o tests/cassettes/plan.json",
    "migrate": "dejacache migrate tests/       (then run pytest: no marker edits)",
    "prompt-cache": ("dejacache prompt-cache plan tests/cassettes\n"
                     "  dejacache prompt-cache check tests/cassettes --min-hit-rate 0.7"),
    "config": "dejacache config --json",
    "learn": ("dejacache learn tests/test_agent.py          (propose volatile rules)\n"
              "  dejacache learn --write tests/               (and write them to pyproject.toml)"),
    "rekey": "dejacache rekey tests/cassettes",
    "proxy": ("dejacache proxy --cassette tests/cassettes/agent.json -- npx vitest run\n"
              "  dejacache proxy --port 8089            (per-test cassettes via the helper)"),
    "mcp-proxy": ("dejacache mcp-proxy --cassette mcp.json -- "
                  "npx @modelcontextprotocol/server-everything"),
}


def _with_examples(sub: Any) -> None:
    for name, cmd in sub.choices.items():
        example = EXAMPLES.get(name)
        if example is not None:
            cmd.epilog = f"example:\n  {example}"
            cmd.formatter_class = argparse.RawDescriptionHelpFormatter


# Who registers which commands, in the order ``--help`` lists them: "module:function" (each
# function takes the subparsers and adds its commands), or a function of this module. A run
# of one command imports its registrar only: building every parser imported 87 modules
# (the planner, the report, the importers, the proxy) to run ``dejacache stats``.
_REGISTRARS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("stats",), "_add_stats"), (("clear",), "_add_clear"), (("demo",), "_add_demo"),
    (("verify",), "_add_verify"), (("config",), "_add_config"),
    (("learn",), "._learn.command:add_learn"), (("rekey",), "._learn.command:add_rekey"),
    (("show", "diff", "scan", "prune", "rehash"), ".cassettes.commands:add_cassette_commands"),
    (("prefix-report",), ".cassettes.prefix_report:add_prefix_report"),
    (("prompt-cache",), ".planner.cli:add_prompt_cache"),
    (("report",), ".report.cli:add_report"),
    (("import",), ".cassettes.importers.cli:add_import"),
    (("migrate",), ".cassettes.importers.cli:add_migrate"),
    (("proxy", "mcp-proxy"), ".proxying.cli:add_proxy_commands"),
)
COMMANDS: tuple[str, ...] = tuple(c for names, _ in _REGISTRARS for c in names)


def _registrar(where: str) -> Callable[[Any], None]:
    module, sep, name = where.partition(":")
    if not sep:
        return globals()[where]  # type: ignore[no-any-return]
    from importlib import import_module

    return getattr(import_module(module, __package__), name)  # type: ignore[no-any-return]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``command``: one of :data:`COMMANDS`) only that command's
    parser: what running it needs."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="dejacache", description="Record/replay and caching for LLM calls and agent tools."
    )
    parser.add_argument("--version", action="version", version=f"dejacache {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for names, where in _REGISTRARS:
        if command is None or command in names:
            _registrar(where)(sub)
    _with_examples(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, when it names a known one first (else None: the whole
    parser says what is wrong, or prints the help)."""
    first = next(iter(argv), None)
    return first if first in COMMANDS else None


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line. A command that passes arguments on (``prune``: to pytest) names
    the attribute that takes them in ``passthrough``: argparse's ``REMAINDER`` misses
    options that come first (``prune -q``), so those arrive as unknown and join it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(argv))
    args, unknown = parser.parse_known_args(argv)
    dest = getattr(args, "passthrough", None)
    if unknown:
        if dest is None:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        setattr(args, dest, [*unknown, *getattr(args, dest)])
    return args


# What the shell shows for ``cat`` or ``git`` killed by SIGPIPE: 128 + 13.
_READER_GONE = 141


def _reader_gone() -> int:
    """Our reader went away (``dejacache show FILE | head``): not an error of ours, so no
    message. stdout goes to /dev/null, or the flush at exit would fail again, and the status
    is the one a Unix tool has in the same place (status 1 is ours for errors, and always
    comes with a message)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return _READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        from . import _project
        from ._env import warn_unknown

        _project.current()  # every command: a misspelt key in the project file is an error
        warn_unknown()  # and a misspelt DEJACACHE_* variable is named
        status = int(args.func(args))
        sys.stdout.flush()  # here, inside the try: a reader gone shows up now, not at exit
        return status
    except BrokenPipeError:  # commands write only to stdout through pipes
        return _reader_gone()
    except DejacacheError as exc:  # a broken store or bad config: one line, not a traceback
        print(f"dejacache {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
