"""Pure parts: canonical requests, id aliases, provider detection, stored values."""

from __future__ import annotations

import orjson
import pytest

from dejacache.http import exchange
from dejacache.http.aliases import AliasTable
from dejacache.http.exchange import (
    canonical_request,
    comparable,
    legacy_request,
    replay_headers,
    response_value,
    storable,
    stored_headers,
    unechoed,
)
from dejacache.http.headers import credential_values
from dejacache.http.providers import detect
from dejacache.http.providers.anthropic import PROVIDER as ANTHROPIC
from dejacache.http.providers.openai import PROVIDER as OPENAI


def canon(body: bytes, ct: str = "application/json", *, aliases: AliasTable | None = None,
          query: list[tuple[str, str]] | None = None) -> dict[str, object]:
    raw, _ = canonical_request("POST", "/v1/chat/completions", query or [], body, ct, OPENAI,
                               aliases, ())
    return orjson.loads(raw)  # type: ignore[no-any-return]


def test_key_order_and_volatile_fields_do_not_matter() -> None:
    a = canon(b'{"model": "m", "user": "u1", "messages": [], "traceparent": "x"}')
    b = canon(b'{"messages": [], "model": "m", "user": "u2"}')
    assert a == b == {"method": "POST", "path": "/v1/chat/completions", "headers": {},
                      "body": {"messages": [], "model": "m"}}


@pytest.mark.parametrize("kept", ["!user", "!User", "!safetyIdentifier", "!traceparent"])
def test_a_kept_default_body_field_is_keyed_in_any_spelling(kept: str) -> None:
    name = {"!User": "user", "!safetyIdentifier": "safety_identifier"}.get(kept, kept[1:])

    def body(v: str) -> dict[str, object]:
        raw, _ = canonical_request("POST", "/v1/chat/completions", [],
                                   orjson.dumps({"model": "m", name: v}), "application/json",
                                   OPENAI, None, (kept,))
        return orjson.loads(raw)["body"]  # type: ignore[no-any-return]

    assert body("a") == {"model": "m", name: "a"} and body("a") != body("b")


def test_secret_query_parameters_are_dropped() -> None:
    got = canon(b"", query=[("api-version", "1"), ("api_key", "s"), ("KEY", "s"),
                            ("sig", "s"), ("x", "1"), ("x", "2")])
    assert got["query"] == {"api-version": "1", "x": ["1", "2"]}


def test_multipart_boundary_is_not_part_of_the_key() -> None:
    a = canon(b"--b1\r\nfile\r\n--b1--", "multipart/form-data; boundary=b1")
    b = canon(b"--b2\r\nfile\r\n--b2--", "multipart/form-data; boundary=b2")
    assert a == b


def test_large_binary_bodies_are_keyed_by_digest() -> None:
    got = canon(bytes(range(256)) * 40, "application/octet-stream")
    assert set(got["body"]) == {"xxh3_128", "size"}  # type: ignore[arg-type]


def test_ids_are_aliased_by_position() -> None:
    t = AliasTable()
    t.learn(["chatcmpl-1", "call_A"])
    t.learn(["call_A", "call_B"])
    body = {"messages": [{"tool_call_id": "call_B"}, {"tool_calls": [{"id": "call_A"}]}],
            "previous_response_id": "chatcmpl-1", "other": "call_Z"}
    got = canon(orjson.dumps(body), aliases=t)["body"]
    assert got == {"messages": [{"tool_call_id": "<id:3>"}, {"tool_calls": [{"id": "<id:2>"}]}],
                   "previous_response_id": "<id:1>", "other": "call_Z"}
    assert body["other"] == "call_Z" and body["messages"][0]["tool_call_id"] == "call_B"


def test_stream_flag_is_reported() -> None:
    _, stream = canonical_request("POST", "/v1/chat/completions", [], b'{"stream": true}',
                                  "application/json", OPENAI, None, ())
    assert stream


def test_provider_detection_and_endpoint_names() -> None:
    h = {"anthropic-version": "2023-06-01"}
    assert detect("127.0.0.1", "/v1/messages", h).endpoint("x", "/v1/messages") == \
        "anthropic.messages"
    assert detect("127.0.0.1", "/v1/messages", {}).name == "http"
    for path, name in [("/v1/chat/completions", "openai.chat.completions"),
                       ("/v1/responses", "openai.responses"),
                       ("/openai/deployments/d/embeddings", "openai.embeddings")]:
        prov = detect("127.0.0.1", path, {})
        assert prov.endpoint("127.0.0.1", path) == name
    assert detect("api.openai.com", "/v1/files", {}).endpoint("", "/v1/files") == "openai.files"
    assert detect("example.com:8080", "/x", {}).endpoint("example.com", "/x") == \
        "http.example.com"


def test_anthropic_stream_usage_and_ids() -> None:
    events = [
        [0.0, 'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
              '"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'],
        [0.1, 'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
              '"content_block":{"type":"tool_use","id":"toolu_9","input":{}}}\n\n'],
        [0.2, 'event: message_delta\ndata: {"type":"message_delta","usage":'
              '{"output_tokens":7}}\n\n'],
    ]
    v = response_value(200, [("content-type", "text/event-stream"), ("set-cookie", "s")],
                       "text/event-stream", ANTHROPIC, events=events)
    assert v["usage"] == {"input_tokens": 5, "output_tokens": 7}
    assert v["ids"] == ["msg_1", "toolu_9"]
    assert v["headers"] == [["content-type", "text/event-stream"], ["set-cookie", "<REDACTED>"]]


def test_transient_failures_are_kept_only_by_sequenced_stores() -> None:
    assert storable({"status": 400}, False)
    assert not storable({"status": 500}, False)
    assert not storable({"status": 429}, False)
    assert not storable({"error": {"type": "ReadTimeout"}}, False)
    assert storable({"status": 500}, True)


def test_body_credentials_are_masked_whatever_else_the_body_holds() -> None:
    """``password`` used to be masked only when a volatile field such as ``user``
    or ``trace_id`` happened to be in the body too (the mask ran inside the volatile strip)."""
    for extra in ({}, {"user": "u"}, {"trace_id": "t"}):
        got = canon(orjson.dumps({"model": "m", "password": "hunter2", **extra}))
        other = canon(orjson.dumps({"model": "m", "password": "hunter3", **extra}))
        assert "hunter2" not in orjson.dumps(got).decode()
        assert str(got["body"]["password"]).startswith("<secret:")  # type: ignore[index]
        assert got != other  # a different credential is a different request


def test_credential_pairs_in_a_body_are_masked_as_fields_are() -> None:
    """``[["Authorization", "..."]]`` in a JSON body was keyed as it was; its value is masked
    now, like a ``password`` field's: two credentials are still two requests."""
    def body(secret: str) -> bytes:
        return orjson.dumps({"model": "m", "headers": [["Authorization", secret],
                                                       ["accept", "text/csv"]]})

    got, other = canon(body("hunter2")), canon(body("hunter3"))
    assert "hunter2" not in orjson.dumps(got).decode() and got != other
    (name, mask), plain = got["body"]["headers"]  # type: ignore[index]
    assert name == "Authorization" and mask.startswith("<secret:")
    assert plain == ["accept", "text/csv"]
def test_trace_ids_are_keyed_in_the_query_and_the_bodys_own_fields_only() -> None:
    def trace(tid: str, meta: str, query: str) -> dict[str, object]:
        body = {"model": "m", "trace_id": tid, "metadata": {"trace_id": meta},
                "messages": [{"role": "user", "content": "c", "span_id": meta}]}
        return canon(orjson.dumps(body), query=[("trace_id", query)])

    assert trace("a", "m1", "q") != trace("b", "m1", "q")
    assert trace("a", "m1", "q") != trace("a", "m1", "r")
    assert trace("a", "m1", "q") == trace("a", "m2", "q") == {
        "method": "POST", "path": "/v1/chat/completions", "headers": {},
        "query": {"trace_id": "q"}, "body": {"model": "m", "trace_id": "a", "metadata": {},
                                             "messages": [{"role": "user", "content": "c"}]}}


def test_credential_query_parameters_that_change_the_answer_are_masked() -> None:
    a = canon(b"", query=[("code", "oauth-1"), ("page", "2")])
    b = canon(b"", query=[("code", "oauth-2"), ("page", "2")])
    assert "oauth-1" not in orjson.dumps(a).decode() and a != b


def test_every_response_header_is_stored_with_credentials_masked() -> None:
    got = stored_headers([
        ("Content-Type", "application/json"), ("Mcp-Session-Id", "s-1"), ("ETag", '"v1"'),
        ("Link", "<https://api.example/items?page=2&access_token=tok-123>; rel=next"),
        ("Set-Cookie", "sid=1"), ("Set-Cookie", "other=2"), ("X-Api-Key", "k"),
        ("OpenAI-Organization", "org-secret"), ("X-Debug", "Bearer abcdefghijklmnopqrstu"),
        ("Content-Encoding", "gzip"), ("Content-Length", "17"), ("Transfer-Encoding", "x"),
        ("Date", "Mon, 01 Jan 2024 00:00:00 GMT"), ("x-ratelimit-remaining-tokens", "9"),
    ])
    assert got == [
        ["content-type", "application/json"], ["mcp-session-id", "s-1"], ["etag", '"v1"'],
        ["link", "<https://api.example/items?page=2&access_token=<REDACTED>>; rel=next"],
        ["set-cookie", "<REDACTED>"], ["set-cookie", "<REDACTED>"],
        ["x-api-key", "<REDACTED>"], ["openai-organization", "<REDACTED>"],
        ["x-debug", "Bearer <REDACTED>"],
        ["date", "Mon, 01 Jan 2024 00:00:00 GMT"], ["x-ratelimit-remaining-tokens", "9"],
    ]
    # A replay never hands back a masked credential (a cookie jar would keep and send it).
    assert [k for k, _ in replay_headers(got)] == [
        "content-type", "mcp-session-id", "etag", "link", "x-debug", "date",
        "x-ratelimit-remaining-tokens"]


def test_a_response_header_is_a_credential_by_the_spelling_it_came_in() -> None:
    """``X-AccessToken`` is ``access`` + ``token`` in its capitals only; it is stored
    lower-cased like every name, and a bare ``Token`` header is a credential too (a body's
    ``token`` is a word: that exemption is not the headers')."""
    got = stored_headers([("X-AccessToken", "SECRETMARK123"), ("X-Session-Token", "s"),
                          ("Token", "t"), ("X-Shown", "Kept-As-Is"), ("X-Accesstoken", "x")])
    assert got == [["x-accesstoken", "<REDACTED>"], ["x-session-token", "<REDACTED>"],
                   ["token", "<REDACTED>"], ["x-shown", "Kept-As-Is"],
                   ["x-accesstoken", "x"]]
    assert replay_headers(got) == [("x-shown", "Kept-As-Is"), ("x-accesstoken", "x")]


def test_volatile_headers_are_kept_but_not_compared() -> None:
    def answer(date: str, rid: str, etag: str) -> dict[str, object]:
        return response_value(200, [("date", date), ("x-request-id", rid), ("etag", etag),
                                    ("x-ratelimit-remaining-requests", rid)],
                              "application/json", OPENAI, body=b"{}")

    a, b = answer("d1", "r1", "e1"), answer("d2", "r2", "e1")
    assert a != b and comparable(a) == comparable(b) == {
        "status": 200, "headers": [["etag", "e1"]], "json": {}}
    assert comparable(a) != comparable(answer("d1", "r1", "e2"))  # a changed ETag is a change


def test_a_provider_can_say_a_request_streams_by_its_path() -> None:
    from dejacache.http.providers.gemini import PROVIDER as GEMINI

    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    _, stream = canonical_request("POST", path, [("alt", "sse"), ("key", "k")],
                                  b'{"contents": []}', "application/json", GEMINI, None, ())
    assert stream
    raw, stream = canonical_request("POST", path.replace("streamG", "g"), [("key", "k")],
                                    b'{"contents": []}', "application/json", GEMINI, None, ())
    assert not stream and b'"query"' not in raw  # the API key is no part of the key


def test_ndjson_bodies_are_kept_line_by_line_and_read_for_usage_and_model() -> None:
    from dejacache.http.providers.ollama import PROVIDER as OLLAMA

    lines = [b'{"model":"m","message":{"content":"a\xe2\x80\xa8b"},"done":false}\n',
             b'{"model":"m","done":true,"prompt_eval_count":3,"eval_count":5}\n']
    value = response_value(200, [("content-type", "application/x-ndjson")],
                           "application/x-ndjson", OLLAMA, body=b"".join(lines))
    # One event per line: U+2028 inside a JSON string does not cut one.
    assert [t.encode() for _, t in value["events"]] == lines
    assert value["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert value["model"] == "m"
    # A failure's body stays whole; text that is not UTF-8 stays bytes.
    err = response_value(500, [], "application/x-ndjson", OLLAMA, body=b'{"error":"x"}\n')
    assert "events" not in err and "usage" not in err
    raw = response_value(200, [], "application/x-ndjson", OLLAMA, body=b"\xff\n")
    assert raw["bytes"] == b"\xff\n"


def test_a_provider_without_a_model_stores_none() -> None:
    value = response_value(200, [], "application/json", OPENAI, body=b'{"model": "gpt"}')
    assert "model" not in value  # OpenAI's answers name it in the body already


@pytest.mark.parametrize("body", [
    b'{"model": "m", "messages": [{"role": "user", "content": null}]}',  # a None mark
    b'{"model": "m"}', b"", b"plain text", b"grant_type=x&client_secret=y",
])
@pytest.mark.parametrize("query", [[], [("limit", "5"), ("method", "x")]])
def test_the_legacy_form_cut_from_the_new_is_the_legacy_form(body: bytes,
                                                             query: list[tuple[str, str]]) -> None:
    """Old recordings are found by the form keys had before headers counted: cut out of the
    new form (a long request is canonicalised once), it must be that form exactly."""
    ct = "application/x-www-form-urlencoded" if b"grant_type" in body else "application/json"
    args = ("POST", "/v1/chat/completions", query, body, ct, OPENAI, None, ())
    new, _ = canonical_request(*args, headers={"accept": "text/csv"}, identity=["a@b#" + "0" * 32])
    old, _ = canonical_request(*args, legacy=True)
    assert legacy_request(new, *args, headers={"accept": "text/csv"},
                          identity=["a@b#" + "0" * 32]) == old
    assert b'"headers"' not in old and b'"identity"' not in old


_KEY = "odd-key-9f2c"
_CREDS = [f"Bearer {_KEY}", _KEY]


@pytest.mark.parametrize(("value", "stored"), [
    ({"json": {"error": {"message": f"Incorrect API key provided: {_KEY}"}}},
     {"json": {"error": {"message": "Incorrect API key provided: <REDACTED>"}}}),
    ({"headers": [["x-why", f"Bearer {_KEY} refused"]], "text": f"?key={_KEY}&x=1"},
     {"headers": [["x-why", "<REDACTED> refused"]], "text": "?key=<REDACTED>&x=1"}),
    ({"messages": [[0.1, {"json": {"type": "error", "n": [1, _KEY]}}]],
      "close": {"code": 4001, "reason": _KEY}},
     {"messages": [[0.1, {"json": {"type": "error", "n": [1, "<REDACTED>"]}}]],
      "close": {"code": 4001, "reason": "<REDACTED>"}}),
    # bytes (a body that was not text) cannot be written as JSON: looked through node by node
    ({"bytes": b"\x00", "status": 401, "text": _KEY}, {"bytes": b"\x00", "status": 401,
                                                      "text": "<REDACTED>"}),
    ({"bytes": b"\xff" + _KEY.encode()}, {"bytes": b"\xff<REDACTED>"}),
])
def test_an_answer_is_stored_without_the_credentials_it_quotes(
        value: dict[str, object], stored: dict[str, object]) -> None:
    assert unechoed(value, _CREDS) == stored
    assert _KEY in str(value)  # the caller's answer is not touched


def test_an_answer_quoting_no_credential_is_kept_as_it_is() -> None:
    value = {"json": {"error": {"message": "Incorrect API key provided: sk-...4f"}}}
    assert unechoed(value, _CREDS) is value
    assert unechoed(value, []) is value


def test_a_credential_json_escapes_is_found_as_it_was_written() -> None:
    odd = 'quote"and\\slash/key'
    value = {"json": {"message": f"bad key {odd}"}}
    assert unechoed(value, [odd]) == {"json": {"message": "bad key <REDACTED>"}}


_LONG_KEY = "sk-test-echo-7f3a9c-no-known-shape"
_OK_HEADERS = [("content-type", "application/json")]


@pytest.mark.parametrize("status", [200, 401])
@pytest.mark.parametrize("spelled", [
    _LONG_KEY,
    _LONG_KEY.replace("-", "\\u002d"),  # a writer escaping characters it need not
    "sk\\/test-echo-7f3a9c-no-known-shape",  # (a key with a slash, PHP-style)
])
def test_a_live_answer_of_any_status_is_stored_without_the_credentials(
        status: int, spelled: str) -> None:
    key = orjson.loads(f'"{spelled}"'.encode())
    body = f'{{"id": "x", "error": {{"message": "bad key {spelled}"}}}}'.encode()
    value = response_value(status, _OK_HEADERS, "application/json", OPENAI, body=body,
                           credentials=[key])
    assert value["json"]["error"]["message"] == "bad key <REDACTED>"
    assert key not in str(value)


def test_basic_credentials_echoed_as_sent_are_found_in_any_spelling() -> None:
    # A debug echo of the request's headers: the base64 as sent, padding percent-encoded.
    sent = credential_values([("Authorization", "Basic YWxpY2U6aHVudGVyMjAyNA==")])
    body = b'{"headers": {"Authorization": "Basic YWxpY2U6aHVudGVyMjAyNA%3d%3D"}}'
    value = response_value(200, _OK_HEADERS, "text/plain", OPENAI, body=body,
                           credentials=sent)
    assert value["text"] == '{"headers": {"Authorization": "<REDACTED>"}}'


def test_a_body_not_spelling_a_credential_leaves_only_the_headers_to_look_at() -> None:
    body = orjson.dumps({"text": "nothing to hide " * 100})
    kept = response_value(200, _OK_HEADERS, "application/json", OPENAI, body=body,
                          credentials=[_LONG_KEY])
    assert kept == response_value(200, _OK_HEADERS, "application/json", OPENAI, body=body)
    echoed = response_value(200, [*_OK_HEADERS, ("x-debug", f"saw {_LONG_KEY}")],
                            "application/json", OPENAI, body=body, credentials=[_LONG_KEY])
    assert ["x-debug", "saw <REDACTED>"] in echoed["headers"]


def test_stream_events_are_stored_without_the_credentials() -> None:
    events = [[0.0, 'data: {"delta": "hi"}\n\n'],
              [0.1, f'event: error\ndata: {{"message": "bad key {_LONG_KEY}"}}\n\n']]
    value = response_value(200, [("content-type", "text/event-stream")], "text/event-stream",
                           OPENAI, events=events, credentials=[_LONG_KEY])
    assert value["events"][1][1] == 'event: error\ndata: {"message": "bad key <REDACTED>"}\n\n'
    assert _LONG_KEY in events[1][1]  # the events as read are not touched


# ------------------------------------------------------------------ a body quoting its own key

_OWN_KEY = "k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd"
_OWN = [("x-api-key", _OWN_KEY), ("Authorization", "Bearer tok/en+9f3c2b7e1d==")]


@pytest.mark.parametrize(("body", "stored"), [
    (b'{"a": {"b": ["use k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd"]}}',
     b'{"a": {"b": ["use <credential:x-api-key>"]}}'),
    # JSON's escapes, a form's percent-encoding, the Bearer token alone
    (b'{"t": "tok\\/en+9f3c2b7e1d=="}', b'{"t": "<credential:authorization>"}'),
    (b"f=tok%2Fen%2B9f3c2b7e1d%3D%3D&g=1", b"f=<credential:authorization>&g=1"),
    # base64 inside a string: the run and the groups either side of it
    (b'{"blob": "dG9rZW49azdRejlXbVh2MkxwNFJ0OFluM0JjNkhk"}',
     b'{"blob": "dG9r<credential:x-api-key>"}'),
    # a placeholder the body held already stays what it was
    (b"<REDACTED> k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd", b"<REDACTED> <credential:x-api-key>"),
])
def test_a_body_quoting_its_own_credentials_holds_tokens_naming_them(
        body: bytes, stored: bytes) -> None:
    assert exchange.unquoted(body, _OWN) == stored


def test_a_body_quoting_no_credential_is_kept_as_it_is() -> None:
    body = orjson.dumps({"messages": [{"role": "user", "content": "hi " * 700}]})
    assert exchange.unquoted(body, _OWN) is body
    assert exchange.unquoted(b"k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd", [("accept", _OWN_KEY)]) == (
        b"k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd")  # not a credential where it came from
    assert exchange.unquoted(b"q=k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd", [],
                             [("key", _OWN_KEY)]) == b"q=<credential:query:key>"
