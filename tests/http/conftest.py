"""Fixtures for the HTTP layer: a fake provider on loopback and a sequenced in-memory store.

Every test here runs under ``blockbuster`` watching dejacache's own frames: a blocking call
(a file stat or read, a sleep, a socket, a SQLite statement) that dejacache makes on a running
event loop raises ``BlockingError``, as it does in the suites that run under
blockbuster themselves (pydantic-ai's). Code running outside an event loop is not affected.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from blockbuster import BlockBuster
from fake_provider import FakeProvider
from http_support import SeqStore


@pytest.fixture(autouse=True)
def _no_blocking_on_the_event_loop() -> Iterator[None]:
    watch = BlockBuster(scanned_modules=["dejacache"])
    # Not the lock check: it flags acquiring any lock another thread holds at that instant,
    # and dejacache's locks guard microsecond sections that a previous test's background
    # thread (a stream's read-ahead settling its recording) may still be in: a verdict that
    # depends on thread timing, not on blocking I/O.
    for name in ("threading.Lock.acquire", "threading.Lock.acquire_lock"):
        del watch.functions[name]
    watch.activate()
    try:
        yield
    finally:
        watch.deactivate()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    # One event per write, a millisecond apart: as real providers stream.
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
