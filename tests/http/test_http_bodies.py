"""Request bodies in the key and the stored request: forms and multipart parsed, credentials
masked (src/dejacache/http/bodies.py).

The end-to-end cases (``bodies_cases.py``) run the real httpx and requests against a loopback
OAuth server (``fake_oauth.py``): recorded in a process of their own, then replayed in a fresh
process with the server stopped and a listener on its port counting any connection.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import xxhash
from bodies_cases import PEM, SECRETS
from cases_support import case_env, run_cases
from fake_oauth import OAuthAPI
from fake_tool_api import ToolAPI
from http_support import CLIENTS, fetch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache import _secrets
from dejacache.errors import ReplayMiss
from dejacache.http.exchange import canonical_request
from dejacache.http.providers import detect
from dejacache.keys import canonical_json
from provider_support import DropListener

HTTP = detect("api.example.com", "/token", {})
FORM = "application/x-www-form-urlencoded"


def canon(body: bytes, ct: str, subs: tuple[tuple[bytes, bytes], ...] = ()) -> dict[str, Any]:
    raw, _ = canonical_request("POST", "/token", [], body, ct, HTTP, None, (), subs)
    return orjson.loads(raw)  # type: ignore[no-any-return]


def _multipart(boundary: str, *parts: tuple[str, bytes]) -> tuple[bytes, str]:
    body = b"".join(b"--" + boundary.encode() + b"\r\n" + head.encode() + b"\r\n\r\n" + content
                    + b"\r\n" for head, content in parts) + b"--" + boundary.encode() + b"--\r\n"
    return body, f"multipart/form-data; boundary={boundary}"


# ---------------------------------------------------------------- JSON


@pytest.mark.parametrize("a, b", [
    (10**20, 10**20 + 1),
    (2**64, 2**64 + 1),
    (-(2**63) - 1, -(2**63) - 2),
], ids=["1e20", "2**64", "-2**63-1"])
def test_integers_beyond_64_bits_keep_their_exact_value(a: int, b: int) -> None:
    JSON = "application/json"
    ka = canon(orjson.dumps({"amount_wei": 0}).replace(b"0", str(a).encode()), JSON)
    kb = canon(orjson.dumps({"amount_wei": 0}).replace(b"0", str(b).encode()), JSON)
    assert ka != kb
    # tagged as ``@cache`` keys a big integer argument
    assert orjson.dumps(ka["body"]) == canonical_json({"amount_wei": a})


def test_integers_past_a_double_are_keyed_apart_as_text() -> None:
    # orjson refuses them: the body is keyed as its text, exact all the same
    a, b = b'{"n": 1' + b"0" * 400 + b"}", b'{"n": 1' + b"0" * 399 + b"1}"
    assert canon(a, "application/json") != canon(b, "application/json")


def test_integers_within_64_bits_and_long_digit_strings_key_as_before() -> None:
    JSON = "application/json"
    for body in (b'{"n": 18446744073709551615, "m": -9223372036854775808}',
                 b'{"id": "12345678901234567890123", "x": 1.5}'):
        assert canon(body, JSON)["body"] == orjson.loads(body)


def test_a_body_typed_as_text_is_keyed_as_its_text_even_when_it_parses_as_json() -> None:
    # Both used to key as {"a": 1, "b": 2}: a text server reads two texts.
    one, two = b'{"a":1, "b":2}', b'{"b":2,"a":1}'
    for ct in ("text/plain", "text/plain; charset=utf-8", "application/octet-stream"):
        assert canon(one, ct) != canon(two, ct)
        assert canon(one, ct)["body"] == {"text": one.decode()}
    # typed as JSON (any +json), or not typed at all: parsed, one request in any layout
    for ct in ("application/json", "application/vnd.api+json", ""):
        assert canon(one, ct)["body"] == canon(two, ct)["body"] == {"a": 1, "b": 2}
    # a credential field in it: keyed as JSON, masked, never held in plain
    secret = b'{"password": "hunter2-hunter2", "q": 1}'
    keyed = orjson.dumps(canon(secret, "text/plain")).decode()
    assert "hunter2" not in keyed and '"password":"<secret:' in keyed


@pytest.mark.parametrize("body, alone", [
    (b'{"a":1,"a":2}', b'{"a":2}'),
    (b'{"a":2,"a":2}', b'{"a":2}'),
    (b'{"m":[{"role":"user","role":"system"}]}', b'{"m":[{"role":"system"}]}'),
    (b'{"a" : 1, "a":2}', b'{"a":2}'),  # space before a colon
    (b'{"x\\u003a":1,"y":"\\u003a","a":1,"a":2}', b'{"x:":1,"y":":","a":2}'),  # escaped
], ids=["top", "same-value", "nested", "spaced", "escaped-colon"])
def test_a_json_body_repeating_a_key_never_keys_as_one_without(body: bytes,
                                                                 alone: bytes) -> None:
    JSON = "application/json"
    # It used to key as the last of its pairs: a server taking the first reads another body.
    assert orjson.loads(body) == orjson.loads(alone)
    assert canon(body, JSON) != canon(alone, JSON)
    assert canon(body, JSON) == canon(body, JSON)
    # a repeated credential is masked in each of its pairs
    pw = canon(b'{"password":"first-pw-123","password":"second-pw-456"}', JSON)
    assert "-pw-" not in orjson.dumps(pw).decode()
    assert canon(b'{"password":"a-pw-1","password":"b-pw-2"}', JSON) != canon(
        b'{"password":"b-pw-2","password":"b-pw-2"}', JSON)


def test_a_body_without_a_repeated_key_keys_as_before() -> None:
    JSON = "application/json"
    for body in (b'{"a":"x:y","b":{"c":"\\"quoted\\": 1"}}', b'[{"a":1},{"a":1}]',
                 b'{"t":"a\\u0041:b","n":18446744073709551615}', b'{"a": 1, "b": [1, 2]}'):
        assert canon(body, JSON)["body"] == orjson.loads(body)


# ---------------------------------------------------------------- forms


def test_a_form_is_keyed_as_its_pairs_with_credentials_masked() -> None:
    body = (b"grant_type=authorization_code&code=c0de&client_secret=s3cr3t"
            b"&scope=read+write&scope=admin&redirect_uri=https%3A%2F%2Fapp%2Fcb")
    got = canon(body, FORM + "; charset=utf-8")["body"]
    # (quoted: the keyed masks are hex, and hold "c0de" one time in ~2,000)
    assert "s3cr3t" not in orjson.dumps(got).decode() and '"c0de"' not in orjson.dumps(got).decode()
    names = [next(iter(p)) for p in got["form"]]
    assert names == ["grant_type", "code", "client_secret", "scope", "scope", "redirect_uri"]
    pairs = [next(iter(p.values())) for p in got["form"]]
    assert pairs[0] == "authorization_code" and pairs[3:] == ["read write", "admin",
                                                              "https://app/cb"]
    assert pairs[1].startswith("<secret:") and pairs[2].startswith("<secret:")
    # another credential is another request; the same one, the same key in every spelling
    assert canon(body.replace(b"s3cr3t", b"other"), FORM) != canon(body, FORM)
    assert canon(body.replace(b"read+write", b"read%20write"), FORM) == canon(body, FORM)


def test_form_pairs_keep_their_order() -> None:
    assert canon(b"a=1&b=2", FORM) != canon(b"b=2&a=1", FORM)


def test_a_form_credential_keys_as_its_substitute_placeholder() -> None:
    """``substitute=`` makes a client secret key the same on every machine, as in JSON."""
    subs = ((b"s3cr3t", b"<CLIENT_SECRET>"),)
    got = canon(b"client_id=a&client_secret=s3cr3t", FORM, subs)["body"]["form"]
    assert got[1]["client_secret"] == "<CLIENT_SECRET>"
    as_json = canon(b'{"client_secret": "s3cr3t"}', "application/json", subs)["body"]
    assert as_json == {"client_secret": "<CLIENT_SECRET>"}


@pytest.mark.parametrize("body", [
    b"a=1&&b=2", b"a", b"a=%zz", b"a=1\n", b"\xff=1", b"=x",
])
def test_a_body_that_is_not_a_clean_form_is_keyed_as_text(body: bytes) -> None:
    got = canon(body, FORM)["body"]
    assert "form" not in got


def test_the_legacy_form_is_the_text_keys_had_before() -> None:
    """Recordings made before forms were parsed are found by recomputing their form."""
    from dejacache.http.exchange import _body_for_key

    form = b"grant_type=client_credentials&client_secret=s3cr3t"
    assert _body_for_key(form, FORM, None, legacy=True) == {"text": form.decode()}
    body, ct = _multipart("b1xyz", ('Content-Disposition: form-data; name="a"', b"1"))
    assert _body_for_key(body, ct, None, legacy=True) == {
        "text": body.decode().replace("b1xyz", "BOUNDARY")}
    assert _body_for_key(form, FORM, None)["form"][1]["client_secret"] == "s3cr3t"  # the core
    assert _body_for_key(b'{"a": 1}', FORM, None, legacy=True) == {"a": 1}


def _before(body: bytes, content_type: str) -> Any:
    """``_body_for_key`` as it was before forms and multipart were parsed (no aliases): the
    oracle of ``legacy=True``, kept here as it was written then."""
    if not body:
        return None
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    if content_type.startswith("multipart/"):
        _, _, boundary = content_type.partition("boundary=")
        if boundary:
            body = body.replace(boundary.strip('"').encode(), b"BOUNDARY")
    if len(body) <= 4096:
        try:
            return {"text": body.decode()}
        except UnicodeDecodeError:
            pass
    return {"xxh3_128": xxhash.xxh3_128_hexdigest(body), "size": len(body)}


_PIECES = [b"a=1", b"&", b"client_secret=s", b"%41", b"+", b"--b1", b"\r\n", b"\r\n\r\n",
           b'Content-Disposition: form-data; name="password"', b"{", b"}", b'"x"', b"\xff",
           b"=", b"?", b"\n", b"[1]", b"x" * 1500]
_TYPES = ["application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8",
          "multipart/form-data; boundary=b1", 'multipart/form-data; boundary="b1"',
          "multipart/mixed; boundary=b1; charset=utf-8", "application/json", "text/plain", ""]


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=8).map(b"".join), st.sampled_from(_TYPES))
def test_legacy_bodies_are_exactly_what_keys_had_before(body: bytes, content_type: str) -> None:
    from dejacache.http.exchange import _body_for_key

    assert _body_for_key(body, content_type, None, legacy=True) == _before(body, content_type)


# ---------------------------------------------------------------- multipart


def test_multipart_is_keyed_as_parts_without_its_boundary() -> None:
    parts = [('Content-Disposition: form-data; name="user"', b"ann"),
             ('Content-Disposition: form-data; name="password"', b"hunter2"),
             ('Content-Disposition: form-data; name="doc"; filename="a.txt"\r\n'
              "Content-Type: text/plain", b"hello"),
             ('Content-Disposition: form-data; name="blob"; filename="b.bin"',
              bytes(range(256)) * 20)]
    a = canon(*_multipart("boundary-1", *parts))
    b = canon(*_multipart("other-boundary-2", *parts))
    assert a == b and "boundary" not in orjson.dumps(a).decode()
    got = a["body"]["multipart"]
    assert got[0] == {"user": "ann"}
    assert got[1]["password"].startswith("<secret:")
    assert got[2] == {"doc": {"content": "hello", "content_type": "text/plain",
                              "filename": "a.txt"}}
    assert set(got[3]["blob"]["content"]) == {"xxh3_128", "size"}
    changed = list(parts)
    changed[2] = (changed[2][0].replace("a.txt", "b.txt"), changed[2][1])
    assert canon(*_multipart("boundary-1", *changed)) != a  # a file name is part of the call


def test_a_credential_file_part_is_masked_whole() -> None:
    parts = [('Content-Disposition: form-data; name="private_key"; filename="id_rsa"',
              PEM.encode()),
             ('Content-Disposition: form-data; name="api_key"', b"\xff\xfe binary"),
             ('Content-Disposition: form-data; name="code"', b"oauth-code")]
    got = canon(*_multipart("b", *parts))["body"]["multipart"]
    text = orjson.dumps(got).decode()
    assert "PEMCANARY" not in text and "oauth-code" not in text and "xxh3" not in text
    assert got[0]["private_key"]["content"].startswith("<secret:")
    # the whole part is under the credential's name: its file name is masked too
    assert got[0]["private_key"]["filename"] == _secrets.mask("id_rsa")
    assert got[1]["api_key"].startswith("<secret:") and got[2]["code"].startswith("<secret:")


def test_odd_parts_keep_what_makes_them_differ() -> None:
    nameless = canon(*_multipart("b", ("Content-Type: application/json", b"{}")))
    named = canon(*_multipart("b", ('Content-Disposition: form-data; name=""\r\n'
                                    "Content-Type: application/json", b"{}")))
    assert nameless != named
    assert nameless["body"]["multipart"] == [
        {"": {"content": "{}", "content_type": "application/json", "disposition": None}}]
    extra = canon(*_multipart("b", ('Content-Disposition: form-data; name="a"\r\n'
                                    "Content-Transfer-Encoding: base64", b"aGk=")))
    assert extra["body"]["multipart"] == [
        {"a": {"content": "aGk=", "headers": [["content-transfer-encoding", "base64"]]}}]


def test_a_malformed_multipart_body_is_keyed_as_text_without_its_boundary() -> None:
    got = canon(b"--b1\r\nno blank line\r\n--b1--", "multipart/form-data; boundary=b1")
    assert got["body"] == {"text": "--BOUNDARY\r\nno blank line\r\n--BOUNDARY--"}


# ---------------------------------------------------------------- real clients, end to end


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cassette = tmp_path_factory.mktemp("bodies") / "cassettes" / "bodies.json"
    api = OAuthAPI().start()
    try:
        recorded = run_cases("bodies_cases.py", "record", str(cassette), api.url)
        seen = api.count()
    finally:
        api.stop()
    guard = DropListener(api.port)
    try:
        replayed = run_cases("bodies_cases.py", "replay", str(cassette), api.url)
    finally:
        guard.close()
    return {"recorded": recorded, "replayed": replayed, "seen": seen, "cassette": cassette,
            "connections": guard.count, "issued": list(api.issued), "sent": api.requests}


def test_every_call_replays_in_a_fresh_process(runs: dict[str, Any]) -> None:
    """Keys are stable across processes: no random boundary, masks keyed the same."""
    assert runs["seen"] == len(runs["recorded"]) == 9
    assert runs["connections"] == 0
    assert runs["replayed"] == runs["recorded"]
    assert runs["recorded"]["httpx_upload"]["files"] == {"key_file": ["id_ed25519", len(PEM)],
                                                         "blob": ["blob.bin", 10240]}


def test_the_server_got_the_credentials_the_file_did_not(runs: dict[str, Any]) -> None:
    sent = b"".join(r["body"] for r in runs["sent"])
    assert all(s.encode() in sent for s in SECRETS.values())
    assert len(runs["issued"]) == 11  # 4 token answers of 2, 1 form answer, 2 echoes
    files = [p for p in runs["cassette"].parent.parent.rglob("*") if p.is_file()]
    assert runs["cassette"] in files
    for path in files:
        data = path.read_text()
        for secret in (*SECRETS.values(), *runs["issued"]):
            assert secret not in data, (secret, path)
    text = runs["cassette"].read_text()
    assert '"client_secret": "<REDACTED>"' in text  # fields kept, values hidden
    assert "access_token=<REDACTED>&scope=repo%2Cgist&token_type=bearer" in text


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, as a pre-commit hook runs it."""
    exe = shutil.which("dejacache", path=str(pathlib.Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, env=case_env(),
                          timeout=120)


def _scan(*args: str) -> subprocess.CompletedProcess[str]:
    return _cli("scan", "--plain", *args)


def test_scan_calls_the_recording_clean(runs: dict[str, Any]) -> None:
    clean = _scan(str(runs["cassette"]))
    assert (clean.returncode, clean.stdout) == (0, "dejacache scan: 1 file clean\n")


def test_scan_finds_each_credential_in_a_hand_written_file(tmp_path: pathlib.Path) -> None:
    """What a cassette held before (or a recorder that does not parse bodies writes): each
    credential is a finding, on its line, and none is printed."""
    multipart = (f"--BOUNDARY\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\n"
                 f"{SECRETS['password']}\r\n--BOUNDARY\r\nContent-Disposition: form-data; "
                 f"name=\"key_file\"; filename=\"id_ed25519\"\r\n\r\n{PEM}\r\n--BOUNDARY--\r\n")
    entries = [
        {"request": {"body": {"text": f"grant_type=client_credentials&client_secret="
                                      f"{SECRETS['client_secret']}&client_id=app-1"}}},
        {"request": {"body": {"text": multipart}}},
        {"request": {"body": {"model": "m", "note": f"use {SECRETS['ya29']}"}}},
        {"response": {"json": {"session": {"handle": "ya29.c.c0ASRK0Ga" + "b" * 32}}}},
        {"response": {"text": "access_token=plain-0123456789&scope=repo&token_type=bearer"}},
    ]
    path = tmp_path / "old.json"
    path.write_text("\n".join(orjson.dumps(e).decode() for e in entries) + "\n")
    found = _scan(str(path))
    assert found.returncode == 1
    lines = found.stdout.splitlines()
    kinds = {(int(line.split(":")[1]), line.split(": ")[1]) for line in lines[:-1]}
    assert kinds == {(1, "credential field 'client_secret'"),
                     (2, "credential field 'password'"), (2, "private key"),
                     (3, "google oauth token"), (4, "google oauth token"),
                     (5, "credential field 'access_token'")}
    for secret in (*SECRETS.values(), "plain-0123456789"):
        assert secret not in found.stdout
    verify = _cli("verify", str(path))
    assert verify.returncode == 1
    assert any("secrets" in line and "fail" in line for line in verify.stdout.splitlines())


def test_a_sqlite_store_keeps_no_credential_of_a_form_or_an_upload(
        tmp_path: pathlib.Path) -> None:
    """The request a runtime store keeps (its request column) holds masks, and the same
    upload asked again is served from it. (Answers are kept as they came: a cache serves
    the token it was given; only cassettes, which are committed, redact answers.)"""
    httpx = pytest.importorskip("httpx")
    import dejacache

    api = OAuthAPI().start()
    path = tmp_path / "cache.db"
    store = dejacache.SQLiteStore(path)
    upload = {"data": {"user": "ann", "password": SECRETS["password"]},
              "files": {"key_file": ("id_ed25519", PEM, "application/x-pem-file")}}
    try:
        with dejacache.scope(store=store, mode="auto", cache_key="t"), \
                httpx.Client(base_url=api.url) as client:
            client.post("/token", data={"grant_type": "refresh_token",
                                        "refresh_token": SECRETS["refresh_token"],
                                        "client_secret": SECRETS["client_secret"],
                                        "code_verifier": SECRETS["code_verifier"]})
            first = client.post("/upload", **upload).json()
            again = client.post("/upload", **upload).json()  # another random boundary
    finally:
        store.close()
        api.stop()
    assert api.count() == 2 and again == first
    db = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("cache.db"))
    for secret in ("client_secret", "refresh_token", "code_verifier", "password", "pem"):
        assert SECRETS[secret].encode() not in db, secret


# ---------------------------------------------------------------- answers quoting the body


@pytest.fixture
def tool() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


_QUOTED = [
    ("application/json", b'{"q": "weather", "api_key": "body-key-0123456789"}'),
    ("application/json", b'{"user": {"name": "a", "password": "body-key-0123456789"}}'),
    (FORM, b"grant_type=client_credentials&client_secret=body-key-0123456789"),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("ctype", "body"), _QUOTED, ids=["json", "nested", "form"])
def test_an_answer_quoting_a_body_credential_is_stored_without_it(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str, ctype: str, body: bytes) -> None:
    """A validation error quotes what it was sent (FastAPI's ``"input"``): the key masked the
    body's credential field, the stored answer kept it, as only the credentials of headers
    and the query were looked for in answers."""
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        status, live = fetch(client, "POST", tool.url + "/validate", {"Content-Type": ctype},
                             body)
    assert status == 422 and "body-key-0123456789" in str(live)  # the caller gets it as sent
    assert b"body-key-0123456789" not in path.read_bytes()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_json_null_body_is_not_an_empty_body(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str) -> None:
    """``null`` is a JSON value a server reads (an empty body is none, often a 400): both
    once keyed as no body at all."""
    path = tmp_path / "c.json"
    json_ = {"Content-Type": "application/json"}
    with dejacache.cassette(path, mode="record"):
        live = fetch(client, "POST", tool.url + "/echo", json_, b"null")
    assert live[1]["echo"] is None
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss):
        fetch(client, "POST", tool.url + "/echo", json_, b"")
    with dejacache.cassette(path, mode="replay"):
        assert fetch(client, "POST", tool.url + "/echo", json_, b"null") == live


# Credential lines of a text body: ``name: value`` and ``name=value`` lines (a config, an
# ``.env``, a YAML document sent as text), each under a credential name.
_LINES = ("user: alice\npassword: hunter2-{who}\n  api_key = k-{who}-0123456789\n"
          "export DB_PASSWORD=db-{who}-0123456789\nnote: keep password: short\n")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-yaml"])
def test_credential_lines_of_a_text_body_never_reach_the_cassette(
        tool: ToolAPI, tmp_path: pathlib.Path, client: str, ctype: str) -> None:
    """The server answers quoting the text: neither the stored request nor the answer holds
    a credential line's value; each body replays its own answer, the rest of the text kept."""
    path = tmp_path / "c.json"

    def send(who: str) -> Any:
        return fetch(client, "POST", tool.url + "/text", {"Content-Type": ctype},
                     _LINES.format(who=who).encode())

    secrets_ = ["hunter2-{}", "k-{}-0123456789", "db-{}-0123456789"]
    with dejacache.cassette(path, mode="record"):
        alice, bob = send("alice"), send("bob")
    assert all(s.format("alice") in alice[1]["text"] for s in secrets_)  # as sent
    text = path.read_text()
    assert [s for s in secrets_ for who in ("alice", "bob") if s.format(who) in text] == []
    assert "user: alice" in text and "note: keep password: short" in text
    with dejacache.cassette(path, mode="replay"):
        assert [send("bob")[1]["nonce"], send("alice")[1]["nonce"]] == [
            bob[1]["nonce"], alice[1]["nonce"]]
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        send("carol")
    assert not any(s.format("carol") in str(miss.value) for s in secrets_)


def test_only_whole_credential_lines_of_text_are_masked() -> None:
    from dejacache._formtext import mask_lines

    def upper(text: str) -> str:
        return mask_lines(text, lambda v: "<X>", _secrets.is_secret_name, _secrets.NAME_HINTS)

    assert upper("password: hunter2\r\nToken=abc\n\tapiKey :  k1 \n") == (
        "password: <X>\r\nToken=<X>\n\tapiKey :  <X> \n")
    kept = ["the password: is hunter2", "passwords: many", "password:", "code: 1234",
            "f(password=pw)", "# password: x", "password: <REDACTED>"]
    assert [upper(t) for t in kept] == kept
