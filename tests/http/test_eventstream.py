"""The AWS eventstream codec: frames the Bedrock fake sends (and botocore parses), decoded and
framed again byte for byte, in any chunking; damage and oversized lengths refused."""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dejacache.codec import JsonCodec
from dejacache.errors import SerializationError
from dejacache.http import eventstream as es
from dejacache.http.eventstream import Decoder, EventStreamSplitter, Int, Message
from dejacache.http.sse import event_bytes, is_stream, replay_sync, splitter_for
from provider_support import eventstream_message

botocore_eventstream = pytest.importorskip("botocore.eventstream")

_SETTINGS = settings(deadline=None, derandomize=True, max_examples=100,
                     suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- strategies

_INT_RANGES = {"byte": 7, "short": 15, "integer": 31, "long": 63, "timestamp": 63}


@st.composite
def _int_header(draw: st.DrawFn) -> Int:
    kind = draw(st.sampled_from(sorted(_INT_RANGES)))
    bits = _INT_RANGES[kind]
    return Int(kind, draw(st.integers(-(2 ** bits), 2 ** bits - 1)))


_values = st.one_of(
    st.booleans(),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.uuids(),
    _int_header(),
)
_names = st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) <= 255)
_messages = st.builds(
    Message,
    headers=st.dictionaries(_names, _values, max_size=6),
    payload=st.binary(max_size=300),
)


def _items(m: Message) -> list[tuple[str, type, Any]]:
    # dict equality ignores order; the wire does not
    return [(k, type(v), v) for k, v in m.headers.items()]


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return out


# ---------------------------------------------------------------- frames the fake sends


def _fake_frames() -> list[bytes]:
    from fake_bedrock import frame_event, frame_exception

    return [
        frame_event("messageStart", {"role": "assistant"}),
        frame_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "héllo"}}),
        frame_event("metadata", {"usage": {"inputTokens": 3, "outputTokens": 2,
                                           "totalTokens": 5}, "metrics": {"latencyMs": 9}}),
        frame_exception("throttlingException", "Stream failed midway."),
    ]


def test_fake_frames_decode_as_botocore_reads_them_and_encode_back_byte_exact() -> None:
    for frame in _fake_frames():
        (msg,) = es.decode_all(frame)
        buf = botocore_eventstream.EventStreamBuffer()
        buf.add_data(frame)
        (theirs,) = list(buf)
        assert msg.headers == theirs.headers and msg.payload == theirs.payload
        assert list(msg.headers) == list(theirs.headers)  # same order
        assert es.encode(msg) == frame
        stored = es.to_stored(msg)
        assert es.from_stored(orjson.loads(orjson.dumps(stored))) == msg
        assert event_bytes(stored) == frame


def test_message_reads_its_type_and_json() -> None:
    start, _, _, exc = (es.decode_all(f)[0] for f in _fake_frames())
    assert start.message_type == "event" and start.event_type == "messageStart"
    assert start.json()["role"] == "assistant"
    assert exc.message_type == "exception" and exc.event_type == "throttlingException"


def test_every_header_type_is_what_botocore_parses() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    msg = Message({"t": True, "f": False, "b": Int("byte", -3), "s": Int("short", 300),
                   "i": Int("integer", -70000), "l": Int("long", 2 ** 40),
                   "ts": Int("timestamp", 1_700_000_000_000), "raw": b"\x00\xff",
                   "str": "ok", "id": u}, b"{}")
    frame = es.encode(msg)
    buf = botocore_eventstream.EventStreamBuffer()
    buf.add_data(frame)
    (theirs,) = list(buf)
    assert theirs.headers["t"] is True and theirs.headers["f"] is False
    assert [theirs.headers[k] for k in ("b", "s", "i", "l", "raw", "str")] == [
        -3, 300, -70000, 2 ** 40, b"\x00\xff", "ok"]
    assert theirs.headers["id"] == u.bytes
    assert es.decode_all(frame) == [msg]
    assert _items(es.decode_all(frame)[0]) == _items(msg)


# ---------------------------------------------------------------- properties


@_SETTINGS
@given(st.lists(_messages, max_size=5), st.lists(st.integers(0, 10_000), max_size=8))
def test_decode_encode_round_trip_in_any_chunking(msgs: list[Message], cuts: list[int]) -> None:
    data = b"".join(es.encode(m) for m in msgs)
    dec = Decoder()
    got: list[Message] = []
    for chunk in _split(data, cuts):
        got += dec.feed(chunk)
    dec.close()
    assert got == msgs
    assert [_items(m) for m in got] == [_items(m) for m in msgs]
    assert b"".join(es.encode(m) for m in got) == data
    # the stored form (as a cassette keeps it) frames the same bytes again
    stored = [es.to_stored(m) for m in got]
    codec = JsonCodec()
    back = codec.decode(codec.encode(stored, key="k"), key="k")
    assert b"".join(event_bytes(s) for s in back) == data


@_SETTINGS
@given(st.lists(_messages, min_size=1, max_size=4), st.data())
def test_damaged_bytes_never_decode_into_another_message(msgs: list[Message],
                                                         data: st.DataObject) -> None:
    raw = bytearray(b"".join(es.encode(m) for m in msgs))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    dec = Decoder()
    got: list[Message] = []
    with pytest.raises(SerializationError, match="eventstream message"):
        for chunk in _split(bytes(raw), data.draw(st.lists(st.integers(0, 5000), max_size=4))):
            got += dec.feed(chunk)
        dec.close()
    # whatever came out before the damage is exactly what was sent, in order
    assert got == msgs[: len(got)]


@_SETTINGS
@given(st.lists(_messages, min_size=1, max_size=3), st.data())
def test_a_truncated_stream_is_refused_at_its_end(msgs: list[Message],
                                                  data: st.DataObject) -> None:
    raw = b"".join(es.encode(m) for m in msgs)
    cut = data.draw(st.integers(1, len(raw) - 1))
    dec = Decoder()
    got = dec.feed(raw[:cut])
    if dec.pending:
        with pytest.raises(SerializationError, match="truncated"):
            dec.close()
    assert got == msgs[: len(got)]


@_SETTINGS
@given(st.lists(_messages, max_size=4), st.lists(st.integers(0, 5000), max_size=6))
def test_splitter_hands_out_stored_events_in_any_chunking(msgs: list[Message],
                                                          cuts: list[int]) -> None:
    data = b"".join(es.encode(m) for m in msgs)
    sp = EventStreamSplitter()
    out: list[Any] = []
    for chunk in _split(data, cuts):
        out += sp.feed(chunk)
    out += sp.flush()
    assert sp.damaged is None and sp.raw() == data and sp.body() is None
    assert [es.from_stored(s) for s in out] == msgs


# ---------------------------------------------------------------- bounds and refusals


def _prelude(total: int, headers: int) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


def test_an_oversized_declared_length_is_refused_before_buffering() -> None:
    dec = Decoder()
    with pytest.raises(SerializationError, match="over the limit"):
        dec.feed(_prelude(2 ** 31, 0))
    assert dec.pending == 0
    small = Decoder(max_message=100)
    with pytest.raises(SerializationError, match="over the limit of 100"):
        small.feed(_prelude(101, 0) + b"x" * 50)
    with pytest.raises(SerializationError):  # and stays refused
        small.feed(es.encode(Message({}, b"")))


def test_impossible_lengths_and_headers_are_refused() -> None:
    with pytest.raises(SerializationError, match="impossible lengths"):
        Decoder().feed(_prelude(10, 0))
    with pytest.raises(SerializationError, match="impossible lengths"):
        Decoder().feed(_prelude(20, 8))
    with pytest.raises(SerializationError, match="over the limit"):
        Decoder().feed(_prelude(es.MAX_HEADERS + 200, es.MAX_HEADERS + 1))


def test_a_header_named_twice_is_refused_not_merged() -> None:
    frame = eventstream_message({"a": "1"}, b"")
    # Build "a" twice by hand (the helper takes a dict).
    one = b"\x01a\x07\x00\x011"
    headers = one + one
    prelude = struct.pack(">II", 16 + len(headers), len(headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    twice = body + struct.pack(">I", zlib.crc32(body))
    assert es.decode_all(frame)[0].headers == {"a": "1"}
    with pytest.raises(SerializationError, match="appears twice"):
        es.decode_all(twice)


def test_unknown_header_type_is_refused() -> None:
    headers = b"\x01a\x0b"
    prelude = struct.pack(">II", 16 + len(headers), len(headers))
    body = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    with pytest.raises(SerializationError, match="unknown value type 11"):
        es.decode_all(body + struct.pack(">I", zlib.crc32(body)))


@pytest.mark.parametrize("msg", [
    Message({"": "x"}, b""),
    Message({"a": "x" * 70_000}, b""),
    Message({"a": Int("byte", 200)}, b""),
    Message({"a": Int("word", 1)}, b""),
    Message({"a": 1.5}, b""),  # type: ignore[dict-item]
])
def test_encoder_refuses_what_the_wire_cannot_carry(msg: Message) -> None:
    with pytest.raises(SerializationError, match="cannot frame"):
        es.encode(msg)


@pytest.mark.parametrize("stored", [
    None, {"headers": "x"}, {"headers": [["a"]]}, {"headers": [["a", 1]]},
    {"headers": [["a", "zz", "bytes"]]}, {"headers": [["a", 1, "word"]]},
    {"headers": [["a", "1"], ["a", "2"]]}, {"headers": [], "payload": 5},
])
def test_a_damaged_stored_event_is_refused(stored: Any) -> None:
    with pytest.raises(SerializationError):
        es.from_stored(stored)


def test_splitter_marks_damage_and_keeps_every_byte() -> None:
    frames = _fake_frames()
    bad = bytearray(frames[1])
    bad[-1] ^= 1
    sp = EventStreamSplitter()
    assert len(sp.feed(frames[0])) == 1
    assert sp.feed(bytes(bad)) == [] and sp.damaged is not None
    assert sp.feed(frames[2]) == []
    assert sp.raw() == sp.body() == frames[0] + bytes(bad) + frames[2]
    cut = EventStreamSplitter()
    cut.feed(frames[0][:-3])
    assert cut.flush() == [] and "truncated" in str(cut.damaged)
    assert cut.body() == frames[0][:-3]


def test_replay_yields_one_frame_per_recorded_event() -> None:
    frames = _fake_frames()
    events = [[0.0, es.to_stored(es.decode_all(f)[0])] for f in frames]
    assert list(replay_sync(events, realtime=False)) == frames
    sse = [[0.0, "data: {}\n\n"]]
    assert list(replay_sync(sse, realtime=False)) == [b"data: {}\n\n"]


def test_content_type_dispatch() -> None:
    assert is_stream("application/vnd.amazon.eventstream")
    assert is_stream("text/event-stream; charset=utf-8")
    assert not is_stream("application/json") and not is_stream(None)
    assert isinstance(splitter_for("application/vnd.amazon.eventstream"), EventStreamSplitter)
    sse = splitter_for("text/event-stream")
    assert not isinstance(sse, EventStreamSplitter)
    assert sse.feed(b"data: 1\n\n") == ["data: 1\n\n"] and sse.body() is None
