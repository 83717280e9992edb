"""``dejacache verify``: one verdict on a tree of cassettes, for CI and pre-commit.

Each cassette gets five checks (a row each: file, check, verdict, detail):

* ``format``: the file's cassette format. Newer than this dejacache reads: ``fail`` (upgrade
  dejacache; nothing else is judged, and the file is never called damaged). Older than the
  current one, or not in the written layout (a large file then opens by a whole parse):
  ``warn``, and ``--fix`` rewrites it (``dejacache rehash``, safe here: its checksums
  were verified first).
* ``damaged``: what replay would refuse (not JSON, merge conflict markers, an entry or
  value that fails its checksum). Never fixed automatically: accepting the bytes as they
  are could serve a flipped byte as a recorded answer. The detail says how to re-record,
  or accept an intended edit with ``dejacache rehash``.
* ``blobs`` (files that keep payloads in the ``blobs`` folder beside them): every blob the
  file uses is there and matches its hash (``fail`` names the missing and altered ones:
  replay would refuse them). Then one row per folder: blobs no cassette beside it uses
  (``warn``; ``--fix`` removes them, unless a cassette there cannot be read).
* ``secrets``: ``dejacache scan``'s findings (text blobs the file uses included).
* ``orphans``: entries no test used, or a whole file no test uses, judged by the usage
  record the pytest plugin writes at the end of each run (``usage.py`` says what it can
  tell: only a complete run judges); ``skip``, with the reason, where it cannot tell, and
  ``ok`` for the files dejacache writes beside a cassette (``<name>.live.json``...). An
  orphan fails only once ``claimed.RUNS`` complete runs in a row judged it unused (a whole
  file: one some recorded run opened); before that it is a warning (``claimed.py`` says
  why). ``--fix`` removes the failing ones, and says what it left alone (:func:`fix_report`).
* ``expired``: entries older than ``max_age`` (the cassette's own top-level ``max_age``
  member where present, else ``--max-age``), by each entry's ``recorded_at`` (ISO 8601 or
  Unix seconds) where present, and entries dated in the future (beyond the clock skew
  ``_core/ageing.py`` allows: a warning without a ``max_age``). An entry without a
  ``recorded_at`` has an unknown age: ``warn``, never counted as fresh.

The exit status is 1 when any row fails (warnings and skips do not fail).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any, Final

import orjson

from .._core.ageing import CLOCK_SKEW, expired, in_future, recorded_at
from .._core.ageing import span as _span
from .._core.durations import seconds
from ..errors import CassetteError, ConfigurationError
from . import blob_audit, blobs
from . import format as fmt
from .atomic import atomic_write, remove_stale_temps
from .claimed import RUNS
from .document import load_document, verify_document
from .orphans import OrphanVerdict, UsageRecord, beside
from .rehash import rehash
from .render import render

__all__ = ["CHECKS", "Row", "cassette_files", "fix_report", "verify_file", "verify_files"]

CHECKS: Final = ("format", "damaged", "blobs", "secrets", "orphans", "expired")
OK, FAIL, WARN, SKIP, FIXED = "ok", "fail", "warn", "skip", "fixed"


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    path: str
    check: str
    verdict: str
    detail: str
    removed: int = 0  # --fix: the orphaned entries it removed from the file
    gone: bool = False  # --fix: it removed the whole file
    kept: str = ""  # an orphans warning: why --fix leaves them (too few runs judged them)


@dataclasses.dataclass(slots=True)
class _Fix:
    """What ``--fix`` would do to one file."""

    rewrite: bool = False  # older format or layout: render it anew (checksums recomputed)
    drop: tuple[tuple[str, int, str], ...] = ()  # orphaned entries (key, occurrence, name)
    remove: bool = False  # the whole file is orphaned
    why: str = ""  # the orphans verdict's detail
    digest: str | None = None  # the bytes the verdicts were made on


def cassette_files(paths: Iterable[str]) -> Iterator[pathlib.Path]:
    """Files named on the command line, and the ``*.json`` files inside a ``cassettes``
    directory under the directories named (other JSON under a tree is not a cassette)."""
    from .scan import iter_files

    for raw in paths:
        p = pathlib.Path(raw)
        if not p.is_dir():
            yield from iter_files([raw])  # a missing path is a CassetteError, not "clean"
            continue
        for f in iter_files([raw]):
            if f.suffix == ".json" and "cassettes" in f.relative_to(p).parts[:-1] + p.parts:
                yield f


def verify_files(files: Iterable[pathlib.Path], *, usage: UsageRecord | None,
                 max_age: float | None, now: float, fix: bool = False) -> list[Row]:
    rows: list[Row] = []
    files = list(files)
    for f in files:
        rows += verify_file(f, usage=usage, max_age=max_age, now=now, fix=fix)
    for folder in sorted({f.parent / blobs.FOLDER for f in files}):
        if folder.is_dir():  # after the files: an orphan --fix removed may free blobs
            rows.append(_unused_blobs(blobs.Folder(folder), now, fix))
    return rows


def verify_file(path: pathlib.Path, *, usage: UsageRecord | None, max_age: float | None,
                now: float, fix: bool = False) -> list[Row]:
    """The rows of one file (and, with ``fix``, what was done about them)."""
    rows: list[Row] = []

    def add(check: str, verdict: str, detail: str = "") -> None:
        rows.append(Row(str(path), check, verdict, detail))

    try:
        data = fmt.whole(fmt.read_file(path))
    except CassetteError as exc:
        add("damaged", FAIL, str(exc))
        return rows
    doc, todo = _structure(path, data, add)
    if doc is not None and blobs.refers(data):
        add(*_blobs(path, doc))
    add(*_secrets(path))
    if doc is None:
        for check in ("orphans", "expired"):
            add(check, SKIP, "the file cannot be read")
        return rows
    orphan = _orphans(path, data, usage)
    rows.append(Row(str(path), "orphans", orphan.verdict, orphan.detail, kept=orphan.kept))
    if orphan.verdict == FAIL:
        todo.drop, todo.remove, todo.why = orphan.entries, orphan.whole_file, orphan.detail
    add("expired", *_expiry(doc, max_age, now))
    if fix and (todo.rewrite or todo.drop or todo.remove):
        from .usage import digest

        todo.digest = digest(data)  # what was verified: a later edit is never rewritten
        done, ok = _apply(path, todo)
        rows = [(Row(r.path, r.check, FIXED, "; ".join(filter(None, [done, r.kept])),
                     removed=len(todo.drop), gone=todo.remove, kept=r.kept)
                 if ok else dataclasses.replace(r, detail=f"{r.detail}; {done}"))
                if _fixed(r, todo) else r for r in rows]
    return rows


def _fixed(row: Row, todo: _Fix) -> bool:
    if row.check == "orphans":
        return row.verdict == FAIL
    return row.check == "format" and row.verdict == WARN and (todo.rewrite or todo.remove)


# ---------------------------------------------------------------- format and damage


def _structure(path: pathlib.Path, data: bytes, add: Any
               ) -> tuple[dict[str, Any] | None, _Fix]:
    """The ``format`` and ``damaged`` rows; the verified document (None: not readable)."""
    todo = _Fix()
    try:
        doc = load_document(data, path, verify=False)
    except CassetteError as exc:
        newer = _newer_format(data)
        if newer is not None:
            from .. import __version__

            add("format", FAIL, f"written in cassette format {newer}; dejacache "
                f"{__version__} reads formats {', '.join(map(str, fmt.READABLE))}: upgrade "
                "dejacache (pip install -U dejacache)")
            add("damaged", SKIP, "not judged: the format is newer than this dejacache")
        else:
            add("format", SKIP, "not judged: the file is damaged")
            add("damaged", FAIL, str(exc))
        return None, todo
    try:
        verify_document(doc, path)
    except CassetteError as exc:
        add("format", OK if doc["format"] == fmt.FORMAT else WARN, f"format {doc['format']}")
        add("damaged", FAIL, str(exc))
        return None, todo
    layout = _layout(doc, data)
    todo.rewrite = bool(layout)
    add("format", WARN if layout else OK, layout or f"format {fmt.FORMAT}")
    n = len(doc["entries"])
    add("damaged", OK, f"{n} entr{'ies' if n != 1 else 'y'}, checksums match")
    return doc, todo


def _newer_format(data: bytes) -> int | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    v = doc.get("format") if isinstance(doc, dict) else None
    return v if type(v) is int and v > max(fmt.READABLE) else None


def _layout(doc: dict[str, Any], data: bytes) -> str:
    """Why the file is not as the writer lays it out (empty: it is)."""
    from .reader import FileIndex

    if doc["format"] == 3:  # read through its cross-reference, as format 4 is
        return (f"format 3: its next save writes it whole; --fix rewrites it in "
                f"format {fmt.FORMAT}")
    if doc["format"] != fmt.FORMAT:
        return (f"format {doc['format']}: replay parses it whole; --fix rewrites it in "
                f"format {fmt.FORMAT}")
    try:
        opened = FileIndex.open(data) is not None
    except CassetteError:
        opened = False
    if not opened:
        return ("not in the written layout (edited by hand?): replay parses it whole; "
                "--fix rewrites it")
    return ""


# ---------------------------------------------------------------- blobs


def _blobs(path: pathlib.Path, doc: dict[str, Any]) -> tuple[str, str, str]:
    got = blob_audit.check(blobs.Folder.beside(path), blobs.used_by(doc))
    if not got.missing and not got.altered:
        return "blobs", OK, (f"{got.count} blob{'s' * (got.count != 1)} "
                             f"({got.size:,} bytes), hashes match")
    said = [f"{len(hs)} {what}: {', '.join(hs[:3])}{' ...' if len(hs) > 3 else ''}"
            for what, hs in (("missing", got.missing), ("altered", got.altered)) if hs]
    return "blobs", FAIL, (f"{'; '.join(said)} (of {got.count} in {path.parent / blobs.FOLDER}"
                           "): replay refuses them; re-record the cassette, or restore them")


def _unused_blobs(folder: blobs.Folder, now: float, fix: bool) -> Row:
    """One row for a blobs folder: what no cassette beside it uses (removed by ``fix``)."""
    where = str(folder.root)
    gone, why = blob_audit.unused(folder, now)
    if why:
        return Row(where, "blobs", SKIP, why)
    if not gone:
        return Row(where, "blobs", OK, "every blob is used by a cassette beside it")
    size = sum(_size(folder.path(h)) for h in gone)
    what = f"{len(gone)} unused blob{'s' * (len(gone) != 1)} ({size:,} bytes)"
    if fix:
        for h in gone:
            folder.remove(h)
        return Row(where, "blobs", FIXED, f"removed {what}")
    return Row(where, "blobs", WARN, f"{what}: no cassette beside it uses them; --fix "
               "removes them")


def _size(p: pathlib.Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


# ---------------------------------------------------------------- secrets and orphans


def _secrets(path: pathlib.Path) -> tuple[str, str, str]:
    from .scan import scan_file

    found = scan_file(path)
    if not found:
        return "secrets", OK, ""
    shown = "; ".join(f"line {f.line}: {f.kind}" for f in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return "secrets", FAIL, (f"{len(found)} finding{'s' * (len(found) != 1)} ({shown}{more}); "
                             "redact them (cassette(redact=...)) and re-record")


def _orphans(path: pathlib.Path, data: bytes, usage: UsageRecord | None) -> OrphanVerdict:
    companion = beside(path)
    if companion:  # whatever the record says, and with none
        return OrphanVerdict(OK, companion)
    if usage is None:
        return OrphanVerdict(SKIP, "no usage record: run the tests first (the pytest plugin "
                             "writes .dejacache/usage.json), or pass --usage FILE")
    return usage.judge(path, data)


# ---------------------------------------------------------------- expiry


# Every way a run can be given the limit, as a skipped row advises (under pytest there is no
# --max-age flag).
_GIVE_MAX_AGE = ("give --max-age, DEJACACHE_MAX_AGE, or max_age in [tool.dejacache] "
                 "(pytest ini: dejacache_max_age)")


def _expiry(doc: dict[str, Any], default: float | None, now: float) -> tuple[str, str]:
    raw = doc.get("max_age")
    max_age: float | None
    if raw is not None:
        try:
            max_age = seconds(raw, "the cassette's max_age")
        except ConfigurationError as exc:
            return FAIL, str(exc)
    else:
        max_age = default
    born = [recorded_at(e) for e in doc["entries"]]
    n = len(born)
    ahead = [t for t in born if t is not None and in_future(t, now)]
    future = ""
    if ahead:
        latest = datetime.datetime.fromtimestamp(max(ahead), datetime.UTC)
        future = (f"{len(ahead)} of {n} entries dated in the future (latest {latest:%Y-%m-%d}, "
                  f"beyond the {_span(CLOCK_SKEW)} allowed for clock skew): a wrong clock or a "
                  "hand edit")
    if max_age is None:
        if future:  # no limit to judge ages by, but such a date is never right
            return WARN, f"{future}; no max_age to judge the rest ({_GIVE_MAX_AGE})"
        return SKIP, f"no max_age ({_GIVE_MAX_AGE}, or a max_age member in the cassette)"
    gone = [t for t in born if expired(t, max_age, now)]
    old = [t for t in gone if t is not None and not in_future(t, now)]
    if gone:
        said = [future + ", so expired"] if future else []
        if old:
            oldest = datetime.datetime.fromtimestamp(min(old), datetime.UTC)
            said.insert(0, f"{len(old)} of {n} entries recorded more than {_span(max_age)} "
                        f"ago (oldest {oldest:%Y-%m-%d})")
        return FAIL, f"{'; '.join(said)}; re-record them (DEJACACHE_MODE=record)"
    unknown = born.count(None)
    if unknown:
        return WARN, (f"{unknown} of {n} entries have no recorded_at: their age is unknown "
                      "(recorded before dejacache kept the time)")
    return OK, f"all {n} entries younger than {_span(max_age)}"


# ---------------------------------------------------------------- --fix


def _apply(path: pathlib.Path, todo: _Fix) -> tuple[str, bool]:
    """Carry out ``todo`` under the cassette's lock, on the bytes the verdict was made on
    (a file changed since is left alone and said so: ``ok`` False)."""
    from .lock import cassette_lock
    from .usage import digest

    with cassette_lock(path, unsaved="the file was not fixed"):
        data = fmt.whole(fmt.read_file(path))
        if digest(data) != todo.digest:
            return "not fixed: the file changed while it was checked", False
        if todo.remove:
            path.unlink()
            return f"removed the file: {todo.why}", True
        remove_stale_temps(path)
        new, _ = rehash(data, path)  # verified above: this only rewrites the layout
        doc = load_document(new, path)
        entries = _without(doc["entries"], {(k, o) for k, o, _ in todo.drop})
        atomic_write(path, render(entries, doc["values"]))
    if todo.drop:
        n = len(todo.drop)
        return f"removed {n} unused entr{'ies' if n != 1 else 'y'}, checksums recomputed", True
    return f"rewritten in format {fmt.FORMAT} (dejacache rehash)", True


def _without(entries: list[dict[str, Any]], drop: set[tuple[str, int]]
             ) -> list[dict[str, Any]]:
    """``entries`` less those named in ``drop`` (key, n-th of that key in file order), each
    kept entry's ``follows`` moved to the kept step its task made before it."""
    seen: collections.Counter[str] = collections.Counter()
    gone: set[int] = set()
    for i, e in enumerate(entries):
        k = str(e.get("key", ""))
        if (k, seen[k]) in drop:
            gone.add(i)
        seen[k] += 1
    if not gone:
        return entries
    new_index: dict[int, int] = {}
    for i in range(len(entries)):
        if i not in gone:
            new_index[i] = len(new_index)
    out = []
    for i, e in enumerate(entries):
        if i in gone:
            continue
        f = fmt.follows_of(e)
        hops = 0
        while f is not None and f in gone and hops <= len(entries):
            f = fmt.follows_of(entries[f])
            hops += 1
        d = dict(e)
        if f is None or f in gone:
            d.pop("follows", None)
        else:
            d["follows"] = new_index.get(f, -1) if f >= 0 else f
        out.append(d)
    return out


# ---------------------------------------------------------------- the table


def table(rows: list[Row], *, verbose: bool = False) -> list[str]:
    """The rows as aligned lines (``verbose``: every row; else all but ``ok`` and ``skip``),
    then one summary line."""
    shown = [r for r in rows if verbose or r.verdict not in (OK, SKIP)]
    lines = []
    if shown:
        head = Row("file", "check", "verdict", "detail")
        w_file = max(len(r.path) for r in (head, *shown))
        w_check = max(len(r.check) for r in (head, *shown))
        for r in (head, *shown):
            lines.append(f"{r.path:<{w_file}}  {r.check:<{w_check}}  {r.verdict:<7}  "
                         f"{r.detail}".rstrip())
    lines.append(summary(rows))
    return lines


def fix_report(rows: list[Row]) -> list[str]:
    """What ``--fix`` removed, and the files whose orphans it left alone because it could
    not judge them, counted by reason."""
    files = sum(r.gone for r in rows if r.check == "orphans")
    pruned = [r.removed for r in rows if r.check == "orphans" and r.removed and not r.gone]
    entries = sum(pruned)
    done = [f"{files} file{'s' * (files != 1)}"] if files else []
    if entries:
        done.append(f"{entries} unused entr{'ies' if entries != 1 else 'y'} from "
                    f"{len(pruned)} file{'s' * (len(pruned) != 1)}")
    lines = [f"dejacache verify --fix: removed {' and '.join(done) or 'no orphans'}"]
    orphans = [r for r in rows if r.check == "orphans"]
    lines += _left(collections.Counter(r.detail for r in orphans if r.verdict == SKIP),
                   "left {} alone, their orphans not judged (never removed in doubt)")
    lines += _left(collections.Counter(r.kept for r in orphans
                                       if r.verdict in (WARN, FIXED) and r.kept),
                   "kept the orphans of {} judged by too few runs (never removed on the word "
                   f"of fewer than {RUNS} complete runs in a row, nor without a usage history)")
    return lines


def _left(reasons: collections.Counter[str], what: str) -> list[str]:
    """The lines of files ``--fix`` left (some of) alone, counted by reason; ``what`` names
    them where it says ``{}``."""
    if not reasons:
        return []
    n = sum(reasons.values())
    lines = [f"dejacache verify --fix: {what.format(f'{n} file' + 's' * (n != 1))}:"]
    lines += [f"  {k:>4}  {why}" for why, k in reasons.most_common(5)]
    if len(reasons) > 5:
        lines.append(f"        ... and {len(reasons) - 5} more reasons (-v lists every file)")
    return lines


def summary(rows: list[Row]) -> str:
    files = len({r.path for r in rows if not r.path.endswith(blobs.FOLDER)})
    count = collections.Counter(r.verdict for r in rows)
    parts = [f"{count[v]} {v}" for v in (FAIL, WARN, FIXED, SKIP) if count[v]]
    skipped = collections.Counter(r.detail for r in rows if r.verdict == SKIP)
    why = f"; skipped most often: {skipped.most_common(1)[0][0]}" if skipped else ""
    verdict = "FAILED" if count[FAIL] else "passed"
    return (f"dejacache verify: {verdict}: {files} cassette{'s' * (files != 1)}, "
            f"{', '.join(parts) or 'every check ok'}{why}")
