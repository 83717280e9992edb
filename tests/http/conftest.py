"""Fixtures for the HTTP layer: a fake provider on loopback and a sequenced in-memory store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_provider import FakeProvider
from http_support import SeqStore


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider().start()
    yield server
    server.stop()


@pytest.fixture
def seq_store() -> SeqStore:
    return SeqStore()
