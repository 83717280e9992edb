"""What a recording keeps of a message, and what a replay hands back (``ws/_message.py``)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache.ws._message import (
    Message,
    TextBytes,
    canonical_message,
    larger_than,
    message_of,
    onward,
    stored,
)

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                     | st.text(max_size=20) | st.floats(allow_nan=False, allow_infinity=False),
                     lambda kids: st.lists(kids, max_size=4)
                     | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=10)


@given(st.text(max_size=200) | st.binary(max_size=200))
def test_text_and_bytes_come_back_as_they_came(data: str | bytes) -> None:
    m = Message(data)
    kept = orjson.loads(orjson.dumps(stored(m)))  # through the file
    back = message_of(kept)
    if "json" in kept:
        assert orjson.loads(back.data) == orjson.loads(data)
        assert back.binary == m.binary
    else:
        assert back == m


@given(st.binary(max_size=200))
def test_text_that_is_not_utf8_comes_back_as_text_of_those_bytes(data: bytes) -> None:
    m = TextBytes(b"{\xff" + data)
    kept = orjson.loads(orjson.dumps(stored(m)))
    assert list(kept) == ["text_bytes"]
    back = message_of(kept)
    assert type(back) is TextBytes and back == m and not back.binary


@given(st.dictionaries(st.text(max_size=8), _JSON, max_size=5) | st.lists(_JSON, max_size=5),
       st.booleans(), st.booleans())
def test_json_comes_back_as_equal_json_however_it_was_written(
        tree: object, spaced: bool, binary: bool) -> None:
    text = json.dumps(tree) if spaced else orjson.dumps(tree).decode()
    m = Message(text.encode() if binary else text)
    kept = orjson.loads(orjson.dumps(stored(m), option=orjson.OPT_SORT_KEYS))
    back = message_of(kept)
    assert back.binary == binary
    assert orjson.loads(back.data) == orjson.loads(text)
    # and it keys alike, spaced or not
    assert canonical_message(m) == canonical_message(Message(orjson.dumps(tree).decode()
                                                             if not binary
                                                             else orjson.dumps(tree)))


def test_the_stored_forms_read_well() -> None:
    assert stored(Message('{"type": "x"}')) == {"json": {"type": "x"}}
    assert stored(Message(b'{"a":1}')) == {"json": {"a": 1}, "binary": True}
    assert stored(Message("plain")) == {"text": "plain"}
    assert stored(Message(b"\x00\x01")) == {"bytes": "AAE="}
    assert stored(Message('{"not json')) == {"text": '{"not json'}


@pytest.mark.parametrize(("heard", "sent"), [
    (1005, 1001), (1006, 1001), (1015, 1001),  # report an end: no close frame may carry them
    (1000, 1000), (1001, 1001), (1009, 1009), (1011, 1011), (4001, 4001)])
def test_a_close_passed_on_carries_a_code_a_close_frame_may(heard: int, sent: int) -> None:
    assert onward(heard) == sent


@pytest.mark.parametrize(("data", "limit", "over"), [
    ("a" * 10, 10, False), ("a" * 11, 10, True), (b"x" * 10, 10, False), (b"x" * 11, 10, True),
    ("\u00e9" * 5, 10, False), ("\u00e9" * 6, 10, True),  # 2 bytes each in UTF-8
    ("\U0001f600" * 3, 12, False), ("\U0001f600" * 3, 11, True),  # 4 bytes each
    ("", 0, False), ("a", 0, True),
])
def test_a_message_is_over_a_bound_by_its_bytes_on_the_wire(data: str | bytes, limit: int,
                                                             over: bool) -> None:
    assert larger_than(Message(data), limit) is over


@pytest.mark.parametrize("binary", [False, True])
def test_an_object_repeating_a_key_keys_apart_and_is_kept_as_sent(binary: bool) -> None:
    def m(text: str) -> Message:
        return Message(text.encode() if binary else text)

    repeated = m('{"op":"buy","n":[{"a":1,"a":2}],"op":"sell"}')
    assert canonical_message(repeated) != canonical_message(m('{"op":"sell","n":[{"a":2}]}'))
    assert canonical_message(repeated) == canonical_message(
        m('{"op": "buy", "n": [{"a": 1, "a": 2}], "op": "sell"}'))  # spacing still not
    assert canonical_message(m('{"t":"a:b\\u003a"}')) == canonical_message(m('{"t":"a:b:"}'))
    kept = orjson.loads(orjson.dumps(stored(repeated)))
    assert "json" not in kept and message_of(kept) == repeated
