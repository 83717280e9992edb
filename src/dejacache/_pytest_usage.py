"""The pytest plugin's usage record and ``--dejacache-verify`` (``pytest_plugin`` calls in).

Every session records which cassettes its tests claim and which blocks opened them
(``cassettes/usage.py``), and what keeps it from judging orphans: a narrowed collection
(``::`` ids, ``--lf``, ``--sw``, ``--ignore``, paths short of the suite), deselected tests,
collection errors and modules skipped at collection, an interruption, and each test's
outcome. It writes the record to ``.dejacache/usage.json`` when it ends, carrying over the
files earlier records saw opened and how many complete runs left them or their entries
unused (``cassettes/claimed.py``), so ``dejacache verify`` can tell orphans later. With
``--dejacache-verify`` the session then verifies the cassettes of the modules it collected
against that record, prints the table in its summary, and fails when a row fails.

A run that opens no cassette imports none of this machinery (``cassettes/usage.py`` and the
rest are loaded by the first block, or at the end for an xdist worker), and the record is
best-effort: a directory that cannot be written (a read-only checkout replaying in CI) costs
one line in the summary, never the run.
"""

from __future__ import annotations

import glob
import os
import pathlib
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from .cassettes import _events

if TYPE_CHECKING:
    from .cassettes.usage import UsageRecorder

__all__ = ["collected", "configure", "deselected", "finish", "outcome", "summary", "unconfigure",
           "unwritten", "worker_part"]

_RECORDER: pytest.StashKey[_Session] = pytest.StashKey()
_DESELECTED: pytest.StashKey[list[pytest.Item]] = pytest.StashKey()
_PARTS: pytest.StashKey[list[dict[str, Any]]] = pytest.StashKey()
_ROWS: pytest.StashKey[list[Any]] = pytest.StashKey()
_UNWRITTEN: pytest.StashKey[str] = pytest.StashKey()
_HOOK: pytest.StashKey[Any] = pytest.StashKey()

class _Session:
    """One session's part of the record: what it knows before a block opens (its roots,
    why its collection is narrowed, collectors that failed or were skipped), and the
    recorder, made by the first block (or at the end, when another part needs it)."""

    def __init__(self, roots: list[str], narrowed: str) -> None:
        self.roots = roots
        self.narrowed = narrowed
        self.collect_errors: set[str] = set()
        self.collect_skipped: set[str] = set()
        self._rec: UsageRecorder | None = None

    @property
    def started(self) -> bool:
        return self._rec is not None

    def recorder(self) -> UsageRecorder:
        if self._rec is None:
            from .cassettes.usage import UsageRecorder

            self._rec = UsageRecorder(self.roots, narrowed=self.narrowed)
        rec = self._rec
        rec.doubts.collect_errors |= self.collect_errors
        rec.doubts.collect_skipped |= self.collect_skipped
        return rec


# The sessions configured and not yet unconfigured in this process, innermost last. A session
# run in-process from inside a test (``pytester.runpytest``, ``pytest.main()`` again in an
# IDE or notebook) owns every block opened until it ends: the outer session's record must not
# take in its files, nor outlive it.
_ACTIVE: list[_Session] = []


def collected(report: pytest.CollectReport) -> None:
    """A collector that failed or was skipped: the tests in it were never seen. The plugin's
    ``pytest_collectreport``: the session collecting is the innermost one configured (a
    watcher registered per session cost a one-test run ~1.3M instructions)."""
    if not _ACTIVE:
        return
    state = _ACTIVE[-1]
    if report.failed:
        state.collect_errors.add(report.nodeid or "(the session)")
    elif report.skipped:
        state.collect_skipped.add(report.nodeid)


def narrowed(config: pytest.Config) -> str:
    """Why this session does not collect the whole suite (empty: it does). The suite is
    what a bare ``pytest`` collects in the root directory: its ``testpaths``, else the
    root directory itself."""
    args = [str(a) for a in config.args]
    if any("::" in a for a in args):
        return "tests named on the command line (path::name)"
    if config.getoption("lf", False):
        return "--lf ran the last failures only"
    if config.getoption("stepwise", False) or config.getoption("stepwise_skip", False):
        return "--sw stops at the first failure"
    # The command line and PYTEST_ADDOPTS narrow the suite; the ini's addopts define it.
    given = [*map(str, config.invocation_params.args),
             *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    if any(a.startswith("--ignore") for a in given):
        return "--ignore / --ignore-glob left paths out"
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return ""
    here = config.invocation_params.dir
    root = config.rootpath
    suite = [pathlib.Path(p) for t in config.getini("testpaths")
             for p in sorted(glob.glob(str(root / t), recursive=True))] or [root]
    ran = [(here / a).resolve() for a in args]
    left = [s for s in suite if not any(s.resolve().is_relative_to(a) for a in ran)]
    if not left:
        return ""
    shown = ", ".join(_shown(pathlib.Path(a), here) for a in ran)
    return (f"the run collected {shown}, not the whole suite ({_shown(left[0], here)} "
            "left out): run pytest without paths, or set testpaths")


def _shown(path: pathlib.Path, here: pathlib.Path) -> str:
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def configure(config: pytest.Config, current_test: Callable[[], pytest.Item | None]) -> None:
    # Against the invocation directory now: the recorder is made by the first block, and a
    # test may have changed directory by then.
    here = str(config.invocation_params.dir)
    rec = _Session([os.path.join(here, str(a).split("::")[0]) for a in config.args],
                   narrowed(config))
    config.stash[_RECORDER] = rec
    config.stash[_DESELECTED] = []
    config.stash[_PARTS] = []

    def opened(blk: Any, tape: Any) -> None:
        if not _ACTIVE or _ACTIVE[-1] is not rec:  # an inner session's block
            return
        item = current_test()
        # A block opened while an inner session collects runs in no test of its own.
        test = item.nodeid if item is not None and item.config is config else None
        rec.recorder().opened(tape, test, prune=blk.prune)

    config.stash[_HOOK] = opened
    _ACTIVE.append(rec)
    _events.OPENED.append(opened)


def unconfigure(config: pytest.Config) -> None:
    """Drops what :func:`configure` put in this process's lists, and the session's recorder."""
    hook = config.stash.get(_HOOK, None)
    if hook is not None and hook in _events.OPENED:
        _events.OPENED.remove(hook)
    rec = config.stash.get(_RECORDER, None)
    # By identity: sessions may end out of order.
    _ACTIVE[:] = [r for r in _ACTIVE if r is not rec]
    for key in (_HOOK, _RECORDER, _DESELECTED, _PARTS, _ROWS, _UNWRITTEN):
        if key in config.stash:
            del config.stash[key]


def deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(_DESELECTED, []).extend(items)


def worker_part(config: pytest.Config, part: dict[str, Any]) -> None:
    """An xdist worker's part, received by the controller."""
    config.stash.setdefault(_PARTS, []).append(part)


def outcome(reports: dict[str, pytest.TestReport]) -> str:
    """A test's outcome from its reports (setup, call, teardown) for the record."""
    if any(r.failed for r in reports.values()):
        return "failed"
    if any(r.skipped for r in reports.values()):
        return "xfailed" if any(hasattr(r, "wasxfail") for r in reports.values()) else "skipped"
    from .cassettes.usage import NOT_RUN, PASSED  # (at the end, once the record is due)

    call = reports.get("call")
    return PASSED if call is not None and call.passed else NOT_RUN


def _part(session: pytest.Session, paths: Callable[[pytest.Item], list[pathlib.Path]],
          outcome_of: Callable[[pytest.Item], str]) -> dict[str, Any] | None:
    config = session.config
    state = config.stash.get(_RECORDER, None)
    if state is None:
        return None
    from .cassettes.usage import DESELECTED

    rec = state.recorder()
    outcomes: dict[str, str] = {}

    def claim(item: pytest.Item, result: str) -> None:
        outcomes[item.nodeid] = result
        rec.module(str(item.path))
        for path in paths(item):
            rec.claim(path, item.nodeid, result)

    for item in session.items:
        claim(item, outcome_of(item))
    deselected = config.stash.get(_DESELECTED, [])
    for item in deselected:  # they still claim their cassettes
        claim(item, DESELECTED)
    rec.doubts.deselected = len({i.nodeid for i in deselected})
    rec.doubts.interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    return rec.part(outcomes)


def finish(session: pytest.Session, paths: Callable[[pytest.Item], list[pathlib.Path]],
           outcome_of: Callable[[pytest.Item], str]) -> dict[str, Any] | None:
    """At the session's end: an xdist worker's part to hand over (returned), or, for the
    session that reports, the record written and ``--dejacache-verify`` carried out.
    ``paths(item)``: the cassettes a test may use; ``outcome_of(item)``: how it ended."""
    config = session.config
    state = config.stash.get(_RECORDER, None)
    worker = getattr(config, "workeroutput", None) is not None
    others = config.stash.get(_PARTS, [])
    verify = config.getoption("dejacache_verify")
    if state is None or not (state.started or worker or verify
                             or any(p["uses"] for p in others)):
        return None  # a run without cassettes leaves the last record alone (and pays nothing)
    part = _part(session, paths, outcome_of)
    if part is None:
        return None
    if worker:
        return part
    parts = [part, *others]
    if not any(p["uses"] for p in parts) and not verify:
        return None
    from ._paths import default_cache_dir
    from .cassettes.usage import FILE_NAME, build, read_previous

    directory = default_cache_dir()
    previous = read_previous(directory / FILE_NAME) if directory else None
    record = build(parts, previous)
    if directory is not None:
        _write(config, record, directory, previous)
    if verify:
        _verify(session, record)
    return None


def _write(config: pytest.Config, record: dict[str, Any], directory: pathlib.Path,
           previous: dict[str, Any] | None) -> None:
    """The record, if it can be written: replay needs no writable directory, so a checkout
    that is read-only (CI) gets one line in the summary, not an error."""
    from .cassettes.usage import FILE_NAME, write
    from .errors import CassetteError

    try:
        write(record, directory, previous=previous)
    except (CassetteError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        config.stash[_UNWRITTEN] = (
            f"dejacache: the usage record {directory / FILE_NAME} was not written ({why}); "
            "tests are not affected, but dejacache verify cannot tell orphaned entries from "
            "this run. Set DEJACACHE_DIR to a writable directory to keep it.")


def _verify(session: pytest.Session, record: dict[str, Any]) -> None:
    from .cassettes.orphans import UsageRecord
    from .cassettes.verify import FAIL, cassette_files, verify_files

    # The cassettes beside the modules collected (those of deleted tests too), and every
    # file a test named or opened elsewhere.
    dirs = {pathlib.Path(m).parent / "cassettes" for m in record["modules"]}
    named = {pathlib.Path(p) for p in (*record["files"], *record["claims"])}
    found = set(cassette_files(sorted(str(d) for d in dirs if d.is_dir())))
    here = pathlib.Path.cwd()
    files = sorted(f.relative_to(here) if f.is_relative_to(here) else f  # shown shorter
                   for f in found | {f for f in named if f.is_file()})
    from .cassettes.ageing import resolve

    limit = resolve(None, None)[0]  # configure(), DEJACACHE_MAX_AGE, the ini key, the table
    rows = verify_files(files, usage=UsageRecord(record, pathlib.Path("usage.json")),
                        max_age=limit, now=time.time())
    session.config.stash[_ROWS] = rows
    if any(r.verdict == FAIL for r in rows) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def unwritten(config: pytest.Config) -> str | None:
    """Why the usage record could not be written this session (None: it was, or none was
    due)."""
    return config.stash.get(_UNWRITTEN, None)


def summary(tr: Any, config: pytest.Config) -> None:
    rows = config.stash.get(_ROWS, None)
    if rows is None:
        return
    from .cassettes.verify import table

    tr.section("dejacache verify")
    for line in table(rows, verbose=bool(config.getoption("verbose", 0) > 0)):
        tr.write_line(line)
