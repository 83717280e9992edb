"""The real Node SDKs through ``dejacache proxy``: openai-node (chat, streaming, tools,
Responses), ``@anthropic-ai/sdk`` (messages, streaming) and the Vercel AI SDK
(``generateText``, ``streamText``), each recorded against the loopback provider and replayed
with it stopped: no connection reaches its port, every answer is the recorded one, and no
file holds the API keys. A miss is the SDK's own API error, carrying the miss report."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_provider import FakeProvider
from proxy_support import NODE_KEYS, clients, files_text

from dejacache.proxying.handle import ProxySession
from provider_support import DropListener

SCENARIOS = ("openai-chat", "openai-stream", "openai-tools", "openai-responses",
             "anthropic-messages", "anthropic-stream", "ai-generate", "ai-stream")
# Calls each scenario makes (openai-tools: two turns; openai-responses: one plus a stream).
CALLS = 10

Open = Callable[..., ProxySession]


@pytest.fixture
def stopped(fake: FakeProvider) -> Iterator[DropListener]:
    """The provider stopped, its port held by a listener that counts connections."""
    port = fake.port
    fake.stop()
    listener = DropListener(port)
    yield listener
    listener.close()


def _record(session_for: Open, fake: FakeProvider, name: str, *scenarios: str
            ) -> dict[str, Any]:
    s = session_for(name, fake)
    got = clients(s.url, *scenarios)
    assert not [k for k, v in got.items() if isinstance(v, dict) and "error" in v], got
    summary = s.close(ok=True)
    assert summary["saved"] and summary["missed"] == 0, summary
    return got


def test_each_sdk_records_then_replays_with_the_provider_stopped(
        session_for: Open, fake: FakeProvider, proxy_dir: pathlib.Path,
        request: pytest.FixtureRequest) -> None:
    recorded = _record(session_for, fake, "sdks", *SCENARIOS)
    assert fake.count() == CALLS
    stopped: DropListener = request.getfixturevalue("stopped")

    s = session_for("sdks", fake, mode="replay")
    replayed = clients(s.url, *SCENARIOS)
    summary = s.close(ok=True)

    assert replayed == recorded
    assert stopped.count == 0
    assert (summary["replayed"], summary["recorded"], summary["missed"]) == (CALLS, 0, 0)
    assert not summary["saved"]  # every call hit: the file is not even rewritten
    for path, text in files_text(proxy_dir):
        for key in NODE_KEYS:
            assert key not in text, f"{key} in {path}"


def test_fifty_concurrent_streams_each_replay_their_own_answer(
        session_for: Open, fake: FakeProvider, request: pytest.FixtureRequest) -> None:
    recorded = _record(session_for, fake, "fifty", "concurrent-streams")["concurrent-streams"]
    assert len(set(recorded)) == 50  # fresh text per call: a mix-up would show
    stopped: DropListener = request.getfixturevalue("stopped")

    s = session_for("fifty", fake, mode="replay")
    replayed = clients(s.url, "concurrent-streams")["concurrent-streams"]
    summary = s.close(ok=True)

    assert replayed == recorded
    assert stopped.count == 0
    assert summary["replayed"] == 50


def test_a_miss_is_the_sdks_own_api_error_naming_the_miss(
        session_for: Open, fake: FakeProvider) -> None:
    scenarios = ("openai-chat", "anthropic-messages", "ai-generate")
    _record(session_for, fake, "miss", *scenarios)
    hint = "npx vitest run agent.test.ts  (DEJACACHE_MODE=record)"
    s = session_for("miss", fake, mode="replay", rerecord=hint)
    got = clients(s.url, *scenarios, suffix=" again")
    summary = s.close(ok=True, expect_misses=True)  # the misses are what it looks at

    expected_class = {"openai-chat": "NotFoundError", "anthropic-messages": "NotFoundError",
                      "ai-generate": "APICallError"}
    for name, want in expected_class.items():
        err = got[name]["error"]
        assert (err["name"], err["status"]) == (want, 404), err
        message = err["message"]
        assert "ReplayMiss: dejacache replay miss" in message, message
        assert "messages[0].content" in message or "body.prompt" in message, message
        assert "again" in message and hint in message, message
    assert summary["missed"] == 3 and len(summary["misses"]) == 3
    assert fake.count() == 3  # the recording run's; the replay sent nothing
