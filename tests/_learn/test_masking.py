"""Recorded requests as new rules key them (``_learn/masking.py``)."""

from __future__ import annotations

from dejacache._learn.masking import Rules, masked


def test_http_paths_are_rooted_at_the_request_and_identity_is_never_touched() -> None:
    req = {"method": "POST", "path": "/v1/chat", "body": {"run": "3fa9c2d1", "q": "x"},
           "identity": ["auth@openai#3fa9c2d1"]}
    rules = Rules(["run", "body.run", r"re:3fa9c2d1"])
    out = masked(req, "http", rules)
    assert out == {"method": "POST", "path": "/v1/chat", "body": {"q": "x"},
                   "identity": ["auth@openai#3fa9c2d1"]}
    assert masked(req, "http", Rules(["re:3fa9c2d1"]))["identity"] == req["identity"]


def test_function_arguments_take_paths_as_written() -> None:
    req = {"plan": {"at": "2026-01-01", "city": "Paris"}}
    assert masked(req, "tool", Rules(["plan.at"])) == {"plan": {"city": "Paris"}}


def test_placeholders_already_there_stay_as_they_are() -> None:
    # Applying a pattern to a string escapes a literal <volatile>; a recording made under
    # the old rules must keep the placeholders those rules wrote.
    req = {"body": {"q": "at <volatile> with nonce=ab12cd34"}, "method": "POST"}
    out = masked(req, "http", Rules([r"re:(?<=nonce=)[0-9a-f]{8}"]))
    assert out["body"]["q"] == "at <volatile> with nonce=<volatile>"


def test_no_rules_no_copy() -> None:
    req = {"a": 1}
    assert masked(req, "http", Rules([])) is req
