"""Counts as users read them: the noun agrees with the number (``_core/counts.py``)."""

from __future__ import annotations

import pytest

from dejacache._core.counts import counted


@pytest.mark.parametrize(("n", "noun", "many", "said"), [
    (0, "call", "", "0 calls"), (1, "call", "", "1 call"), (2, "call", "", "2 calls"),
    (1, "cassette use", "", "1 cassette use"), (3, "cassette use", "", "3 cassette uses"),
    (1, "entry", "entries", "1 entry"), (0, "entry", "entries", "0 entries"),
    (12, "entry", "entries", "12 entries")])
def test_the_noun_agrees_with_the_number(n: int, noun: str, many: str, said: str) -> None:
    assert counted(n, noun, many) == said
