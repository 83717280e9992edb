"""The agent-framework environments (``.venv-fw3`` and ``.venv-fw2``, ``make test-frameworks``).

The frameworks cannot share ``.venv`` (several pin openai 2.x, others need 3.x): each test
module skips where its framework is not installed, so the main suite collects them all and
runs none. Set before any framework is imported: telemetry and tracing off (crewai, agno,
openai-agents, langsmith, llama-index, dspy's disk cache, litellm's price table read from its
bundled copy), Hugging Face offline, no provider keys. Every test fails if anything connects
beyond loopback, even a connection a framework swallows.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

# The loopback provider shared with the HTTP tests, and the MCP tests' ticket-desk server.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "http"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "mcp_support"))

_home = tempfile.mkdtemp(prefix="dejacache-fw-")
atexit.register(shutil.rmtree, _home, True)
os.environ.update({
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_STORAGE_DIR": os.path.join(_home, "crewai"),
    "OTEL_SDK_DISABLED": "true",
    "AGNO_TELEMETRY": "false",
    "AGNO_MONITOR": "false",
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
    "DSPY_CACHEDIR": os.path.join(_home, "dspy"),
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TIKTOKEN_CACHE_DIR": os.path.join(_home, "tiktoken"),
    "LLAMA_INDEX_CACHE_DIR": os.path.join(_home, "llama_index"),
    "ANONYMIZED_TELEMETRY": "False",
    "HOME": _home,
})
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_KEY",
             "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "AGNO_API_KEY", "HF_TOKEN"):
    os.environ.pop(_var, None)

KEY = "sk-framework-test-0123456789"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``way``: each way the test class's framework runs an agent (plain, streamed, async)."""
    if "way" in metafunc.fixturenames and metafunc.cls is not None:
        metafunc.parametrize("way", list(metafunc.cls.adapter.ways))


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[list[str]]:
    from dejacache.cassettes.netguard import NetworkGuard

    attempts: list[str] = []

    def explain(where: str) -> str:
        attempts.append(where)
        return "(tests/integrations/frameworks allow loopback only)"

    with NetworkGuard(explain):
        yield attempts
    assert attempts == [], f"non-loopback connections attempted: {attempts}"


@pytest.fixture
def provider() -> Iterator[Any]:
    from fw_provider import FrameworkProvider

    server = FrameworkProvider().start()
    yield server
    server.stop()
