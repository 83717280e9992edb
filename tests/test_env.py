"""The ``DEJACACHE_*`` variables dejacache reads, and the warning naming a misspelt one."""

from __future__ import annotations

import pathlib
import re
import warnings

import pytest

from dejacache import _env, config
from dejacache.errors import DejacacheWarning

SRC = pathlib.Path(_env.__file__).parent


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment with no DEJACACHE_* variable, not yet checked in this process."""
    import os

    for name in [n for n in os.environ if n.startswith("DEJACACHE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(_env, "_checked", [False])
    return monkeypatch


def test_the_known_list_is_every_variable_the_source_reads() -> None:
    # Any file of the package (Python, the Node client, stubs): a variable read anywhere
    # and missing from KNOWN would be warned about as a typo.
    found = set()
    for path in SRC.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".mjs", ".mts", ".js", ".ts") and (
                path.name != "_env.py"):  # (its docstring shows a misspelt one)
            found |= set(re.findall(r"DEJACACHE_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    assert {n for n in found if not n.startswith("DEJACACHE_TEST_")} == _env.KNOWN


def test_a_misspelt_variable_is_named_with_the_closest_known_one(
        fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("DEJACACHE_MDOE", "replay")
    fresh.setenv("DEJACACHE_MAXAGE", "1d")
    with pytest.warns(DejacacheWarning) as got:
        _env.warn_unknown()
    assert [str(w.message) for w in got] == [
        "dejacache: environment variable DEJACACHE_MAXAGE is not one dejacache reads, so it "
        "is ignored; did you mean 'DEJACACHE_MAX_AGE'?",
        "dejacache: environment variable DEJACACHE_MDOE is not one dejacache reads, so it "
        "is ignored; did you mean 'DEJACACHE_MODE'?"]


def test_known_variables_and_the_suites_hooks_are_not_named(
        fresh: pytest.MonkeyPatch) -> None:
    for name in _env.KNOWN - {"DEJACACHE_PROJECT", "DEJACACHE_LEARN_DIR"}:
        fresh.setenv(name, "")
    fresh.setenv("DEJACACHE_TEST_CRASH_AT", "")
    fresh.setenv("DEJACACHEX", "1")  # not the prefix
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _env.warn_unknown()


def test_settings_check_once_per_process(fresh: pytest.MonkeyPatch) -> None:
    fresh.setenv("DEJACACHE_MDOE", "replay")
    config.reset()
    with pytest.warns(DejacacheWarning, match="DEJACACHE_MDOE .*'DEJACACHE_MODE'"):
        config.get_settings()
    config.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config.get_settings()
    config.reset()
