"""Request headers in HTTP keys (``dejacache/http/headers.py``): what changes the answer is
keyed, transport and telemetry are not, and the user moves a header either way."""

from __future__ import annotations

import base64
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import requests
from fake_tool_api import ToolAPI
from http_support import CLIENTS, fetch

import dejacache
from dejacache.errors import ConfigurationError, ReplayMiss
from dejacache.http.headers import TRANSPORT, classify, credential_values


@pytest.fixture
def tool() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


# ------------------------------------------------------------------ the rules, as a table

@pytest.mark.parametrize(("name", "value", "kind"), [
    # negotiation and versions: keyed as they are
    ("Accept", "text/csv", "plain"),
    ("Accept-Language", "pt-PT", "plain"),
    ("Range", "bytes=0-99", "plain"),
    ("If-None-Match", '"abc"', "plain"),
    ("anthropic-version", "2023-06-01", "plain"),
    ("anthropic-beta", "prompt-caching-2024-07-31", "plain"),
    ("OpenAI-Beta", "assistants=v2", "plain"),
    ("X-GitHub-Api-Version", "2022-11-28", "plain"),
    ("X-Tenant", "acme", "plain"),  # unknown: keyed, since a miss is safe
    # who is asking: a digest only
    ("Authorization", "Bearer alice-token", "identity"),
    ("Cookie", "sid=1", "identity"),
    ("X-Api-Key", "k", "identity"),
    ("api-key", "k", "identity"),
    ("X-Goog-Api-Key", "k", "identity"),
    ("OpenAI-Organization", "org-1", "identity"),
    ("OpenAI-Project", "proj_1", "identity"),
    ("X-RapidAPI-Key", "k", "identity"),
    ("PRIVATE-TOKEN", "glpat-x", "identity"),
    ("Ocp-Apim-Subscription-Key", "k", "identity"),
    ("X-Custom", "sk-proj-" + "a" * 40, "identity"),  # a secret-shaped value
    # credential words told apart only by their capitals, and Authentication
    ("X-AuthToken", "t", "identity"),
    ("X-AccessKey", "k", "identity"),
    ("X-ClientSecret", "s", "identity"),
    ("X-SessionId", "s", "identity"),
    ("Authentication", "Basic dTpw", "identity"),
    ("X-Authentication", "t", "identity"),
    # credential words a name is made of: a JWT, a pass (phrase, code), an HMAC
    ("X-Jwt", "t", "identity"),
    ("X-User-Jwt", "t", "identity"),
    ("X-Pass", "p", "identity"),
    ("X-Passphrase", "p", "identity"),
    ("X-Hmac", "h", "identity"),
    ("X-Hmac-Signature", "h", "identity"),
    # one-time codes, PINs, signing and user:password words
    ("X-Otp", "123456", "identity"),
    ("X-Pin", "1234", "identity"),
    ("X-Sign", "s", "identity"),
    ("X-Signature", "s", "identity"),
    ("X-Userpass", "u:p", "identity"),
    # transport and telemetry: left out
    ("User-Agent", "OpenAI/Python 2.1", "out"),
    ("X-Stainless-Retry-Count", "1", "out"),
    ("X-Stainless-Package-Version", "2.1.0", "out"),
    ("traceparent", "00-abc-def-01", "out"),
    ("X-Request-ID", "r1", "out"),
    ("Date", "Tue, 01 Dec 2026 10:00:00 GMT", "out"),
    ("Content-Length", "10", "out"),
    ("Content-Type", "multipart/form-data; boundary=x1", "plain"),
    ("Content-Type", "text/plain; charset=latin-1", "plain"),
    ("Accept-Encoding", "gzip", "out"),
    ("Connection", "keep-alive", "out"),
    ("Idempotency-Key", "stainless-retry-1", "out"),
    ("amz-sdk-invocation-id", "u-u-i-d", "out"),
    ("X-Amz-Date", "20261201T100000Z", "out"),
    ("mcp-session-id", "s1", "out"),
])
def test_each_header_is_keyed_as_what_it_is(name: str, value: str, kind: str) -> None:
    got = classify([(name, value)], provider=False)
    seen = ("plain" if got.plain else "identity" if got.identity else "out")
    assert seen == kind
    if kind == "plain":
        assert got.plain == {name.lower(): value.partition("; boundary")[0]}


@pytest.mark.parametrize(("value", "keyed"), [
    ("application/json", "application/json"),
    ("Application/JSON; charset=UTF-8", "application/json"),  # what no charset reads as
    ("text/plain; charset=utf8", "text/plain"),
    ("text/plain; charset=ISO-8859-1", "text/plain; charset=iso-8859-1"),
    ('application/json; profile="a;b"; charset=latin-1',
     "application/json; charset=latin-1; profile=a;b"),
    ('multipart/form-data; boundary="x;1"; charset=latin-1',
     "multipart/form-data; charset=latin-1"),
    ("text/plain; charset=latin-1; boundary=x; ???", "text/plain; charset=latin-1; ???"),
])
def test_content_type_keys_what_the_body_is_without_its_framing(value: str, keyed: str
                                                               ) -> None:
    assert classify([("Content-Type", value)], provider=False).plain == {
        "content-type": keyed}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_same_bytes_in_another_charset_are_another_question(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str) -> None:
    """``caf\xc3\xa9`` is "café" as UTF-8 and "cafÃ©" as Latin-1: the server answers
    each its own; the charset once was cut from the key with the boundary."""
    path = tmp_path / "c.json"

    def text(charset: str) -> Any:
        return fetch(client, "POST", tool.url + "/text",
                     {"Content-Type": f"text/plain; charset={charset}"}, "café".encode())

    with dejacache.cassette(path, mode="record"):
        live = text("utf-8")
    assert live[1]["text"] == "café"
    with dejacache.cassette(path, mode="replay"), \
            pytest.raises(ReplayMiss, match="charset=latin-1"):
        text("latin-1")  # first in its block: the recording is not used up
    with dejacache.cassette(path, mode="replay"):
        assert text("UTF-8") == live


def test_a_providers_api_key_is_a_role_but_its_account_headers_count() -> None:
    heads = [("Authorization", "Bearer sk-real"), ("x-api-key", "sk-ant-x"),
             ("OpenAI-Organization", "org-1"), ("Accept", "application/json")]
    got = classify(heads, provider=True)
    assert got.plain == {"accept": "application/json"}
    assert got.identity == (("openai-organization", "org-1"),)


def test_the_user_moves_a_header_either_way() -> None:
    heads = [("User-Agent", "my-client/2"), ("X-Tenant", "acme")]
    assert classify(heads, provider=False).plain == {"x-tenant": "acme"}
    got = classify(heads, provider=False, volatile=frozenset({"x-tenant"}),
                   keep=frozenset({"user-agent"}))
    assert got.plain == {"user-agent": "my-client/2"}


def test_repeated_headers_are_joined_in_order_and_names_are_case_blind() -> None:
    got = classify([("Accept", "text/csv"), ("ACCEPT", "application/json")], provider=False)
    assert got.plain == {"accept": "text/csv, application/json"}


def test_credential_words_are_read_from_the_clients_spelling() -> None:
    # Lower-cased, ``x-authtoken`` is one unknown word; the key still names it in lower case,
    # and one spelling that says "credential" makes the joined header identity.
    got = classify([("x-authtoken", "a"), ("X-AuthToken", "b")], provider=False)
    assert got == ({}, (("x-authtoken", "a, b"),))
    assert classify([("X-Keyword", "k")], provider=False).plain == {"x-keyword": "k"}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_header_named_with_credential_words_never_reaches_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str) -> None:
    """``X-Jwt``, ``X-Pass``, ``X-Hmac``: keyed and stored as they were sent, as neither a
    credential name nor made of the words that make one, and their values no known shape."""
    path = tmp_path / "c.json"
    sent = {"X-Jwt": "jwt-value-0123456789", "X-Pass": "pass-value-0123456789",
            "X-Hmac": "hmac-value-0123456789"}
    with dejacache.cassette(path, mode="record"):
        fetch(client, "GET", tool.url + "/me", {"Authorization": "Bearer alice-token", **sent})
    text = path.read_text()
    assert [v for v in sent.values() if v in text] == []


@pytest.mark.parametrize("client", CLIENTS)
def test_otp_pin_sign_and_userpass_headers_never_reach_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str) -> None:
    """``X-Otp``, ``X-Pin``, ``X-Sign``, ``X-Signature``, ``X-Userpass``: a one-time code, a
    PIN, a request signature and a user's password say who is asking; a replay still hits."""
    path = tmp_path / "c.json"
    sent = {"X-Otp": "otp-value-0123456789", "X-Pin": "pin-value-0123456789",
            "X-Sign": "sign-value-0123456789", "X-Signature": "sigv-value-0123456789",
            "X-Userpass": "alice:userpass-0123456789"}
    headers = {"Authorization": "Bearer alice-token", **sent}
    with dejacache.cassette(path, mode="record"):
        live = fetch(client, "GET", tool.url + "/me", headers)
    text = path.read_text()
    assert [v for v in sent.values() if v in text] == []
    with dejacache.cassette(path, mode="replay"):
        assert fetch(client, "GET", tool.url + "/me", headers) == live


def test_a_camel_case_credential_header_never_reaches_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        _me(tool.url, **{"X-AuthToken": "camel-secret-1234", "Authentication": "camel-secret-5678"})
    assert b"camel-secret" not in path.read_bytes()


def test_the_documented_transport_list_is_the_one_applied() -> None:
    for name in TRANSPORT:
        assert classify([(name, "x")], provider=False) == ({}, ())


def test_bang_is_for_names_only() -> None:
    with pytest.raises(ConfigurationError, match="'!' keys one field or header"):
        dejacache.scope(volatile=["!headers.accept"])


# ------------------------------------------------------------------ end to end

def _answer(r: httpx.Response | requests.Response) -> object:
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def _me(url: str, accept: str = "application/json", **more: str) -> object:
    return _answer(httpx.get(url + "/me", headers={"Authorization": "Bearer alice-token",
                                                   "Accept": accept, **more}))


def test_a_request_that_asks_for_another_format_is_not_served_the_recorded_one(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        recorded = _me(tool.url)
    with dejacache.cassette(path, mode="replay"):
        assert _me(tool.url) == recorded
        with pytest.raises(ReplayMiss) as miss:
            _me(tool.url, "text/csv")
    assert "headers.accept: 'application/json' -> 'text/csv'" in str(miss.value)
    with dejacache.cassette(path, mode="auto"):  # auto records the new question live
        assert str(_me(tool.url, "text/csv")).startswith("user,nonce\nalice,")


def test_telemetry_and_transport_headers_never_make_a_call_miss(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        recorded = _me(tool.url, **{"User-Agent": "a/1", "X-Stainless-Retry-Count": "0",
                                    "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                                    "X-Request-ID": "r1", "Idempotency-Key": "k1"})
    with dejacache.cassette(path, mode="replay"):
        assert _me(tool.url, **{"User-Agent": "b/2", "X-Stainless-Retry-Count": "2",
                                "traceparent": "00-" + "3" * 32 + "-" + "4" * 16 + "-01",
                                "X-Request-ID": "r2", "Idempotency-Key": "k2"}) == recorded


def test_volatile_names_leave_a_header_out_and_bang_keys_one_back_in(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record", volatile=["x-nonce", "!user-agent"]):
        recorded = _me(tool.url, **{"X-Nonce": "1", "User-Agent": "a/1"})
    request = orjson.loads(path.read_bytes())["entries"][0]["request"]
    assert request["headers"] == {"accept": "application/json", "user-agent": "a/1"}
    with dejacache.cassette(path, mode="replay", volatile=["x-nonce", "!user-agent"]):
        assert _me(tool.url, **{"X-Nonce": "2", "User-Agent": "a/1"}) == recorded
        with pytest.raises(ReplayMiss, match="user-agent"):
            _me(tool.url, **{"X-Nonce": "2", "User-Agent": "b/2"})


def test_requests_keys_headers_like_httpx(tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        csv = _answer(requests.get(tool.url + "/me", timeout=10, headers={
            "Authorization": "Bearer alice-token", "Accept": "text/csv"}))
        js = _answer(requests.get(tool.url + "/me", timeout=10, headers={
            "Authorization": "Bearer alice-token", "Accept": "application/json"}))
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        assert _answer(requests.get(tool.url + "/me", timeout=10, headers={
            "Authorization": "Bearer alice-token", "Accept": "application/json"})) == js
        assert _answer(requests.get(tool.url + "/me", timeout=10, headers={
            "Authorization": "Bearer alice-token", "Accept": "text/csv"})) == csv


def test_a_value_that_asks_what_absence_asks_is_left_out() -> None:
    # requests, httpx and aiohttp send Accept: */*, urllib sends none: one key for both.
    assert classify([("Accept", "*/*")], provider=False) == ({}, ())
    assert classify([("Accept", "*/*;q=0.8, text/csv")], provider=False).plain == {
        "accept": "*/*;q=0.8, text/csv"}


def test_a_cookies_value_is_a_credential_an_answer_may_quote_without_its_name() -> None:
    # A debug page echoing the session id alone; a one-word setting is no secret, and hidden
    # it would hide that word in every stored answer.
    sent = [("Cookie", "sid=s3ss10n/7d41c0ffee; consent=accepted; theme=dark"),
            ("Accept", "application/json")]
    found = credential_values(sent)
    assert set(found) == {
        "sid=s3ss10n/7d41c0ffee; consent=accepted; theme=dark", "sid=s3ss10n/7d41c0ffee;",
        "consent=accepted;", "s3ss10n/7d41c0ffee", "theme=dark"}
    assert found == sorted(found, key=len, reverse=True)  # a value holding another first


@pytest.mark.parametrize("name", ["Authorization", "Proxy-Authorization"])
def test_a_basic_token_is_also_a_credential_decoded(name: str) -> None:
    # An echo server answers the header decoded ("you": "alice:s3cretPassw0rdXYZ"): the
    # token alone left the password plain in the cassette.
    import base64

    token = base64.b64encode(b"alice:s3cretPassw0rdXYZ").decode()
    found = credential_values([(name, f"Basic {token}")])
    assert {"alice:s3cretPassw0rdXYZ", "s3cretPassw0rdXYZ", token} <= set(found)
    # not base64, or no colon: nothing more is taken
    assert "s3cretPassw0rdXYZ" not in credential_values([(name, "Basic not*base64!")])
    plain = base64.b64encode(b"no-colon-in-this-token").decode()
    assert credential_values([(name, f"Basic {plain}")]) == [f"Basic {plain}", plain]


def test_an_answer_quoting_the_basic_password_decoded_is_stored_redacted(
        tmp_path: pathlib.Path) -> None:
    import base64
    import http.server
    import threading

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            user_pass = base64.b64decode(self.headers["Authorization"].split()[1]).decode()
            body = orjson.dumps({"you": user_pass, "password": user_pass.split(":")[1]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "basic.json"
    try:
        with dejacache.cassette(str(path), mode="record"):
            got = httpx.get(f"http://127.0.0.1:{server.server_port}/me",
                            auth=("alice", "s3cretPassw0rdXYZ")).json()
    finally:
        server.shutdown()
        server.server_close()
    assert got["password"] == "s3cretPassw0rdXYZ"  # the caller gets the live answer whole
    assert "s3cretPassw0rdXYZ" not in path.read_text()


def test_a_basic_password_under_8_characters_is_a_credential_an_answer_may_quote() -> None:
    import base64

    token = base64.b64encode(b"alice:hunt3r").decode()
    found = credential_values([("Authorization", f"Basic {token}")])
    assert {"alice:hunt3r", "hunt3r", token} <= set(found)
    # the scheme and other short parts are still no credential; an empty password none
    assert "Basic" not in found
    empty = base64.b64encode(b"alice:").decode()
    assert "" not in credential_values([("Authorization", f"Basic {empty}")])


class _Echo:
    """A loopback server answering each request's credentials back as a mail server, a
    debug endpoint and an echo server may: base64 wrapped in MIME lines (CRLF), base64 of a
    JSON blob in one line, and the password in prose."""

    def __init__(self) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                user, _, pw = base64.b64decode(
                    self.headers["Authorization"].split()[1]).decode().partition(":")
                short, long = self.headers["X-Api-Key"], self.headers["X-Auth-Token"]
                dump = f"x-api-key: {short}\r\nx-auth-token: {long}\r\n".encode()
                mail = ("Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n"
                        "\r\n" + base64.encodebytes(b"\x00" * 70 + dump).decode()
                        .replace("\n", "\r\n"))
                body = orjson.dumps({
                    "mail": mail,
                    "blob": base64.b64encode(orjson.dumps({"token": short})).decode(),
                    "said": f"wrong password {pw} for {user}",
                })
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/send"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _b64_forms(secret: str) -> set[str]:
    """The inner base64 runs of ``secret`` at each offset, in both alphabets."""
    data = secret.encode()
    runs = {base64.b64encode(data[s:s + (len(data) - s) // 3 * 3]).decode() for s in range(3)}
    return runs | {r.replace("+", "-").replace("/", "_") for r in runs}


def test_credentials_wrapped_or_short_in_base64_never_reach_the_cassette(
        tmp_path: pathlib.Path) -> None:
    short, long = "k3y-7f3a9c2d", "tok-4b1e0c9a7d2f8e3b6a5c"
    echo = _Echo()
    path = tmp_path / "echo.json"
    try:
        with dejacache.cassette(str(path), mode="record"):
            got = httpx.post(echo.url, content=b"{}", auth=("alice", "hunt3r"),
                             headers={"X-Api-Key": short, "X-Auth-Token": long}).json()
    finally:
        echo.close()
    assert "hunt3r" in got["said"] and short.encode() in base64.b64decode(got["blob"])
    raw = path.read_bytes()
    flat = raw.replace(b"\\r", b"").replace(b"\\n", b"")  # the MIME lines joined
    for secret in (short, long, "hunt3r", "alice:hunt3r"):
        assert secret.encode() not in raw, secret
        for form in _b64_forms(secret) if len(secret) >= 8 else ():
            assert form.encode() not in flat, (secret, form)
    stored = orjson.loads(raw)["entries"][0]["response"]["json"]
    assert stored["said"] == "wrong password <REDACTED> for alice"
    for text in (stored["mail"].split("\r\n\r\n", 1)[1], stored["blob"]):
        for part in _unwrapped_runs(text):
            assert short.encode() not in part and long.encode() not in part


def _unwrapped_runs(text: str) -> list[bytes]:
    """Each base64 run of ``text`` (line breaks dropped) decoded from each alignment."""
    import re

    out = []
    for run in re.findall(r"[A-Za-z0-9+/]{4,}", text.replace("\r\n", "")):
        for k in range(4):
            cut = run[k:][:len(run) - k - ((len(run) - k) % 4 == 1)]
            out.append(base64.b64decode(cut + "=" * (-len(cut) % 4)))
    return out
