"""pytest-recording's fixtures, served by dejacache cassettes (``_pytest_vcr.py`` has the rest
of its surface and the fixtures' bodies).

This module is registered as the plugin ``dejacache-vcr`` when no other plugin has a ``vcr``
fixture, so it holds the fixtures and nothing else: pytest looks every name of a plugin
module over for fixtures and hooks (~48k instructions a name), and with the 61 names of
``_pytest_vcr`` registered a one-test run cost ~2.5M instructions more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import _pytest_state, _pytest_vcr

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from .cassettes.vcr_view import VcrView


@pytest.fixture
def vcr_config() -> dict[str, Any]:
    """Options for every vcr test's cassette (overridden in a conftest)."""
    return {}


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """``<test dir>/cassettes/<module>``, or ``<dejacache_cassette_dir>/<module>``."""
    return _pytest_vcr.module_cassette_dir(request)


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    return _pytest_vcr.default_cassette_name(request)


@pytest.fixture(scope="session")
def record_mode(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("record_mode", None) or "none")


@pytest.fixture
def vcr(request: pytest.FixtureRequest) -> Iterator[VcrView | None]:
    """The test's cassette with vcrpy's ``Cassette`` names; None for a test with neither
    marker that does not name ``vcr`` itself. Set up for every ``vcr`` test, named or not
    (the plugin's ``_dejacache_marker`` asks for it)."""
    yield from _pytest_vcr.vcr_views(request)


@pytest.fixture
def vcr_cassette(vcr: VcrView | None, request: pytest.FixtureRequest) -> VcrView:
    """pytest-vcr's name for the test's cassette."""
    return vcr if vcr is not None else _pytest_vcr.dejacache_view(request)


# What pytest and pluggy look over (as in pytest_plugin): the six fixtures of 18 names.
__dir__ = _pytest_state.plugin_dir(globals(), type(vcr))
