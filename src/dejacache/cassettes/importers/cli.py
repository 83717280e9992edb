"""``dejacache import FILE -o CASSETTE``: the command over :func:`import_file`."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from ...errors import ConfigurationError
from ..vcr_match import MATCHES

__all__ = ["add_import", "add_migrate"]


def _functions(specs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, target = spec.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ConfigurationError(f"--function {spec!r}: expected NAME=module:attribute")
        out[name.strip()] = target.strip()
    return out


def _cmd_import(args: argparse.Namespace) -> int:
    from . import run_import

    if args.path_entry:  # "module:attr" lookups import from the working directory
        sys.path.insert(0, ".")
    importlib.invalidate_caches()  # a module written since this process looked at "."
    for module in args.module:  # its @dejacache.cache(name=...) functions register
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(f"--module {module!r}: cannot import it ({exc})") from None
    report = run_import(args.file, args.output, functions=_functions(args.function),
                        cache_key=args.cache_key, redact=tuple(args.redact),
                        overwrite=args.force, overwrite_hint="--force", match=args.match)
    for line in report.lines():
        print(line)
    if report.secrets_in_output:  # pragma: no cover - the redactor masks every shape scan finds
        print("dejacache import: error: secret-shaped strings reached the cassette; "
              "do not commit it", file=sys.stderr)
        return 1
    return 0 if report.converted else 1


def add_import(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="convert a vcrpy / pytest-recording or agentcassette recording into a cassette",
        description="Convert a vcrpy / pytest-recording cassette (YAML or JSON) of HTTP "
        "calls (OpenAI, Anthropic, Gemini, Bedrock, any web API), or an agentcassette JSON "
        "recording, into a dejacache cassette "
        "that replays the same calls. Credentials are redacted on the way in; calls that "
        "cannot be mapped faithfully are skipped and listed. Exit status 1 when nothing was "
        "converted.")
    p.add_argument("file", help="the recording to import (format read from its content)")
    p.add_argument("-o", "--output", required=True, metavar="CASSETTE",
                   help="the dejacache cassette to write")
    p.add_argument("--function", action="append", default=[], metavar="NAME=MODULE:ATTR",
                   help="agentcassette: the @dejacache.cache function that makes the calls "
                   "recorded as NAME (repeatable)")
    p.add_argument("--module", action="append", default=[], metavar="MODULE",
                   help="agentcassette: import MODULE first; a step named like one of its "
                   "@dejacache.cache(name=...) functions needs no --function (repeatable)")
    p.add_argument("--cache-key", default=None, metavar="NS",
                   help="the namespace the replaying block uses (cassette(cache_key=...))")
    p.add_argument("--redact", action="append", default=[], metavar="NAME",
                   help="an extra name or dotted path to redact (repeatable)")
    p.add_argument("--match", choices=MATCHES, default="request",
                   help="vcrpy recordings: 'vcr' matches their calls on method + URL in "
                   "recorded order, as vcrpy did (bodies may have changed since they were "
                   "recorded; a warning names the changed fields) until they are "
                   "re-recorded; default 'request': the whole request")
    p.add_argument("--force", action="store_true", help="replace CASSETTE if it exists")
    p.add_argument("--no-path-entry", dest="path_entry", action="store_false",
                   help="do not put the working directory on sys.path for --function and --module")
    p.set_defaults(func=_cmd_import)


def _cmd_migrate(args: argparse.Namespace) -> int:
    import pathlib

    from .migrate import migrate

    root = args.tests_dir or ("tests" if pathlib.Path("tests").is_dir() else ".")
    result = migrate(root, match=args.match, force=args.force)
    for line in result.lines():
        print(line)
    if not result.imported and not result.existing and not result.failed:
        print(f"dejacache migrate: no vcrpy cassette under {root}", file=sys.stderr)
        return 1
    return 1 if result.failed else 0


def add_migrate(sub: Any) -> None:
    p = sub.add_parser(
        "migrate",
        help="import every vcrpy / pytest-recording cassette of a suite where the pytest "
        "plugin looks for it",
        description="Imports each vcrpy / pytest-recording cassette under TESTS_DIR "
        "(YAML or JSON, gzipped or not) to a dejacache cassette beside it, same name, "
        ".json: the file the pytest plugin opens for the @pytest.mark.vcr test, so the "
        "suite runs without pytest-recording and without marker edits. Then lists what the "
        "suite's code does that a cassette cannot carry (a conftest hook, a custom "
        "matcher), with the fix. Exit status 1 when a cassette could not be moved.")
    p.add_argument("tests_dir", nargs="?", default=None, metavar="TESTS_DIR",
                   help="the directory to search (default: ./tests, else .)")
    p.add_argument("--match", choices=MATCHES, default="vcr",
                   help="'vcr' (default): calls matched on method + URL in recorded order, "
                   "as vcrpy's default match_on did; 'request': on the whole request")
    p.add_argument("--force", action="store_true",
                   help="replace dejacache cassettes that are already there")
    p.set_defaults(func=_cmd_migrate)
