"""The pytest plugin's usage record and ``--dejacache-verify`` (``pytest_plugin`` calls in).

Every session records which cassettes its tests claim and which blocks opened them
(``cassettes/usage.py``), and writes the record to ``.dejacache/usage.json`` when it ends, so
``dejacache verify`` can tell orphans later. With ``--dejacache-verify`` the session then
verifies the cassettes of the modules it collected against that record, prints the table in
its summary, and fails when a row fails.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from .cassettes import block
from .cassettes.usage import NOT_RUN, PASSED, UsageRecorder, build, write

__all__ = ["configure", "deselected", "finish", "outcome", "summary", "unconfigure",
           "worker_part"]

_RECORDER = pytest.StashKey[UsageRecorder]()
_DESELECTED = pytest.StashKey[list[pytest.Item]]()
_PARTS = pytest.StashKey[list[dict[str, Any]]]()
_ROWS = pytest.StashKey[list[Any]]()
_HOOK = pytest.StashKey[Any]()

# The recorders of the sessions configured and not yet unconfigured in this process,
# innermost last. A session run in-process from inside a test (``pytester.runpytest``,
# ``pytest.main()`` again in an IDE or notebook) owns every block opened until it ends: the
# outer session's record must not take in its files, nor outlive it.
_ACTIVE: list[UsageRecorder] = []


def configure(config: pytest.Config, current_test: Callable[[], pytest.Item | None]) -> None:
    narrowed = (any("::" in str(a) for a in config.args) or bool(config.getoption("lf", False))
                or bool(config.getoption("stepwise", False)))
    rec = UsageRecorder([str(a).split("::")[0] for a in config.args], narrowed=narrowed)
    config.stash[_RECORDER] = rec
    config.stash[_DESELECTED] = []
    config.stash[_PARTS] = []

    def opened(blk: block.cassette, tape: Any) -> None:
        if not _ACTIVE or _ACTIVE[-1] is not rec:  # an inner session's block
            return
        item = current_test()
        # A block opened while an inner session collects runs in no test of its own.
        test = item.nodeid if item is not None and item.config is config else None
        rec.opened(tape, test, prune=blk.prune)

    config.stash[_HOOK] = opened
    _ACTIVE.append(rec)
    block.OPENED.append(opened)


def unconfigure(config: pytest.Config) -> None:
    """Drops what :func:`configure` put in this process's lists, and the session's recorder."""
    hook = config.stash.get(_HOOK, None)
    if hook is not None and hook in block.OPENED:
        block.OPENED.remove(hook)
    rec = config.stash.get(_RECORDER, None)
    # By identity: UsageRecorder has no __eq__, and sessions may end out of order.
    _ACTIVE[:] = [r for r in _ACTIVE if r is not rec]
    for key in (_HOOK, _RECORDER, _DESELECTED, _PARTS, _ROWS):
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
        return "skipped"
    call = reports.get("call")
    return PASSED if call is not None and call.passed else NOT_RUN


def _part(session: pytest.Session, paths: Callable[[pytest.Item], list[pathlib.Path]],
          outcome_of: Callable[[pytest.Item], str]) -> dict[str, Any] | None:
    config = session.config
    rec = config.stash.get(_RECORDER, None)
    if rec is None:
        return None
    outcomes: dict[str, str] = {}
    for item in [*session.items, *config.stash.get(_DESELECTED, [])]:
        result = outcomes[item.nodeid] = outcome_of(item)
        rec.module(str(item.path))
        for path in paths(item):
            rec.claim(path, item.nodeid, result)
    return rec.part(outcomes)


def finish(session: pytest.Session, paths: Callable[[pytest.Item], list[pathlib.Path]],
           outcome_of: Callable[[pytest.Item], str]) -> dict[str, Any] | None:
    """At the session's end: an xdist worker's part to hand over (returned), or, for the
    session that reports, the record written and ``--dejacache-verify`` carried out.
    ``paths(item)``: the cassettes a test may use; ``outcome_of(item)``: how it ended."""
    config = session.config
    part = _part(session, paths, outcome_of)
    if part is None:
        return None
    if getattr(config, "workeroutput", None) is not None:
        return part
    parts = [part, *config.stash.get(_PARTS, [])]
    if not any(p["uses"] for p in parts) and not config.getoption("dejacache_verify"):
        return None  # a run without cassettes leaves the last record alone
    from ._paths import default_cache_dir

    record = build(parts)
    directory = default_cache_dir()
    if directory is not None:
        write(record, directory)
    if config.getoption("dejacache_verify"):
        _verify(session, record)
    return None


def _verify(session: pytest.Session, record: dict[str, Any]) -> None:
    from .cassettes.usage import UsageRecord
    from .cassettes.verify import FAIL, cassette_files, verify_files

    # The cassettes beside the modules collected (those of deleted tests too), and every
    # file a test named or opened elsewhere.
    dirs = {pathlib.Path(m).parent / "cassettes" for m in record["modules"]}
    named = {pathlib.Path(p) for p in (*record["files"], *record["claims"])}
    found = set(cassette_files(sorted(str(d) for d in dirs if d.is_dir())))
    here = pathlib.Path.cwd()
    files = sorted(f.relative_to(here) if f.is_relative_to(here) else f  # shown shorter
                   for f in found | {f for f in named if f.is_file()})
    max_age = session.config.getini("dejacache_max_age") or None
    from ._core.durations import seconds

    limit = seconds(max_age, "dejacache_max_age") if max_age else None
    rows = verify_files(files, usage=UsageRecord(record, pathlib.Path("usage.json")),
                        max_age=limit, now=time.time())
    session.config.stash[_ROWS] = rows
    if any(r.verdict == FAIL for r in rows) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def summary(tr: Any, config: pytest.Config) -> None:
    rows = config.stash.get(_ROWS, None)
    if rows is None:
        return
    from .cassettes.verify import table

    tr.section("dejacache verify")
    for line in table(rows, verbose=bool(config.getoption("verbose", 0) > 0)):
        tr.write_line(line)
