"""The closest valid name to a misspelt one (``_suggest.py``), shared by every message
that names one: settings keys, marker arguments, live= patterns, invalidated resources."""

from __future__ import annotations

import pytest

from dejacache._suggest import closest, did_you_mean

KEYS = ["volatile", "mode", "cassette_dir", "max_age", "on_expiry", "live", "allow_hosts",
        "prices"]


@pytest.mark.parametrize(("typo", "meant"), [
    ("volatil", "volatile"), ("Volatile", "volatile"), ("cassette-dir", "cassette_dir"),
    ("maxage", "max_age"), ("allowed_hosts", "allow_hosts"), ("price", "prices"),
    ("modes", "mode"), ("expiry", "on_expiry"),
])
def test_a_misspelling_names_the_key_meant(typo: str, meant: str) -> None:
    assert closest(typo, KEYS) == meant
    assert did_you_mean(typo, KEYS) == f"; did you mean {meant!r}?"


def test_nothing_close_names_nothing() -> None:
    assert closest("colour", KEYS) is None
    assert did_you_mean("colour", KEYS) == ""
    assert closest("x", []) is None


def test_the_suggestion_may_say_what_the_name_is() -> None:
    assert did_you_mean("volatil", ["volatile"], "the key") == "; did you mean the key 'volatile'?"
    assert did_you_mean("xyz", ["volatile"], "the key") == ""


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
