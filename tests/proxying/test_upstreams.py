"""The upstream table: one built-in upstream per provider module that names its API,
``--upstream NAME=URL`` over them, and the path's first segment choosing one."""

from __future__ import annotations

import pytest

from dejacache.errors import ConfigurationError
from dejacache.http.providers import all_providers
from dejacache.proxying.upstreams import (
    Upstream,
    builtin_upstreams,
    env_upstreams,
    keyed_headers,
    parse_upstream,
    split_target,
    unknown_upstream,
    upstream_table,
)


def test_every_provider_module_but_the_generic_one_is_an_upstream() -> None:
    table = builtin_upstreams()
    assert set(table) == {p.name for p in all_providers()} - {"http"}
    assert table["openai"].url == "https://api.openai.com"
    assert table["anthropic"].url == "https://api.anthropic.com"
    assert table["gemini"].url == "https://generativelanguage.googleapis.com"
    assert {"bedrock", "cohere", "groq", "mistral", "ollama"} <= set(table)


def test_an_upstream_adds_one_or_replaces_a_built_in_one() -> None:
    table = upstream_table(["OpenAI=http://127.0.0.1:9/v1/", "mine=https://llm.internal:8443"])
    assert table["openai"] == Upstream("openai", "http://127.0.0.1:9/v1")
    assert table["mine"].url == "https://llm.internal:8443"
    assert table["anthropic"] == builtin_upstreams()["anthropic"]


@pytest.mark.parametrize(("spec", "added"), [
    ("mine=http://127.0.0.1:9", [("x-dejacache-upstream", "mine")]),
    ("OpenAI=http://127.0.0.1:9/v1", []),  # a built-in name, pointed elsewhere
    ("bedrock=http://127.0.0.1:9", []),
])
def test_an_upstream_the_user_named_is_keyed_by_its_name_a_built_in_one_is_not(
        spec: str, added: list[tuple[str, str]]) -> None:
    # Keys leave the host out: two user-named upstreams would share keys without the name.
    headers = [("authorization", "Bearer k")]
    assert keyed_headers(parse_upstream(spec), headers) == [*headers, *added]


@pytest.mark.parametrize("spec", [
    "openai", "=http://x", "bad name=http://x", "_x=http://x", "a=ftp://x", "a=http://",
    "a=http://h/?q=1", "a=http://user:pw@h", "a=relative/path",
])
def test_a_malformed_upstream_names_itself(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="--upstream"):
        parse_upstream(spec)


@pytest.mark.parametrize(("target", "expected"), [
    ("/openai/v1/chat/completions?x=1", ("openai", "/v1/chat/completions?x=1")),
    ("/OpenAI/v1", ("openai", "/v1")),
    ("/openai", ("openai", "")),
    ("/openai?key=1", ("openai", "?key=1")),
    ("/bedrock/model/a%3A0/converse", ("bedrock", "/model/a%3A0/converse")),
    ("/", ("", "")),
])
def test_split_target(target: str, expected: tuple[str, str]) -> None:
    assert split_target(target) == expected


def test_the_region_comes_from_the_signature_then_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bedrock = builtin_upstreams()["bedrock"]
    assert bedrock.base("eu-west-3") == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigurationError, match="AWS region"):
        bedrock.base(None)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert bedrock.base(None) == "https://bedrock-runtime.us-west-2.amazonaws.com"


def test_the_sdks_base_url_variables_name_where_the_proxy_forwards() -> None:
    env = {"OPENAI_BASE_URL": "https://gateway.example.com/openai/v1",
           "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/"}
    assert env_upstreams(env) == {
        "openai": Upstream("openai", "https://gateway.example.com/openai"),
        "anthropic": Upstream("anthropic", "http://127.0.0.1:8080")}
    assert env_upstreams({}) == {}
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL"):
        env_upstreams({"OPENAI_BASE_URL": "localhost:8080"})


def test_an_unknown_name_is_answered_with_the_known_ones() -> None:
    text = unknown_upstream("opnai", builtin_upstreams())
    assert "no upstream named 'opnai'" in text and "--upstream NAME=URL" in text
    assert "anthropic, bedrock, cohere, gemini, groq, mistral, ollama, openai" in text
