"""Which cassettes, and which of their entries, a test run used: the record ``dejacache
verify`` judges orphans by.

The pytest plugin keeps one :class:`UsageRecorder` per session and writes what it saw to
``<DEJACACHE_DIR or project>/.dejacache/usage.json`` when the session ends (the controller
merges the workers' parts under xdist). The record says, for the run:

* ``cannot_judge``: why the run cannot tell an orphan (empty: it can). Only a complete run
  can: the whole suite collected without errors, nothing deselected, and every test passed.
  A test named with ``::``, ``--lf``, ``--sw``, ``--ignore`` or paths that leave part of the
  suite out, ``-k`` / ``-m`` / ``--deselect``, a collection error or a module skipped at
  collection, and a test skipped, xfailed, failed or not run each mean the run never saw
  every file a test may open (a skipped test may open files only on another platform; a
  failed one may stop before its last block), so nothing is called an orphan;
* ``claims``: every cassette path a collected test may use (its default path, a marker's
  ``cassette=``), with that test's outcome (``passed``, ``failed``, ``skipped``,
  ``xfailed``, ``not run``, ``deselected``); the tests named here are the suite;
* ``files``: every cassette a block opened, with the entries no block used, when that is
  known: each block that opened it replayed (``auto``/``replay``) without recording or
  missing, and the file was not rewritten during the run. Otherwise the file's usage is
  unknown and ``why`` says so. ``digest`` is the file's hash when the run ended: a file
  changed since then is not judged by this record;
* ``opened``: every file a block opened in any recorded run, with the tests that opened it
  (``claimed.py``): kept across runs, so a file a test opens only sometimes (by hand, on a
  condition) stays claimed while that test exists; and for each, in how many complete runs
  in a row it went unopened, and its entries unused (``verify --fix`` removes nothing fewer
  than ``claimed.RUNS`` such runs judged unused);
* ``modules``: the test modules collected, with the hash of each (a module edited since
  the run makes the whole record silent about orphans: its tests may now use what the run
  did not); ``roots``, the paths the run collected from; ``written``, when the record's
  content last changed (a run that saw the same leaves the file as it is).

Entries are named by ``(key, occurrence)``: the n-th entry of a key in file order, which is
what the writer numbers ``occurrence`` by, so the pair names one entry of an unchanged file.

This module records and writes; reading a record back and judging files by it is
``orphans.py``'s.
"""

from __future__ import annotations

import datetime
import os
import pathlib
from collections.abc import Iterable
from typing import Any, Final

import orjson
import xxhash

from .._paths import cwd
from ..errors import CassetteError
from .claimed import remember, suite_of

__all__ = ["FILE_NAME", "Names", "UsageRecorder", "carried", "digest", "file_digest"]

FILE_NAME: Final = "usage.json"
# 3: ``opened`` counts the complete runs that judged a file or entry unused. A version 2
# record is read as a history of one run (:func:`carried`).
VERSION: Final = 3
PASSED: Final = "passed"
NOT_RUN: Final = "not run"
DESELECTED: Final = "deselected"
# Blocks one test may open before the rest are only counted, their files' usage then unknown
# (a cassette used as a decorator opens a block per call): the recorder stays bounded.
MAX_USES: Final = 10_000
# When two parts of a run (xdist workers) disagree, the outcome that ran wins.
_RANK: Final = {DESELECTED: 0, NOT_RUN: 0, "skipped": 1, "xfailed": 1, PASSED: 2, "failed": 3}
# Test ids named in a reason before "and N more".
_SHOWN: Final = 2


def digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def file_digest(path: str) -> str | None:
    """The :func:`digest` of the file at ``path`` (None: it cannot be read)."""
    try:
        return digest(pathlib.Path(path).read_bytes())
    except OSError:
        return None


# Directories one recorder or record resolves before it starts again: bounds its cache.
_MAX_DIRS: Final = 4096


def _absolute(path: str | os.PathLike[str]) -> str:
    """``path`` against the working directory of the moment; joined, not normalised:
    ``link/..`` resolves through the link later, as it opens."""
    s = os.fspath(path)
    # (cwd(): asked on an event loop, it makes no blocking call)
    return s if os.path.isabs(s) else os.path.join(cwd(), s)


class Names:
    """How the record names a file: its directory, taken against the working directory of
    the moment and resolved (symlinks, ``..``), then its name. Both the plugin and
    ``verify`` name files by this, so a project under a symlinked path matches itself.

    Directories are resolved once each (per file it cost ~0.1 ms a test), in a cache each
    recorder and record owns: a process-wide one outlived the pytest session, and named
    ``cassettes/x`` after the first session's directory in the next session run in the
    same process (``pytest.main()`` twice, ``pytester``), which then saw no test module."""

    __slots__ = ("_dirs",)

    def __init__(self) -> None:
        self._dirs: dict[str, str] = {}

    def __call__(self, path: str | os.PathLike[str]) -> str:
        p = pathlib.Path(path)
        d = _absolute(p.parent)
        resolved = self._dirs.get(d)
        if resolved is None:
            if len(self._dirs) >= _MAX_DIRS:
                self._dirs.clear()
            # realpath, not Path.resolve: the same answer without a Path made and a stat
            # per directory (~0.2M instructions of a one-test session's three).
            resolved = self._dirs[d] = os.path.realpath(d)
        return os.path.join(resolved, p.name)


# _Use, _Group and Doubts are plain slotted classes: nothing compares, copies or converts
# them, and building them as dataclasses (each compiles its methods) was ~0.7 ms of the
# import every session that opens a cassette pays.
class _Use:
    """One block over a cassette file, until its test has ended."""

    __slots__ = ("prune", "tape", "test", "where")

    def __init__(self, tape: Any, test: str | None, prune: bool, where: str) -> None:
        self.tape = tape  # the Cassette
        self.test = test
        self.prune = prune  # the block removes what it did not use when it saves
        self.where = where  # the path, against the working directory the block opened in


class _Group:
    """The blocks over one file, folded: the tests that opened it, why its unused entries
    are not known (empty: they are), and the entries none of them used."""

    __slots__ = ("tests", "unused", "why")

    def __init__(self) -> None:
        self.tests: set[str | None] = set()
        self.why = ""
        self.unused: dict[tuple[str, int], str] | None = None

    def fold(self, u: _Use) -> None:
        self.tests.add(u.test)
        if self.why:
            return
        self.why = _incomplete(u)
        if not self.why:
            try:
                mine = {(e.key, e.occurrence): e.name for e in u.tape.unused}
            except CassetteError as exc:
                self.why = f"the file could not be read: {exc}"
            else:
                self.unused = mine if self.unused is None else {
                    e: n for e, n in mine.items() if e in self.unused}
        if self.why:
            self.unused = None


class Doubts:
    """What makes one session (or xdist worker) unable to judge orphans, besides its tests'
    outcomes (see the module docstring); all empty: nothing."""

    __slots__ = ("collect_errors", "collect_skipped", "deselected", "interrupted", "narrowed")

    def __init__(self, *, narrowed: str = "", deselected: int = 0,
                 collect_errors: set[str] | None = None,
                 collect_skipped: set[str] | None = None, interrupted: bool = False) -> None:
        self.narrowed = narrowed  # why the session did not collect the whole suite
        self.deselected = deselected
        self.collect_errors = set() if collect_errors is None else collect_errors  # node ids
        self.collect_skipped = set() if collect_skipped is None else collect_skipped
        self.interrupted = interrupted

    def as_json(self) -> dict[str, Any]:
        return {"narrowed": self.narrowed, "deselected": self.deselected,
                "collect_errors": sorted(self.collect_errors),
                "collect_skipped": sorted(self.collect_skipped),
                "interrupted": self.interrupted}


class UsageRecorder:
    """What one pytest session (or xdist worker) saw; :meth:`part` is its JSON form.

    A block's tape is kept only until its test ends (the next block opened by another test
    folds it into its file's group), so a session holds one group per file, not every
    closed tape."""

    def __init__(self, roots: Iterable[str], *, narrowed: str = "") -> None:
        self._name = Names()
        # Resolved in part(), not here: the plugin makes its recorder in the first block,
        # which may open on a running event loop, where realpath's stat and readlink block
        # (blockbuster failed that block, and only when it was the session's first).
        self._roots = [_absolute(r) for r in roots]
        self.doubts = Doubts(narrowed=narrowed)
        self.modules: set[str] = set()
        self.claims: dict[str, dict[str, str]] = {}
        self._open: list[_Use] = []
        self._groups: dict[str, _Group] = {}  # by _Use.where

    def claim(self, path: pathlib.Path, test: str, outcome: str) -> None:
        per = self.claims.setdefault(self._name(path), {})
        if _RANK.get(outcome, 0) >= _RANK.get(per.get(test, NOT_RUN), 0):
            per[test] = outcome

    def module(self, path: str | os.PathLike[str]) -> None:
        self.modules.add(self._name(path))

    def opened(self, tape: Any, test: str | None, *, prune: bool = False) -> None:
        """A block opened ``tape`` in ``test`` (None: outside one). No I/O here: a block
        may open on a running event loop, where a stat is a blocking call."""
        if self._open and test is not None:
            self._settle(keep=test)
        # Made absolute now (a test may change directory later); resolved when the run ends.
        where = _absolute(tape.path)
        if len(self._open) >= MAX_USES:  # one test opening blocks without end
            group = self._groups.setdefault(where, _Group())
            group.tests.add(test)
            group.why, group.unused = f"a test opened more than {MAX_USES} blocks", None
            return
        self._open.append(_Use(tape, test, prune, where))

    def _settle(self, keep: str | None = None) -> None:
        """Fold the blocks of tests other than ``keep`` (ended: tests run one at a time in
        a process); blocks opened outside a test stay until the end (they may be open)."""
        still = []
        for u in self._open:
            if u.test is None or u.test == keep:
                still.append(u)
            else:
                self._groups.setdefault(u.where, _Group()).fold(u)
        self._open = still

    def part(self, outcomes: dict[str, str]) -> dict[str, Any]:
        """This session's part of the record (``outcomes``: test id -> outcome)."""
        for u in self._open:
            self._groups.setdefault(u.where, _Group()).fold(u)
        self._open = []
        uses = []
        for path, g in self._groups.items():
            ran = sorted(t for t in g.tests if t is not None)
            failed = next((f"test {t} {outcomes.get(t, NOT_RUN)}" for t in ran
                           if outcomes.get(t, NOT_RUN) != PASSED), "")
            why = g.why or failed
            unused = [] if why or g.unused is None else [
                [k, o, n] for (k, o), n in g.unused.items()]
            uses.append({"path": self._name(path), "tests": ran, "outside": None in g.tests,
                         "why": why, "unused": unused})
        return {"doubts": self.doubts.as_json(),
                "roots": sorted({self._name(r) for r in self._roots}),
                "modules": {m: file_digest(m) for m in sorted(self.modules)},
                "claims": self.claims, "uses": uses}


def _incomplete(u: _Use) -> str:
    """Why this block's unused entries are not the file's (empty: they are, if its test
    passes)."""
    # Each way a block writes its file is ruled out, so the entries it did not use are
    # named by the file as it was read, which is the file as the run left it (a write by
    # another block makes that block's use incomplete in turn).
    tape = u.tape
    if u.test is None:
        return "opened outside a test"
    if tape.mode not in ("auto", "replay"):
        return f"opened in {tape.mode} mode"
    if tape.misses or tape.new_entries:
        return f"test {u.test} recorded calls the file did not have"
    if u.prune:
        return "pruned by the run"
    return ""


def merge(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One run's record from its parts (one per xdist worker), without the digests."""
    doubts = Doubts()
    out: dict[str, Any] = {"roots": set(), "modules": {}, "claims": {}, "uses": []}
    for p in parts:
        d = p["doubts"]
        doubts.narrowed = doubts.narrowed or str(d["narrowed"])
        doubts.deselected = max(doubts.deselected, int(d["deselected"]))
        doubts.collect_errors.update(d["collect_errors"])
        doubts.collect_skipped.update(d["collect_skipped"])
        doubts.interrupted = doubts.interrupted or bool(d["interrupted"])
        out["roots"].update(p["roots"])
        out["modules"].update(p["modules"])
        for path, tests in p["claims"].items():
            per = out["claims"].setdefault(path, {})
            for test, outcome in tests.items():
                if _RANK.get(outcome, 0) >= _RANK.get(per.get(test, NOT_RUN), 0):
                    per[test] = outcome
        out["uses"].extend(p["uses"])
    out["doubts"] = doubts
    return out


def cannot_judge(doubts: Doubts, claims: dict[str, dict[str, str]]) -> str:
    """Why a run with these doubts and claims (their outcomes) cannot tell an orphan (empty:
    it can)."""
    why = [doubts.narrowed] if doubts.narrowed else []
    for ids, what in ((doubts.collect_errors, "failed to collect"),
                      (doubts.collect_skipped, "skipped at collection")):
        if ids:
            why.append(f"{_some(sorted(ids))} {what}")
    if doubts.deselected:
        n = doubts.deselected
        why.append(f"{n} test{'s' * (n != 1)} deselected (-k, -m, --deselect)")
    if doubts.interrupted:
        why.append("the run was interrupted")
    outcomes: dict[str, str] = {}
    for tests in claims.values():
        outcomes.update(tests)
    short = sorted(t for t, o in outcomes.items() if o not in (PASSED, DESELECTED))
    if short:
        named = ", ".join(f"{t} {outcomes[t]}" for t in short[:_SHOWN])
        more = f" and {len(short) - _SHOWN} more" if len(short) > _SHOWN else ""
        why.append(f"test {named}{more} (a test that did not pass may use cassettes the run "
                   "never saw)")
    return "; ".join(why)


def _some(ids: list[str]) -> str:
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return ", ".join(ids[:_SHOWN]) + more


def build(parts: Iterable[dict[str, Any]], previous: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """The record of a run (:func:`merge` of its parts, each used file hashed as it is now):
    a file is used by the entries any block used, and known only when every block is.
    ``previous``: the record this one replaces (its ``opened`` files are carried over)."""
    m = merge(parts)
    files: dict[str, dict[str, Any]] = {}
    for u in m["uses"]:
        f = files.setdefault(u["path"], {"tests": [], "outside": False, "why": "",
                                         "unused": None})
        f["tests"] += [t for t in u["tests"] if t not in f["tests"]]
        f["outside"] = f["outside"] or bool(u.get("outside"))
        if f["why"]:
            continue
        if u["why"]:
            f["why"], f["unused"] = u["why"], None
            continue
        mine = {(k, o): n for k, o, n in u["unused"]}
        if f["unused"] is not None:
            mine = {e: n for e, n in mine.items() if e in f["unused"]}
        f["unused"] = mine
    for path, f in files.items():
        f["digest"] = file_digest(path)
        unused = f["unused"]
        f["unused"] = None if unused is None else [[k, o, n] for (k, o), n in unused.items()]
    written = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    why = cannot_judge(m["doubts"], m["claims"])
    opened, overflow = remember(carried(previous), files, suite=suite_of(m["claims"]),
                                judged=not why, now=written)
    if overflow:
        why = "; ".join(filter(None, [why, "the record of files opened across runs is full: "
                                      "delete it and run the tests again"]))
    return {"version": VERSION, "written": written, "cannot_judge": why,
            "roots": sorted(m["roots"]),
            "modules": dict(sorted(m["modules"].items())), "claims": m["claims"],
            "files": files, "opened": opened, "overflow": overflow}


def carried(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """``doc`` (a record read back) as this version carries its ``opened`` on, or None (none
    it can: the next record starts anew). A version 2 record, which kept no counts, is read
    as a history of one run: its own run is counted as the first."""
    if doc is None or doc.get("version") == VERSION:
        return doc
    if doc.get("version") != 2:
        return None
    files, claims = doc.get("files"), doc.get("claims")
    files = {p: f for p, f in files.items() if isinstance(f, dict)} if isinstance(
        files, dict) else {}
    claims = {p: c for p, c in claims.items() if isinstance(c, dict)} if isinstance(
        claims, dict) else {}
    opened, overflow = remember(doc, files, suite=suite_of(claims),
                                judged=not doc.get("cannot_judge"),
                                now=str(doc.get("written", "")))
    return {"opened": opened, "overflow": overflow}


def read_previous(path: pathlib.Path) -> dict[str, Any] | None:
    """The record at ``path`` as JSON, to carry its ``opened`` files into the next (None:
    none, or not JSON: the next record starts anew; :func:`carried` reads the version)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def write(record: dict[str, Any], directory: pathlib.Path, *,
          previous: dict[str, Any] | None = None) -> pathlib.Path:
    """Write the record into ``directory`` (raises ``OSError`` when it cannot), unless
    ``previous`` (the record just read from there) says the same but when it was written.

    A run that changed nothing (the same tests replaying the same files) then writes
    nothing: the record on disk is already this one, and its durable write (the file's and
    the directory's ``fsync``) cost a one-test replay session ~35 ms of its ~70 on this box,
    more than the rest of its cassette machinery. ``written`` therefore says when the
    record's content last changed."""
    dest = directory / FILE_NAME
    if previous is not None and _same(record, previous):
        return dest
    from .._paths import make_dir
    from .atomic import atomic_write

    make_dir(directory)
    atomic_write(dest, orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return dest


def _same(record: dict[str, Any], previous: dict[str, Any]) -> bool:
    """Whether two records hold the same (in the same order: ``opened`` is oldest first),
    their ``written`` times aside."""
    return orjson.dumps({**record, "written": None}) == orjson.dumps(
        {**previous, "written": None})
