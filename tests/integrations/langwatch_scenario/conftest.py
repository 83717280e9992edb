"""The scenario test environment (``.venv-scenario``, ``make test-scenario``).

langwatch-scenario, openai 2.x and litellm cannot share ``.venv`` with openai 3.x; in the main
venv every test in this directory skips. The environment is set before scenario is imported:
litellm's price table is read from its bundled copy instead of being fetched, scenario's own
joblib cache goes to a temporary directory, and LangWatch reporting stays off (no API key).
Every test runs under a guard that fails it if anything connects beyond loopback.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

HAVE_SCENARIO = importlib.util.find_spec("scenario") is not None \
    and importlib.util.find_spec("litellm") is not None

if HAVE_SCENARIO:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["SCENARIO_HEADLESS"] = "true"
    os.environ["SCENARIO_DISABLE_SIMULATION_REPORT_INFO"] = "1"
    for var in ("LANGWATCH_API_KEY", "LANGWATCH_ENDPOINT", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        os.environ.pop(var, None)
    _joblib_dir = tempfile.mkdtemp(prefix="scenario-joblib-")
    os.environ["SCENARIO_CACHE_DIR"] = _joblib_dir
    atexit.register(shutil.rmtree, _joblib_dir, True)


@pytest.fixture(scope="session", autouse=True)
def _local_tracing() -> None:
    """Set scenario's tracing up once, without LangWatch, whichever test runs first (a test
    that sets LANGWATCH_API_KEY must not leave a span exporter behind)."""
    if HAVE_SCENARIO:
        import scenario

        scenario.setup_scenario_tracing()


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[list[str]]:
    """Any connection beyond loopback fails the test, even one scenario or litellm swallows."""
    if not HAVE_SCENARIO:
        yield []
        return
    from dejacache.cassettes.netguard import NetworkGuard

    attempts: list[str] = []

    def explain(where: str) -> str:
        attempts.append(where)
        return "(tests/integrations/langwatch_scenario allow loopback only)"

    with NetworkGuard(explain):
        yield attempts
    assert attempts == [], f"non-loopback connections attempted: {attempts}"


@pytest.fixture
def provider() -> Iterator[Any]:
    from scenario_provider import ScenarioProvider

    server = ScenarioProvider().start()
    yield server
    server.stop()


@pytest.fixture
def scenario_config(provider: Any) -> Iterator[Any]:
    """scenario configured for the loopback provider; its global config reset afterwards."""
    import scenario
    from scenario.config import ModelConfig

    scenario.ScenarioConfig.default_config = None
    scenario.configure(
        default_model=ModelConfig(model="openai/gpt-4o-mini", api_base=provider.base_url,
                                  api_key="sk-scenario-test-key-0123456789"),
        max_turns=4, verbose=False,
    )
    yield scenario
    scenario.ScenarioConfig.default_config = None


@pytest.fixture(autouse=True)
def _uninstall_after() -> Iterator[None]:
    yield
    if HAVE_SCENARIO:
        from dejacache.integrations import scenario as integration

        integration.uninstall()
