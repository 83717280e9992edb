"""Where two recordings of one call differ (``_learn/diffs.py``)."""

from __future__ import annotations

import pytest

from dejacache._learn.diffs import (
    CREDENTIAL,
    FIELD,
    SPAN,
    STRUCTURE,
    TEXT,
    differences,
    generalised,
    path_text,
)
from dejacache._learn.rules import CallRef, Observed, propose


def _kinds(a: object, b: object) -> dict[str, str]:
    return {d.where: d.kind for d in differences(a, b)}


def test_each_kind_of_difference() -> None:
    a = {"body": {"messages": [{"content": "at 2026-01-01T00:00:01Z about Paris"},
                               {"content": "Tell me about Paris"}],
                  "metadata": {"run": "3fa9c2d1e0b41234"}, "seed": 1, "tools": [1, 2],
                  "api_key": "<secret:aa>", "only_a": 1},
         "identity": ["auth@openai#1"]}
    b = {"body": {"messages": [{"content": "at 2026-01-01T00:00:09Z about Paris"},
                               {"content": "Tell me about Rome"}],
                  "metadata": {"run": "77b0e1aa42c9ff00"}, "seed": 2, "tools": [1],
                  "api_key": "<secret:bb>"},
         "identity": ["auth@openai#2"]}
    assert _kinds(a, b) == {
        "body.messages[0].content": SPAN, "body.messages[1].content": TEXT,
        "body.metadata.run": FIELD, "body.seed": FIELD, "body.tools": STRUCTURE,
        "body.api_key": CREDENTIAL, "body.only_a": STRUCTURE, "identity[0]": CREDENTIAL}


def test_a_whole_value_of_one_shape_is_a_field_with_that_shape() -> None:
    (d,) = differences({"at": "2026-01-01T00:00:01"}, {"at": "2026-01-02T10:00:01"})
    assert d.kind == FIELD and d.shape is not None and d.shape.name == "timestamp"
    (e,) = differences({"ts": 1796185683.07}, {"ts": 1796185742.95})
    assert e.kind == FIELD and e.shape is not None and e.shape.name == "epoch"
    (n,) = differences({"n": 3}, {"n": 4})
    assert n.kind == FIELD and n.shape is None


def test_paths_are_written_as_rules_take_them() -> None:
    p = ("body", "messages", 3, "content")
    assert path_text(p) == "body.messages[3].content"
    assert path_text(generalised(p)) == "body.messages[*].content"


def test_a_list_in_another_order_is_one_order_difference_never_volatile() -> None:
    # Item by item, each tag differs "in every call": `body.tags[*]` was learned, and every
    # search keyed alike whatever its tags.
    a = {"body": {"tags": ["red", "blue", {"k": 1}], "q": "shoes"}}
    b = {"body": {"tags": [{"k": 1}, "red", "blue"], "q": "shoes"}}
    (d,) = differences(a, b)
    assert (d.kind, d.where) == ("order", "body.tags")
    assert propose([Observed(CallRef("c", 0, "s"), "tool", a, b, [d])], lambda r: None
                   ).texts == []
    (d,) = differences({"t": ["red", "blue"]}, {"t": ["red", "green"]})
    assert (d.kind, d.where) == ("field", "t[1]")  # other items: compared one by one


KEY_MASK = "<secret:" + "ab" * 64 + ">"
OTHER_MASK = "<secret:" + "cd" * 64 + ">"


@pytest.mark.parametrize(("a", "b", "kind"), [
    # The credential reads alike: what differs beside it is what it is.
    ("<REDACTED> at 2026-01-01T10:00:00Z", "<REDACTED> at 2026-01-02T11:30:00Z", SPAN),
    (f"{KEY_MASK} at 2026-01-01T10:00:00Z", f"{KEY_MASK} at 2026-01-02T11:30:00Z", SPAN),
    ("<REDACTED> about Paris", "<REDACTED> about Rome", TEXT),
    # The credential differs, or the difference touches it: a credential's.
    (f"{KEY_MASK} at 2026-01-01T10:00:00Z", f"{OTHER_MASK} at 2026-01-02T11:30:00Z",
     CREDENTIAL),
    ("<REDACTED> at 2026-01-01T10:00:00Z", "2026-01-02T11:30:00Z", CREDENTIAL),
    # A weak shape is written with the text beside it: a placeholder a live key never holds.
    ("<REDACTED>=3fa9c2d1e0b41234", "<REDACTED>=77b0e1aa42c9ff00", CREDENTIAL),
])
def test_a_string_holding_a_credential_differs_by_what_differs_beside_it(
    a: str, b: str, kind: str,
) -> None:
    assert _kinds({"note": a}, {"note": b}) == {"note": kind}
    assert _kinds({"api_key": a}, {"api_key": b}) == {"api_key": CREDENTIAL}  # by its name
