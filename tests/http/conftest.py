"""Fixtures for the HTTP layer: a fake provider on loopback and a sequenced in-memory store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider import FakeProvider
from http_support import SeqStore


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    # One event per write, a millisecond apart: as real providers stream (issue 8).
    server = FakeProvider(chunk_delay=0.001).start()
    yield server
    server.stop()


@pytest.fixture
def seq_store() -> SeqStore:
    return SeqStore()


@pytest.fixture
def aiohttp_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Counts requests sent through litellm's aiohttp transport (patched under dejacache)."""
    from litellm_cases import import_litellm

    import_litellm()
    from litellm.llms.custom_httpx import aiohttp_transport

    cls = aiohttp_transport.LiteLLMAiohttpTransport
    seen: list[str] = []
    orig = cls.__dict__["handle_async_request"]

    async def spy(self: Any, request: Any) -> Any:
        seen.append(str(request.url))
        return await orig(self, request)

    monkeypatch.setattr(cls, "handle_async_request", spy)
    yield seen
