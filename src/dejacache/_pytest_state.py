"""What the pytest plugin's entry point (``pytest_plugin.py``) and its cassette machinery
(``_pytest_cassette.py``) share: the stash keys, the marker's arguments, where a test's
cassette lives and how a test ended. Imports nothing of dejacache's machinery."""

from __future__ import annotations

import os
import pathlib
import re
from typing import TYPE_CHECKING, Any

import pytest

from .cassettes._events import INTERRUPTIONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from .cassettes.partial import Partial
    from .cassettes.store import Cassette

__all__ = ["LIVE_SEEN", "MARKER_ARGS", "PLACEHOLDERS", "RAISED", "REPORTS", "STOPPED", "TAPE",
           "TAPES", "cassette_dir", "cassette_path", "check_marker", "ending", "marker_options",
           "outcome", "placeholders_out", "plugin_dir", "rerecord_command"]

TAPE: pytest.StashKey[Cassette] = pytest.StashKey()
TAPES: pytest.StashKey[list[tuple[str, Cassette]]] = pytest.StashKey()
# the partial replays --dejacache-live made
LIVE_SEEN: pytest.StashKey[list[Partial]] = pytest.StashKey()
REPORTS: pytest.StashKey[dict[str, pytest.TestReport]] = pytest.StashKey()
PLACEHOLDERS: pytest.StashKey[list[str] | None] = pytest.StashKey()
# the session was interrupted by this
STOPPED: pytest.StashKey[type[BaseException]] = pytest.StashKey()
RAISED: pytest.StashKey[type[BaseException]] = pytest.StashKey()  # what the test's call raised
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 100

#: The marker's arguments and the defaults its help line shows: an argument not here is a
#: usage error naming the closest one (``cassete=`` would have recorded to the default path).
MARKER_ARGS: dict[str, str] = {
    "cassette": "None", "mode": "None", "cache_key": "None", "redact": "None",
    "substitute": "None", "record_errors": "()", "record_on_error": "False", "prune": "False",
    "allow_hosts": "()", "volatile": "()", "expect_misses": "False", "strict": "False",
    "match": "'request'", "max_age": "None", "on_expiry": "None", "live": "None",
    "replay_until": "None", "live_path": "None",
}


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """The closest ``dejacache`` marker's arguments, checked: a name the marker does not
    take is a usage error naming the closest one."""
    marker = item.get_closest_marker("dejacache")
    if marker is None:
        return {}
    check_marker(item, marker)
    opts: dict[str, Any] = dict(marker.kwargs)
    if marker.args:
        opts.setdefault("cassette", marker.args[0])
    return opts


def check_marker(item: pytest.Item, marker: pytest.Mark) -> None:
    unknown = [k for k in marker.kwargs if k not in MARKER_ARGS]
    if unknown:
        from ._suggest import did_you_mean

        name = unknown[0]
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.dejacache takes no argument {name!r}"
            f"{did_you_mean(name, MARKER_ARGS)} (it takes: {', '.join(MARKER_ARGS)})")
    if len(marker.args) > 1:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.dejacache takes one positional argument (the "
            f"cassette), got {len(marker.args)}: {marker.args!r}")
    named = marker.kwargs.get("cassette", marker.args[0] if marker.args else None)
    if named is not None:
        from ._paths import path_arg
        from .errors import ConfigurationError

        try:
            path_arg(named, "@pytest.mark.dejacache cassette")
        except ConfigurationError as e:
            raise pytest.UsageError(f"{item.nodeid}: {e}") from None


def placeholders_out(config: pytest.Config) -> bool:
    """Whether this session supplied placeholder API keys (it replays)."""
    return PLACEHOLDERS in config.stash


def ending(item: pytest.Item) -> type[BaseException] | None:
    """How the test's cassette blocks end: None when the test passed (they are written); an
    interruption when the session was stopped (Ctrl-C, ``pytest.exit()``) or the test raised
    one (nothing is written, and the summary says so); else ``AssertionError`` (failed,
    skipped or not run: nothing is written unless ``record_on_error``)."""
    stopped = item.config.stash.get(STOPPED, None)
    if stopped is not None:
        return stopped
    raised = item.stash.get(RAISED, None)
    if raised is not None and issubclass(raised, INTERRUPTIONS):
        return raised
    reports = item.stash.get(REPORTS, {})
    call = reports.get("call")
    if call is None or not call.passed or any(r.failed for r in reports.values()):
        return AssertionError
    return None


def outcome(item: pytest.Item) -> str:
    """What became of a test that did not pass, for the note naming what it did not write."""
    reports = item.stash.get(REPORTS, {})
    if any(r.failed for r in reports.values()):
        return "the test failed"
    if any(r.skipped for r in reports.values()):
        return "the test was skipped"
    return "the test did not run to its end"


def cassette_path(item: pytest.Item, explicit: str | os.PathLike[str] | None = None
                  ) -> pathlib.Path:
    """Where a test's cassette lives: ``<test dir>/cassettes/<module>/<test name>.json`` (the
    ``dejacache_cassette_dir`` ini key moves ``<test dir>/cassettes``)."""
    test_file = pathlib.Path(str(item.path))
    if explicit is not None:
        p = pathlib.Path(explicit)
        return p if p.is_absolute() else test_file.parent / p
    parts = item.nodeid.split("::")[1:]
    name = _UNSAFE.sub("_", ".".join(parts)).strip("._") or "test"
    if len(name) > _MAX_NAME:  # long parametrize ids: keep a readable head, hash the rest
        import xxhash

        name = name[:80] + "-" + xxhash.xxh3_64_hexdigest(".".join(parts).encode())
    return cassette_dir(item, test_file) / test_file.stem / f"{name}.json"


def cassette_dir(item: pytest.Item, test_file: pathlib.Path) -> pathlib.Path:
    """``<test dir>/cassettes``, or the project's ``cassette_dir`` (relative to the project
    file; ini ``dejacache_cassette_dir`` or ``[tool.dejacache] cassette_dir``)."""
    from . import _project

    project = _project.current()
    cdir: str | None = project.get("cassette_dir")
    if not cdir:
        return test_file.parent / "cassettes"
    base: pathlib.Path = project.directory or item.config.rootpath
    if item.config.inipath is not None and \
            project.sources.get("cassette_dir", "").startswith("ini"):
        base = item.config.inipath.parent  # an ini key is relative to its ini file
    return base / cdir


def rerecord_command(item: pytest.Item) -> str:
    import shlex

    return f"pytest {shlex.quote(item.nodeid)} --dejacache-mode=record"


def plugin_dir(namespace: dict[str, Any], fixture: type) -> Callable[[], list[str]]:
    """A plugin module's ``__dir__``: its hooks and fixtures (``fixture``: the type of one of
    them, pytest's class for them not being public). pytest and pluggy look over every name
    ``dir()`` gives of a plugin module for them, ~33k instructions a name: the 52 other names
    of ``pytest_plugin`` cost a one-test run ~1.6M instructions."""
    shown = sorted(name for name, value in namespace.items()
                   if name.startswith("pytest_") or type(value) is fixture)
    return lambda: list(shown)
