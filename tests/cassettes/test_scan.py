"""``scan_text``: the needle prefilter finds exactly what every regex on every line finds."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dejacache._secrets import SECRET_PATTERNS
from dejacache.cassettes.redact import PLACEHOLDER
from dejacache.cassettes.scan import Finding, scan_text

_PIECES = [
    "sk-proj-" + "A1b2C3d4" * 5, "sk-ant-" + "Z" * 30, "AIza" + "x" * 35, "AKIAABCDEFGHIJKLMNOP",
    "aws_secret_access_key=" + "a/B+" * 10, "Bearer " + "t" * 20, "Authorization: Bearer ",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX3Zh", "ghp_" + "g" * 36,
    "xoxb-123456789012", "hf_" + "h" * 30, "sk-", "eyJ", "hf_", "xox", "ghp_", "AKIA",
    PLACEHOLDER, "Bearer " + PLACEHOLDER, "\n", "\r\n", "\\n", " ", "-", "_", ".", "=", '"',
    "plain words ", "ask-me", "task-", "secret", "bearer",
    "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "MIIEow", "PRIVATE KEY",
    "ya29.", "ya29.a0AfB_" + "x" * 20, "1//0" + "g" * 30, "GOCSPX-" + "a" * 24,
    "github_pat_" + "a" * 40, "sk_live_" + "b" * 20, "SK" + "0123456789abcdef" * 2, "SG.",
    "dapi" + "0123456789abcdef" * 2, "npm_" + "n" * 36, "xai-", "gsk_", "r8_", "glpat-",
]


def _every_regex_on_every_line(text: str) -> list[Finding]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for kind, pat in SECRET_PATTERNS.items():
            for m in pat.finditer(line):
                if PLACEHOLDER not in m.group(0):
                    out.append(Finding("", lineno, kind, m.group(0)))
    return out


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_the_prefilter_finds_what_every_regex_finds(text: str) -> None:
    want = [(f.line, f.kind) for f in _every_regex_on_every_line(text)]
    shapes = [f for f in scan_text(text) if not f.kind.startswith("credential field")]
    assert [(f.line, f.kind) for f in shapes] == want


def test_text_without_a_needle_is_not_scanned_line_by_line() -> None:
    text = '{"role": "user", "content": "plain words"}\n' * 20_000  # ~0.9 MB, no needle
    assert list(scan_text(text)) == []


def test_form_and_multipart_credentials_are_findings_in_json_and_yaml() -> None:
    """A body written as text by a cassette of an older dejacache (or by another recorder):
    form pairs and multipart fields named like credentials are findings; masked values and
    ordinary pairs are not."""
    cassette = (
        '{"request": {"body": {"text": "grant_type=client_credentials&client_secret=cs-live-1'
        '&client_id=app"}},\n'
        ' "response": {"text": "access_token=at-live-2&scope=repo&token_type=bearer"},\n'
        ' "values": {"v": "--BOUNDARY\\r\\nContent-Disposition: form-data; name=\\"password\\"'
        '\\r\\n\\r\\npw-live-3\\r\\n--BOUNDARY--\\r\\n"},\n'
        ' "clean": {"text": "grant_type=x&client_secret=<REDACTED>&page=2", "code": "print(1)"}}\n')
    found = [(f.line, f.kind) for f in scan_text(cassette)]
    assert found == [(1, "credential field 'client_secret'"),
                     (2, "credential field 'access_token'"), (3, "credential field 'password'")]
    yaml = ("request:\n  body: client_secret=cs-live-4&grant_type=client_credentials\n"
            "  multipart: |\n    --b\n    Content-Disposition: form-data; name=\"api_key\"\n\n"
            "    k-live-5\n    --b--\n")
    assert [(f.line, f.kind) for f in scan_text(yaml)] == [
        (2, "credential field 'client_secret'"), (5, "credential field 'api_key'")]


def test_session_and_nested_query_credentials_are_findings() -> None:
    """A URL a file holds with ``?sid=``, ``?session=`` or ``auth[token]`` (percent-encoded
    as clients send it) is a finding; ``filter[code]`` is not."""
    text = ('{"url": "https://a.example/x?sid=sid-live-0123456789&q=1"}\n'
            '{"url": "https://a.example/x?session=s-live-0123456789"}\n'
            '{"url": "https://a.example/x?auth%5Btoken%5D=t-live-0123456789"}\n'
            '{"url": "https://a.example/x?filter%5Bcode%5D=US-live-0123456789"}\n')
    assert [(f.line, f.kind) for f in scan_text(text)] == [
        (1, "credential field 'sid'"), (2, "credential field 'session'"),
        (3, "credential field 'auth%5Btoken%5D'")]


def test_credential_response_headers_are_findings_on_one_line_or_many() -> None:
    """A cassette keeps a response's headers as ``[name, value]`` pairs, each on lines of its
    own: one named by the request headers' rule with a value is a finding (a file written
    while ``X-Hub-Signature`` and ``X-Auth`` were kept plain was called clean), on the line
    naming it; masked values and other headers are not."""
    cassette = (
        '{"response": {"headers": [\n'
        '  [\n    "x-hub-signature",\n    "sha256=c0ffee1234"\n  ],\n'
        '  ["x-auth", "plainmark-1"], ["mcp-session-id", "sess-42"], ["etag", "v1"],\n'
        '  ["x-api-key", "<REDACTED>"], ["set-cookie", "<REDACTED>"]\n'
        '], "json": {"token": "Hello"}}}\n')
    found = [(f.line, f.kind) for f in scan_text(cassette)]
    assert found == [(3, "credential header 'x-hub-signature'"),
                     (6, "credential header 'x-auth'")]


def _old_cassette(request: object) -> str:
    """A cassette entry as a dejacache before basic credentials were masked wrote it."""
    import json

    return json.dumps({"entries": [{"kind": "call", "name": "fetch", "request": request,
                                    "response": "ok"}]}, indent=2) + "\n"


@pytest.mark.parametrize(("request_", "name"), [
    ({"url": "u", "auth": ["alice", "hunter2"]}, "auth"),
    ({"url": "u", "auth": "alice:hunter2"}, "auth"),
    ({"opts": {"proxyBasicAuth": ["alice", "hunter2", "latin1"]}}, "proxyBasicAuth"),
    ({"opts": [["auth", ["alice", "hunter2"]]]}, "auth"),
    ({"opts": [["basic_auth", "alice:hunter2"]]}, "basic_auth"),
    ({"auth": [{"\x00bytes": "YWxpY2U="}, {"\x00bytes": "aHVudGVyMg=="}]}, "auth"),  # bytes
    ({"url": "u", "aUtH": ["alice", "hunter2"]}, "aUtH"),  # names in any case
    ({"opts": {"Proxy-AuTh": "alice:hunter2"}}, "Proxy-AuTh"),
])
def test_a_plain_basic_auth_password_in_an_older_cassette_is_a_finding(request_, name) -> None:
    """A file recorded before the password of basic credentials was masked: a finding on
    the line naming the field, telling to re-record; the password is not printed."""
    text = _old_cassette(request_)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if f'"{name}"' in t)
    found = list(scan_text(text, "old.json"))
    assert [(f.line, f.kind.split(" (")[0]) for f in found] == [
        (line, f"credential field {name!r}")]
    assert str(found[0]).startswith(f"old.json:{line}: ") and "re-record" in str(found[0])
    assert "hunter2" not in str(found[0])
    assert [f.line for f in scan_text(text.replace("\n", " "))] == [1]  # on one line
    headers = _old_cassette({"headers": [["proxy-auth", "alice:hunter2"]]})
    assert len(list(scan_text(headers))) == 1  # a credential header: found once


@pytest.mark.parametrize("request_", [
    {"auth": "bearer"}, {"auth": {"type": "oauth2"}}, {"auth": True}, {"auth": ["alice"]},
    {"auth": "alice"}, {"auth": ["alice", PLACEHOLDER]}, {"auth": "alice:" + PLACEHOLDER},
    {"auth": ["a", "b", "c", "d"]}, {"opts": [["auth", "bearer"]]},
    {"auth": [{"\x00bytes": "YWxpY2U="}, {"\x00bytes": PLACEHOLDER}]},
    {"schema": {"required": ["auth", "host:port"]}}, {"auth": "https://auth.example/t"},
    {"opts": [["auth", ["alice", "hunter2"], "x"]]},  # no pair: three items
])
def test_settings_user_names_and_masked_passwords_under_auth_names_are_clean(request_) -> None:
    assert list(scan_text(_old_cassette(request_))) == []


def test_a_cassette_recorded_with_basic_credentials_now_scans_clean(tmp_path) -> None:
    import dejacache
    from dejacache.cassettes.scan import scan_file

    @dejacache.cache(name="fetch")
    def fetch(url: str, auth: object, headers: object = ()) -> str:
        return url

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        fetch("u", ("alice", "hunter2"))
        fetch("u", (b"alice", b"hunter2"))
        fetch("u", "alice:hunter2", [["auth", ["alice", "hunter2"]]])
    assert scan_file(path) == []
    path.write_text(path.read_text().replace(PLACEHOLDER, "hunter2"))  # as written before
    assert len(scan_file(path)) == 4


def test_a_secret_shaped_string_inside_base64_is_a_finding() -> None:
    import base64

    key = "sk-proj-" + "A1b2C3d4" * 5
    echoed = base64.b64encode(b'\x89PNG{"api_key": "' + key.encode() + b'"}').decode()
    jwt = "eyJhbGciOiJub25lIn0." + base64.urlsafe_b64encode(
        b'{"sub": "u", "key": "' + key.encode() + b'"}').decode().rstrip("=") + ".c2ln"
    text = (f'{{"status": 200,\n "text": "data:application/octet-stream;base64,{echoed}",\n'
            f' "token": "{jwt}"}}\n')
    found = [(f.line, f.kind) for f in scan_text(text) if f.kind.endswith("in base64")]
    assert found == [(2, "openai key in base64"), (3, "openai key in base64")]
    plain = base64.b64encode(bytes(range(256)) * 4).decode()  # base64 holding no secret
    assert list(scan_text(f'{{"data": "{plain}"}}')) == []
