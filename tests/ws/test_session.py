"""A session's state as pure data (``ws/_session.py``): windows recorded, windows played."""

from __future__ import annotations

import orjson

from dejacache.http.providers.openai_realtime import PROVIDER as REALTIME
from dejacache.ws._message import Answer, Closed, Cut, Faulted, Message
from dejacache.ws._session import SessionState, answer_of, error_of, handshake_value


def _done(audio: int, text: int, rid: str = "resp_1") -> Message:
    usage = {"total_tokens": 100 + audio + text, "input_tokens": 100,
             "output_tokens": audio + text,
             "input_token_details": {"audio_tokens": 80, "text_tokens": 20},
             "output_token_details": {"audio_tokens": audio, "text_tokens": text}}
    return Message(orjson.dumps({"type": "response.done",
                                 "response": {"id": rid, "usage": usage}}).decode())


def test_a_window_keeps_messages_offsets_close_usage_and_ids() -> None:
    s = SessionState(REALTIME, "openai.realtime", realtime=False, model="gpt-realtime")
    s.open_window(10.0)
    s.heard(Message('{"type": "response.created", "response": {"id": "resp_1"}}'), 10.25)
    s.heard(_done(40, 5), 11.0)
    s.heard(Closed(1000, "bye"), 11.5)
    w = s.take_window()
    assert w is not None and s.window is None
    v = w.value(REALTIME, s.model)
    assert [t for t, _ in v["messages"]] == [0.25, 1.0]
    assert v["close"] == {"code": 1000, "reason": "bye", "at": 1.5}
    assert v["usage"]["output_audio_tokens"] == 40 and v["usage"]["input_audio_tokens"] == 80
    assert v["model"] == "gpt-realtime" and v["ids"] == ["resp_1"]
    # the client was handed each as it came
    assert [type(item).__name__ for _, item in s.pending] == ["Message", "Message", "Closed"]


def test_a_window_a_message_over_the_bound_cut_is_marked_so_the_client_told() -> None:
    s = SessionState(REALTIME, "openai.realtime", realtime=False)
    s.open_window(0.0)
    s.heard(Message('{"type": "response.created"}'), 0.1)
    cut = Cut(1011, "dejacache: the server's message over the 64 MiB limit")
    s.heard(cut, 0.2)
    w = s.take_window()
    assert w is not None and w.cut  # (its driver stores nothing for it: ``_window_value``)
    assert [item for _, item in s.pending][-1] == cut and s.ended
    s.open_window(1.0)
    s.heard(Closed(1000, ""), 1.1)
    w = s.take_window()
    assert w is not None and not w.cut


def test_an_end_the_clients_library_made_is_stored_and_played_as_its_own() -> None:
    """A ``Faulted`` end (the client's library refused a frame the server sent) is kept with
    ``"error": true`` and played back as one; a server's close stays a ``Closed``."""
    s = SessionState(REALTIME, "n", realtime=False)
    s.open_window(0.0)
    s.heard(Faulted(1007, "Invalid UTF-8 text message"), 0.5)
    w = s.take_window()
    assert w is not None and not w.cut
    v = w.value(REALTIME, "")
    assert v["close"] == {"code": 1007, "reason": "Invalid UTF-8 text message", "at": 0.5,
                          "error": True}
    back = SessionState(REALTIME, "n", realtime=False)
    back.play(orjson.loads(orjson.dumps(v)), 0.0)
    assert [item for _, item in back.pending] == [Faulted(1007, "Invalid UTF-8 text message")]
    plain = SessionState(REALTIME, "n", realtime=False)
    plain.play({"messages": [], "close": {"code": 1007, "reason": "", "at": 0}}, 0.0)
    assert type(plain.pending[0][1]) is Closed


def test_played_windows_are_due_at_their_offsets_only_in_realtime() -> None:
    value = {"messages": [[0.0, {"json": {"a": 1}}], [0.5, {"text": "later"}]],
             "close": {"code": 4000, "reason": "r", "at": 0.75}, "ids": ["item_9"]}
    paced = SessionState(REALTIME, "n", realtime=True)
    assert paced.play(value, 100.0) == ["item_9"]
    assert [d for d, _ in paced.pending] == [100.0, 100.5, 100.75]
    assert paced.ended and paced.replayed == 2
    fast = SessionState(REALTIME, "n", realtime=False)
    fast.play(value, 100.0)
    assert [d for d, _ in fast.pending] == [None, None, None]
    assert fast.pending[1][1] == Message("later") and fast.pending[2][1] == Closed(4000, "r")
    fast.play(value, 101.0)  # nothing is queued after the end
    assert len(fast.pending) == 3


def test_handshake_answers_refusals_and_failures() -> None:
    ok = handshake_value(Answer(101, [("Sec-WebSocket-Accept", "abc"), ("X-Req", "1"),
                                      ("Set-Cookie", "sid=secret")], "realtime"), 2)
    assert ok["session"] == 2 and ok["subprotocol"] == "realtime"
    assert ["sec-websocket-accept", "abc"] not in ok["headers"]
    assert ["set-cookie", "sid=secret"] not in ok["headers"]
    refused = handshake_value(Answer(401, [("Content-Type", "application/json")], None,
                                     b'{"error": "no key"}'), 0)
    assert refused["json"] == {"error": "no key"} and "session" not in refused
    back = answer_of(refused)
    assert back.status == 401 and back.body == b'{"error":"no key"}'
    assert error_of(ConnectionRefusedError(111, "Connection refused")) == {
        "error": {"type": "ConnectionRefusedError", "message": "Connection refused",
                  "errno": 111}}


def test_the_model_asked_for_comes_from_the_first_setup_or_session() -> None:
    s = SessionState(REALTIME, "gemini.live", realtime=False)
    s.sent(Message('{"setup": {"model": "models/gemini-live-2.5-flash"}}'))
    s.sent(Message('{"session": {"model": "other"}}'))
    assert s.model == "gemini-live-2.5-flash" and len(s.history) == 2
