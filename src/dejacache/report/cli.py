"""The ``dejacache report`` command."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

__all__ = ["add_report"]


def _cmd(args: argparse.Namespace) -> int:
    import orjson

    from ..errors import CassetteError
    from . import report

    if args.other is None and not pathlib.Path(args.target).exists():
        print(f"dejacache report: no such file or directory: {args.target}", file=sys.stderr)
        return 2
    def progress(done: int, total: int, path: pathlib.Path) -> None:
        # Long directories: a line that rewrites itself on a terminal, nothing in a pipe.
        end = "\n" if done + 1 == total else ""
        print(f"\rreport: {done + 1}/{total} {path.name[:60]:<60}", end=end, file=sys.stderr,
              flush=True)

    try:
        page = report(args.target, args.other,
                      progress=progress if sys.stderr.isatty() else None)
    except (CassetteError, OSError, orjson.JSONDecodeError) as exc:
        print(f"dejacache report: {exc}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.output)
    try:  # -o reports/run.html makes reports/, as dejacache import -o does
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as exc:  # one line, never a traceback
        print(f"dejacache report: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({len(page.encode()):,} bytes); open it in a browser")
    return 0


def add_report(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "report", help="a recorded run (or the drift between two) as one HTML page")
    p.add_argument("target", metavar="FILE_OR_DIR", help="a cassette, or a directory of them")
    p.add_argument("other", metavar="B", nargs="?", default=None,
                   help="a second cassette: show the drift from FILE_OR_DIR to it")
    p.add_argument("-o", "--output", default="report.html", metavar="PATH",
                   help="where to write the page (default: report.html)")
    p.set_defaults(func=_cmd)
