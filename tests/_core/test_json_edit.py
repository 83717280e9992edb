"""Members spliced into a JSON document's bytes: every other byte as it was."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.json_edit import Path, insert


def _objects(value: Any, path: Path = ()) -> list[Path]:
    out: list[Path] = []
    if isinstance(value, dict):
        out.append(path)
        for k, v in value.items():
            out += _objects(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _objects(v, (*path, i))
    return out


def _set(value: Any, path: Path, name: str, member: Any) -> None:
    for step in path:
        value = value[step]
    value[name] = member


def test_inserts_at_the_end_of_each_named_object_and_nowhere_else() -> None:
    doc = {"system": [{"type": "text", "text": 'braces } { and "quotes" \\ inside'}],
           "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {}]}],
           "n": [1, 2.5, True, None]}
    raw = json.dumps(doc, indent=1).encode()  # the SDK's own spacing, kept
    out = insert(raw, [((), "cache_control", {"type": "ephemeral"}),
                       (("system", 0), "cache_control", {"type": "ephemeral", "ttl": "1h"}),
                       (("messages", 0, "content", 1), "a", 1),
                       (("messages", 0, "content", 1), "b", [2]),
                       (("nowhere", 3), "never_added", 1)])
    assert out.startswith(raw[:raw.index(b'inside"') + 7])
    got = orjson.loads(out)
    assert got["cache_control"] == {"type": "ephemeral"}
    assert got["system"][0] == {**doc["system"][0],  # type: ignore[dict-item]
                                "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    assert got["messages"][0]["content"][1] == {"a": 1, "b": [2]}  # an empty object: no comma
    assert b"never_added" not in out
    # Nothing else moved: the document less the inserted members is the original text.
    for member in (b',"cache_control":{"type":"ephemeral"}',
                   b',"cache_control":{"type":"ephemeral","ttl":"1h"}', b'"a":1,"b":[2]'):
        out = out.replace(member, b"", 1)
    assert out == raw


def test_no_edit_is_the_same_bytes() -> None:
    raw = b'{"a": 1}'
    assert insert(raw, []) is raw
    assert insert(raw, [(("b",), "x", 1)]) == raw


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(
        blacklist_categories=("Cs",)), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=5), inner, max_size=3),
    max_leaves=12)


@given(doc=st.dictionaries(st.text(max_size=5), _JSON, max_size=4), pick=st.integers(0, 50),
       indent=st.sampled_from([None, 2]), ascii_only=st.booleans())
def test_inserting_equals_setting_the_member_on_the_parsed_value(
        doc: dict[str, Any], pick: int, indent: int | None, ascii_only: bool) -> None:
    raw = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    paths = _objects(doc)
    path = paths[pick % len(paths)]
    out = insert(raw, [(path, "\x00added", {"k": [1]})])
    expected = json.loads(raw)
    _set(expected, path, "\x00added", {"k": [1]})
    assert json.loads(out) == expected


@given(doc=st.dictionaries(st.text(max_size=5), _JSON, min_size=1, max_size=4),
       pick=st.integers(0, 50), member=st.integers(0, 5),
       indent=st.sampled_from([None, 2]), ascii_only=st.booleans())
def test_deleting_equals_removing_the_member_from_the_parsed_value(
        doc: dict[str, Any], pick: int, member: int, indent: int | None,
        ascii_only: bool) -> None:
    from dejacache._core.json_edit import DELETE

    raw = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    paths = [p for p in _objects(doc) if _get(doc, p)]
    path = paths[pick % len(paths)]
    names = list(_get(doc, path))
    name = names[member % len(names)]
    out = insert(raw, [(path, name, DELETE), (path, "\x00added", 1)])
    expected = json.loads(raw)
    del _get(expected, path)[name]
    _set(expected, path, "\x00added", 1)
    assert json.loads(out) == expected
    # Nothing but the member and one comma went: the rest of the text is in order.
    assert len(insert(raw, [(path, name, DELETE)])) < len(raw)


def _get(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def test_an_added_member_replaces_one_of_its_name() -> None:
    # An SDK that writes "cache_control": null: the marker added must not be a second
    # member of that name (parsers disagree on which one counts).
    raw = b'{"system": [{"type": "text", "text": "rules", "cache_control": null}], "k": ""}'
    out = insert(raw, [(("system", 0), "cache_control", {"type": "ephemeral"}),
                       ((), "k", "dejacache-1")])
    assert out.count(b'"cache_control"') == 1 and out.count(b'"k"') == 1
    assert orjson.loads(out) == {"system": [{"type": "text", "text": "rules", "cache_control": {
        "type": "ephemeral"}}], "k": "dejacache-1"}
    assert out == (b'{"system": [{"type": "text", "text": "rules","cache_control":'
                   b'{"type":"ephemeral"}}],"k":"dejacache-1"}')
