"""The files blocks opened across recorded runs: what keeps a cassette claimed between runs.

One run sees only the files its tests opened this time. A test that opens a file on a
condition (by hand, per platform, on an environment variable) leaves that file unopened in
a run where the condition is false, and one run alone would call it an orphan. So the usage
record (``usage.py``) carries ``opened``: every file a block opened in any recorded run,
with the tests that opened it, merged into each new record from the one before.

A file stays in it until it no longer exists; it is kept out of orphan verdicts while one of
the tests that opened it is still in the suite (or while it cannot be told: it was opened
outside a test, or by more tests than are kept). The map is bounded: past :data:`MAX_FILES`
the oldest are dropped and the record says ``overflow`` from then on, which makes every
later record unable to judge orphans (a dropped file could be one a test still opens) until
the record is deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MAX_FILES", "MAX_TESTS", "holder", "remember"]

#: Files kept: orders of magnitude above the cassettes one suite keeps, so reaching it
#: means something else is going on (paths made anew each run), and verdicts stop.
MAX_FILES: Final = 100_000
#: Tests kept per file, the latest; a file opened by more is claimed unconditionally.
MAX_TESTS: Final = 8


def remember(previous: Mapping[str, Any] | None, files: Mapping[str, Mapping[str, Any]]
             ) -> tuple[dict[str, dict[str, Any]], bool]:
    """``(opened, overflow)``: the previous record's ``opened`` (files that no longer exist
    left out) with this run's ``files`` added, most recently opened last."""
    opened: dict[str, dict[str, Any]] = {}
    overflow = False
    if previous is not None:
        overflow = bool(previous.get("overflow", False))
        old = previous.get("opened")
        for path, o in (old.items() if isinstance(old, dict) else ()):
            if isinstance(o, dict) and os.path.exists(path):
                opened[path] = _clean(o)
    for path, f in files.items():
        o = opened.pop(path, None) or {"tests": []}
        opened[path] = o  # moved to the end: the latest opened
        tests: list[str] = o["tests"]
        for t in f.get("tests", ()):
            if t in tests:
                tests.remove(t)
            tests.append(t)
        if len(tests) > MAX_TESTS:
            del tests[:-MAX_TESTS]
            o["more"] = True
        if f.get("outside"):
            o["outside"] = True
    if len(opened) > MAX_FILES:
        for path in list(opened)[: len(opened) - MAX_FILES]:
            del opened[path]
        overflow = True
    return opened, overflow


def _clean(o: dict[str, Any]) -> dict[str, Any]:
    tests = o.get("tests")
    out: dict[str, Any] = {"tests": [str(t) for t in tests] if isinstance(tests, list) else []}
    for flag in ("more", "outside"):
        if o.get(flag):
            out[flag] = True
    return out


def holder(o: Mapping[str, Any], suite: Iterable[str]) -> str:
    """Why a file an earlier run opened is still claimed (empty: it is not: every test that
    opened it has left the suite, renamed or deleted)."""
    if o.get("outside"):
        return "a block opened it outside a test in an earlier run"
    if o.get("more"):
        return f"more than {MAX_TESTS} tests opened it in earlier runs"
    tests = o.get("tests") or ()
    present = set(suite)
    still = next((t for t in reversed(tests) if t in present), None)
    return "" if still is None else f"test {still} opened it in an earlier run"
