"""The ``dejacache`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _cmd_stats(args: argparse.Namespace) -> int:
    from .config import get_settings

    store = get_settings().store
    st = store.stats()
    print(f"store: {st.backend}")
    print(f"entries: {st.entries}   bytes: {st.bytes:,}")
    per: dict[str, list[float]] = {}
    for _, rec in store.iterate():
        row = per.setdefault(rec.name, [0, 0.0, 0])
        row[0] += 1
        row[1] += rec.duration
        row[2] += sum((rec.usage or {}).values()) if rec.usage else 0
    if per:
        print(f"{'calls':>7} {'recorded s':>11}  name")
        for name, (n, dur, _) in sorted(per.items(), key=lambda kv: -kv[1][0]):
            print(f"{int(n):>7} {dur:>11.3f}  {name}")
    return 0


def _cmd_clear(args: argparse.Namespace) -> int:
    from .config import get_settings

    n = get_settings().store.clear(namespace=args.cache_key)
    print(f"removed {n} entries")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(live=args.live)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dejacache", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("stats", help="what the default store holds")
    p.set_defaults(func=_cmd_stats)
    p = sub.add_parser("clear", help="empty the default store")
    p.add_argument("--cache-key", default=None, help="only this namespace")
    p.set_defaults(func=_cmd_clear)
    p = sub.add_parser("demo", help="record an agent run, replay it, show what was saved")
    p.add_argument("--live", action="store_true", help="record against the real API")
    p.set_defaults(func=_cmd_demo)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
