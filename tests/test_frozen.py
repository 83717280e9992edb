"""Read-only results (``@cache(frozen=True)``): what callers can and cannot do with them."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dejacache
from dejacache._frozen import FrozenDict, FrozenList, freeze, thaw
from dejacache.codec import JsonCodec

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=20,
)


def _containers(v: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(v, dict):
        out.append(v)
        for x in v.values():
            out += _containers(x)
    elif isinstance(v, list):
        out.append(v)
        for x in v:
            out += _containers(x)
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_json)
def test_a_frozen_value_reads_compares_and_serialises_as_the_plain_one(value: Any) -> None:
    frozen = freeze(value)
    assert frozen == value
    assert orjson.dumps(frozen) == orjson.dumps(value)
    assert json.dumps(frozen) == json.dumps(value)
    for c in _containers(frozen):  # every level, not just the top
        assert type(c) in (FrozenDict, FrozenList)
    plain = thaw(frozen)
    assert plain == value
    assert all(type(c) in (dict, list) for c in _containers(plain))
    assert copy.deepcopy(frozen) == value
    assert all(type(c) in (dict, list) for c in _containers(copy.deepcopy(frozen)))
    assert pickle.loads(pickle.dumps(frozen)) == value


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json)
def test_frozen_values_key_and_encode_exactly_as_plain_ones(value: Any) -> None:
    """A frozen result passed on to another cached call, or returned by one, is the data it
    reads as: the same key, the same stored bytes."""
    frozen = freeze(value)
    assert dejacache.call_key("ns", "f", (frozen,)) == dejacache.call_key("ns", "f", (value,))
    codec = JsonCodec()
    assert codec.encode(frozen, key="k") == codec.encode(value, key="k")


_DICT_CHANGES: list[Callable[[Any], Any]] = [
    lambda d: d.__setitem__("x", 1),
    lambda d: d.__delitem__("a"),
    lambda d: d.update(x=1),
    lambda d: d.setdefault("x", 1),
    lambda d: d.pop("a"),
    lambda d: d.popitem(),
    lambda d: d.clear(),
    lambda d: d.__ior__({"x": 1}),
    lambda d: d.__init__(x=1),
]
_LIST_CHANGES: list[Callable[[Any], Any]] = [
    lambda s: s.__setitem__(0, 1),
    lambda s: s.__delitem__(0),
    lambda s: s.append(1),
    lambda s: s.extend([1]),
    lambda s: s.insert(0, 1),
    lambda s: s.pop(),
    lambda s: s.remove(1),
    lambda s: s.clear(),
    lambda s: s.sort(),
    lambda s: s.reverse(),
    lambda s: s.__iadd__([1]),
    lambda s: s.__imul__(2),
    lambda s: s.__init__([9]),
]


@pytest.mark.parametrize("change", _DICT_CHANGES + _LIST_CHANGES)
def test_every_change_in_place_is_refused_and_changes_nothing(
    change: Callable[[Any], Any],
) -> None:
    value = freeze({"a": [1, 2, {"b": 3}]})
    target = value if change in _DICT_CHANGES else value["a"]
    with pytest.raises(dejacache.ReadOnlyResult, match=r"frozen=True.*copy\.deepcopy"):
        change(target)
    assert value == {"a": [1, 2, {"b": 3}]}


def test_read_only_result_is_a_type_error_in_the_one_tree() -> None:
    assert issubclass(dejacache.ReadOnlyResult, TypeError)
    assert issubclass(dejacache.ReadOnlyResult, dejacache.DejacacheError)


def test_copies_are_the_callers_own() -> None:
    value = freeze({"a": [1], "t": ([2], 3)})
    shallow = copy.copy(value)
    assert type(shallow) is dict and shallow == value
    shallow["new"] = 1  # the top level is the caller's own
    deep = copy.deepcopy(value)
    deep["a"].append(2)
    assert value == {"a": [1], "t": ([2], 3)}
    assert type(value["t"]) is tuple and type(value["t"][0]) is FrozenList
    merged = value | {"b": 2}
    assert type(merged) is dict and merged["b"] == 2
    assert type(value["a"] + [5]) is list and type(value["a"][:]) is list


def test_other_objects_are_left_as_they_are() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box = Box()
    assert freeze(box) is box
    assert freeze("text") == "text"
    already = freeze({"a": 1})
    assert freeze(already) is already
