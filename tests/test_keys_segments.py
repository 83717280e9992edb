"""Keying by parts (``dejacache._keys_segments``): growing conversations and None vs NaN.

The reference everywhere is the general canonicaliser alone (``keys._general``), which
rewrites every case and remembers nothing: whatever the memos hold, a key must equal it.
"""

from __future__ import annotations

import collections
import copy
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dejacache import _keys_segments as seg
from dejacache import keys
from dejacache.keys import KeyBuilder

_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow],
                     derandomize=True)
_FILTER = keys._names_for(KeyBuilder(None, "f").volatile)


def _reference(data: dict[str, Any]) -> bytes:
    return keys._secrets.mask_url_queries(keys._general(data, _FILTER, "f"))


def _quick(data: dict[str, Any]) -> bytes:
    return keys._canonical(data, _FILTER, "f", ())


def _fast(data: dict[str, Any]) -> tuple[bytes, bool]:
    return keys.fast_json(data, names=_FILTER)


def _message(i: int, content: Any = "") -> dict[str, Any]:
    if i % 4 == 1:
        return {"role": "assistant", "content": content if content != "" else None,
                "tool_calls": [{"id": f"call_{i}", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}}]}
    return {"role": ("user", "tool", "assistant", "assistant")[i % 4],
            "content": content if content != "" else f"message {i}"}


def _conversation(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"be brief {tag}"}, *(_message(i) for i in range(n))]


# ------------------------------------------------------------------------------ properties

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.floats() | st.text(max_size=6))
_names = st.sampled_from(["role", "content", "name", "traceparent", "password", "x"])
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)
_elements = st.dictionaries(_names, _values, max_size=4) | _values


@_SETTINGS
@given(st.lists(_elements, min_size=0, max_size=12), st.lists(_elements, max_size=4),
       _values)
def test_by_parts_writes_what_the_general_path_writes_as_the_list_grows(
    history: list[Any], new: list[Any], other: Any
) -> None:
    data = {"messages": list(history), "other": other}
    assert _quick(data) == _reference(data)
    assert _quick(data) == _reference(data)  # again, with the memos filled
    grown = {"messages": [*history, *new], "other": other}
    assert _quick(grown) == _reference(grown)
    form, full = _fast(grown)
    if full:
        assert form == _reference(grown)


def _nan_for_none(v: Any) -> Any:
    if v is None:
        return math.nan
    if isinstance(v, dict):
        return {k: _nan_for_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nan_for_none(x) for x in v]
    return v


@_SETTINGS
@given(st.lists(_elements, min_size=1, max_size=12), st.integers(0, 11), st.booleans())
def test_a_nan_where_a_seen_element_held_none_never_shares_its_key(
    history: list[Any], at: int, inf: bool
) -> None:
    """orjson writes NaN as null: the bytes of a seen element come back unchanged with a NaN
    where its None was. The memo must notice (probes), not serve the None form."""
    data = {"messages": history}
    before = _quick(data)
    fast_before = _fast(data)[0]
    i = at % len(history)
    swapped = copy.deepcopy(history)
    swapped[i] = _nan_for_none(swapped[i])
    if inf:
        swapped[i] = _nan_for_none(swapped[i])  # NaN stays NaN; inf comes from the next line
        swapped[i] = swapped[i] if swapped[i] == swapped[i] else math.inf
    other = {"messages": swapped}
    assert _quick(other) == _reference(other)
    if _reference(other) != before:  # it held a None there, so the data differs
        assert _quick(other) != before
        form, _ = _fast(other)
        assert form != before and form != fast_before


# ------------------------------------------------------------------------------ conversations


def test_a_growing_conversation_keys_like_the_general_path_every_turn() -> None:
    msgs = _conversation(0)
    for turn in range(30):
        msgs = [*msgs, _message(2 * turn), _message(2 * turn + 1)]
        data = {"model": "m", "messages": msgs, "tools": [{"type": "function", "name": "f"}]}
        assert _quick(data) == _reference(data)
        assert _fast(data)[0] in (_reference(data), _reference(data).rstrip(b" "))


def test_input_mutated_after_keying_keys_afresh() -> None:
    """An old message changed in place after its turn was keyed: same list object, same
    dict objects, new content. Nothing may be trusted by identity."""
    msgs = _conversation(12)
    data = {"messages": msgs}
    first = _quick(data)
    msgs[3]["content"] = "edited"
    assert _quick(data) == _reference(data) != first
    msgs[2]["content"] = math.nan  # was None (an assistant tool call): same bytes as before
    assert _quick(data) == _reference(data)
    assert b'"\\u0000float"' in _reference(data) or b'\x00float' in _reference(data)
    msgs[2]["content"] = None
    msgs.append(_message(13))
    assert _quick(data) == _reference(data)


def test_nan_in_the_history_is_never_answered_with_the_none_entry() -> None:
    kb = KeyBuilder(lambda **kw: kw, "chat")
    none_msgs = _conversation(20, "n")
    nan_msgs = copy.deepcopy(none_msgs)
    nan_msgs[2]["content"] = math.nan
    for _ in range(2):  # second round: both are remembered
        k_none = kb.key("ns", (), {"messages": none_msgs})
        k_nan = kb.key("ns", (), {"messages": nan_msgs})
        assert k_none != k_nan
        f_none = kb.fast_form(kb.bind((), {"messages": none_msgs}))[0]
        f_nan = kb.fast_form(kb.bind((), {"messages": nan_msgs}))[0]
        assert f_none != f_nan


def test_volatile_and_credential_fields_inside_old_messages_are_still_rewritten() -> None:
    msgs = _conversation(10)
    msgs[4] = {**msgs[4], "traceparent": "00-abc-01", "password": "hunter2"}
    data = {"messages": msgs}
    for _ in range(2):
        out = _quick(data)
        assert out == _reference(data)
        assert b"traceparent" not in out and b"hunter2" not in out


def test_elements_of_other_types_fall_back_to_the_general_path() -> None:
    class Sub(dict):  # type: ignore[type-arg]
        pass

    msgs: list[Any] = _conversation(10)
    msgs[3] = Sub(msgs[3])
    msgs[5] = collections.OrderedDict(msgs[5])
    msgs[6] = ("a", 1, None)
    msgs.append(2**70)  # only the general path can write it
    data = {"messages": msgs}
    assert _quick(data) == _reference(data)


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seg, "MEMO_MAX", 4)
    names = keys._Names(_FILTER.vol)
    for n in range(10):
        data = {"messages": _conversation(8, str(n))}
        assert keys._canonical(data, names, "f", ()) == _reference(data)
        assert len(names.lists.runs) <= 4


def test_appending_more_than_the_tail_window_still_keys_correctly() -> None:
    msgs = _conversation(10)
    assert _quick({"messages": msgs}) == _reference({"messages": msgs})
    grown = [*msgs, *(_message(i) for i in range(seg.TAIL + 5))]
    assert _quick({"messages": grown}) == _reference({"messages": grown})


def test_none_check_probes_every_null_of_a_small_request() -> None:
    """Small requests (no long list) remember where their None are, by their bytes."""
    data = {"a": None, "b": [1, None, {"c": None}], "d": "null"}
    first, full = _fast(data)
    again, full2 = _fast(data)
    assert first == again == _reference(data) and full and not full2
    for path in (("a",), ("b", 1), ("b", 2, "c")):
        other = copy.deepcopy(data)
        node: Any = other
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = math.inf
        form, _ = _fast(other)
        assert form == _reference(other) != first


def test_null_inside_text_only_needs_no_mark() -> None:
    data = {"q": "is it null?"}
    assert _fast(data)[0] == _fast(data)[0] == _reference(data)
    assert not _reference(data).endswith(keys._NONE_MARK)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=3), c,
                                                                         max_size=4),
                    max_leaves=20),
       st.sampled_from([math.nan, math.inf, -math.inf]))
def test_compiled_none_probe_agrees_with_the_walk(data: Any, bad: float) -> None:
    """``NoneCheck.ok`` runs its probes as one generated function: it must
    pass the data it was built from and refuse the same data with any ``None`` turned into
    NaN or an infinity (the same bytes to orjson), and a container swapped for a subclass."""
    data = {"request": data}
    paths = seg.none_paths(data, frozenset({int, bool}))
    assert paths is not None
    check = seg.NoneCheck(paths)
    assert check.ok(data) and check.ok(data)  # the second call runs the compiled probe
    for path in paths:
        if not path:
            continue
        twin = copy.deepcopy(data)
        node = twin
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = bad
        assert not check.ok(twin)
        if type(node) is dict:  # a subclass may answer lookups its own way: refused
            twin = copy.deepcopy(data)
            parent: Any = None
            node = twin
            for step in path[:-1]:
                parent, node = node, node[step]
            if parent is not None:
                parent[path[-2]] = type("D", (dict,), {})(node)
                assert not check.ok(twin)
