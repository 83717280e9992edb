"""A session's keys (``ws/_keys.py``): the handshake keyed as an HTTP request, messages
within their session."""

from __future__ import annotations

import pathlib

import dejacache
from dejacache.scope import current
from dejacache.ws._keys import message_key, route
from dejacache.ws._message import Handshake, Message

REALTIME = "wss://api.openai.com/v1/realtime?model=gpt-realtime"


def _hs(url: str, *headers: tuple[str, str], protocols: tuple[str, ...] = ()) -> Handshake:
    return Handshake(url, [("Host", "x"), ("Sec-WebSocket-Key", "nonce=="),
                           ("User-Agent", "ua"), *headers], protocols)


def test_the_handshake_keys_what_can_change_the_answer(tmp_path: pathlib.Path) -> None:
    with dejacache.cassette(tmp_path / "k.json", mode="record"):
        eff = current()
        a = route(eff, _hs(REALTIME, ("Authorization", "Bearer sk-aaaaaaaaaaaaaaaaaaaaaaaa")))
        b = route(eff, _hs(REALTIME, ("Authorization", "Bearer sk-bbbbbbbbbbbbbbbbbbbbbbbb"),
                           ("Sec-WebSocket-Key", "other==")))
        assert a.name == "openai.realtime" and a.keyed.key == b.keyed.key  # the key: a role
        c = route(eff, _hs(REALTIME.replace("gpt-realtime", "gpt-realtime-mini")))
        assert c.keyed.key != a.keyed.key  # the model asked for
        live = "wss://h.example/ws/google.ai.generativelanguage.v1beta.GenerativeService." \
               "BidiGenerateContent"
        d = route(eff, _hs(live + "?key=AIza-one", ("x-goog-api-key", "AIza-two")))
        e = route(eff, _hs(live + "?key=AIza-three"))
        assert d.name == "gemini.live" and d.keyed.key == e.keyed.key
        f = route(eff, _hs("ws://h.example/chat", protocols=("chat",)))
        g = route(eff, _hs("ws://h.example/chat", protocols=("other",)))
        assert f.name == "ws.h.example" and f.keyed.key != g.keyed.key
        who = route(eff, _hs("ws://h.example/chat", ("Authorization", "Bearer sk-who")))
        assert b"authorization@ws.h.example#" in who.keyed.canonical  # a digest, for others
        assert b"sk-who" not in who.keyed.canonical


def test_messages_key_without_volatile_fields_and_with_ids_aliased(
        tmp_path: pathlib.Path) -> None:
    with dejacache.cassette(tmp_path / "m.json", mode="record"):
        eff = current()
        r = route(eff, _hs(REALTIME))

        def key(text: str) -> str:
            m = Message(text)
            import orjson

            return message_key(eff, r, "s#0", m, orjson.loads(text)).key

        assert key('{"type": "response.create", "event_id": "evt_1"}') == key(
            '{"event_id":"evt_2","type":"response.create"}')
        assert r.aliases is not None
        before = key('{"type": "conversation.item.delete", "item_id": "item_abc123XYZ"}')
        r.aliases.learn(["item_abc123XYZ"])
        after = key('{"type": "conversation.item.delete", "item_id": "item_abc123XYZ"}')
        r.aliases.learn(["item_zzz999"])
        assert after != before
        assert message_key(eff, r, "s#0", Message("x"), None).key != message_key(
            eff, r, "s#1", Message("x"), None).key  # another session
