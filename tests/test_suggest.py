"""The closest valid name to a typo (src/dejacache/_suggest.py), shared by every message
that names one: marker arguments, live= patterns, invalidated resources."""

from __future__ import annotations

import pytest

from dejacache._suggest import closest, did_you_mean


@pytest.mark.parametrize(("typo", "choices", "meant"), [
    ("cassete", ["cassette", "mode", "strict"], "cassette"),
    ("strcit", ["cassette", "strict", "shared"], "strict"),
    ("models", ["model", "tool", "function", "http"], "model"),
    ("cartz", ["cart", "orders"], "cart"),
    ("Cart", ["cart", "orders"], "cart"),
    ("xyz", ["cart", "orders"], None),
    ("cart", ["cart"], None),  # the name itself is no suggestion
    ("cart", [], None),
])
def test_the_closest_choice_or_none(typo: str, choices: list[str], meant: str | None) -> None:
    assert closest(typo, choices) == meant


def test_did_you_mean_reads_as_a_clause() -> None:
    assert did_you_mean("strcit", ["strict"]) == "; did you mean 'strict'?"
    assert did_you_mean("models", ["model"], "the kind") == "; did you mean the kind 'model'?"
    assert did_you_mean("xyz", ["strict"]) == ""
