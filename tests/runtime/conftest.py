"""Runtime tests start with no counters and no generation state from other tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dejacache.runtime import generations, metrics


@pytest.fixture(autouse=True)
def _fresh_runtime() -> Iterator[None]:
    generations.reset()
    metrics.reset_runtime_stats()
    yield
    generations.reset()
