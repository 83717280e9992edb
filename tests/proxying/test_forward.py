"""One request through the proxy, as the exchange answers it in-process: streams passed on
live and replayed event by event, errors recorded in order, misses and refusals in the
upstream's own error shape, strict order, partial replay, ageing and volatility, all from
the session's cassette (the real Python openai SDK and httpx2 against the loopback
provider)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import pathlib
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import openai
import orjson
import pytest
from fake_provider import FakeProvider
from http_support import (
    FORMS,
    SPELLINGS,
    KeyRefuser,
    KeySpeller,
    count_decoded,
    watch_passing,
    watch_recorders,
)
from proxy_support import (
    RawUpstream,
    entries,
    read_to_end,
    small_window_client,
    writes_waiting,
)

import dejacache
from dejacache._core.ageing import stamp
from dejacache.cassettes import ageing
from dejacache.cassettes.document import load_document
from dejacache.cassettes.placeholder_keys import PLACEHOLDER as PLACEHOLDER_KEY
from dejacache.cassettes.render import render
from dejacache.errors import CassetteError
from dejacache.http import transport
from dejacache.proxying import _forward
from dejacache.proxying._server import ProxyConfig, ProxyServer
from dejacache.proxying._sessions import SessionSpec
from dejacache.proxying.handle import ProxySession
from dejacache.proxying.upstreams import parse_upstream
from encoded_upstream import PLAIN, EncodedUpstream, deflated, gzipped, pieces

Open = Callable[..., ProxySession]
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
DAY = 86400.0


def post(url: str, body: Any, **headers: str) -> httpx2.Response:
    return httpx2.post(url, content=orjson.dumps(body), timeout=30,
                       headers={"content-type": "application/json", **headers})


def chat(session: ProxySession, **kw: Any) -> Any:
    with openai.OpenAI(base_url=session.base_url("openai") + "/v1", api_key="sk-py-test",
                       max_retries=0) as client:
        return client.chat.completions.create(model="gpt-test", **kw)


def test_a_live_stream_reaches_the_client_as_it_arrives(session_for: Open,
                                                        fake: FakeProvider) -> None:
    s = session_for("live", fake)
    pause = 2.0
    fake.script.append({"end_delay": pause})  # the last event comes 2 s after the others
    t0 = time.perf_counter()
    first = None
    with httpx2.stream("POST", s.base_url("openai") + "/v1/chat/completions", timeout=30,
                       json={**CHAT, "stream": True}) as r:
        body = b""
        for part in r.iter_raw():
            first = first or time.perf_counter() - t0
            body += part
    total = time.perf_counter() - t0
    # Held back until the end, the first event could not come before the provider's pause
    # is over; passed on, it comes as soon as the proxy is scheduled (a loaded machine
    # delays it, never by the whole pause).
    assert first is not None and first < pause <= total
    assert s.close(ok=True)["recorded"] == 1
    assert body.endswith(b"data: [DONE]\n\n")


def test_a_replayed_stream_comes_one_event_per_chunk(session_for: Open,
                                                     fake: FakeProvider) -> None:
    s = session_for("events", fake)
    post(s.base_url("openai") + "/v1/chat/completions", {**CHAT, "stream": True})
    s.close(ok=True)
    events = entries(s.cassette)[0]["response"]["events"]
    r = session_for("events", fake, mode="replay")
    with httpx2.stream("POST", r.base_url("openai") + "/v1/chat/completions", timeout=30,
                       json={**CHAT, "stream": True}) as resp:
        parts = [p.decode() for p in resp.iter_raw()]
    assert parts == [text for _, text in events]
    assert r.close(ok=True)["replayed"] == 1


def test_a_realtime_session_replays_at_the_recorded_pace(proxy_process: Any,
                                                         session_for: Open,
                                                         fake: FakeProvider) -> None:
    s = session_for("pace", fake)
    fake.script.append({"end_delay": 1.0})
    post(s.base_url("openai") + "/v1/chat/completions", {**CHAT, "stream": True})
    s.close(ok=True)

    def replayed(realtime: bool) -> float:
        opened = httpx2.post(f"{proxy_process.url}/_dejacache/sessions", timeout=30, json={
            "cassette": str(s.cassette), "mode": "replay", "realtime": realtime}).json()
        t0 = time.perf_counter()
        post(f"{opened['url']}/openai/v1/chat/completions", {**CHAT, "stream": True})
        took = time.perf_counter() - t0
        httpx2.post(f"{proxy_process.url}/_dejacache/sessions/{opened['id']}/close",
                    json={"ok": False}, timeout=30)
        return took

    paced, fast = replayed(True), replayed(False)
    # Paced, the replay waits out the recorded 1 s pause (a lower bound, whatever the load);
    # not paced, it never waits that long (a loaded machine slows it, not by a second).
    assert fast < 0.9 < paced


def test_errors_replay_in_the_order_recorded(session_for: Open, fake: FakeProvider) -> None:
    s = session_for("errors", fake)
    fake.script.extend([{"status": 500}, {"status": 429}])
    live = [post(s.base_url("openai") + "/v1/chat/completions", CHAT) for _ in range(3)]
    s.close(ok=True)
    r = session_for("errors", fake, mode="replay")
    seen = [post(r.base_url("openai") + "/v1/chat/completions", CHAT) for _ in range(3)]
    assert [x.status_code for x in seen] == [x.status_code for x in live] == [500, 429, 200]
    assert [x.json() for x in seen] == [x.json() for x in live]
    assert fake.count() == 3


def test_header_values_beyond_ascii_pass_through_as_the_bytes_sent(
        session_for: Open, fake: FakeProvider) -> None:
    # The proxy read them as latin-1 text, which the HTTP library refused to send: the client
    # got a closed connection. Now each way the bytes are the ones sent.
    s = session_for("non-ascii", fake)
    fake.script.append({"headers": {"x-answer": "caf\u00e9"}})  # sent as latin-1: b"caf\xe9"
    sent = {"x-name": "caf\u00e9 \u20ac".encode(), "x-raw": b"\xe9t\xe9"}  # UTF-8, latin-1
    live = httpx2.post(s.base_url("openai") + "/v1/chat/completions",
                       content=orjson.dumps(CHAT), timeout=30,
                       headers={"content-type": "application/json", **sent})
    assert live.status_code == 200
    got = fake.requests[-1]["headers"]  # read by the fake as latin-1
    assert {k: got[k].encode("latin-1") for k in sent} == sent
    assert (b"x-answer", b"caf\xe9") in live.headers.raw
    s.close(ok=True)
    r = session_for("non-ascii", fake, mode="replay")
    again = httpx2.post(r.base_url("openai") + "/v1/chat/completions",
                        content=orjson.dumps(CHAT), timeout=30,
                        headers={"content-type": "application/json", **sent})
    assert again.status_code == 200 and again.json() == live.json()
    assert fake.count() == 1


def raw_answer(url: str) -> tuple[int, str | None, str | None, bytes]:
    """Status, ``content-encoding``, ``x-request-id`` and the body's bytes as they came."""
    with httpx2.stream("POST", url, content=orjson.dumps(CHAT), timeout=30,
                       headers={"content-type": "application/json"}) as r:
        return (r.status_code, r.headers.get("content-encoding"), r.headers.get("x-request-id"),
                b"".join(r.iter_raw()))


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_body_that_is_not_what_its_encoding_says_passes_through_and_replays(
        session_for: Open, fake: FakeProvider, encoding: str) -> None:
    # A plain JSON body said to be gzip was answered 500 (the recorder failed to decode
    # it); said to be br, it replayed without its header. The client decides what to make
    # of it, live and replayed alike.
    s = session_for("encoding", fake)
    fake.script.append({"headers": {"content-encoding": encoding}})
    live = raw_answer(s.base_url("openai") + "/v1/chat/completions")
    assert live[:2] == (200, encoding)
    assert orjson.loads(live[3])["object"] == "chat.completion"  # the bytes sent
    s.close(ok=True)
    stored = entries(s.cassette)[0]["response"]
    assert ["content-encoding", encoding] in stored["headers"] and "json" not in stored
    r = session_for("encoding", fake, mode="replay")
    assert raw_answer(r.base_url("openai") + "/v1/chat/completions") == live
    assert fake.count() == 1


def raw_stream(url: str, stream: bool) -> tuple[int, str | None, bytes]:
    """Status, ``content-encoding`` and the bytes as they came of a chat call's answer."""
    with httpx2.stream("POST", url, content=orjson.dumps({**CHAT, "stream": stream}),
                       timeout=30, headers={"content-type": "application/json"}) as r:
        return r.status_code, r.headers.get("content-encoding"), b"".join(r.iter_raw())


# (content-encoding, the stream's chunks as sent, kept decoded)
STREAMS = {
    "gzip": ("gzip", pieces(gzipped(PLAIN)), True),
    "plain said gzip": ("gzip", pieces(PLAIN), False),
    "gzip cut short": ("gzip", pieces(gzipped(PLAIN)[:-40]), False),
    "gzip, gzip": ("gzip, gzip", pieces(gzipped(gzipped(PLAIN))), True),
    "deflate, gzip": ("deflate, gzip", pieces(gzipped(deflated(PLAIN))), True),
    "br, gzip": ("br, gzip", pieces(gzipped(b"data: not br\n\n")), False),
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("case", list(STREAMS))
def test_an_encoded_stream_passes_through_as_sent_and_replays(
        session_for: Open, case: str, stream: bool) -> None:
    # An event stream whose body is not what its content-encoding says was answered 500
    # (the recorder failed to decode it), or cut after its headers. It reaches the client
    # as the upstream sent it (the client's own decoder reports what it reports), and is
    # kept so: decoded when every coding undoes to its end, else as it came, with its
    # header, and replayed byte for byte.
    encoding, chunks, plain = STREAMS[case]
    upstream = EncodedUpstream().serve(encoding, chunks).start()
    try:
        s = session_for("encoded-stream", upstream)
        live = raw_stream(s.base_url("openai") + "/v1/chat/completions", stream)
        assert live == (200, encoding, b"".join(chunks))
        assert s.close(ok=True)["recorded"] == 1
        stored = entries(s.cassette)[0]["response"]
        if plain:
            assert "".join(e for _, e in stored["events"]) == PLAIN.decode()
            assert "content-encoding" not in dict(stored["headers"])
        else:
            assert dict(stored["headers"])["content-encoding"] == encoding
            assert "events" not in stored
        r = session_for("encoded-stream", upstream, mode="replay")
        again = raw_stream(r.base_url("openai") + "/v1/chat/completions", stream)
        assert again == ((200, None, PLAIN) if plain else live)
        assert upstream.count() == 1
    finally:
        upstream.stop()


def test_an_identity_encoded_answer_is_stored_as_any_other(session_for: Open,
                                                          fake: FakeProvider) -> None:
    s = session_for("identity", fake)
    fake.script.append({"headers": {"content-encoding": "identity"}})
    assert raw_answer(s.base_url("openai") + "/v1/chat/completions")[:2] == (200, "identity")
    s.close(ok=True)
    stored = entries(s.cassette)[0]["response"]
    assert stored["json"]["object"] == "chat.completion"
    assert "content-encoding" not in [k for k, _ in stored["headers"]]


def test_a_miss_is_a_404_in_each_providers_shape(session_for: Open,
                                                 fake: FakeProvider) -> None:
    r = session_for("misses", fake, mode="replay")
    oa = post(r.base_url("openai") + "/v1/chat/completions", CHAT)
    an = post(r.base_url("anthropic") + "/v1/messages",
              {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
              **{"anthropic-version": "2023-06-01"})
    assert (oa.status_code, an.status_code) == (404, 404)
    assert oa.headers["x-should-retry"] == "false"
    err = oa.json()["error"]
    assert err["type"] == "dejacache_replay_miss"
    assert err["message"].startswith("ReplayMiss: dejacache replay miss: no recording of "
                                     "openai.chat.completions")
    body = an.json()
    assert body["type"] == "error" and body["error"]["type"] == "dejacache_replay_miss"
    assert "anthropic.messages" in body["error"]["message"]
    assert fake.count() == 0


def test_the_sdk_raises_its_api_error_with_the_field_that_differs(
        session_for: Open, fake: FakeProvider) -> None:
    s = session_for("sdk-miss", fake)
    chat(s, messages=[{"role": "user", "content": "hello"}])
    s.close(ok=True)
    r = session_for("sdk-miss", fake, mode="replay", rerecord="pytest -k sdk --record")
    with pytest.raises(openai.NotFoundError) as info:
        chat(r, messages=[{"role": "user", "content": "hello!"}])
    text = str(info.value)
    assert "ReplayMiss" in text and "body.messages[0].content: 'hello' -> 'hello!'" in text
    assert "to re-record: pytest -k sdk --record" in text


def test_a_strict_session_answers_a_divergence(session_for: Open, fake: FakeProvider) -> None:
    s = session_for("strict", fake)
    for word in ("one", "two"):
        chat(s, messages=[{"role": "user", "content": word}])
    s.close(ok=True)
    r = session_for("strict", fake, mode="replay", strict=True)
    out = post(r.base_url("openai") + "/v1/chat/completions",
               {**CHAT, "messages": [{"role": "user", "content": "two"}]})
    assert out.status_code == 404
    assert out.json()["error"]["type"] == "dejacache_replay_divergence"
    with pytest.raises(CassetteError, match="never made"):  # "one": the test must not pass
        r.close(ok=True)
    assert r.summary is not None and r.summary["divergences"] and r.summary["error"]


def test_sequential_requests_form_one_chain_in_the_cassette(session_for: Open,
                                                            fake: FakeProvider) -> None:
    s = session_for("chain", fake)
    for word in ("a", "b", "c"):
        chat(s, messages=[{"role": "user", "content": word}])
    s.close(ok=True)
    assert [e["follows"] for e in entries(s.cassette)] == [-1, 0, 1]
    r = session_for("chain", fake, mode="replay", strict=True)
    for word in ("a", "b", "c"):
        chat(r, messages=[{"role": "user", "content": word}])
    summary = r.close(ok=True)
    assert (summary["replayed"], summary["divergences"], summary["error"]) == (3, [], None)


def test_replay_until_replays_the_first_calls_and_sends_the_rest(
        session_for: Open, fake: FakeProvider) -> None:
    s = session_for("until", fake)
    first = [chat(s, messages=[{"role": "user", "content": w}]).id for w in ("a", "b")]
    s.close(ok=True)
    r = session_for("until", fake, replay_until=1)
    again = [chat(r, messages=[{"role": "user", "content": w}]).id for w in ("a", "b")]
    summary = r.close(ok=True)
    assert again[0] == first[0] and again[1] != first[1]
    assert fake.count() == 3
    live = s.cassette.with_name(s.cassette.stem + ".live.json")
    assert [e["request"]["body"]["messages"][0]["content"] for e in entries(live)] == ["b"]
    assert summary["saved"] is False  # the cassette itself is never written by a partial run


def test_an_expired_entry_is_recorded_again(session_for: Open, fake: FakeProvider,
                                            tmp_path: pathlib.Path) -> None:
    s = session_for("aged", fake)
    old = chat(s, messages=[{"role": "user", "content": "news"}]).id
    s.close(ok=True)
    doc = load_document(s.cassette.read_bytes(), s.cassette)
    for e in doc["entries"]:
        e["recorded_at"] = stamp(ageing.clock() - 45 * DAY)
    s.cassette.write_bytes(render(doc["entries"], doc["values"]))

    r = session_for("aged", fake, mode="auto", on_expiry="rerecord", max_age="30d")
    new = chat(r, messages=[{"role": "user", "content": "news"}]).id
    summary = r.close(ok=True)
    assert new != old and fake.count() == 2 and summary["recorded"] == 1


def _tools_turns(session: ProxySession) -> tuple[str, str]:
    """Two turns of a tool call through the proxy: the call's id, and the final text."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = chat(session, messages=messages, tools=[weather])
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.to_dict(),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    return call.id, chat(session, messages=messages, tools=[weather]).choices[0].message.content


def test_a_turn_recorded_again_keeps_the_next_one_replaying(session_for: Open,
                                                            fake: FakeProvider) -> None:
    s = session_for("aliases", fake)
    old_id, text = _tools_turns(s)
    s.close(ok=True)
    doc = load_document(s.cassette.read_bytes(), s.cassette)  # the first turn forgotten
    s.cassette.write_bytes(render(doc["entries"][1:], doc["values"]))

    again = session_for("aliases", fake)  # auto: the first turn goes live, with a new id
    new_id, new_text = _tools_turns(again)
    summary = again.close(ok=True)
    # The second turn sends the new id back; keyed by its place, it still replays.
    assert new_id != old_id and new_text == text
    assert (summary["recorded"], summary["replayed"], fake.count()) == (1, 1, 3)


def test_volatile_fields_do_not_change_the_key(session_for: Open, fake: FakeProvider) -> None:
    s = session_for("volatile", fake)
    got = chat(s, messages=[{"role": "user", "content": "x"}], user="run-1").id
    s.close(ok=True)
    r = session_for("volatile", fake, mode="replay")
    assert chat(r, messages=[{"role": "user", "content": "x"}], user="run-2").id == got


def test_the_upstream_down_is_a_502_in_its_shape(session_for: Open,
                                                 fake: FakeProvider) -> None:
    s = session_for("down", fake)
    fake.stop()
    oa = post(s.base_url("openai") + "/v1/chat/completions", CHAT)
    assert oa.status_code == 502
    assert oa.json()["error"]["type"] == "dejacache_upstream_error"
    assert "upstream openai" in oa.json()["error"]["message"]
    an = post(s.base_url("anthropic") + "/v1/messages", {"model": "c", "messages": []},
              **{"anthropic-version": "2023-06-01"})
    assert an.status_code == 502 and an.json()["type"] == "error"


def test_an_unknown_upstream_is_a_404_naming_the_known_ones(session_for: Open) -> None:
    r = session_for("unknown")
    out = post(r.url + "/openia/v1/chat/completions", CHAT)
    assert out.status_code == 404
    message = out.json()["error"]["message"]
    assert "no upstream named 'openia'" in message
    for name in ("anthropic", "bedrock", "gemini", "openai"):
        assert name in message


def test_an_upstream_that_leads_back_is_refused(proxy_process: Any,
                                                session_for: Open) -> None:
    s = session_for("loop")
    s.route("openai", proxy_process.url + "/openai")
    out = post(s.base_url("openai") + "/v1/chat/completions", CHAT)
    assert out.status_code == 508 and "points back at it" in out.text


def test_the_session_header_routes_like_the_prefix(proxy_process: Any, session_for: Open,
                                                   fake: FakeProvider) -> None:
    s = session_for("header", fake)
    out = post(proxy_process.url + "/openai/v1/chat/completions", CHAT,
               **{"x-dejacache-session": s.id})
    assert out.status_code == 200
    summary = s.close(ok=True)
    assert summary["recorded"] == 1
    request = entries(s.cassette)[0]["request"]
    assert "x-dejacache-session" not in request.get("headers", {})


def test_a_python_recording_replays_through_the_proxy(session_for: Open, fake: FakeProvider,
                                                      proxy_dir: pathlib.Path) -> None:
    name = "from-python"
    path = proxy_dir / "test_a_python_recording_replays_through_the_proxy" / f"{name}.json"
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-py-test",
                       max_retries=0) as client, dejacache.cassette(path, "record"):
        got = client.chat.completions.create(**CHAT).choices[0].message.content
    r = session_for(name, fake, mode="replay")
    assert chat(r, messages=CHAT["messages"]).choices[0].message.content == got
    assert fake.count() == 1


@pytest.mark.parametrize("lib_name", ["httpx", "httpx2"])
@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "QUERY",
                                    "OPTIONS"])
@pytest.mark.parametrize("body", [b"", b'{"q": 1}'])
def test_a_restated_request_is_the_one_an_httpx_client_sends(lib_name: str, method: str,
                                                             body: bytes) -> None:
    """The proxy frames the request it sends on itself (``Host`` and the length, as
    ``Request(content=...)`` adds them): the same headers, in the same order, and content."""
    from dejacache.http._libs import lib_named
    from dejacache.proxying._forward import Forwarder
    from dejacache.proxying._http1 import RequestParser
    from dejacache.proxying.upstreams import Upstream

    lib = lib_named(lib_name)
    assert lib is not None
    head = (f"{method} /openai/v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
            "Connection: keep-alive, x-hop\r\nX-Hop: 1\r\nContent-Type: application/json\r\n"
            "Authorization: Bearer sk-t\r\nx-dejacache-session: s\r\nAccept: */*\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    [req] = RequestParser(1 << 20).feed(head + body)
    pending, items = Forwarder(lib).restate(req, Upstream("openai", "http://127.0.0.1:9"),
                                            "/v1/x?a=1")
    got = pending.request()
    assert (pending.method, pending.url, pending.content) == (got.method, got.url, got.content)
    want = lib.module.Request(method, "http://127.0.0.1:9/v1/x?a=1", content=body, headers=[
        ("Content-Type", "application/json"), ("Authorization", "Bearer sk-t"),
        ("Accept", "*/*")])
    assert (got.method, got.url, got.headers.raw, got.content) == (
        want.method, want.url, want.headers.raw, want.content)
    # what the proxy keys the request by: names as the client spelled them
    assert items == [(k.decode(), v.decode()) for k, v in got.headers.raw]


_KEYED_HEADS = [
    "Content-Type: application/json\r\nAuthorization: Bearer sk-t\r\n",
    # repeats, mixed case, names an identity or the answer depends on, spaces inside values
    ("content-type: application/json; charset=utf-8\r\nX-API-Key: sk-ant-x\r\n"
     "Anthropic-Version: 2023-06-01\r\nanthropic-beta: a, b\r\nANTHROPIC-BETA: c\r\n"
     "OpenAI-Organization: org-1\r\nCookie: a=1; b=2\r\nAccept:  */*  \r\n"
     "User-Agent: OpenAI/Python 1.0\r\nX-Stainless-Retry-Count: 0\r\n"
     "traceparent: 00-abc-def-01\r\nOpenAI-Beta: assistants=v2\r\n"),
    "Accept-Encoding: gzip\r\n",  # no content type
    # credential words only in the capitals
    "Content-Type: application/json\r\nX-AuthToken: SECRETMARK123\r\n",
]


def test_a_request_header_is_a_credential_by_the_spelling_it_reached_the_proxy_in(
        session_for: Open, fake: FakeProvider) -> None:
    """``X-AccessToken`` says ``access`` and ``token`` only in its capitals: the proxy keys
    it as the client spelled it, so it never reaches the cassette as it is."""
    s = session_for("spelled", fake)
    r = post(s.base_url("openai") + "/v1/chat/completions", CHAT,
             **{"X-AccessToken": "SECRETMARK123"})
    assert r.status_code == 200
    assert s.close(ok=True)["recorded"] == 1
    assert "SECRETMARK123" not in s.cassette.read_text()


@pytest.mark.parametrize("lib_name", ["httpx", "httpx2"])
@pytest.mark.parametrize("head", _KEYED_HEADS)
@pytest.mark.parametrize("target", ["/openai/v1/chat/completions",
                                    "/anthropic/v1/messages?beta=true", "/openai/v1/models"])
def test_the_proxy_keys_a_request_as_an_in_process_transport_does(
        tmp_path: pathlib.Path, lib_name: str, head: str, target: str) -> None:
    """The proxy hands the engine the headers it restated the request from instead of
    having them decoded again: the same key bytes, older key forms and identity as the
    request's own ``headers.multi_items()`` give, whatever the options."""
    from dejacache.http._libs import lib_named
    from dejacache.http.transport import Options, _prepare
    from dejacache.proxying._forward import Forwarder
    from dejacache.proxying._http1 import RequestParser
    from dejacache.proxying.upstreams import Upstream
    from dejacache.scope import current

    lib = lib_named(lib_name)
    assert lib is not None
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 5})
    name, _, rest = target[1:].partition("/")
    head_bytes = (f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:1\r\n{head}"
                  f"Content-Length: {len(body)}\r\n\r\n").encode()
    [req] = RequestParser(1 << 20).feed(head_bytes + body)
    pending, items = Forwarder(lib).restate(req, Upstream(name, "http://127.0.0.1:9"),
                                            "/" + rest)
    hreq = pending.request()

    def calls(given: list[tuple[str, str]] | None, path: pathlib.Path) -> list[Any]:
        # a block each: a block's identity table learns from the calls keyed in it; the
        # proxy keys the request it has not built (``Pending``) by the headers it restated
        request = hreq if given is None else pending
        with dejacache.cassette(path, "record"):
            eff = current()
            return [_prepare(lib, eff, request, hreq.content, opts, given) for opts in (
                Options(), Options(headers=False), Options(replayed=True),
                Options(volatile=("max_tokens",)))]

    for own, given in zip(calls(None, tmp_path / "a.json"), calls(items, tmp_path / "b.json"),
                          strict=True):
        assert (given.key, given.canonical, given.raw, given.name, given.provider,
                given.stream) == (own.key, own.canonical, own.raw, own.name, own.provider,
                                  own.stream)
        assert (given.identity is None) == (own.identity is None)
        if own.identity is not None and given.identity is not None:
            assert (given.identity.items, given.identity.keyed, given.identity.pending) == (
                own.identity.items, own.identity.keyed, own.identity.pending)


async def _stream_through(server: ProxyServer) -> bytes:
    url = await server.start()
    try:
        async with httpx2.AsyncClient(timeout=30) as client, client.stream(
                "POST", f"{url}/openai/v1/chat/completions",
                json={**CHAT, "stream": True}) as r:
            return b"".join([part async for part in r.aiter_raw()])
    finally:
        await server.stop()


def _server(tmp_path: pathlib.Path, fake: FakeProvider, **config: Any) -> ProxyServer:
    return ProxyServer(ProxyConfig(
        spec=SessionSpec(cassette=tmp_path / "s.json"), cassette=tmp_path / "s.json",
        upstreams={"openai": parse_upstream(f"openai={fake.url}", "test")},
        cassette_dir=tmp_path, **config))


async def test_a_stream_past_the_proxys_bound_reaches_the_client_and_is_not_recorded(
        tmp_path: pathlib.Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    # --max-recorded-stream 400: less than one answer of the fake provider (~2 kB).
    watched = watch_recorders(monkeypatch)
    with pytest.warns(dejacache.DejacacheWarning, match=r"openai.chat.completions \(model "
                      r"'gpt-test'\) stream \(POST /v1/chat/completions\) passed 400 bytes "
                      r"held for its recording; it was not recorded in .*s\.json.*"
                      r"--max-recorded-stream"):
        body = await _stream_through(_server(tmp_path, fake, max_recorded_stream=400))
    assert body.endswith(b"data: [DONE]\n\n") and body.count(b"data: ") > 5
    path = tmp_path / "s.json"
    assert not path.exists() or entries(path) == []
    (rec,) = watched
    assert rec.dropped and not rec.events and 0 < rec.peak <= 400


async def test_a_stream_within_the_proxys_bound_is_recorded(
        tmp_path: pathlib.Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    watched = watch_recorders(monkeypatch)
    body = await _stream_through(_server(tmp_path, fake, max_recorded_stream=64 * 1024))
    (entry,) = entries(tmp_path / "s.json")
    assert b"".join(e.encode() for _, e in entry["response"]["events"]) == body
    (rec,) = watched
    assert not rec.dropped and rec.peak > 400


def _unreadable(call: Any, resp: Any, raw: Any, **flags: Any) -> Any:
    raise ValueError(f"cannot read the answer for {' and '.join(call.credentials)}")


async def test_the_proxys_log_and_errors_hold_no_credential_of_the_request(
        tmp_path: pathlib.Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A failure of the exchange's own is the proxy's: logged with the URL it went to (its
    # ?key= included) and the traceback, answered with the exception's message. A transport
    # error's message, too. (Every answer the wire can bring is read now, a body that is
    # not what its content-encoding says included: the failure is made here.)
    monkeypatch.setattr(transport, "_read_whole", _unreadable)
    ups = {n: parse_upstream(f"{n}={u}", "test") for n, u in
           (("openai", fake.url), ("down", "http://127.0.0.1:9"))}
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=tmp_path / "d.json"),
                                     cassette=tmp_path / "d.json", upstreams=ups,
                                     cassette_dir=tmp_path))
    url = await server.start()
    secrets = ("QUERY-SECRET-4f1e", "plain-api-key-8c2d", "bearer-secret-6b7a")
    try:
        async with httpx2.AsyncClient(timeout=30) as client:
            answers = [await client.post(
                f"{url}/{name}/v1/chat/completions?key={secrets[0]}", json=CHAT,
                headers={"x-api-key": secrets[1], "authorization": f"Bearer {secrets[2]}"})
                for name in ("openai", "down")]
    finally:
        await server.stop()
    assert [a.status_code for a in answers] == [500, 502]
    log = capsys.readouterr().err
    assert "error answering POST" in log and "ValueError: cannot read the answer" in log
    for text in (log, *(a.text for a in answers)):
        assert not [s for s in secrets if s in text], text


def test_upstreams_of_the_users_asked_the_same_answer_each_their_own(
        session_for: Open, fake: FakeProvider) -> None:
    # Keys leave the host out: "a" and "b" asked the same thing keyed alike, and replayed in
    # the other order "b" was answered "a"'s recording.
    other = FakeProvider().start()
    try:
        routes = {"a": fake.url, "b": other.url}
        s = session_for("two-upstreams", upstreams=routes)  # (no fake: these routes only)
        live = {n: post(f"{s.url}/{n}/v1/chat/completions", CHAT).json() for n in "ab"}
        s.close(ok=True)
        r = session_for("two-upstreams", upstreams=routes, mode="replay")
        again = {n: post(f"{r.url}/{n}/v1/chat/completions", CHAT).json() for n in "ba"}
        assert again == live and fake.count() == other.count() == 1
        recorded = [e["request"]["headers"].get("x-dejacache-upstream")
                    for e in entries(s.cassette)]
        assert recorded == ["a", "b"]
    finally:
        other.stop()


@pytest.mark.parametrize(("path", "status", "body"), [
    ("things", 401, {"q": 1}), ("echo", 200, {"q": 1}), ("stream", 200, {"stream": True}),
])
def test_an_answer_quoting_the_requests_key_is_stored_without_it(
        session_for: Open, path: str, status: int, body: dict[str, Any]) -> None:
    # An error answer, a 200 quoting the key, a 200 stream whose later event does (passed
    # on as it comes): the client gets each as it came; the cassette, and so a replay, the
    # placeholder.
    with KeyRefuser() as server:
        def ask(session: ProxySession) -> httpx2.Response:
            return post(f"{session.url}/echo/v1/{path}?key={KeyRefuser.KEYS[2]}", body,
                        **KeyRefuser.HEADERS)

        s = session_for("quoting", upstreams={"echo": server.base})
        live = ask(s)
        assert live.status_code == status and all(k in live.text for k in KeyRefuser.KEYS)
        s.close(ok=True)
        data = s.cassette.read_bytes()
        assert b"Incorrect API key provided" in data
        assert [k for k in KeyRefuser.KEYS if k.encode() in data] == []
        again = ask(session_for("quoting", upstreams={"echo": server.base}, mode="replay"))
    assert again.status_code == status and again.text.count("<REDACTED>") == 3


def test_a_body_quoting_the_requests_keys_is_stored_and_keyed_with_tokens(
        session_for: Open) -> None:
    # A client handing its keys on in the body: through the proxy, the cassette holds a
    # token naming each, and a replay with other keys, quoted alike, is the same call.
    def ask(session: ProxySession, keys: tuple[str, ...]) -> httpx2.Response:
        body = {"handing_on": list(keys), "note": f"the key is {keys[0]}"}
        return post(f"{session.url}/echo/v1/echo?key={keys[2]}", body,
                    **{"x-api-key": keys[0], "authorization": f"Bearer {keys[1]}"})

    with KeyRefuser() as server:
        s = session_for("handing-on", upstreams={"echo": server.base})
        assert ask(s, KeyRefuser.KEYS).status_code == 200
        s.close(ok=True)
        data = s.cassette.read_bytes()
        assert [k for k in KeyRefuser.KEYS if k.encode() in data] == []
        (entry,) = entries(s.cassette)
        assert entry["request"]["body"]["handing_on"] == [
            "<credential:x-api-key>", "<credential:authorization>", "<credential:query:key>"]
    others = ("other-api-key-0f1e2d", "other-token-3c4b5a", "other-query-6d7e8f")
    again = ask(session_for("handing-on", upstreams={"echo": server.base}, mode="replay"),
                others)
    assert again.status_code == 200 and "Incorrect API key provided" in again.text


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("form", FORMS)
def test_an_answer_quoting_the_requests_key_in_another_spelling_is_stored_without_it(
        session_for: Open, form: str, spelling: str) -> None:
    with KeySpeller() as server:
        def ask(session: ProxySession) -> httpx2.Response:
            return post(f"{session.url}/echo{KeySpeller.route(f'{form}/{spelling}')}",
                        {"q": 1}, **KeySpeller.HEADERS)

        s = session_for("spelt", upstreams={"echo": server.base})
        live = ask(s)
        assert KeySpeller.held(live.text) == list(KeySpeller.KEYS)
        s.close(ok=True)
        data = s.cassette.read_text()
        assert "Incorrect API key provided" in data and KeySpeller.held(data) == []
        again = ask(session_for("spelt", upstreams={"echo": server.base}, mode="replay"))
    assert again.text.count("<REDACTED>") == 3 and KeySpeller.held(again.text) == []


# ---------------------------------------------------------------- a whole answer past the bound
# A download (not a stream) larger than --max-recorded-stream was read whole into the proxy's
# memory before the client got a byte. Now the client gets it as it arrives, nothing is
# recorded, and what the proxy held stays within the bound.

PIECE = 4096  # bytes the upstream writes at a time


class Download(RawUpstream):
    """A loopback upstream answering every request with ``wire`` (under ``encoding``), with
    its length or in chunks, PIECE bytes a write, as fast as the proxy takes them."""

    def __init__(self, wire: bytes, *, chunked: bool, encoding: str = "") -> None:
        super().__init__()
        self.wire, self.chunked, self.encoding = wire, chunked, encoding
        self.requests = 0

    async def answer(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        self.requests += 1
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
        if self.encoding:
            head += b"content-encoding: %s\r\n" % self.encoding.encode()
        head += (b"transfer-encoding: chunked\r\n" if self.chunked
                 else b"content-length: %d\r\n" % len(self.wire))
        writer.write(head + b"\r\n")
        for i in range(0, len(self.wire), PIECE):
            piece = self.wire[i:i + PIECE]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self.chunked else piece)
            await writer.drain()
        if self.chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()


BODY = random.Random(7).randbytes(256 * 1024)  # random: gzip leaves it as large
# case: (sent in chunks, not with a length; content-encoding; the bytes on the wire)
DOWNLOADS = {"length": (False, "", BODY), "chunked": (True, "", BODY),
             "gzip": (False, "gzip", gzipped(BODY))}
ASKED = {"file": "report.bin"}


@contextlib.asynccontextmanager
async def _downloading(tmp_path: pathlib.Path, case: str, mode: str | None = None,
                       **config: Any) -> AsyncIterator[tuple[ProxyServer, Download]]:
    chunked, encoding, wire = DOWNLOADS[case]
    upstream = Download(wire, chunked=chunked, encoding=encoding)
    ups = {"files": parse_upstream(f"files={await upstream.start()}", "test")}
    cassette = tmp_path / "s.json"
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=cassette, mode=mode),
                                     cassette=cassette, upstreams=ups, cassette_dir=tmp_path,
                                     **config))
    await server.start()
    try:
        yield server, upstream
    finally:
        await server.stop()
        await upstream.stop()


async def _download(url: str) -> tuple[httpx2.Headers, bytes]:
    """The answer's headers and its bytes as they came (not decoded)."""
    async with httpx2.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{url}/files/download", json=ASKED) as r:
        return r.headers, b"".join([part async for part in r.aiter_raw()])


@pytest.mark.parametrize("case", list(DOWNLOADS))
async def test_a_download_past_the_proxys_bound_reaches_the_client_as_it_arrives(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    chunked, encoding, wire = DOWNLOADS[case]
    watched = watch_passing(monkeypatch, _forward)
    with pytest.warns(dejacache.DejacacheWarning, match=r"http.* answer \(POST /download\) "
                      r"passed 4096 bytes held for its recording; it was not recorded in "
                      r".*s\.json.*--max-recorded-stream"):
        async with _downloading(tmp_path, case, max_recorded_stream=4096) as (server, _):
            headers, raw = await _download(server.url)
    # Every byte as the upstream sent it, its coding and length with it: the client's own
    # decoder undoes gzip once.
    assert raw == wire and headers.get("content-encoding", "") == encoding
    if chunked:
        assert "content-length" not in headers and headers["transfer-encoding"] == "chunked"
    else:
        assert headers["content-length"] == str(len(wire))
    if encoding:
        assert gzip.decompress(raw) == BODY
    path = tmp_path / "s.json"
    assert not path.exists() or entries(path) == []
    # The exchange, then the proxy's relay of its answer: each held the bound, and the one
    # read that passed it, at most; the rest went through as it came.
    exchange, relay = watched
    for w in watched:
        assert sum(w.held[:-1]) <= 4096 < sum(w.held) and w.held[-1] <= 64 * 1024
    assert sum(exchange.held) + exchange.pulled == sum(relay.held) + relay.pulled == len(wire)


async def test_a_download_past_the_bound_is_read_no_faster_than_the_client_takes_it(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = 16 * 1024 * 1024
    watched = watch_passing(monkeypatch, _forward)
    body = orjson.dumps(ASKED)
    request = (b"POST /files/download HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
               b"\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    with pytest.warns(dejacache.DejacacheWarning, match="passed 65536 bytes"):
        async with _downloading(tmp_path, "length", max_recorded_stream=65536) as (server, up):
            up.wire = bytes(range(256)) * (size // 256)
            with await small_window_client(server, request) as sock:
                await writes_waiting(server)  # the client reads nothing: the writes wait
                await asyncio.sleep(0.3)
                exchange = watched[0]
                taken = sum(exchange.held) + exchange.pulled
                # What sits in the socket buffers between (a few MiB at most), not the
                # whole answer the upstream would send at once.
                assert taken < size // 2
                data = await read_to_end(sock)
    assert data.endswith(up.wire[-1000:])
    head, _, rest = data.partition(b"\r\n\r\n")
    assert b"content-length: %d" % size in head.lower() and rest == up.wire


async def test_a_download_within_the_proxys_bound_is_recorded_and_replayed_with_its_length(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunked from the upstream: the proxy answers it whole, with its length, as before;
    # and replays it so.
    watched = watch_passing(monkeypatch, _forward)
    async with _downloading(tmp_path, "chunked") as (server, upstream):
        live_headers, live = await _download(server.url)
    (entry,) = entries(tmp_path / "s.json")
    async with _downloading(tmp_path, "chunked", "replay") as (server, upstream):
        headers, again = await _download(server.url)
        assert upstream.requests == 0
    assert live == again == BODY and watched == []
    assert live_headers["content-length"] == headers["content-length"] == str(len(BODY))
    assert "transfer-encoding" not in live_headers and entry["response"]["status"] == 200


async def test_a_download_not_recorded_is_relayed_as_it_arrives_too(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --mode off: the exchange hands the upstream's answer on unread, and the proxy held it
    # whole. Now it relays it by the same bound, with nothing to warn about.
    watched = watch_passing(monkeypatch, _forward)
    async with _downloading(tmp_path, "length", "off", max_recorded_stream=4096) as (
            server, _):
        headers, raw = await _download(server.url)
    assert raw == BODY and headers["content-length"] == str(len(BODY))
    (relay,) = watched
    assert sum(relay.held[:-1]) <= 4096 < sum(relay.held)
    assert sum(relay.held) + relay.pulled == len(BODY)


# ---------------------------------------------------------------- decompression bombs
# A few KB of gzip that inflate to megabytes: within the bound on the wire, past it decoded.

ZEROS = bytes(8 * 1024 * 1024)


class Received(Download):
    """A :class:`Download` that keeps each request's body as it came."""

    def __init__(self, wire: bytes, *, encoding: str = "") -> None:
        super().__init__(wire, chunked=False, encoding=encoding)
        self.bodies: list[bytes] = []

    async def answer(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        self.bodies.append(body)
        await super().answer(writer, body)


@contextlib.asynccontextmanager
async def _bombed(tmp_path: pathlib.Path, upstream: Received,
                  **config: Any) -> AsyncIterator[ProxyServer]:
    ups = {"files": parse_upstream(f"files={await upstream.start()}", "test")}
    cassette = tmp_path / "s.json"
    server = ProxyServer(ProxyConfig(spec=SessionSpec(cassette=cassette), cassette=cassette,
                                     upstreams=ups, cassette_dir=tmp_path, **config))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await upstream.stop()


async def test_an_answer_that_decodes_past_the_proxys_bound_reaches_the_client_unrecorded(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = count_decoded(monkeypatch)
    wire = gzipped(ZEROS)
    with pytest.warns(dejacache.DejacacheWarning, match=r"answer \(POST /download\) passed "
                      r"65536 bytes held for its recording; it was not recorded in .*s\.json"):
        async with _bombed(tmp_path, Received(wire, encoding="gzip"),
                           max_recorded_stream=65536) as server:
            headers, raw = await _download(server.url)
    # As the upstream sent it: the client's own decoder inflates it, if it will.
    assert raw == wire and headers["content-encoding"] == "gzip"
    assert headers["content-length"] == str(len(wire))
    path = tmp_path / "s.json"
    assert not path.exists() or entries(path) == []
    assert made and max(made) <= 65536 + 1


async def test_a_request_body_that_would_decode_to_a_bomb_is_relayed_and_keyed_as_it_came(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = count_decoded(monkeypatch)
    bombs = [gzipped(ZEROS), gzipped(ZEROS + b"1")]
    upstream = Received(b'{"ok":true}')
    async with _bombed(tmp_path, upstream) as server, \
            httpx2.AsyncClient(timeout=30) as client:
        for bomb in bombs:
            r = await client.post(f"{server.url}/files/upload", content=bomb,
                                  headers={"content-encoding": "gzip",
                                           "content-type": "application/json"})
            assert r.status_code == 200
    assert upstream.bodies == bombs and made == []  # relayed unchanged, never inflated
    stored = [e["request"]["body"] for e in entries(tmp_path / "s.json")]
    assert [b["size"] for b in stored] == [len(b) for b in bombs]
    assert all(set(b) == {"xxh3_128", "size"} for b in stored)
    assert stored[0]["xxh3_128"] != stored[1]["xxh3_128"]


@pytest.mark.parametrize(("headers", "named", "not_named"), [
    ({"x-api-key": PLACEHOLDER_KEY}, "ANTHROPIC_API_KEY was unset", "OPENAI_API_KEY"),
    ({"authorization": f"Bearer {PLACEHOLDER_KEY}"}, "OPENAI_API_KEY was unset",
     "ANTHROPIC_API_KEY"),
])
def test_a_live_call_with_the_placeholder_key_names_the_variable_it_came_from(
        session_for: Open, fake: FakeProvider, headers: dict[str, str], named: str,
        not_named: str) -> None:
    # The refusal named OPENAI_API_KEY / ANTHROPIC_API_KEY whatever the call (and none of
    # the three others the proxy sets for its command); it goes by where the key was sent.
    import http.client
    import urllib.parse

    s = session_for("placeholder", fake)
    # Sent with http.client: under CI this test process holds the placeholder itself, and
    # its httpx transports refuse to send it (the guard this proxy refusal mirrors).
    at = urllib.parse.urlsplit(s.url)
    conn = http.client.HTTPConnection(at.hostname or "", at.port, timeout=30)
    try:
        conn.request("POST", f"{at.path}/anthropic/v1/messages",
                     orjson.dumps({"model": "m", "messages": []}),
                     {"content-type": "application/json", **headers})
        r = conn.getresponse()
        status, text = r.status, r.read().decode()
    finally:
        conn.close()
    assert status >= 500 and named in text and not_named not in text
    assert fake.count() == 0
