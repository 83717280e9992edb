"""Secrets never reach the file; ``substitute`` restores live values on replay."""

from __future__ import annotations

import re

import orjson
import pytest

import dejacache
from dejacache.cassettes.redact import PLACEHOLDER, Redactor

OPENAI_KEY = "sk-proj-" + "A1b2C3d4" * 5
ANTHROPIC_KEY = "sk-ant-api03-" + "Zz9Yy8Xx" * 5


def test_default_headers_query_params_and_body_fields():
    r = Redactor()
    tree = {
        "method": "POST",
        "url": "https://api.example.com/v1/x?key=abc123&alt=json&sig=s1g&page=2&token=t0k",
        "headers": {"Authorization": f"Bearer {OPENAI_KEY}", "X-Api-Key": "k",
                    "OpenAI-Organization": "org-1", "Cookie": "a=b", "accept": "json"},
        "header_list": [["x-goog-api-key", "g"], ["content-type", "json"]],
        "params": {"token": "t", "q": "cats"},
        "body": {"password": "hunter2", "nested": [{"client_secret": "cs", "refresh_token": "r"}],
                 "token": "t0k3n"},
    }
    out = r.tree(tree)
    assert out["headers"] == {"Authorization": PLACEHOLDER, "X-Api-Key": PLACEHOLDER,
                              "OpenAI-Organization": PLACEHOLDER, "Cookie": PLACEHOLDER,
                              "accept": "json"}
    assert out["header_list"] == [["x-goog-api-key", PLACEHOLDER], ["content-type", "json"]]
    assert "abc123" not in out["url"] and "s1g" not in out["url"] and "t0k" not in out["url"]
    assert "alt=json" in out["url"] and "page=2" in out["url"]
    assert out["params"] == {"token": PLACEHOLDER, "q": "cats"}
    assert out["body"]["password"] == PLACEHOLDER
    assert out["body"]["nested"] == [{"client_secret": PLACEHOLDER, "refresh_token": PLACEHOLDER}]
    assert out["body"]["token"] == PLACEHOLDER  # a request's token is a credential...
    # ...but a response's token (logprobs) is a word: redacting it would change the replay
    resp = {"logprobs": [{"token": "Hello", "logprob": -0.1}], "access_token": "at"}
    assert r.tree(resp, response=True) == {"logprobs": [{"token": "Hello", "logprob": -0.1}],
                                           "access_token": PLACEHOLDER}
    assert tree["headers"]["X-Api-Key"] == "k"  # input untouched


def test_secret_shaped_strings_are_masked_anywhere():
    r = Redactor()
    text = (f"use {OPENAI_KEY} or {ANTHROPIC_KEY}; google AIza{'x' * 35}; aws AKIAABCDEFGHIJKLMNOP;"
            " jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop")
    out = r.text(text)
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, "AIza", "AKIAABCDEFGHIJKLMNOP", "eyJhbGci"):
        assert secret not in out
    assert r.text("a task-list and a skeleton") == "a task-list and a skeleton"


def test_user_names_paths_and_patterns():
    r = Redactor.from_spec(["x-tenant", "user.ssn", re.compile(r"acct_\d+")])
    out = r.tree({"x-tenant": "t1", "user": {"ssn": "123", "name": "ann"},
                  "note": "bill acct_42 now"})
    assert out == {"x-tenant": PLACEHOLDER, "user": {"ssn": PLACEHOLDER, "name": "ann"},
                   "note": f"bill {PLACEHOLDER} now"}


def test_cassette_file_holds_no_secret_and_substitute_round_trips(tmp_path):
    @dejacache.cache(name="call_api")
    def call_api(headers: dict[str, str], account: str) -> dict[str, str]:
        return {"owner": f"account {account}", "echo": headers["authorization"][:6]}

    headers = {"authorization": f"Bearer {OPENAI_KEY}"}
    path = tmp_path / "c.json"
    live = call_api.__wrapped__(headers, "987654")
    with dejacache.cassette(path, substitute={"<ACCOUNT>": "987654"}):
        assert call_api(headers, "987654") == live
    text = path.read_text()
    assert OPENAI_KEY not in text and "987654" not in text
    assert "<ACCOUNT>" in text and PLACEHOLDER in text
    with dejacache.cassette(path, mode="replay", substitute={"<ACCOUNT>": "987654"}):
        assert call_api(headers, "987654") == live


def test_miss_report_does_not_print_secrets(tmp_path):
    @dejacache.cache(name="call_api")
    def call_api(headers: dict[str, str], q: str) -> str:
        return q

    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        call_api({"x-api-key": ANTHROPIC_KEY}, "a")
    with pytest.raises(dejacache.ReplayMiss) as err, dejacache.cassette(path, mode="replay"):
        call_api({"x-api-key": ANTHROPIC_KEY + "2"}, "b")
    assert ANTHROPIC_KEY not in str(err.value)
    assert orjson.loads(path.read_bytes())["entries"][0]["request"]["headers"] == {
        "x-api-key": PLACEHOLDER}


def test_substitute_keys_live_values_as_placeholders(tmp_path):
    """Recorded under one account, replayed under another: the request containing the live
    account id keys as its placeholder, and the response gets the replaying account back."""

    @dejacache.cache(name="whoami")
    def whoami(account: str) -> dict[str, str]:
        return {"owner": f"account {account}"}

    path = tmp_path / "c.json"
    with dejacache.cassette(path, substitute={"<ACCOUNT>": "111111"}):
        assert whoami("111111") == {"owner": "account 111111"}
    assert "111111" not in path.read_text()
    with dejacache.cassette(path, mode="replay", substitute={"<ACCOUNT>": "222222"}):
        assert whoami("222222") == {"owner": "account 222222"}


@pytest.mark.parametrize(("spec", "bad"), [(5, "5"), (["authorization", 7], "7")])
def test_a_redact_spec_of_the_wrong_type_is_refused_naming_the_value(spec: object,
                                                                     bad: str) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=f"redact= takes .*, not {bad}$"):
        dejacache.cassette("a.json", redact=spec)  # type: ignore[arg-type]


def _basic_auth(login: str, password: str) -> object:
    """aiohttp's ``BasicAuth`` (a named tuple), without aiohttp 3.14's deprecation warning."""
    import warnings

    import aiohttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return aiohttp.BasicAuth(login, password)


@pytest.mark.parametrize("auth", [
    lambda pw: ("alice", pw), lambda pw: {"auth": ["alice", pw]}, lambda pw: "alice:" + pw,
    lambda pw: _basic_auth("alice", pw),
    # bytes as requests takes them (written as base64 of the password before), mixed pairs,
    # and ``["auth", ...]`` pairs (written as the password before)
    lambda pw: (b"alice", pw.encode()), lambda pw: ("alice", pw.encode()),
    lambda pw: [["auth", ("alice", pw)]], lambda pw: [["auth", "alice:" + pw]],
    lambda pw: [("basic_auth", [b"alice", pw.encode()])],
])
def test_basic_credentials_never_reach_a_cassette_or_a_miss_report(tmp_path, auth):
    """``fetch(url, auth=("alice", "hunter2"))``: the password is written as the
    placeholder, the user as it is (bytes: as keys spell them); the same password replays,
    another one misses without either being printed."""
    @dejacache.cache(name="fetch")
    def fetch(url: str, auth: object) -> str:
        return url

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        fetch("u", auth("hunter2"))
    text = path.read_text()
    assert "hunter2" not in text and "aHVudGVyMg" not in text and PLACEHOLDER in text
    assert "alice" in text or "YWxpY2U=" in text
    with dejacache.cassette(path, mode="replay"):
        assert fetch("u", auth("hunter2")) == "u"
    with pytest.raises(dejacache.ReplayMiss) as err, dejacache.cassette(path, mode="replay"):
        fetch("u", auth("hunter3"))
    assert "hunter2" not in str(err.value) and "hunter3" not in str(err.value)
    assert "aHVudGVyMg" not in str(err.value) and "aHVudGVyMw" not in str(err.value)


@pytest.mark.parametrize("value", ["bearer", {"type": "oauth2"}, True, ["a", "b", "c", "d"],
                                   "https://auth.example/token"])
def test_settings_under_auth_names_are_written_as_they_are(value):
    tree = {"auth": value, "tools": [{"name": "t", "basic_auth": value}]}
    assert Redactor().tree(tree) == tree
