"""The files blocks opened across recorded runs, and how long what they hold has gone
unused: what keeps a cassette, or an entry of one, claimed between runs.

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

Nothing is removed on the word of one run either: a branch a test takes only on a condition
leaves entries unused in a run where it was false. So each file also counts, in complete
runs in a row (only they judge), how long it has gone unopened with no test that opened it
left (``idle``: ``[runs, since]``), and how long each of its entries has gone unused
(``entries``: ``[key, occurrence, runs, since]``, for the file whose hash is ``digest``).
A run that opens the file clears its count; a run that uses an entry clears that entry's; a
run that opened the file without knowing which entries it used (it recorded or pruned, or a
test that opened it did not pass), or a file that changed since the count began, starts the
entries' counts again. ``verify --fix`` removes only what :data:`RUNS` complete runs in a
row judged unused, and a whole file only with such a history (one no recorded run opened is
never removed). The counts stop at :data:`RUNS`, so a run that sees the same leaves the
record as it is, and they are kept only for files in the map and entries still unused: the
history is bounded by the cassettes themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MAX_FILES", "MAX_TESTS", "RUNS", "holder", "idle_entries", "idle_runs", "remember",
           "suite_of"]

#: Files kept: orders of magnitude above the cassettes one suite keeps, so reaching it
#: means something else is going on (paths made anew each run), and verdicts stop.
MAX_FILES: Final = 100_000
#: Tests kept per file, the latest; a file opened by more is claimed unconditionally.
MAX_TESTS: Final = 8
#: Complete runs in a row that must judge a file or an entry unused before ``verify --fix``
#: removes it. Three: one run misses a branch taken on a condition; a count that a run
#: using it starts again keeps what is used now and then.
RUNS: Final = 3


def remember(previous: Mapping[str, Any] | None, files: Mapping[str, Mapping[str, Any]], *,
             suite: Iterable[str] = (), judged: bool = False, now: str = ""
             ) -> tuple[dict[str, dict[str, Any]], bool]:
    """``(opened, overflow)``: the previous record's ``opened`` (files that no longer exist
    left out) with this run's ``files`` added, most recently opened last, and the counts
    carried on. ``judged``: this run was complete (its verdicts count); ``suite``: the tests
    it collected; ``now``: when it ended (a count begun now starts there)."""
    opened: dict[str, dict[str, Any]] = {}
    overflow = False
    if previous is not None:
        overflow = bool(previous.get("overflow", False))
        old = previous.get("opened")
        for path, o in (old.items() if isinstance(old, dict) else ()):
            if isinstance(o, dict) and os.path.exists(path):
                opened[path] = _clean(o)
    if judged:
        present = set(suite)
        for path, o in opened.items():
            if path not in files:
                _count_file(o, present, now)
    for path, f in files.items():
        o = opened.pop(path, None) or {"tests": []}
        opened[path] = o  # moved to the end: the latest opened
        o.pop("idle", None)  # opened: its count is over
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
        _count_entries(o, f, judged, now)
    if len(opened) > MAX_FILES:
        for path in list(opened)[: len(opened) - MAX_FILES]:
            del opened[path]
        overflow = True
    return opened, overflow


def _count_file(o: dict[str, Any], suite: set[str], now: str) -> None:
    """A complete run that did not open the file: one more run unused, unless a test that
    opened it before is still in the suite (it may open it again: the count starts over)."""
    if holder(o, suite):
        o.pop("idle", None)
        return
    runs, since = idle_runs(o)
    o["idle"] = [min(runs + 1, RUNS), since or now]


def _count_entries(o: dict[str, Any], f: Mapping[str, Any], judged: bool, now: str) -> None:
    """This run opened the file: its unused entries' counts, from ``f`` (its ``files`` row)."""
    unused, digest = f.get("unused"), f.get("digest")
    before = idle_entries(o, digest)
    o.pop("entries", None)
    if digest is None:
        o.pop("digest", None)
        return
    o["digest"] = digest
    if unused is None:  # which entries were used is not known: no count goes on
        return
    counts = []
    for k, occ, *_ in unused:
        runs, since = before.get((k, occ), (0, ""))
        if judged:
            counts.append([k, occ, min(runs + 1, RUNS), since or now])
        elif runs:  # a run that cannot judge neither counts it nor clears it
            counts.append([k, occ, runs, since])
    if counts:
        o["entries"] = counts


def idle_runs(o: Mapping[str, Any] | None) -> tuple[int, str]:
    """``(runs, since)``: the complete runs in a row the file went unopened (0: none)."""
    idle = o.get("idle") if o is not None else None
    if isinstance(idle, list) and len(idle) == 2 and type(idle[0]) is int:
        return max(0, min(idle[0], RUNS)), str(idle[1])
    return 0, ""


def idle_entries(o: Mapping[str, Any] | None, digest: str | None
                 ) -> dict[tuple[str, int], tuple[int, str]]:
    """``(key, occurrence) -> (runs, since)``: how long each entry of the file went unused,
    when the count was made on the file whose hash is ``digest`` (else none: a changed file
    numbers its entries anew)."""
    if o is None or digest is None or o.get("digest") != digest:
        return {}
    out: dict[tuple[str, int], tuple[int, str]] = {}
    rows = o.get("entries")
    for row in rows if isinstance(rows, list) else ():
        if (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                and type(row[1]) is int and type(row[2]) is int):
            out[(row[0], row[1])] = (max(0, min(row[2], RUNS)), str(row[3]))
    return out


def _clean(o: dict[str, Any]) -> dict[str, Any]:
    tests = o.get("tests")
    out: dict[str, Any] = {"tests": [str(t) for t in tests] if isinstance(tests, list) else []}
    for flag in ("more", "outside"):
        if o.get(flag):
            out[flag] = True
    runs, since = idle_runs(o)
    if runs:
        out["idle"] = [runs, since]
    digest = o.get("digest")
    if isinstance(digest, str):
        out["digest"] = digest
        counts = [[k, occ, r, s] for (k, occ), (r, s) in idle_entries(o, digest).items() if r]
        if counts:
            out["entries"] = counts
    return out


def suite_of(claims: Mapping[str, Mapping[str, str]]) -> set[str]:
    """The tests a run collected, from its ``claims`` (each claims its own cassette)."""
    return {t for tests in claims.values() for t in tests}


def holder(o: Mapping[str, Any], suite: Iterable[str]) -> str:
    """Why a file an earlier run opened is still claimed (empty: it is not: every test that
    opened it has left the suite, renamed or deleted)."""
    if o.get("outside"):
        return "a block opened it outside a test in an earlier run"
    if o.get("more"):
        return f"more than {MAX_TESTS} tests opened it in earlier runs"
    tests = o.get("tests") or ()
    present = suite if isinstance(suite, (set, frozenset)) else set(suite)  # (once per file)
    still = next((t for t in reversed(tests) if t in present), None)
    return "" if still is None else f"test {still} opened it in an earlier run"
