"""A JSON object repeating a key, told apart (``_core/repeated_keys.py``); the HTTP body and
the WebSocket message tests show it keyed through each."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.repeated_keys import may_repeat, with_pairs

_TREE = st.recursive(st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6),
                     lambda kids: st.lists(kids, max_size=3)
                     | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=8)


@given(st.dictionaries(st.text(max_size=6), _TREE, max_size=4), st.booleans(), st.booleans())
def test_a_text_without_a_repeat_is_never_flagged(tree: object, spaced: bool,
                                                  as_str: bool) -> None:
    text = json.dumps(tree, ensure_ascii=False) if spaced else orjson.dumps(tree).decode()
    raw: str | bytes = text if as_str else text.encode()
    assert not may_repeat(raw, orjson.loads(raw))


def test_a_repeat_is_flagged_and_keeps_its_pairs_in_order() -> None:
    for raw in ('{"a":1,"b":{"c":"x:y","c":2},"a":3}', b'{"a":1,"b":{"c":"x:y","c":2},"a":3}'):
        assert may_repeat(raw, orjson.loads(raw))
        assert with_pairs(raw) == {0: [{"a": 1}, {"b": {0: [{"c": "x:y"}, {"c": 2}]}},
                                       {"a": 3}]}
    hidden = '{"k\\u003a":1}'  # an escaped colon: counted apart, so parsed again
    assert may_repeat(hidden, orjson.loads(hidden)) and with_pairs(hidden) == {"k:": 1}


@given(st.lists(st.tuples(st.sampled_from(["a", "b:", "c"]),
                          st.none() | st.integers(-5, 5) | st.sampled_from(["x", "y:z", "\\u003a"])
                          | st.just([1]) | st.just({"k": "v"})), min_size=1, max_size=4),
       st.booleans())
def test_a_repeat_is_always_flagged_and_a_flag_without_one_keys_alike(
        pairs: list[tuple[str, object]], as_str: bool) -> None:
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"
    raw: str | bytes = text if as_str else text.encode()
    flagged = may_repeat(raw, orjson.loads(raw))
    if len({k for k, _ in pairs}) < len(pairs):
        assert flagged
    elif flagged:  # only a text ``\u003a``, like an escaped colon: parsed again, alike
        assert "\\u003a" in text and with_pairs(raw) == orjson.loads(raw)
