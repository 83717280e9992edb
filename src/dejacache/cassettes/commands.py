"""The cassette subcommands of the ``dejacache`` CLI: show, diff, scan, prune, rehash."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, TypeVar

import orjson

from ..errors import CassetteError
from ..stats import token_total

__all__ = ["add_cassette_commands"]

T = TypeVar("T")


class _Out:
    """Rich when installed and wanted, plain text otherwise."""

    def __init__(self, plain: bool) -> None:
        self.console: Any = None
        if not plain:
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self.console = Console(highlight=False)

    def line(self, text: str, style: str = "") -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text(text, style=style))
        else:
            print(text)

    def json(self, value: Any, indent: str = "    ") -> None:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        if self.console is not None:
            from rich.padding import Padding
            from rich.syntax import Syntax

            self.console.print(Padding(Syntax(text, "json", background_color="default",
                                              word_wrap=True), (0, 0, 0, len(indent))))
        else:
            for ln in text.splitlines():
                print(indent + ln)

    def progress(self, items: list[T], what: str) -> Iterator[T]:
        if self.console is not None and len(items) > 20 and self.console.is_terminal:
            from rich.progress import track

            yield from track(items, description=what, console=self.console)
        else:
            yield from items


def _usage_text(e: dict[str, Any]) -> str:
    u = e.get("usage")
    return f"  {token_total(u):,} tokens" if isinstance(u, dict) else ""


def _warn_if_damaged(command: str, doc: dict[str, Any], path: str) -> None:
    from .view import problem

    why = problem(doc, path)
    if why is not None:  # still shown: seeing the file is how one finds what changed
        print(f"dejacache {command}: warning: replay would refuse this file: {why}",
              file=sys.stderr)


def _cmd_show(args: argparse.Namespace) -> int:
    from .view import expanded_entries, load

    out = _Out(args.plain)
    try:
        doc = load(args.file)
    except CassetteError as exc:
        print(f"dejacache show: {exc}", file=sys.stderr)
        return 2
    _warn_if_damaged("show", doc, args.file)
    entries = doc["entries"] if args.refs else expanded_entries(doc)
    out.line(f"{args.file}: {len(entries)} calls, {len(doc['values'])} shared values",
             "bold")
    for i, e in enumerate(entries):
        if args.name and args.name not in str(e.get("name", "")):
            continue
        head = (f"#{i} {e.get('name')} [{e.get('kind')}] occurrence {e.get('occurrence')}  "
                f"{float(e.get('duration', 0)):.3f}s{_usage_text(e)}  key {e.get('key')}")
        out.line(head, "bold cyan")
        out.line("  request:", "yellow")
        out.json(e.get("request"))
        if "error" in e:
            out.line("  raised:", "red")
            out.json(e["error"])
        else:
            out.line("  response:", "green")
            out.json(e.get("response"))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from .view import drift, load

    out = _Out(args.plain)
    try:
        a, b = load(args.a), load(args.b)
    except CassetteError as exc:
        print(f"dejacache diff: {exc}", file=sys.stderr)
        return 2
    _warn_if_damaged("diff", a, args.a)
    _warn_if_damaged("diff", b, args.b)
    d = drift(a, b)
    out.line(f"{args.a} -> {args.b}", "bold")
    out.line(f"calls: {len(d.added)} added, {len(d.dropped)} dropped, {len(d.changed)} changed, "
             f"{d.same} unchanged")
    ta, tb = d.tokens
    sa, sb = d.seconds
    out.line(f"tokens: {ta:,} -> {tb:,} ({tb - ta:+,})   model time: {sa:.2f}s -> {sb:.2f}s "
             f"({sb - sa:+.2f}s)")
    for e in d.added:
        out.line(f"+ {e.get('name')} #{e.get('occurrence')}{_usage_text(e)}", "green")
    for e in d.dropped:
        out.line(f"- {e.get('name')} #{e.get('occurrence')}{_usage_text(e)}", "red")
    for _old, new, lines in d.changed:
        out.line(f"~ {new.get('name')} #{new.get('occurrence')}", "yellow")
        for ln in lines[: args.limit]:
            out.line(f"    {ln}")
        if len(lines) > args.limit:
            out.line(f"    ... and {len(lines) - args.limit} more")
    return 1 if args.exit_code and (d.added or d.dropped or d.changed) else 0


def _cmd_scan(args: argparse.Namespace) -> int:
    from .scan import iter_files, scan_file

    out = _Out(args.plain)
    files = list(iter_files(args.paths))
    found = 0
    for f in out.progress(files, "scanning"):
        for finding in scan_file(f):
            found += 1
            out.line(str(finding), "red")
    if found:
        out.line(f"dejacache scan: {found} secret-shaped strings in {len(files)} files; "
                 "redact them (cassette(redact=...)) and re-record", "bold red")
        return 1
    if not args.quiet:
        out.line(f"dejacache scan: {len(files)} files clean")
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    # Which entries are unused is only known by running the tests that replay them.
    cmd = [sys.executable, "-m", "pytest", "--dejacache-prune", *args.pytest_args]
    print("running:", " ".join(cmd))
    return subprocess.call(cmd)


def _cmd_rehash(args: argparse.Namespace) -> int:
    import pathlib

    from . import format as fmt
    from .lock import cassette_lock

    status = 0
    for name in args.files:
        path = pathlib.Path(name)
        try:
            with cassette_lock(path):  # a write like any other: no test may save meanwhile
                data = fmt.read_file(path)
                if data is None:
                    raise CassetteError("no such file", path=path)
                new, changed = fmt.rehash(data, path)
                if new == data[:]:
                    print(f"{path}: checksums match, nothing to do")
                    continue
                fmt.remove_stale_temps(path)
                fmt.atomic_write(path, new)
        except CassetteError as exc:
            print(f"dejacache rehash: {exc}", file=sys.stderr)
            status = 1
            continue
        what = f"accepted edits to {', '.join(changed)}" if changed else "rewritten"
        print(f"{path}: {what} (format {fmt.FORMAT}, checksums updated)")
    return status


def _add(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("--plain", action="store_true", help="plain text output (no colours)")
    return p


def add_cassette_commands(sub: Any) -> None:
    p = _add(sub, "show", "print a cassette with every shared value expanded")
    p.add_argument("file")
    p.add_argument("--refs", action="store_true", help="show value references unexpanded")
    p.add_argument("--name", default="", help="only calls whose name contains this")
    p.set_defaults(func=_cmd_show)
    p = _add(sub, "diff", "drift between two cassettes: calls added/dropped/changed, tokens")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--limit", type=int, default=20, help="field changes shown per call")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when they differ")
    p.set_defaults(func=_cmd_diff)
    p = _add(sub, "scan", "exit 1 if files hold secret-shaped strings (pre-commit hook)")
    p.add_argument("paths", nargs="+")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_scan)
    p = _add(sub, "prune", "run pytest with --dejacache-prune: drop entries no test used")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest")
    p.set_defaults(func=_cmd_prune)
    p = sub.add_parser(
        "rehash", help="accept hand edits to cassettes: recompute value hashes and checksums",
        description="Replay refuses a cassette whose bytes do not match their checksums. "
        "After editing one on purpose (a recorded answer, a merge of two branches), this "
        "rewrites it with fresh hashes and checksums; files written by an older dejacache "
        "are upgraded to the current format. Keys are kept: editing a request does not "
        "change which call the entry answers.")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.set_defaults(func=_cmd_rehash)
