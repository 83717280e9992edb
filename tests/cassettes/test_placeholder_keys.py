"""Replay needs no API key: placeholders while replaying, never on the wire."""

from __future__ import annotations

import os
from typing import Any

import anthropic  # noqa: F401  (loaded here so the in-process inner sessions share them)
import openai  # noqa: F401
import pytest

from dejacache.cassettes import placeholder_keys
from dejacache.cassettes.placeholder_keys import PLACEHOLDER
from loopback_provider import loopback

__all__ = ["loopback"]

_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout", "-p", "no:randomly")

INNER = """
import os, pytest
import anthropic, openai
from dejacache.errors import NetworkBlocked

CLIENT = openai.OpenAI(max_retries=0)     # at import time, as most projects build it
CLAUDE = anthropic.Anthropic()            # constructs too

@pytest.mark.dejacache(cassette="cassettes/chat.json")
def test_chat():
    r = CLIENT.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content.startswith("Hello")

def test_live_call_with_the_placeholder_is_refused():
    if os.environ.get("OPENAI_API_KEY") != PLACEHOLDER:
        pytest.skip("a real key is set")
    with pytest.raises(Exception) as info:   # the SDK wraps it in APIConnectionError
        CLIENT.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": "live"}])
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    blocked = [e for e in chain if isinstance(e, NetworkBlocked)]
    assert blocked, chain
    assert "placeholder credential" in str(blocked[0])
    assert "OPENAI_API_KEY" in str(blocked[0])
    assert "ANTHROPIC_API_KEY" not in str(blocked[0])  # the variable this call used, only
"""


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch, loopback: Any) -> Any:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", loopback.url)
    return loopback


def test_ci_replays_without_a_key_and_refuses_the_placeholder_live(
        pytester: pytest.Pytester, no_keys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_inner=INNER.replace(
        "from dejacache.errors", "from dejacache.cassettes.placeholder_keys import PLACEHOLDER\n"
        "from dejacache.errors"))
    # Recorded once with a key (as on a developer's machine)...
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer-key-0123456789abcdef")
    pytester.runpytest_subprocess(*_QUIET, "--dejacache-mode=record", "-k", "test_chat"
                                  ).assert_outcomes(passed=1)
    recorded = no_keys.count()
    assert recorded == 1
    # ...then CI: no key anywhere, clients built at import time, every call replays.
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("CI", "true")
    # (subprocesses: an in-process session that makes the process's first HTTP/1.1 request
    # imports h11 and httpcore's connection modules, which pytester drops afterwards, leaving
    # later tests of the worker with two copies of their exception classes)
    pytester.runpytest_subprocess(*_QUIET).assert_outcomes(passed=2)
    assert no_keys.count() == recorded     # the replay made no request, the refusal neither
    assert "OPENAI_API_KEY" not in os.environ  # the session put the environment back
    assert "ANTHROPIC_API_KEY" not in os.environ


def test_a_marker_in_replay_mode_supplies_the_keys_for_its_test(
        pytester: pytest.Pytester, no_keys: Any) -> None:
    pytester.makepyfile(test_inner=f"""
import os, pytest

@pytest.mark.dejacache(mode="replay")
def test_replaying():
    assert os.environ["OPENAI_API_KEY"] == "{PLACEHOLDER}"

def test_not_replaying():
    assert "OPENAI_API_KEY" not in os.environ
""")
    pytester.runpytest_subprocess(*_QUIET, "-p", "no:randomly").assert_outcomes(passed=2)


def test_recording_sessions_get_no_placeholder(pytester: pytest.Pytester, no_keys: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")   # CI, but the run asks to record: a real key is needed
    pytester.makepyfile(test_inner="""
import os

def test_env():
    assert "OPENAI_API_KEY" not in os.environ
""")
    pytester.runpytest(*_QUIET, "--dejacache-mode=record").assert_outcomes(passed=1)


def test_supply_keeps_real_keys_and_withdraw_restores() -> None:
    env = {"OPENAI_API_KEY": "sk-real", "GEMINI_API_KEY": "g-real", "AWS_PROFILE": "dev"}
    before = dict(env)
    got = placeholder_keys.supply(env)
    try:
        assert got == ["ANTHROPIC_API_KEY"]
        assert env == {**before, "ANTHROPIC_API_KEY": PLACEHOLDER}
    finally:
        placeholder_keys.withdraw(got, env)
    assert env == before


def _no_aws_files(tmp_path: Any) -> dict[str, str]:
    return {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_CONFIG_FILE": str(tmp_path / "none")}


@pytest.mark.parametrize("given", [
    {}, {"GOOGLE_API_KEY": "g-real"}, {"AWS_PROFILE": "dev"},
    {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/creds"}, {"credentials file": ""}])
def test_gemini_and_aws_get_a_placeholder_only_when_nothing_else_gives_one(
        given: dict[str, str], tmp_path: Any) -> None:
    # boto3 with no credential anywhere asks the instance metadata service, a call no
    # cassette holds; a profile, a file or container credentials must not be hidden.
    env = {"OPENAI_API_KEY": "sk-real", "ANTHROPIC_API_KEY": "sk-ant-real",
           **_no_aws_files(tmp_path), **given}
    if "credentials file" in given:
        del env["credentials file"]
        (tmp_path / "creds").write_text("[default]\n")
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "creds")
    got = placeholder_keys.supply(env)
    try:
        want = [] if "GOOGLE_API_KEY" in given else ["GEMINI_API_KEY"]
        if not given or "GOOGLE_API_KEY" in given:
            want += ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        assert got == want
    finally:
        placeholder_keys.withdraw(got, env)


def test_the_guard_is_gone_after_the_last_withdraw(loopback: Any) -> None:
    # Behaviour, not identity: a guard left under an interception wrapper by an earlier
    # test stays in the class as a pass-through, so the method object may not change.
    import httpx

    from dejacache.errors import NetworkBlocked

    def send() -> int:
        with httpx.Client() as client:
            return client.get(loopback.url + f"/v1/models?key={PLACEHOLDER}").status_code

    # Under CI this very session replays and holds a supply of its own, which must outlive
    # the test's: then the guard stays; otherwise it goes with the test's last withdraw.
    session_holds_one = placeholder_keys._USERS > 0
    outer = placeholder_keys.supply({})
    inner = placeholder_keys.supply({})
    placeholder_keys.withdraw(inner, {})
    with pytest.raises(NetworkBlocked):
        send()  # one supply is still in force
    placeholder_keys.withdraw(outer, {})
    if session_holds_one:
        with pytest.raises(NetworkBlocked):
            send()
    else:
        assert send()  # passes through: no guard in force


def test_the_placeholder_is_not_secret_shaped() -> None:
    from dejacache._secrets import mask_text

    assert mask_text(PLACEHOLDER, lambda s: "<X>") == PLACEHOLDER


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_the_guard_refuses_the_placeholder_on_every_transport(
        library: str, loopback: Any) -> None:
    import importlib

    from dejacache.errors import NetworkBlocked

    lib = importlib.import_module(library)
    keys = placeholder_keys.supply({})
    try:
        with lib.Client() as client, pytest.raises(NetworkBlocked, match="placeholder"):
            client.post(loopback.url + "/v1/messages", headers={"x-api-key": PLACEHOLDER})
        async with lib.AsyncClient() as aclient:
            with pytest.raises(NetworkBlocked, match="placeholder"):
                await aclient.get(loopback.url + f"/v1/models?key={PLACEHOLDER}")
            ok = await aclient.post(loopback.openai_url + "/chat/completions",
                                    json={"model": "gpt-4o-mini", "messages": []},
                                    headers={"authorization": "Bearer sk-real"})
            assert ok.status_code == 200   # a real key passes untouched
    finally:
        placeholder_keys.withdraw(keys, {})
    assert loopback.count() == 1


_BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"
_GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent"


@pytest.mark.parametrize(("url", "headers", "named"), [
    ("https://api.openai.com/v1/chat/completions",
     {"authorization": f"Bearer {PLACEHOLDER}"}, "OPENAI_API_KEY was unset"),
    ("https://api.anthropic.com/v1/messages", {"x-api-key": PLACEHOLDER},
     "ANTHROPIC_API_KEY was unset"),
    (_GEMINI, {"x-goog-api-key": PLACEHOLDER}, "GEMINI_API_KEY was unset"),
    (_GEMINI + f"?key={PLACEHOLDER}", {}, "GEMINI_API_KEY was unset"),
    ("https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
     {"authorization": f"Bearer {PLACEHOLDER}"}, "GEMINI_API_KEY was unset"),
    (_BEDROCK, {"authorization": f"AWS4-HMAC-SHA256 Credential={PLACEHOLDER}/20261205/"},
     "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY were unset"),
    # nowhere an SDK puts its key: every variable holding a placeholder
    ("http://127.0.0.1:9/v1", {"x-custom": PLACEHOLDER},
     " / ".join(placeholder_keys.KEY_VARIABLES) + " were unset"),
])
def test_the_refusal_names_the_variable_the_request_used(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any, url: str, headers: dict[str, str],
        named: str) -> None:
    """It listed all five whatever the host: the user had to work out which to set."""
    import httpx

    from dejacache.errors import NetworkBlocked

    for var in (*placeholder_keys.KEY_VARIABLES, *placeholder_keys._AWS, "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, path in _no_aws_files(tmp_path).items():
        monkeypatch.setenv(var, path)
    got = placeholder_keys.supply()
    try:
        with pytest.raises(NetworkBlocked) as info:
            placeholder_keys.check(httpx.Request("POST", url, headers=headers))
    finally:
        placeholder_keys.withdraw(got)
    assert f"({named})" in str(info.value)
