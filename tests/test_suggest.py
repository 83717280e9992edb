"""The closest valid name to a misspelt one (``_suggest.py``)."""

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
