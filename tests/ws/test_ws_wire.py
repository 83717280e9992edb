"""The in-memory server end (``ws/_wire.py``) takes what a real client writes: whole
messages, in one frame or in fragments, text and binary, between pings."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.extensions.permessage_deflate import (
    ClientPerMessageDeflateFactory,
    ServerPerMessageDeflateFactory,
)
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from dejacache.ws._message import Answer, Closed, Message
from dejacache.ws._wire import Endpoint


def _opened() -> tuple[ClientProtocol, Endpoint]:
    client = ClientProtocol(parse_uri("ws://127.0.0.1:8765/chat"))
    client.send_request(client.connect())
    end = Endpoint("ws")
    end.feed(b"".join(client.data_to_send()))
    assert end.handshake() is not None
    client.receive_data(end.answer(Answer(101)))
    assert client.handshake_exc is None
    return client, end


def _fed(client: ClientProtocol, end: Endpoint) -> bytes:
    return end.feed(b"".join(client.data_to_send()))


def test_whole_and_fragmented_messages_arrive_whole_in_order() -> None:
    client, end = _opened()
    client.send_text(b'{"type": "input_audio_buffer.append", "audio": "AAAA"}')
    client.send_text("caf\u00e9 ".encode(), fin=False)  # a text message in three frames
    client.send_continuation("na\u00efve ".encode(), fin=False)
    client.send_continuation(b"end", fin=True)
    client.send_ping(b"p")
    client.send_binary(b"\x00\x01", fin=False)  # a binary one in two, a ping between
    client.send_continuation(b"\x02", fin=True)
    client.send_binary(b"\xff")
    out = _fed(client, end)
    assert end.take() == [Message('{"type": "input_audio_buffer.append", "audio": "AAAA"}'),
                          Message("caf\u00e9 na\u00efve end"), Message(b"\x00\x01\x02"),
                          Message(b"\xff")]
    assert end.take() == []
    client.receive_data(out)  # the server end answered the ping itself
    assert [ev.opcode for ev in client.events_received() if isinstance(ev, Frame)] == [
        Opcode.PONG]


def test_a_message_split_across_writes_waits_for_its_last_frame() -> None:
    client, end = _opened()
    client.send_text(b"first ", fin=False)
    _fed(client, end)
    assert end.take() == []
    client.send_continuation(b"second", fin=True)
    _fed(client, end)
    assert end.take() == [Message("first second")]


def test_the_client_closing_is_kept() -> None:
    client, end = _opened()
    client.send_close(4000, "done")
    _fed(client, end)
    assert end.client_closed == Closed(4000, "done") and end.take() == []


@pytest.mark.parametrize(("heard", "read"), [(1000, 1000), (4001, 4001), (1005, 1005),
                                             (1015, 1001)])
def test_the_server_closing_sends_a_code_the_client_reads(heard: int, read: int) -> None:
    """A close heard without a code goes on without one (the client reads 1005); 1015 (TLS
    failed), which no close frame may carry, as 1001."""
    client, end = _opened()
    client.receive_data(end.close(Closed(heard, "")))
    assert client.close_rcvd is not None and client.close_rcvd.code == read


def test_the_server_dropping_drops_the_connection() -> None:
    _, end = _opened()
    assert end.close(Closed(1006, "")) == b"" and end.eof


# ---------------------------------------------------------------- frames read and written here
#
# Once open, a write of whole plain data frames skips the protocol (``_read``) and the
# server's messages are framed without it (``_frame``); everything else goes through it.


def _reference() -> tuple[ClientProtocol, Endpoint]:
    """An endpoint whose protocol logs at debug level, so it takes every frame itself."""
    client = ClientProtocol(parse_uri("ws://127.0.0.1:8765/chat"))
    client.send_request(client.connect())
    end = Endpoint("ws")
    end.proto.debug = True
    end.feed(b"".join(client.data_to_send()))
    client.receive_data(end.answer(Answer(101)))
    return client, end


def _spied(end: Endpoint) -> list[bytes]:
    """What the endpoint hands its protocol from now on."""
    seen: list[bytes] = []
    receive = end.proto.receive_data

    def spy(data: bytes | bytearray) -> None:
        seen.append(bytes(data))
        receive(data)

    end.proto.receive_data = spy  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_whole_messages_skip_the_protocol_with_its_result(size: int) -> None:
    for payload in ("\u00e9" * size, (bytes(range(256)) * (size // 256 + 1))[:size]):
        client, end = _opened()
        seen = _spied(end)
        ref_client, ref = _reference()
        for c, e in ((client, end), (ref_client, ref)):
            if isinstance(payload, str):
                c.send_text(payload.encode())
            else:
                c.send_binary(payload)
            assert _fed(c, e) == b""
        assert end.take() == ref.take() == [Message(payload)]
        assert seen == []


def test_several_whole_messages_in_one_write_skip_it_in_order() -> None:
    client, end = _opened()
    seen = _spied(end)
    client.send_text(b"one")
    client.send_binary(b"\x02" * 300)
    client.send_text("thr\u00e9e".encode())
    assert _fed(client, end) == b""
    assert end.take() == [Message("one"), Message(b"\x02" * 300), Message("thr\u00e9e")]
    assert seen == []


def test_a_length_written_longer_than_needed_reads_as_the_protocol_reads_it() -> None:
    _, end = _opened()
    seen = _spied(end)
    # "hi" with its length in 16 bits (RFC 6455 asks for the shortest; websockets takes it)
    frame = bytes((0x81, 0x80 | 126)) + (2).to_bytes(2, "big") + b"\x00" * 4 + b"hi"
    assert end.feed(frame) == b""
    assert end.take() == [Message("hi")] and seen == []


def test_a_ping_between_messages_goes_through_the_protocol_then_not() -> None:
    client, end = _opened()
    seen = _spied(end)
    client.send_text(b"a")
    client.send_ping(b"p")
    out = _fed(client, end)
    assert len(seen) == 1 and end.take() == [Message("a")]
    client.receive_data(out)
    assert [ev.opcode for ev in client.events_received() if isinstance(ev, Frame)] == [
        Opcode.PONG]
    client.send_text(b"b")
    _fed(client, end)
    assert len(seen) == 1 and end.take() == [Message("b")]  # whole again: skipped


def test_a_fragmented_message_goes_through_the_protocol_until_its_last_frame() -> None:
    client, end = _opened()
    seen = _spied(end)
    client.send_text(b"fra", fin=False)
    _fed(client, end)
    client.send_continuation(b"gment", fin=False)
    _fed(client, end)
    client.send_continuation(b"ed", fin=True)
    _fed(client, end)
    assert len(seen) == 3 and end.take() == [Message("fragmented")]
    client.send_binary(b"\x01")
    _fed(client, end)
    assert len(seen) == 3 and end.take() == [Message(b"\x01")]


@pytest.mark.parametrize("cut", [1, 3, 6, 50])  # in the header, its length, mask, payload
def test_a_frame_split_across_writes_hands_the_rest_of_the_connection_to_it(cut: int) -> None:
    client, end = _opened()
    seen = _spied(end)
    client.send_text(b"x" * 200)
    data = b"".join(client.data_to_send())
    assert end.feed(data[:cut]) == b"" and end.take() == []
    assert end.feed(data[cut:]) == b"" and end.take() == [Message("x" * 200)]
    client.send_text(b"y")
    _fed(client, end)
    assert end.take() == [Message("y")] and len(seen) == 3  # its parser may hold bytes


def test_invalid_utf8_raises_from_the_protocol_as_before() -> None:
    for c, e in (_opened(), _reference()):
        seen = _spied(e)
        c.send_text(b"ok")
        c.send_text(b"\xff\xfe")
        with pytest.raises(UnicodeDecodeError):
            _fed(c, e)
        assert e.take() == [Message("ok")] and len(seen) == 1
        c.send_text(b"after")
        _fed(c, e)
        assert e.take() == [Message("after")] and len(seen) == 2


def test_the_client_closing_goes_through_the_protocol_and_ends_skipping() -> None:
    client, end = _opened()
    seen = _spied(end)
    client.send_text(b"last")
    client.send_close(1000, "bye")
    out = _fed(client, end)
    assert end.take() == [Message("last")] and end.client_closed == Closed(1000, "bye")
    assert end.eof and out.endswith(b"bye") and len(seen) == 1
    client.receive_data(out)


def test_a_frame_the_protocol_refuses_is_refused_as_before() -> None:
    for bad in (bytes((0x81, 0x01)) + b"x",  # unmasked
                bytes((0xC1, 0x81)) + b"\x00" * 4 + b"x",  # RSV1 without an extension
                bytes((0x83, 0x81)) + b"\x00" * 4 + b"x"):  # a reserved opcode
        outs = []
        for _, e in (_opened(), _reference()):
            outs.append(e.feed(bad))
            assert e.take() == [] and e.eof
        assert outs[0] == outs[1] and outs[0].startswith(b"\x88")  # its close, 1002


def test_bytes_after_the_request_hand_the_connection_to_the_protocol() -> None:
    client = ClientProtocol(parse_uri("ws://127.0.0.1:8765/chat"))
    client.send_request(client.connect())
    end = Endpoint("ws")
    # the request and two bytes of a frame: the parser is inside a frame once open
    end.feed(b"".join(client.data_to_send()) + bytes((0x81, 0x85)))
    client.receive_data(end.answer(Answer(101)))
    seen = _spied(end)
    end.feed(b"\x00\x00\x00\x00hello")
    assert end.take() == [Message("hello")] and len(seen) == 1


def test_with_its_debug_log_on_the_protocol_takes_every_frame() -> None:
    client, end = _reference()
    seen = _spied(end)
    client.send_text(b"a")
    _fed(client, end)
    assert end.take() == [Message("a")] and len(seen) == 1
    assert end.message(Message("b")) == Frame(Opcode.TEXT, b"b").serialize(mask=False)


def test_with_an_extension_negotiated_the_protocol_takes_every_frame() -> None:
    client = ClientProtocol(parse_uri("ws://127.0.0.1:8765/chat"),
                            extensions=[ClientPerMessageDeflateFactory()])
    client.send_request(client.connect())
    end = Endpoint("ws")
    end.proto.available_extensions = [ServerPerMessageDeflateFactory()]  # (never ours)
    end.feed(b"".join(client.data_to_send()))
    client.receive_data(end.answer(Answer(101)))
    assert client.extensions and end.proto.extensions
    seen = _spied(end)
    client.send_text(b"squeezed " * 40)
    _fed(client, end)
    assert end.take() == [Message("squeezed " * 40)] and len(seen) == 1
    out = end.message(Message("back " * 40))
    assert out[0] == 0xC1  # FIN, RSV1: compressed by the protocol
    client.receive_data(out)
    assert [ev.data for ev in client.events_received() if isinstance(ev, Frame)] == [
        b"back " * 40]


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536])
def test_the_servers_frames_are_the_protocols(size: int) -> None:
    _, end = _opened()
    _, ref = _reference()
    for data in ("\u00e9" * size, b"\x07" * size):
        m = Message(data)
        assert end.message(m) == ref.message(m)
    assert end.close(Closed(1000, "")) == ref.close(Closed(1000, ""))
    with pytest.raises(InvalidState):  # closing: no more messages, as before
        end.message(Message("late"))


def test_a_whole_message_inside_a_fragmented_one_is_the_protocols_error() -> None:
    outs = []
    for client, end in (_opened(), _reference()):
        client.send_text(b"fra", fin=False)
        _fed(client, end)
        whole = bytes((0x81, 0x81)) + b"\x00" * 4 + b"x"  # not a continuation
        outs.append(end.feed(whole))
        assert end.take() == [] and end.eof
    assert outs[0] == outs[1] and outs[0].startswith(b"\x88")  # its close, 1002


_ACTIONS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["text", "binary", "ping", "pong"]),
              st.binary(max_size=300)),
    st.tuples(st.just("fragments"), st.lists(st.binary(max_size=200), min_size=2,
                                             max_size=4)),
    st.tuples(st.just("close"), st.just(b""))), max_size=12)


@settings(max_examples=150, deadline=None)
@given(_ACTIONS, st.lists(st.integers(0, 4000), max_size=6), st.booleans())
def test_any_writes_read_as_the_protocol_reads_them(
        actions: list[tuple[str, Any]], cuts: list[int], per_frame: bool) -> None:
    """Whatever the client writes, cut anywhere: the same messages, answers and end as an
    endpoint whose protocol takes every byte."""
    writer, _ = _opened()
    writes: list[bytes] = []
    for kind, data in actions:
        if kind == "text":
            writer.send_text(data.decode("utf-8", "replace").encode())
        elif kind == "binary":
            writer.send_binary(data)
        elif kind == "ping":
            writer.send_ping(data[:125])
        elif kind == "pong":
            writer.send_pong(data[:125])
        elif kind == "fragments":
            writer.send_binary(data[0], fin=False)
            for i, part in enumerate(data[1:], 2):
                writer.send_continuation(part, fin=i == len(data))
        else:
            writer.send_close(1000, "done")
        if per_frame:
            writes += writer.data_to_send()
        if kind == "close":
            break
    stream = b"".join(writes) if per_frame else b"".join(writer.data_to_send())
    if not per_frame:  # the stream cut at arbitrary places
        bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
        writes = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    seen = []
    for _, end in (_opened(), _reference()):
        out = b"".join(end.feed(w) for w in writes if not end.eof)
        seen.append((end.take(), out, end.client_closed, end.eof))
    assert seen[0] == seen[1]


# ---------------------------------------------------------------- the message bound
#
# A message (all its frames) over ``max_message`` closes the connection with 1009 and a
# reason naming the bound and what raises it, on the fast path and the protocol's alike.

_LIMIT = 1000


def _bounded(raise_with: str = "--max-message") -> tuple[ClientProtocol, Endpoint]:
    client = ClientProtocol(parse_uri("ws://127.0.0.1:8765/chat"))
    client.send_request(client.connect())
    end = Endpoint("ws", _LIMIT, raise_with)
    end.feed(b"".join(client.data_to_send()))
    client.receive_data(end.answer(Answer(101)))
    return client, end


def _closed_with(client: ClientProtocol, out: bytes) -> tuple[int, str]:
    client.receive_data(out)
    close = client.close_rcvd
    assert close is not None
    return int(close.code), close.reason


@pytest.mark.parametrize("binary", [False, True])
def test_a_whole_message_at_the_bound_skips_the_protocol_and_one_byte_more_is_1009(
        binary: bool) -> None:
    for size, over in ((_LIMIT, False), (_LIMIT + 1, True)):
        client, end = _bounded()
        seen = _spied(end)
        if binary:
            client.send_binary(b"\x07" * size)
        else:
            client.send_text(b"a" * size)
        out = _fed(client, end)
        assert end.over is over and end.eof is over
        if not over:
            assert out == b"" and seen == []  # the fast path took it
            assert end.take() == [Message(b"\x07" * size if binary else "a" * size)]
            continue
        assert len(seen) == 1  # handed to the protocol, which refused it
        assert end.take() == []
        assert _closed_with(client, out) == (
            1009, "dejacache: the client's message over the 1000 bytes limit; "
                  "raise --max-message")


def test_a_fragmented_message_is_bounded_by_its_running_total() -> None:
    client, end = _bounded()
    client.send_text(b"a" * 400, fin=False)
    client.send_continuation(b"b" * 400, fin=False)
    client.send_continuation(b"c" * 200, fin=True)  # 1000 in all: taken
    client.send_binary(b"\x01" * 600, fin=False)
    client.send_continuation(b"\x02" * 401, fin=True)  # 1001: refused
    out = _fed(client, end)
    assert end.take() == [Message("a" * 400 + "b" * 400 + "c" * 200)]
    assert end.over and end.eof
    assert _closed_with(client, out)[0] == 1009


def test_a_fragmented_message_over_it_across_writes_is_refused_at_the_frame_that_passes(
        ) -> None:
    client, end = _bounded()
    client.send_text(b"x" * 300, fin=False)
    assert _fed(client, end) == b""
    for _ in range(2):  # 900 in all, one write a frame
        client.send_continuation(b"x" * 300, fin=False)
        assert _fed(client, end) == b"" and not end.over
    client.send_continuation(b"x" * 101, fin=False)
    out = _fed(client, end)
    assert end.over and end.take() == []
    assert _closed_with(client, out)[0] == 1009


def test_a_huge_frame_is_refused_from_its_header_nothing_of_it_held() -> None:
    client, end = _bounded()
    # A 10 GB binary frame's header (FIN, binary, 64-bit length, the mask), no payload.
    header = bytes((0x82, 0xFF)) + (10 * 2**30).to_bytes(8, "big") + b"\x00\x00\x00\x00"
    out = end.feed(header)
    assert end.over and end.eof
    assert _closed_with(client, out)[0] == 1009
    assert end.feed(b"\x00" * 65536) == b""  # what follows is dropped, not kept


def test_endless_empty_continuation_frames_hold_nothing() -> None:
    client, end = _bounded()
    client.send_text(b"start", fin=False)
    for _ in range(2000):
        client.send_continuation(b"", fin=False)
    _fed(client, end)
    assert end._parts == bytearray(b"start") and not end.over
    client.send_continuation(b" end", fin=True)
    _fed(client, end)
    assert end.take() == [Message("start end")]


def test_the_default_bound_is_64_mib_and_the_reason_fits_a_close_frame() -> None:
    from dejacache.ws._message import MAX_MESSAGE, too_big

    assert Endpoint("ws").max_message == MAX_MESSAGE == 64 * 2**20
    reason = too_big("the client's", MAX_MESSAGE, "--max-message (max_message= of "
                     "dejacache.proxy())")
    assert "64 MiB" in reason and "--max-message" in reason
    assert len(reason.encode()) <= 123


def test_messages_written_before_the_one_over_it_are_still_taken() -> None:
    client, end = _bounded()
    client.send_text(b"first")
    client.send_binary(b"\x01" * (_LIMIT + 1))
    out = _fed(client, end)  # one write: the protocol reads both
    assert end.take() == [Message("first")] and end.over
    assert _closed_with(client, out)[0] == 1009
