"""Credentials inside form-encoded and multipart text: masked where they sit, found in files."""

from __future__ import annotations

import pytest

from dejacache import _formtext, _secrets

PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAr2bCANARYPEMBODY0b3V0\n"
       "-----END RSA PRIVATE KEY-----\n")


def _star(value: str) -> str:
    return "*"


def _secret(name: str) -> bool:
    return _secrets.is_secret_query(name)


@pytest.mark.parametrize(("text", "want"), [
    ("grant_type=client_credentials&client_secret=s3cr3t&client_id=abc",
     "grant_type=client_credentials&client_secret=*&client_id=abc"),
    ("a=1&password=p&password=q", "a=1&password=*&password=*"),  # repeated names, each
    ("code=oauth-code&state=xyz", "code=*&state=xyz"),  # secret as a query parameter: here too
    ("client%5Fsecret=abc&x=1", "client%5Fsecret=*&x=1"),  # names are read decoded
    ("?token=t&page=2", "?token=*&page=2"),
    ("access_token=tok&scope=repo%2Cgist&token_type=bearer\n",
     "access_token=*&scope=repo%2Cgist&token_type=bearer\n"),
    ("client_secret=<REDACTED>&x=1", "client_secret=<REDACTED>&x=1"),  # masked already
    ("password=", "password="),
    ("password=it's&x=1", "password=*&x=1"),  # a whole form's value, not the pair's "it"
])
def test_whole_form_strings_have_their_credential_values_masked(text: str, want: str) -> None:
    assert _formtext.mask_form(text, _star, _secret) == want


@pytest.mark.parametrize("text", [
    "set password=hunter2 in the config",  # prose: a pair after a space starts no form
    "aGVsbG8gd29ybGQ=",  # base64 padding
    "a=1&password",  # a part without a value
    '{"password":"x"}',
    "f(x, password=pw())",  # code: not a pair
    "the password is secret & so = is the key",
    "a=1&name=ann&scope=read write",  # an irregular form holding no credential
])
def test_text_without_a_credential_pair_is_left_as_it_is(text: str) -> None:
    assert _formtext.mask_form(text, _star, _secret) == text


@pytest.mark.parametrize(("text", "want"), [
    ("grant_type=password&username=ann&password=pw-1&scope=read write",  # a raw space
     "grant_type=password&username=ann&password=*&scope=read write"),
    ("a=1&&password=x", "a=1&&password=*"),  # an empty part
    ("a&client_secret=x", "a&client_secret=*"),  # a part without ``=``
    ("=x&password=y", "=x&password=*"),  # a part without a name
    ('state="s"&code=c0de', 'state="s"&code=*'),  # a quote
    ("a=1\npassword=pw-1\nb=2", "a=1\npassword=*\nb=2"),  # a line each (an .env file)
    ("user=ann&password=p@ss!w0rd&scope=a b", "user=ann&password=*&scope=a b"),
    ("see https://x/cb?x=1&code=c0de and more", "see https://x/cb?x=1&code=* and more"),
    ("body: client_secret=cs-1&grant_type=x y", "body: client_secret=*&grant_type=x y"),
    ("x" * 300 + "=1&password=p", "x" * 300 + "=1&password=*"),  # data, but a pair after it
    ("a=1&password=<REDACTED>&b=c d", "a=1&password=<REDACTED>&b=c d"),  # masked already
])
def test_irregular_forms_have_the_pairs_scan_finds_masked(text: str, want: str) -> None:
    """Text that is not a whole form still has each credential pair that ``scan`` reports
    masked, its value only, in place."""
    assert _formtext.mask_form(text, _star, _secret) == want
    masked = _formtext.mask_form(text, lambda v: _secrets.PLACEHOLDER, _secret)
    assert list(_formtext.pair_fields(masked, _secrets.is_secret_pair)) == []


def test_multipart_text_has_credential_parts_masked_whole() -> None:
    text = ("--BOUNDARY\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nann\r\n"
            "--BOUNDARY\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nhunter2\r\n"
            "--BOUNDARY\r\nContent-Disposition: form-data; name=\"private_key\"; "
            "filename=\"id_rsa\"\r\nContent-Type: application/x-pem-file\r\n\r\n" + PEM +
            "\r\n--BOUNDARY--\r\n")
    out = _formtext.mask_multipart(text, _star, _secret)
    assert "hunter2" not in out and "CANARYPEMBODY" not in out
    # the content up to the delimiter line, not up to the PEM's own ``-----END`` line
    assert "-----END" not in out
    assert out.count("\r\n\r\n*\r\n--BOUNDARY") == 2
    assert "name=\"user\"\r\n\r\nann\r\n" in out


def test_multipart_text_without_a_known_delimiter_stops_at_any_delimiter_line() -> None:
    text = "Content-Disposition: form-data; name=\"api_key\"\n\nk-123\n--x--\n"
    assert _formtext.mask_multipart(text, _star, _secret) == (
        "Content-Disposition: form-data; name=\"api_key\"\n\n*\n--x--\n")
    # a part whose header block never ends, or a non-credential field: as it was
    for same in ("Content-Disposition: form-data; name=\"password\"\nno blank line",
                 "--b\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--b--"):
        assert _formtext.mask_multipart(same, _star, _secret) == same


def test_pairs_in_a_file_line() -> None:
    line = ('"text": "grant_type=refresh_token&refresh_token=r-123&client_id=c", '
            '"url": "https://x/cb?code=c0de&state=s", "pwd=/home/ann", "password=<REDACTED>"')
    got = list(_formtext.pair_fields(line, _secrets.is_secret_pair))
    # ``pwd`` is a directory in a file (an answer's word), ``<REDACTED>`` is no value
    assert got == [("refresh_token", "r-123"), ("code", "c0de")]
    for code in ("f(x, password=pw())", "    client(api_key=key, base_url=url)",
                 "        key=key", "client(x, api_key=settings.key)"):
        assert list(_formtext.pair_fields(code, _secrets.is_secret_pair)) == [], code
    # after a space, a form's first pair (a YAML body) still is one
    assert list(_formtext.pair_fields("body: client_secret=cs-1&grant_type=x",
                                      _secrets.is_secret_pair)) == [("client_secret", "cs-1")]
    assert list(_formtext.pair_fields("a\\npassword=x1", _secrets.is_secret_pair)) == [
        ("password", "x1")]  # after a JSON escape


def test_multipart_fields_in_a_file_raw_or_json_escaped() -> None:
    raw = ("--b\nContent-Disposition: form-data; name=\"password\"\n\n  hunter2\n--b--\n")
    escaped = ('"text": "--b\\r\\nContent-Disposition: form-data; name=\\"client_secret\\"'
               '\\r\\n\\r\\ncs-1\\r\\n--b--"')
    assert [(n, v) for _, n, v in _formtext.multipart_fields(raw, _secrets.is_secret_pair)] == [
        ("password", "hunter2")]
    assert [(n, v) for _, n, v in _formtext.multipart_fields(
        escaped, _secrets.is_secret_pair)] == [("client_secret", "cs-1")]


def test_name_hints_cover_every_name_a_pair_is_a_credential_under() -> None:
    """``scan`` skips lines holding no hint: each credential name, suffix and query-only
    name holds one, in every spelling ``is_secret_pair`` reads."""
    names = [*_secrets.SECRET_NAMES, *_secrets._QUERY_ONLY, *("db" + s for s in _secrets._SUFFIXES)]
    for name in names:
        for spelling in (name, name.upper(), name.replace("_", "-"),
                         "".join(w.title() for w in name.split("_"))):
            if _secrets.is_secret_pair(spelling):
                assert _formtext.hinted(spelling, _secrets.NAME_HINTS), spelling


@pytest.mark.parametrize("disposition", [
    'form-data; name="password"', 'Form-Data; name="password"', 'FORM-DATA; NAME="password"',
    "form-data; name=password", 'form-data; filename="a.txt"; Name=password',
])
def test_multipart_parts_are_read_in_any_case_and_with_an_unquoted_name(
        disposition: str) -> None:
    text = f"--B\r\nContent-Disposition: {disposition}\r\n\r\nhunter2\r\n--B\r\n"
    assert _formtext.may_hold_multipart(text)
    assert _formtext.mask_multipart(text, _star, _secret) == text.replace("hunter2", "*")
    assert [(n, v) for _, n, v in _formtext.multipart_fields(text, _secrets.is_secret_pair)
            ] == [("password", "hunter2")]


def test_may_hold_multipart_is_false_for_text_without_form_data() -> None:
    for text in ("", "form-dat", "x-data; name=password", "a-d-D-" * 10, "informed-data"):
        assert not _formtext.may_hold_multipart(text), text


def test_a_form_whose_first_name_is_long_is_still_a_form() -> None:
    # Names up to 256 characters start a form (a longer run is base64); a second constant of
    # the same name once cut that to 64, the pair scan's bound.
    text = "f" * 100 + "=1&password=hunter2"
    assert _formtext.form_spans(text) == [(0, 100, 102), (103, 111, 119)]
    assert _formtext.form_spans("f" * 300 + "=1") is None
