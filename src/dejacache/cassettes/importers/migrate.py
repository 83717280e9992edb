"""``dejacache migrate [TESTS_DIR]``: a vcrpy / pytest-recording suite's cassettes, imported
where the pytest plugin will look for them, and what could not be moved, with its fix.

Each vcrpy cassette under the directory (``.yaml``, ``.yml``, vcrpy's ``.json``, gzipped or
not, any layout :func:`~dejacache.cassettes.importers.import_file` reads) becomes a dejacache
cassette beside it with the same name and ``.json`` for its suffixes: the path the plugin opens
for a ``@pytest.mark.vcr`` test (``_pytest_vcr``), which is pytest-recording's own name, so
parametrized ids need no renaming. Files that are not recordings are passed over. By default
the calls are matched the way vcrpy's default ``match_on`` matched them, on method + URL in
recorded order (``match="vcr"``); ``match="request"`` keys them whole.

The suite's Python files are read (never run) for what a cassette cannot carry: a
``pytest_recording_configure`` hook, custom matchers, ``before_record_*`` hooks, a persister,
``allow_playback_repeats``, extra cassettes on a marker, ``vcr.use_cassette`` blocks, and a
``filterwarnings = error`` setting that would turn the stale-body warning into failures. Each
is reported once with the line that deals with it.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Iterator
from typing import Final

from ...errors import CassetteError, ConfigurationError
from .report import ImportReport

__all__ = ["Migration", "Note", "migrate", "target_for"]

# A recording's suffixes, longest first: the dejacache cassette drops them all.
_SUFFIXES: Final = (".yaml.gz", ".yml.gz", ".json.gz", ".yaml", ".yml", ".json")
# Why the vcrpy reader skips an interaction with no HTTP request: a file of them all is
# another tool's (pydantic-ai's xAI gRPC cassettes also hold "interactions").
_NOT_HTTP: Final = "the interaction has no request method and uri"
_SKIP_DIRS: Final = frozenset({"__pycache__", "node_modules", ".git", ".venv", "venv",
                               ".tox", ".nox", ".dejacache", "site-packages"})


@dataclasses.dataclass(frozen=True, slots=True)
class Note:
    """Something the suite does that the cassettes do not carry: where, what, the fix."""

    where: str
    what: str
    fix: str


@dataclasses.dataclass(slots=True)
class Migration:
    """What :func:`migrate` did."""

    imported: list[ImportReport] = dataclasses.field(default_factory=list)
    existing: list[pathlib.Path] = dataclasses.field(default_factory=list)
    failed: list[tuple[pathlib.Path, str]] = dataclasses.field(default_factory=list)
    notes: list[Note] = dataclasses.field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(len(r.converted) for r in self.imported)

    @property
    def skipped_calls(self) -> int:
        return sum(len(r.skipped) for r in self.imported)

    def lines(self) -> list[str]:
        out = []
        for r in self.imported:
            extra = f", {len(r.skipped)} skipped" if r.skipped else ""
            out.append(f"moved {r.source} -> {pathlib.Path(r.output).name} "
                       f"({len(r.converted)} call(s){extra})")
            out += [f"  skipped #{s.index} {s.name}: {s.reason}" for s in r.skipped]
        out += [f"kept {p} (already there; --force replaces it)" for p in self.existing]
        out += [f"could not move {p}: {why}" for p, why in self.failed]
        out.append(f"{len(self.imported)} cassette(s), {self.calls} call(s) moved; "
                   f"{self.skipped_calls} call(s) skipped; {len(self.failed)} file(s) failed")
        if self.notes:
            out.append("not moved (the suite's own code; one line each fixes it):")
            for n in self.notes:
                out += [f"  {n.where}: {n.what}", f"    fix: {n.fix}"]
        return out


def target_for(source: pathlib.Path) -> pathlib.Path:
    """The dejacache cassette for a vcrpy cassette: same directory and name, ``.json``."""
    name = source.name
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return source.with_name(name[: -len(suffix)] + ".json")
    return source.with_suffix(".json")


def _candidates(root: pathlib.Path) -> Iterator[pathlib.Path]:
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for f in sorted(files):
            if f.endswith(_SUFFIXES):
                yield pathlib.Path(directory) / f


def migrate(root: str | os.PathLike[str], *, match: str = "vcr", force: bool = False
            ) -> Migration:
    """Import every vcrpy cassette under ``root`` beside itself (see the module docstring)."""
    from . import detect_format, run_import

    base = pathlib.Path(root)
    if not base.is_dir():
        raise ConfigurationError(f"{base} is not a directory (the suite's tests directory)")
    result = Migration()
    for source in _candidates(base):
        try:
            if detect_format(source) != "vcr":
                continue
        except CassetteError:
            continue  # not a recording (another YAML or JSON file, or a dejacache cassette)
        target = target_for(source)
        if target == source:
            result.failed.append((source, "vcrpy's JSON serializer wrote it under the name "
                                  "its dejacache cassette takes; import it to a file of "
                                  "another name and point the test at it with "
                                  "@pytest.mark.dejacache(cassette=...)"))
            continue
        if target.exists() and not force:
            result.existing.append(target)
            continue
        try:
            report = run_import(source, target, functions=None, cache_key=None, redact=(),
                                overwrite=force, overwrite_hint="--force", match=match)
        except (CassetteError, ConfigurationError) as exc:
            result.failed.append((source, str(exc)))
            continue
        if not report.converted:
            if all(s.reason == _NOT_HTTP for s in report.skipped):
                continue  # "interactions" of another tool (a gRPC recorder's), not vcrpy's
            result.failed.append((source, "no call could be converted: " + "; ".join(
                sorted({s.reason for s in report.skipped}))))
            continue
        result.imported.append(report)
    result.notes = list(_notes(base))
    return result


# (pattern, what, fix): a regex over one line of a Python or configuration file.
_RULES: Final[tuple[tuple[re.Pattern[str], str, str], ...]] = tuple(
    (re.compile(p), what, fix) for p, what, fix in (
        (r"def pytest_recording_configure\b",
         "a pytest_recording_configure hook: dejacache declares the hook so this file loads, "
         "and calls it only to write vcr._path in the suite's own layout",
         "none needed; its matchers and before_record hooks are listed below"),
        (r"\.register_matcher\(\s*['\"]([^'\"]+)",
         "custom matcher {0!r}: dejacache matches migrated calls on method + URL path in "
         "recorded order (hosts and ports never compared)",
         "if it ignores more than the host (a region in a path), leave that part out of "
         "matching: @pytest.mark.dejacache(volatile=['path'])"),
        (r"before_record_(request|response)\b",
         "before_record_{0}: not applied; dejacache never writes credentials, cookies or "
         "secret-shaped values",
         "for other fields: @pytest.mark.dejacache(redact=['name.or.path'])"),
        (r"\.register_persister\(",
         "a custom persister: migrated cassettes are dejacache JSON files",
         "none needed (it still writes vcr._path for checks that read it)"),
        (r"['\"]allow_playback_repeats['\"]\s*:\s*True|allow_playback_repeats\s*=\s*True",
         "allow_playback_repeats: each dejacache recording answers once, in order",
         "re-record a test that repeats a call: pytest TEST --dejacache-mode=record"),
        (r"mark\.vcr\(\s*['\"]",
         "@pytest.mark.vcr with extra cassettes: only vcrpy reads several per test",
         "dejacache import EXTRA -o <the test's cassette> --force, then drop the argument"),
        (r"\.use_cassette\(",
         "vcr.use_cassette(...) in code: a vcrpy block, not migrated",
         "with dejacache.cassette('path.json', match='vcr'): ..."),
    ))
_STRICT_WARNINGS: Final = re.compile(
    r"""^\s*['"]?error['"]?\s*,?\s*$|filterwarnings\s*=\s*['"]?error""")


def _notes(root: pathlib.Path) -> Iterator[Note]:
    seen: set[tuple[str, str]] = set()
    files = [p for p in _source_files(root)]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for pattern, what, fix in _RULES:
                m = pattern.search(line)
                if m is None:
                    continue
                said = what.format(*m.groups())
                if (said, str(path)) in seen:
                    continue
                seen.add((said, str(path)))
                yield Note(f"{path}:{n}", said, fix)
    yield from _warning_filters(root)


def _source_files(root: pathlib.Path) -> Iterator[pathlib.Path]:
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for f in sorted(files):
            if f.endswith(".py"):
                yield pathlib.Path(directory) / f


def _warning_filters(root: pathlib.Path) -> Iterator[Note]:
    """``filterwarnings = error`` in the project's pytest configuration."""
    here = root.resolve()
    for directory in (here, *here.parents):
        for name in ("pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"):
            path = directory / name
            if not path.is_file():
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            inside = False
            for n, line in enumerate(lines, 1):
                inside = inside or "filterwarnings" in line
                if inside and _STRICT_WARNINGS.search(line):
                    yield Note(
                        f"{path}:{n}",
                        "warnings are errors: the once-per-cassette warning about calls "
                        "whose bodies changed since they were recorded would fail a test",
                        'add to filterwarnings: "default:dejacache. cassette .* by method '
                        '\\\\+ URL:dejacache.DejacacheWarning"')
                    return
                if inside and line.strip().endswith("]"):
                    inside = False
            if name in ("pytest.ini", "pyproject.toml"):
                return
