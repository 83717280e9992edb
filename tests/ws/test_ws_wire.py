"""The in-memory server end (``ws/_wire.py``) takes what a real client writes: whole
messages, in one frame or in fragments, text and binary, between pings."""

from __future__ import annotations

from websockets.client import ClientProtocol
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
