"""The hermes-agent test environment (``.venv-hermes``, ``make test-hermes``).

hermes-agent 0.19 pins openai 2.x and cannot share ``.venv`` (openai 3.x); in the main venv
every test here skips. Set before hermes is imported: ``HERMES_DISABLE_LAZY_INSTALLS`` (else
building an ``AIAgent`` tries to pip-install a TTS package), a throwaway ``HERMES_HOME``, and
no provider keys. Agents use provider ``custom`` pointed at the loopback fake provider
(``openrouter`` would fetch a model list from the internet), with memory and context files
skipped. Every test fails if anything connects beyond loopback.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

HAVE_HERMES = importlib.util.find_spec("run_agent") is not None

# The loopback provider shared with the HTTP tests.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "http"))

if HAVE_HERMES:
    os.environ["HERMES_DISABLE_LAZY_INSTALLS"] = "1"
    _home = tempfile.mkdtemp(prefix="hermes-home-")
    os.environ["HERMES_HOME"] = _home
    atexit.register(shutil.rmtree, _home, True)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY",
                "NOUS_API_KEY", "HERMES_MODEL"):
        os.environ.pop(var, None)

# What decides whether a session's agent can be reused: the gateway's own signature inputs
# (model, provider, base_url, api_mode, api key, toolsets, ephemeral prompt, user ids) plus
# the constructor-only options. Everything else (reasoning config, callbacks) is per message.
SIGNATURE = ("model", "provider", "base_url", "api_key", "api_mode", "enabled_toolsets",
             "ephemeral_system_prompt", "user_id", "user_id_alt", "session_id", "platform",
             "max_iterations", "quiet_mode", "skip_context_files", "skip_memory")


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[list[str]]:
    if not HAVE_HERMES:
        yield []
        return
    from dejacache.cassettes.netguard import NetworkGuard

    attempts: list[str] = []

    def explain(where: str) -> str:
        attempts.append(where)
        return "(tests/integrations/hermes allow loopback only)"

    with NetworkGuard(explain):
        yield attempts
    assert attempts == [], f"non-loopback connections attempted: {attempts}"


@pytest.fixture(scope="module")
def fake() -> Iterator[Any]:
    from fake_provider import FakeProvider

    server = FakeProvider().start()
    yield server
    server.stop()


@pytest.fixture
def config(fake: Any) -> dict[str, Any]:
    """One gateway message's agent config, as the pool receives it."""
    return {
        "model": "test-model", "provider": "custom", "base_url": fake.openai_url,
        "api_key": "sk-hermes-test-0123456789", "api_mode": "chat_completions",
        "enabled_toolsets": [], "ephemeral_system_prompt": "You answer briefly.",
        "platform": "telegram", "max_iterations": 3, "quiet_mode": True,
        "skip_context_files": True, "skip_memory": True,
    }
