"""Fixtures shared by the cassette tests."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from dejacache.cassettes import block
from dejacache.cassettes.store import Cassette


@pytest.fixture
def told() -> Iterator[list[tuple[pathlib.Path, str]]]:
    """What blocks told ``block.DISCARDED`` (the pytest plugin's summary listens there)."""
    seen: list[tuple[pathlib.Path, str]] = []

    def listen(tape: Cassette, note: str) -> None:
        seen.append((tape.path, note))

    block.DISCARDED.append(listen)
    try:
        yield seen
    finally:
        block.DISCARDED.remove(listen)
