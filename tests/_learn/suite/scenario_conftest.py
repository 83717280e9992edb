"""conftest.py of the langwatch-scenario run ``dejacache learn`` is measured on (copied into
a temporary project; runs in .venv-scenario). As tests/integrations/langwatch_scenario sets
it up: litellm's price table from its bundled copy, scenario's cache in a temporary
directory, LangWatch reporting off, the loopback provider playing every part. The run is
recorded by the test's own cassette, not by dejacache.integrations.scenario, so the judge's
prompt keeps its OpenTelemetry trace digest (timestamps, span ids, durations) as it is.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["SCENARIO_HEADLESS"] = "true"
os.environ["SCENARIO_DISABLE_SIMULATION_REPORT_INFO"] = "1"
for var in ("LANGWATCH_API_KEY", "LANGWATCH_ENDPOINT", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
    os.environ.pop(var, None)
os.environ["SCENARIO_CACHE_DIR"] = tempfile.mkdtemp(prefix="scenario-joblib-")


@pytest.fixture(scope="session", autouse=True)
def _local_tracing() -> None:
    import scenario

    scenario.setup_scenario_tracing()


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    from dejacache.cassettes.netguard import NetworkGuard

    attempts: list[str] = []

    def explain(where: str) -> str:
        attempts.append(where)
        return "(the measured scenario run allows loopback only)"

    with NetworkGuard(explain):
        yield
    assert attempts == [], f"non-loopback connections attempted: {attempts}"


@pytest.fixture(scope="session")
def provider() -> Iterator[Any]:
    from scenario_provider import ScenarioProvider

    server = ScenarioProvider().start()
    yield server
    server.stop()


@pytest.fixture
def scenario_config(provider: Any) -> Iterator[Any]:
    import scenario
    from scenario.config import ModelConfig

    scenario.ScenarioConfig.default_config = None
    scenario.configure(
        default_model=ModelConfig(model="openai/gpt-4o-mini", api_base=provider.base_url,
                                  api_key="sk-scenario-test-key-0123456789"),
        max_turns=4, verbose=False)
    yield scenario
    scenario.ScenarioConfig.default_config = None
