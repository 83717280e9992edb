"""The loopback fakes of Bedrock, Gemini and the Mistral / Groq / Cohere / Ollama chat APIs,
started per test like ``FakeProvider``: one event per write, a millisecond apart.

The tests in this directory drive each fake with its provider's real SDK and no dejacache at
all: they are what makes the fakes trustworthy stand-ins for the providers in the record and
replay tests, so a fake that drifts from what its SDK parses fails here first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_bedrock import FakeBedrock
from fake_chat_apis import FakeChatAPIs
from fake_gemini import FakeGemini


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    server = FakeBedrock(chunk_delay=0.001).start()
    yield server
    server.stop()


@pytest.fixture
def gemini() -> Iterator[FakeGemini]:
    server = FakeGemini(chunk_delay=0.001).start()
    yield server
    server.stop()


@pytest.fixture
def chat_apis() -> Iterator[FakeChatAPIs]:
    server = FakeChatAPIs(chunk_delay=0.001).start()
    yield server
    server.stop()

