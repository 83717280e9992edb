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
from typing import Any

import orjson

from ..errors import CassetteError
from .claimed import holder
from .usage import VERSION, Names, digest, file_digest

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


@dataclasses.dataclass(frozen=True, slots=True)
class OrphanVerdict:
    """``verdict``: ``ok``, ``fail`` (orphans) or ``skip`` (the record cannot tell)."""

    verdict: str
    detail: str
    entries: tuple[tuple[str, int, str], ...] = ()  # orphaned entries: (key, occurrence, name)
    whole_file: bool = False  # no test uses the file at all


class UsageRecord:
    """A record written by ``usage.build``, read back to judge files (``usage.py``'s
    docstring says what it can and cannot tell)."""

    def __init__(self, doc: dict[str, Any], source: pathlib.Path) -> None:
        self.source = source
        self._name = Names()
        self.written = str(doc.get("written", "?"))
        self.cannot_judge = str(doc.get("cannot_judge", "")) if doc.get(
            "version") == VERSION else ("the usage record was written by an older dejacache: "
                                        "run the tests again")
        self.roots = [pathlib.Path(r) for r in doc.get("roots", ())]
        self.modules: dict[str, str | None] = dict(doc.get("modules", {}))
        self._stale: str | bool | None = False  # False: not looked at yet
        self.claims: dict[str, dict[str, str]] = doc.get("claims", {})
        self.files: dict[str, dict[str, Any]] = doc.get("files", {})
        self.opened: dict[str, dict[str, Any]] = doc.get("opened", {})
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
        # judge: an upgrade must not turn its verdicts into deletions.
        if not isinstance(doc, dict) or doc.get("version") not in (1, VERSION):
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
        if f is not None:
            return self._judge_used(f, digest(data))
        o = self.opened.get(key)
        held = holder(o, self.suite()) if o is not None else ""
        if held:
            return OrphanVerdict("skip", f"usage unknown: not opened in the last run, but {held} "
                                 "(kept while that test exists)")
        claims = self.claims.get(key, {})
        if claims:
            return OrphanVerdict("fail", f"its test {min(claims)} passed without opening it",
                                 whole_file=True)
        return self._judge_unclaimed(path)

    def suite(self) -> set[str]:
        """The tests the run collected (each claims its own cassette)."""
        if self._suite is None:
            self._suite = {t for tests in self.claims.values() for t in tests}
        return self._suite

    def stale(self) -> str | None:
        """The first test module edited (or deleted) since the run, or None: a test edited
        since may use what the run did not, or be one a cassette is now named for."""
        if self._stale is False:
            self._stale = next((pathlib.Path(m).name for m, d in self.modules.items()
                                if file_digest(m) != d), None)
        return self._stale if isinstance(self._stale, str) else None

    def _judge_used(self, f: dict[str, Any], now: str) -> OrphanVerdict:
        if f.get("digest") != now:
            return OrphanVerdict("skip", "changed since the last run")
        unused = f.get("unused")
        if unused is None:
            return OrphanVerdict("skip", f"usage unknown: {f.get('why') or 'not recorded'}")
        tests = f.get("tests") or []
        if not unused:
            return OrphanVerdict("ok", f"every entry used ({len(tests)} test"
                                 f"{'s' * (len(tests) != 1)})")
        shown = ", ".join(f"{n} (key {k[:12]}" + (f", occurrence {o})" if o else ")")
                          for k, o, n in unused[:3])
        more = f" and {len(unused) - 3} more" if len(unused) > 3 else ""
        return OrphanVerdict("fail", f"{len(unused)} entr{'ies' if len(unused) != 1 else 'y'} "
                             f"no test used: {shown}{more}",
                             entries=tuple((str(k), int(o), str(n)) for k, o, n in unused))

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
