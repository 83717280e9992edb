"""Verify's side of the usage record: reading a record back and judging a cassette by it
(orphaned file, orphaned entries, or a record that cannot tell), and naming the files
dejacache writes beside a cassette, which are never orphans.

Apart from ``usage.py``, which every test session that opens a cassette loads to record
and write the record: only ``dejacache verify`` and ``--dejacache-verify`` judge, and this
half (the verdict's dataclass above all) was ~1 ms of importing ``usage.py``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Final

import orjson

from ..errors import CassetteError
from .claimed import RUNS, holder, idle_entries, idle_runs, suite_of
from .usage import VERSION, Names, carried, digest, file_digest

__all__ = ["OrphanVerdict", "UsageRecord", "beside", "owner_module"]


def owner_module(path: pathlib.Path) -> pathlib.Path | None:
    """The test module a cassette at the plugin's default place belongs to
    (``<dir>/cassettes/<module>/<test>.json`` -> ``<dir>/<module>.py``), or None."""
    if path.parent.parent.name != "cassettes":
        return None
    return path.parent.parent.parent / f"{path.parent.name}.py"


def beside(path: pathlib.Path) -> str:
    """What ``path`` is when dejacache writes it beside a cassette rather than as one (empty:
    it is not such a file). These are never orphans: no test names them, and the
    cassette they belong to decides their fate."""
    from .atomic import side_file
    from .partial import LIVE_SUFFIX

    name = path.name
    if name.endswith(LIVE_SUFFIX):
        return (f"the live calls of a partial replay of "
                f"{name.removesuffix(LIVE_SUFFIX)}.json: never an orphan")
    side = side_file(name)
    if side == "undo":
        return "an append's undo record: never an orphan"
    if side == "temp":
        return "a temporary file of a save: never an orphan"
    return ""


#: Why ``--fix`` leaves alone a file no recorded run opened (its rule: ``claimed.py``).
NO_HISTORY: Final = "kept: no usage history (no recorded run opened it)"


@dataclasses.dataclass(frozen=True, slots=True)
class OrphanVerdict:
    """``verdict``: ``ok``, ``fail`` (orphans ``--fix`` removes), ``warn`` (orphans by the
    last run, judged by fewer complete runs than ``--fix`` needs: ``kept`` says why) or
    ``skip`` (the record cannot tell)."""

    verdict: str
    detail: str
    entries: tuple[tuple[str, int, str], ...] = ()  # orphaned entries: (key, occurrence, name)
    whole_file: bool = False  # no test uses the file at all
    kept: str = ""  # why ``--fix`` leaves them (all of a ``warn``, some of a ``fail``)


class UsageRecord:
    """A record written by ``usage.build``, read back to judge files (``usage.py``'s
    docstring says what it can and cannot tell)."""

    def __init__(self, doc: dict[str, Any], source: pathlib.Path) -> None:
        self.source = source
        self._name = Names()
        self.written = str(doc.get("written", "?"))
        history = carried(doc)  # (None: version 1, which cannot judge)
        self.cannot_judge = str(doc.get("cannot_judge", "")) if history is not None else (
            "the usage record was written by an older dejacache: run the tests again")
        self.roots = [pathlib.Path(r) for r in doc.get("roots", ())]
        self.modules: dict[str, str | None] = dict(doc.get("modules", {}))
        self._stale: str | bool | None = False  # False: not looked at yet
        self.claims: dict[str, dict[str, str]] = doc.get("claims", {})
        self.files: dict[str, dict[str, Any]] = doc.get("files", {})
        self.opened: dict[str, dict[str, Any]] = (history or {}).get("opened") or {}
        self._suite: set[str] | None = None

    @classmethod
    def read(cls, path: pathlib.Path) -> UsageRecord | None:
        """The record at ``path`` (None: there is none); an unreadable one is a
        :class:`CassetteError` naming it (a damaged record must not pass as "no orphans")."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            # (no path=: the error would call the record "cassette ...")
            raise CassetteError(f"cannot read the usage record {path}: "
                                f"{exc.strerror or type(exc).__name__}") from None
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        # Version 1 (no word on whether its run was complete) reads as a record that cannot
        # judge: an upgrade must not turn its verdicts into deletions. Version 2 (no counts
        # of runs) reads as a history of one run.
        if not isinstance(doc, dict) or doc.get("version") not in (1, 2, VERSION):
            raise CassetteError("not a usage record this dejacache reads; delete it and run "
                                "the tests again", path=path)
        return cls(doc, path)

    def judge(self, path: pathlib.Path, data: bytes) -> OrphanVerdict:
        """Whether the run recorded here left ``path`` (holding ``data``) or entries of it
        unused. Called an orphan only on the word of a complete run; ``skip`` otherwise.
        (A file :func:`beside` names is no cassette of its own: ``verify`` asks first.)"""
        if self.cannot_judge:
            return OrphanVerdict("skip", f"cannot judge: {self.cannot_judge}")
        stale = self.stale()
        if stale is not None:
            return OrphanVerdict("skip", f"test module {stale} changed since the last run: "
                                 "run the tests again")
        key = self._name(path)
        f = self.files.get(key)
        o = self.opened.get(key)
        if f is not None:
            return self._judge_used(f, digest(data), o)
        held = holder(o, self.suite()) if o is not None else ""
        if held:
            return OrphanVerdict("skip", f"usage unknown: not opened in the last run, but {held} "
                                 "(kept while that test exists)")
        claims = self.claims.get(key, {})
        if claims:
            return _confirmed(OrphanVerdict(
                "fail", f"its test {min(claims)} passed without opening it", whole_file=True), o)
        return _confirmed(self._judge_unclaimed(path), o)

    def suite(self) -> set[str]:
        """The tests the run collected (each claims its own cassette)."""
        if self._suite is None:
            self._suite = suite_of(self.claims)
        return self._suite

    def stale(self) -> str | None:
        """The first test module edited (or deleted) since the run, or None: a test edited
        since may use what the run did not, or be one a cassette is now named for."""
        if self._stale is False:
            self._stale = next((pathlib.Path(m).name for m, d in self.modules.items()
                                if file_digest(m) != d), None)
        return self._stale if isinstance(self._stale, str) else None

    def _judge_used(self, f: dict[str, Any], now: str, o: dict[str, Any] | None
                    ) -> OrphanVerdict:
        if f.get("digest") != now:
            return OrphanVerdict("skip", "changed since the last run")
        unused = f.get("unused")
        if unused is None:
            return OrphanVerdict("skip", f"usage unknown: {f.get('why') or 'not recorded'}")
        tests = f.get("tests") or []
        if not unused:
            return OrphanVerdict("ok", f"every entry used ({len(tests)} test"
                                 f"{'s' * (len(tests) != 1)})")
        counts = idle_entries(o, now)
        runs = {(k, occ): counts.get((k, occ), (0, ""))[0] for k, occ, _ in unused}
        sure = [e for e in unused if runs[(e[0], e[1])] >= RUNS]
        if not sure:
            least = max(1, min(runs.values()))  # (the last run, complete, judged them)
            return OrphanVerdict("warn", f"{_entries(unused, least)}; {_kept(least)}",
                                 kept=_kept(least))
        rest = len(unused) - len(sure)
        kept = (f"kept: {rest} more entr{'ies' if rest != 1 else 'y'} unused in fewer than the "
                f"{RUNS} complete runs in a row needed") if rest else ""
        return OrphanVerdict("fail", "; ".join(filter(None, [_entries(sure, RUNS), kept])),
                             entries=tuple((str(k), int(o), str(n)) for k, o, n in sure),
                             kept=kept)

    def _judge_unclaimed(self, path: pathlib.Path) -> OrphanVerdict:
        module = owner_module(pathlib.Path(self._name(path)))
        if module is None:
            return OrphanVerdict("skip", "no test of the last run names it")
        if str(module) in self.modules:
            return OrphanVerdict("fail", f"no test in {module.name} is named for it "
                                 "(renamed or deleted test)", whole_file=True)
        if not module.exists() and any(module.is_relative_to(r) for r in self.roots):
            return OrphanVerdict("fail", f"its test module {module.name} no longer exists",
                                 whole_file=True)
        return OrphanVerdict("skip", "its test module was not collected in the last run")


def _entries(unused: list[Any], runs: int) -> str:
    """``unused`` (key, occurrence, name rows), unused in the last ``runs`` complete runs."""
    shown = ", ".join(f"{n} (key {k[:12]}" + (f", occurrence {o})" if o else ")")
                      for k, o, n in unused[:3])
    more = f" and {len(unused) - 3} more" if len(unused) > 3 else ""
    return (f"{len(unused)} entr{'ies' if len(unused) != 1 else 'y'} no test used in the last "
            f"{runs} complete run{'s' * (runs != 1)}: {shown}{more}")


def _kept(runs: int) -> str:
    return f"kept: unused in {runs} of the {RUNS} complete runs in a row needed"


def _confirmed(v: OrphanVerdict, o: dict[str, Any] | None) -> OrphanVerdict:
    """A whole-file verdict ``v`` as ``--fix`` may act on it: ``fail`` only for a file some
    recorded run opened (``o``) that :data:`RUNS` complete runs in a row left unopened, with
    no test that opened it in the suite; else ``warn``, saying why it is kept."""
    if v.verdict != "fail":
        return v
    runs, since = idle_runs(o)
    if o is None:
        return OrphanVerdict("warn", f"{v.detail}; {NO_HISTORY}", kept=NO_HISTORY)
    if runs < RUNS:
        return OrphanVerdict("warn", f"{v.detail}; {_kept(runs)}", kept=_kept(runs))
    return dataclasses.replace(v, detail=f"{v.detail}; not opened in the last {runs} complete "
                               f"runs (since {since[:10]})")
