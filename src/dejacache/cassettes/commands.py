"""The cassette subcommands of the ``dejacache`` CLI: show, diff, scan, prune, rehash."""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import orjson

from .._core.counts import counted
from ..errors import CassetteError, ConfigurationError
from .ageing import resolve as resolve_ageing
from .expiry import age_line
from .trajectory import CassetteView, Step, diff_cassettes, load_cassette

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
                # rich ends a closed pipe with its own exit(1); rich's documented hook
                # hands it back, so the CLI ends it one way for every command.
                self.console.on_broken_pipe = _broken_pipe

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


def _broken_pipe() -> None:
    raise BrokenPipeError


def _tokens_text(s: Step) -> str:
    if not s.total_tokens:
        return ""
    return f"  {s.total_tokens:,} tokens" + ("" if s.tokens_exact else " (estimated)")


def _warn_if_damaged(command: str, view: CassetteView) -> None:
    why = view.problem
    if why is not None:  # still shown: seeing the file is how one finds what changed
        print(f"dejacache {command}: warning: replay would refuse this file: {why}",
              file=sys.stderr)


def _load(command: str, path: str) -> CassetteView | None:
    try:
        return load_cassette(path, verify=False)
    except CassetteError as exc:
        print(f"dejacache {command}: {exc}", file=sys.stderr)
        return None


def _totals(view: CassetteView) -> str:
    est = "" if view.tokens_exact else " (some estimated)"
    return (f"tokens: {view.total_input_tokens:,} in + {view.total_output_tokens:,} out = "
            f"{view.total_tokens:,}{est}   model time: {view.duration:.2f}s   cost: "
            f"~${view.cost:.4f} (prices as of {view.prices_date})")


def _max_age() -> float | None:
    """``DEJACACHE_MAX_AGE`` (or none): show marks the entries replay would warn about."""
    try:
        return resolve_ageing(None, None)[0]
    except ConfigurationError:
        return None


def _cmd_show(args: argparse.Namespace) -> int:
    out = _Out(args.plain)
    view = _load("show", args.file)
    if view is None:
        return 2
    _warn_if_damaged("show", view)
    out.line(f"{args.file}: {counted(view.num_steps, 'call')}, "
             f"{counted(view.num_values, 'shared value')}", "bold")
    out.line(_totals(view))
    _show_blobs(out, view)
    now, max_age = time.time(), _max_age()
    for s in view.steps:
        if args.name and args.name not in s.name:
            continue
        after = (f"  after #{s.follows}" if s.follows is not None and s.follows >= 0
                 and s.follows != s.index - 1 else "")
        head = (f"#{s.index} {s.name} [{s.raw_kind}] occurrence {s.occurrence}  "
                f"{s.duration:.3f}s{_tokens_text(s)}{after}  key {s.key}")
        out.line(head, "bold cyan")
        out.line("  " + age_line(s.stored, now, max_age))
        stored = s.stored if args.refs else None
        out.line("  request:", "yellow")
        out.json(stored["request"] if stored is not None else s.request)
        if s.error is not None:
            out.line("  raised:", "red")
            out.json(s.error)
        else:
            out.line("  response:", "green")
            out.json(stored.get("response") if stored is not None else s.response)
    return 0


def _show_blobs(out: _Out, view: CassetteView, limit: int = 12) -> None:
    """The payloads kept beside the file, by size and type (largest first)."""
    found = view.blobs
    if not found:
        return
    total = sum(b.size for b in found if b.size > 0)
    kinds = collections.Counter(b.kind for b in found)
    out.line(f"blobs: {len(found)} ({total:,} bytes in {view.path.parent}/blobs): "
             + ", ".join(f"{n} x {k}" for k, n in kinds.most_common()))
    for b in found[:limit]:
        size = "MISSING" if b.size < 0 else f"{b.size:,} B"
        used = ", ".join(f"#{i}" for i in b.steps[:6]) + (" ..." if len(b.steps) > 6 else "")
        out.line(f"  {b.hash}  {size:>12}  {b.kind}  used by {used}",
                 "red" if b.size < 0 else "")
    if len(found) > limit:
        out.line(f"  ... and {len(found) - limit} more")


def _cmd_diff(args: argparse.Namespace) -> int:
    out = _Out(args.plain)
    a, b = _load("diff", args.a), _load("diff", args.b)
    if a is None or b is None:
        return 2
    _warn_if_damaged("diff", a)
    _warn_if_damaged("diff", b)
    d = diff_cassettes(a, b, ignore_ids=not args.keep_ids, limit=max(args.limit, 1) * 5)
    out.line(f"{args.a} -> {args.b}", "bold")
    moved = f", {len(d.reordered_calls)} reordered" if d.reordered_calls else ""
    out.line(f"calls: {len(d.new_calls)} added, {len(d.dropped_calls)} dropped, "
             f"{len(d.changed_calls)} changed, {d.unchanged} unchanged{moved} "
             f"(steps {a.num_steps} -> {b.num_steps})")
    out.line(f"tokens: {a.total_tokens:,} -> {b.total_tokens:,} ({d.token_delta:+,})   "
             f"model time: {a.duration:.2f}s -> {b.duration:.2f}s ({d.duration_delta:+.2f}s)   "
             f"cost: ~${a.cost:.4f} -> ~${b.cost:.4f} ({d.cost_delta:+.4f})")
    # Steps are numbered in their own file: a#2 is the third call of A, b#5 the sixth of B.
    for s in d.new_calls:
        out.line(f"+ b#{s.index} {s.kind} {s.name}{_tokens_text(s)}", "green")
    for s in d.dropped_calls:
        out.line(f"- a#{s.index} {s.kind} {s.name}{_tokens_text(s)}", "red")
    for c in d.changed_calls:
        out.line(f"~ a#{c.before.index} -> b#{c.after.index} {c.after.kind} {c.name}",
                 "yellow")
        for ln in c.changes[: args.limit]:
            out.line(f"    {ln}")
        if len(c.changes) > args.limit:
            out.line(f"    ... and {len(c.changes) - args.limit} more")
    for sa, sb in d.reordered_calls:
        was = "the start of its task" if sa.follows == -1 else f"a#{sa.follows}"
        now = "the start of its task" if sb.follows == -1 else f"b#{sb.follows}"
        out.line(f"> a#{sa.index} -> b#{sb.index} {sb.kind} {sb.name}: came after {was}, "
                 f"now after {now}", "magenta")
    return 1 if args.exit_code and not d.identical else 0


def _cmd_scan(args: argparse.Namespace) -> int:
    from .scan import iter_files, scan_file

    out = _Out(args.plain)
    try:
        files = list(iter_files(args.paths))
    except CassetteError as exc:  # a misspelt path must not come back "clean"
        print(f"dejacache scan: {exc.path}: no such file or directory", file=sys.stderr)
        return 2
    found = dirty = 0
    for f in out.progress(files, "scanning"):
        findings = scan_file(f)
        found += len(findings)
        dirty += bool(findings)
        if findings and args.quiet:  # -q: the file names only, once each
            out.line(str(f), "red")
        elif not args.quiet:
            for finding in findings:
                out.line(str(finding), "red")
    if found:
        if not args.quiet:
            out.line(f"dejacache scan: {counted(found, 'finding')} in {dirty} of "
                     f"{counted(len(files), 'file')}; redact them "
                     "(cassette(redact=...)) and re-record", "bold red")
        return 1
    if not args.quiet:
        out.line(f"dejacache scan: {counted(len(files), 'file')} clean")
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    # Which entries are unused is only known by running the tests that replay them.
    cmd = [sys.executable, "-m", "pytest", "--dejacache-prune", *args.pytest_args]
    print("running:", " ".join(cmd))
    return subprocess.call(cmd)


def _cmd_rehash(args: argparse.Namespace) -> int:
    import pathlib

    from . import format as fmt
    from .atomic import atomic_write, remove_stale_temps
    from .lock import cassette_lock
    from .rehash import rehash

    status = 0
    for name in args.files:
        path = pathlib.Path(name)
        try:
            # a write like any other: no test may save meanwhile
            with cassette_lock(path, unsaved="the file was not rehashed"):
                data = fmt.read_file(path)
                if data is None:
                    raise CassetteError("no such file", path=path)
                new, changed = rehash(data, path)
                if new == data[:]:
                    print(f"{path}: checksums match, nothing to do")
                    continue
                remove_stale_temps(path)
                atomic_write(path, new)
        except CassetteError as exc:
            print(f"dejacache rehash: {exc}", file=sys.stderr)
            status = 1
            continue
        what = f"accepted edits to {', '.join(changed)}" if changed else "rewritten"
        print(f"{path}: {what} (format {fmt.FORMAT}, checksums updated)")
        if changed:
            print("  keys are kept: rehash only refreshes checksums. An entry whose request "
                  "you edited still answers the call it was recorded for, not the edited "
                  "one; to answer the edited call, re-record it "
                  "(pytest <test> --dejacache-mode=record).")
    return status


def _add(sub: Any, name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, **kw)
    p.add_argument("--plain", action="store_true", help="plain text output (no colours)")
    return p


def _count(text: str) -> int:
    # A usage error (exit 2): --limit -1 sliced the changes and hid the one that differed.
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, not {text!r}")
    return n


def add_cassette_commands(sub: Any) -> None:
    p = _add(sub, "show", "print a cassette with every shared value expanded")
    p.add_argument("file", help="a cassette (tests/cassettes/<module>/<test>.json)")
    p.add_argument("--refs", action="store_true", help="show value references unexpanded")
    p.add_argument("--name", default="", help="only calls whose name contains this")
    p.set_defaults(func=_cmd_show)
    p = _add(sub, "diff", "drift between two cassettes: calls added/dropped/changed, tokens")
    p.add_argument("a", help="the cassette before (e.g. a copy from git show HEAD:path)")
    p.add_argument("b", help="the cassette after")
    p.add_argument("--limit", type=_count, default=20, help="field changes shown per call")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when they differ")
    p.add_argument("--keep-ids", action="store_true",
                   help="compare the ids, headers and timestamps providers regenerate on "
                        "every call (ignored by default)")
    p.set_defaults(func=_cmd_diff)
    p = _add(sub, "scan", "exit 1 if files hold secret-shaped strings (pre-commit hook)")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="files, or directories whose files are all scanned")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print the names of the files with findings only")
    p.set_defaults(func=_cmd_scan)
    p = _add(sub, "prune", "run pytest with --dejacache-prune: drop entries no test used",
             allow_abbrev=False)  # "--pl" is pytest's to read, not a short "--plain"
    p.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="passed on to pytest (options too: prune -q -k slow)")
    p.set_defaults(func=_cmd_prune, passthrough="pytest_args")
    p = sub.add_parser(
        "rehash", help="accept hand edits to cassettes: recompute value hashes and checksums "
        "(keys are kept)",
        description="Replay refuses a cassette whose bytes do not match their checksums. "
        "After editing one on purpose (a recorded answer, a merge of two branches), this "
        "rewrites it with fresh hashes and checksums; files written by an older dejacache "
        "are upgraded to the current format. Keys are kept: editing a request does not "
        "change which call the entry answers.")
    p.add_argument("files", nargs="+", metavar="FILE", help="the cassettes edited by hand")
    p.set_defaults(func=_cmd_rehash)
