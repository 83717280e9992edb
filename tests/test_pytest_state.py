"""What the pytest plugin's modules share (``_pytest_state.py``)."""

from __future__ import annotations

import types

import pytest

from dejacache import _pytest_state, _pytest_vcr, pytest_plugin


def test_a_plugin_module_shows_pytest_its_hooks_and_fixtures_only() -> None:
    shown = dir(pytest_plugin)
    assert "pytest_configure" in shown and "dejacache_cassette" in shown
    assert "_dejacache_marker" in shown  # (the autouse fixture)
    assert "current_test" not in shown and "os" not in shown
    # every hook and fixture the module defines is shown
    hooks = {n for n in vars(pytest_plugin) if n.startswith("pytest_")}
    assert hooks <= set(shown)
    assert dir(_pytest_vcr) == sorted(
        ["default_cassette_name", "record_mode", "vcr", "vcr_cassette", "vcr_cassette_dir",
         "vcr_config"])
    # the names stay reachable: only dir() is narrowed
    assert callable(pytest_plugin.open_cassette)


def test_plugin_dir_picks_hooks_and_fixtures_of_any_scope() -> None:
    @pytest.fixture
    def one() -> int:
        return 1

    @pytest.fixture(scope="session", autouse=True)
    def _two() -> int:
        return 2

    def pytest_configure(config: pytest.Config) -> None:
        pass

    def helper() -> None:
        pass

    namespace = {"one": one, "_two": _two, "pytest_configure": pytest_configure,
                 "helper": helper, "types": types}
    listing = _pytest_state.plugin_dir(namespace, type(one))
    assert listing() == ["_two", "one", "pytest_configure"]
    listing().append("x")  # a copy each time
    assert listing() == ["_two", "one", "pytest_configure"]
