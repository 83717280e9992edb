"""``dejacache prompt-cache plan|check|rules``.

- ``plan FILE_OR_DIR``: per session and in total, the hit rate and cost as recorded, as the
  provider's cache model predicts them for the same requests, and under each fix found, with
  its saving (``--json`` for tools).
- ``check FILE_OR_DIR --min-hit-rate 0.7 [--baseline OTHER] [--max-drop 0.05]``: exit 1 when a
  session's predicted hit rate is below the bar, or below the baseline recording's session of
  the same name by more than ``--max-drop``, naming the session, the turn and the span.
- ``rules``: the provider cache rules in use, with their sources.

Exit status 2 when a file cannot be read, or ``check`` finds no recorded LLM request.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from ..errors import DejacacheError
from .report import plan_json, plan_lines, verdict_lines, verdicts_json

__all__ = ["add_prompt_cache"]


def _plan(target: str, per_cassette: bool) -> Any:
    from .recordings import plan_recordings

    return plan_recordings(target, per_cassette=per_cassette)


def _fail(args: argparse.Namespace, exc: Exception | str) -> int:
    print(f"dejacache prompt-cache {args.action}: {exc}", file=sys.stderr)
    return 2


def _cmd_plan(args: argparse.Namespace) -> int:
    from .._core.cache_rules import READ_ON
    from ..cassettes.prices import PRICES_DATE

    try:
        plan = _plan(args.target, args.per_cassette)
    except (DejacacheError, OSError, orjson.JSONDecodeError) as exc:
        return _fail(args, exc)
    if args.json:
        print(orjson.dumps(plan_json(plan), option=orjson.OPT_INDENT_2).decode())
        return 0
    n = len(plan.sessions)
    head = (f"prompt-cache plan of {args.target}: {n} session{'s' * (n != 1)} (cache rules "
            f"read {READ_ON}, prices as of {PRICES_DATE})")
    for line in plan_lines(plan, head):
        print(line)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from .._core.cache_gate import check

    try:
        plan = _plan(args.target, args.per_cassette)
        baseline = _plan(args.baseline, args.per_cassette) if args.baseline else None
    except (DejacacheError, OSError, orjson.JSONDecodeError) as exc:
        return _fail(args, exc)
    # A gate that judged nothing must not pass: a wrong path or an empty directory would
    # turn it green for good.
    for target, found in ((args.target, plan), (args.baseline, baseline)):
        if found is not None and not found.sessions:
            return _fail(args, f"{target}: no recorded LLM request to check")
    verdicts = check(plan, args.min_hit_rate, baseline, args.max_drop)
    if args.json:
        print(orjson.dumps(verdicts_json(verdicts), option=orjson.OPT_INDENT_2).decode())
    else:
        for line in verdict_lines(verdicts):
            print(line)
    return 1 if any(not v.ok for v in verdicts) else 0


def _cmd_rules(args: argparse.Namespace) -> int:
    from .._core.cache_rules import READ_ON, table

    if args.json:
        import dataclasses

        rows = [dataclasses.asdict(r) for r in table()]
        print(orjson.dumps({"read_on": READ_ON, "rules": rows},
                           option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"provider cache rules (read {READ_ON}; override with "
          "dejacache.planner.set_cache_rules)")
    for r in table():
        ttl = f"{r.ttl:,.0f} s" + (f" / {r.long_ttl:,.0f} s" if r.long_ttl else "")
        print(f"  {r.provider:<9} {r.family or '(default)':<18} min {r.minimum:>5,} "
              f"{r.mode:<11} block {r.block:>3}  ttl {ttl:<20} read {r.read:g}x "
              f"write {r.write:g}x/{r.write_long:g}x"
              + (f" storage ${r.storage:g}/M/h" if r.storage else "") + f"  {r.source}")
    return 0


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:  # argparse would name this function ("invalid _number value")
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a fraction between 0 and 1, e.g. 0.7")
    return value


def add_prompt_cache(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "prompt-cache", help="plan and gate the provider's prompt-cache hit rate from "
        "recordings (plan, check, rules)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION",
                               help="what to do (each has its own --help)")
    for name, func, text in (
            ("plan", _cmd_plan, "hit rate and cost as recorded, predicted, and under each fix"),
            ("check", _cmd_check, "exit 1 when a session's predicted hit rate is too low")):
        a = actions.add_parser(name, help=text)
        a.add_argument("target", metavar="FILE_OR_DIR",
                       help="a cassette, a PrefixMonitor trace, or a directory of them")
        a.add_argument("--per-cassette", action="store_true",
                       help="one session per cassette and endpoint (no inference)")
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.set_defaults(func=func)
        if name == "check":
            a.add_argument("--min-hit-rate", type=_number, required=True, metavar="RATE",
                           help="the predicted hit rate every session must reach, e.g. 0.7")
            a.add_argument("--baseline", metavar="OTHER", default=None,
                           help="recordings to compare with (sessions matched by name)")
            a.add_argument("--max-drop", type=_number, default=0.05, metavar="RATE",
                           help="how far below the baseline's a session may fall (0.05)")
    r = actions.add_parser("rules", help="the provider cache rules in use, with sources")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=_cmd_rules)
