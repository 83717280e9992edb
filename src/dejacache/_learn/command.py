"""``dejacache learn`` and ``dejacache rekey`` (see docs/cli.md and docs/keys.md)."""

from __future__ import annotations

import argparse
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from .. import _project
from .._core.counts import counted
from ..errors import ConfigurationError
from .masking import Rules
from .recordings import Recordings
from .rekey import Rekeyed, cassette_files, rekey_files
from .runs import BROKEN, cassettes_of, parse_upstreams, run_tests

__all__ = ["add_learn", "add_rekey"]


def _root(project: _project.Project) -> pathlib.Path:
    if project.directory is not None:
        return project.directory
    from .._paths import project_root

    return project_root()


def _project_cassettes(root: pathlib.Path, project: _project.Project,
                       skip: pathlib.Path | None = None) -> list[pathlib.Path]:
    roots = [root]
    cdir = project.get("cassette_dir")
    if cdir:
        roots.append(root / cdir)
    out = []
    for p in cassette_files([r for r in roots if r.exists()]):
        if skip is None or not p.resolve().is_relative_to(skip.resolve()):
            out.append(p)
    return out


def _compare(dirs: Sequence[pathlib.Path], root: pathlib.Path, project: _project.Project,
             scratch_root: pathlib.Path) -> tuple[Recordings, int]:
    from ..cassettes import scratch

    rec = Recordings()
    first, second = dirs
    rels = sorted(set(cassettes_of(first)) | set(cassettes_of(second)))
    for rel in rels:
        original = scratch.original(first / rel, first, root)
        label = str(original.relative_to(root)) if original.is_relative_to(root) \
            else str(original)
        rec.add_runs(label, first / rel if (first / rel).exists() else None,
                     second / rel if (second / rel).exists() else None)
    rec.add_existing(_project_cassettes(root, project, scratch_root), root)
    return rec, len(rels)


def _write(rules: Sequence[str], root: pathlib.Path, project: _project.Project,
           scratch_root: pathlib.Path | None, also: Sequence[pathlib.Path] = ()) -> list[str]:
    """Add ``rules`` to the project file and key the project's cassettes (and ``also``)
    under them."""
    from .._pyproject import add_items
    from ..cassettes.atomic import atomic_write

    path = project.path or root / "pyproject.toml"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    new, added = add_items(text, "volatile", rules, where=str(path))
    out = []
    if added:
        atomic_write(path, new.encode("utf-8"))
        out.append(f"wrote {counted(len(added), 'rule')} to {path} "
                   "[tool.dejacache] volatile")
    else:
        out.append(f"{path} [tool.dejacache] volatile has every rule already")
    files = _project_cassettes(root, project, scratch_root)
    files += [p for p in also if p.exists() and p.resolve() not in {f.resolve() for f in files}]
    done = rekey_files(files, Rules(rules))
    out += _rekeyed(done, root)
    import os

    if os.environ.get("DEJACACHE_VOLATILE", "").strip():
        out.append("note: DEJACACHE_VOLATILE is set here, and it replaces the project "
                   "file's volatile list wherever it is set")
    return out


def _shown(path: pathlib.Path, root: pathlib.Path) -> str:
    for p, r in ((path, root), (path.resolve(), root.resolve())):
        if p.is_relative_to(r):
            return str(p.relative_to(r))
    return str(path)


def _rekeyed(done: list[Rekeyed], root: pathlib.Path) -> list[str]:
    changed = [r for r in done if r.changed]
    kept = sum(r.kept for r in done)
    out = [f"re-keyed {counted(sum(r.changed for r in changed), 'entry', 'entries')} in "
           f"{counted(len(changed), 'cassette')} (of {len(done)} read)"]
    for r in changed[:10]:
        out.append(f"  {_shown(r.path, root)}: {r.changed}")
    if kept:
        out.append(f"  {counted(kept, 'entry', 'entries')} kept as keyed: the stored request "
                   "does not give the key back (masked credentials, substitute= "
                   "placeholders); re-record those")
    for r in done:
        if _unkeyed(r):
            out.append(f"  not re-keyed: {r.problem}")
    return out


def _unkeyed(r: Rekeyed) -> bool:
    """A cassette that could not be re-keyed (other JSON files are not cassettes)."""
    return r.problem is not None and "not a dejacache cassette" not in r.problem


RUNS = ("run1", "run2")


def _kept_scratch(raw: str) -> pathlib.Path:
    """``--scratch DIR``, refused when it is no directory or holds an earlier learn's runs: a
    test that fails now records nothing, and its earlier recording would be compared as if
    this run had made it."""
    path = pathlib.Path(raw)
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"--scratch {raw}: not a directory")
    for name in RUNS:
        run = path / name
        if run.exists() and (not run.is_dir() or any(run.iterdir())):
            raise ConfigurationError(f"--scratch {raw}: {run} holds an earlier run's "
                                     "recordings; remove it, or choose another directory")
    return path


def _learn(args: argparse.Namespace, project: _project.Project) -> int:
    import shutil
    import tempfile

    from . import report
    from .rules import propose

    env = parse_upstreams(args.upstream)
    root = _root(project)
    scratch_root = _kept_scratch(args.scratch) if args.scratch else pathlib.Path(
        tempfile.mkdtemp(prefix="dejacache-learn-"))
    try:
        dirs = []
        for i, name in enumerate(RUNS, 1):
            d = scratch_root / name
            print(f"dejacache learn: run {i} of 2, every call live, recorded into {d}",
                  flush=True)
            status = run_tests(args.pytest_args, learn_dir=d, mode="record", env=env)
            if status in BROKEN:
                print(f"dejacache learn: the test run ended with status {status}; nothing "
                      "compared", file=sys.stderr)
                return status
            if status:  # some tests failed: their cassettes are not written
                print(f"dejacache learn: tests failed in run {i}; a failing test's calls are "
                      "not recorded, so nothing is learned from them", file=sys.stderr)
            dirs.append(d)
        rec, files = _compare(dirs, root, project, scratch_root)
        proposal = propose(rec.observed, rec.check)
        if args.json:
            import orjson

            print(orjson.dumps(report.as_json(proposal, rec, files),
                               option=orjson.OPT_INDENT_2).decode())
        else:
            print("\n".join(report.lines(proposal, rec, files)))
        if args.write and proposal.rules:
            print("\n".join(_write(proposal.texts, root, project, scratch_root)))
        elif proposal.rules and not args.json:
            print("to add them to pyproject.toml and re-key the project's cassettes: "
                  "dejacache learn --write " + " ".join(args.pytest_args))
        return 0
    finally:
        if not args.scratch:
            shutil.rmtree(scratch_root, ignore_errors=True)


def _from_miss(args: argparse.Namespace, project: _project.Project) -> int:
    """The rules the last run's misses suggested, checked, written and applied."""
    from .._paths import default_cache_dir
    from . import notes

    if args.pytest_args:
        status = run_tests(args.pytest_args, learn_dir=None, mode="replay",
                           env=parse_upstreams(args.upstream))
        if status in BROKEN - {5}:
            return status
    found = notes.read(default_cache_dir())
    if not found:
        print("dejacache learn --from-miss: no replay miss of the last test run suggested a "
              "rule (run the tests first, or pass their arguments after --from-miss)",
              file=sys.stderr)
        return 1
    root = _root(project)
    rec = Recordings()
    cassettes = sorted({pathlib.Path(n["cassette"]) for n in found if n.get("cassette")})
    rec.add_existing(_project_cassettes(root, project) + cassettes, root)
    kept: list[str] = []
    for rule in dict.fromkeys(r for n in found for r in n["rules"]):
        why = rec.check(Rules([*kept, rule]))
        if why is None:
            kept.append(rule)
        else:
            print(f"not applied: {rule}: {why}")
    if not kept:
        return 1
    for rule in kept:
        print(f"rule: {rule}")
    print("\n".join(_write(kept, root, project, None, cassettes)))
    print("run the tests again: the calls that missed now key as their recordings")
    return 0


def _cmd_learn(args: argparse.Namespace) -> int:
    project = _project.current()
    if args.from_miss:
        return _from_miss(args, project)
    return _learn(args, project)


def add_learn(sub: Any) -> None:
    p = sub.add_parser(
        "learn", allow_abbrev=False,
        help="find the volatile rules a suite needs: run its tests twice live and compare",
        description="Runs the tests (pytest arguments after the options) twice with every "
        "call live, recorded into a scratch directory, compares the two recordings call by "
        "call, and proposes the smallest set of volatile rules (re:PATTERN for timestamps, "
        "ids, nonces, temp paths, ports inside text; paths for whole fields) that makes "
        "them key alike without making two differently answered calls share a key. "
        "--write adds them to [tool.dejacache] volatile in pyproject.toml and re-keys the "
        "project's cassettes. --from-miss applies the rules the last test run's replay "
        "misses suggested.")
    p.add_argument("--write", action="store_true",
                   help="add the rules to pyproject.toml and re-key the project's cassettes")
    p.add_argument("--from-miss", action="store_true",
                   help="apply the rules the last run's replay misses printed (with pytest "
                        "arguments: run those tests in replay mode first)")
    p.add_argument("--scratch", metavar="DIR", default=None,
                   help="keep the two runs' recordings in DIR (default: a temporary "
                        "directory, removed afterwards)")
    p.add_argument("--upstream", metavar="NAME=URL", action="append", default=[],
                   help="send provider NAME's calls to URL during the runs (sets "
                        "<NAME>_BASE_URL, which the SDKs read: openai=http://host/v1)")
    p.add_argument("--json", action="store_true", help="the proposal as JSON")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER,
                   help="passed on to pytest (options too: learn -k agent tests/)")
    p.set_defaults(func=_cmd_learn, passthrough="pytest_args")


def _cmd_rekey(args: argparse.Namespace) -> int:
    from ..config import global_volatile, global_volatile_source

    for raw in args.paths:  # first: a typo in a path says so, whatever the rules
        if not pathlib.Path(raw).exists():
            print(f"dejacache rekey: {raw}: no such file or directory", file=sys.stderr)
            return 2
    project = _project.current()
    items = [i for i in global_volatile(project) if isinstance(i, str)]
    rules = Rules(items)
    if not rules:
        print(f"dejacache rekey: no volatile rules in force ({global_volatile_source()})")
        return 0
    root = _root(project)
    files = (list(cassette_files(pathlib.Path(p) for p in args.paths)) if args.paths
             else _project_cassettes(root, project))
    print(f"rules ({global_volatile_source()}): {len(items)}")
    done = rekey_files(files, rules)
    print("\n".join(_rekeyed(done, root)))
    # A damaged cassette left as it was is a failure to say in the status, as verify does.
    return 1 if any(_unkeyed(r) for r in done) else 0


def add_rekey(sub: Any) -> None:
    p = sub.add_parser(
        "rekey", help="key cassettes again under the volatile rules in force (after adding "
        "one), so they replay without re-recording",
        description="Applies the volatile rules in force (DEJACACHE_VOLATILE, else "
        "[tool.dejacache] volatile) to every entry's stored request and keys it again. "
        "Default: the cassettes under the project root.")
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.set_defaults(func=_cmd_rekey)

