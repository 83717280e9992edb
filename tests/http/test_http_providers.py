"""Provider modules: every one listed, and imported with the package."""

from __future__ import annotations

import pkgutil

from dejacache.http import providers


def test_every_provider_module_is_listed() -> None:
    found = {m.name for m in pkgutil.iter_modules(providers.__path__)
             if not m.name.startswith("_")}
    assert found == set(providers.MODULES)
    assert [p.name for p in providers.all_providers()][-1] == "http"  # the fallback is last


def test_openai_names_the_response_a_url_polls() -> None:
    from dejacache.http.providers import detect

    p = detect("127.0.0.1", "/v1/responses/resp_abc123", {})
    assert p.name == "openai" and p.endpoint("127.0.0.1", "/v1/responses/resp_abc123") == (
        "openai.responses")
    assert p.url_id("/v1/responses/resp_abc123") == "resp_abc123"
    assert p.url_id("/v1/responses/resp_abc123/cancel") == "resp_abc123"
    assert p.url_id("/v1/responses/resp_abc123/input_items") is None
    assert p.url_id("/v1/responses") is None
    assert detect("127.0.0.1", "/v1/files/file_1", {}).name == "http"


def _by_name() -> dict[str, providers.Provider]:
    return {p.name: p for p in providers.all_providers()}


def test_every_provider_but_the_generic_one_names_its_api() -> None:
    for name, p in _by_name().items():
        assert (p.upstream is None) == (name == "http"), name
        if p.upstream is not None:
            assert p.upstream.startswith(("https://", "http://127.0.0.1")), name


def test_each_provider_answers_an_error_in_its_own_shape() -> None:
    got = {name: p.error_answer(404, "dejacache_replay_miss", "no recording")
           for name, p in _by_name().items()}
    openai_shape = ({}, {"error": {"message": "no recording", "type": "dejacache_replay_miss",
                                   "param": None, "code": "dejacache_replay_miss"}})
    assert got["openai"] == got["groq"] == got["http"] == openai_shape
    assert got["anthropic"] == ({}, {"type": "error", "error": {
        "type": "dejacache_replay_miss", "message": "no recording"}})
    assert got["gemini"] == ({}, {"error": {"code": 404, "message": "no recording",
                                            "status": "NOT_FOUND"}})
    assert got["bedrock"] == ({"x-amzn-errortype": "ResourceNotFoundException"},
                              {"message": "no recording"})
    assert got["cohere"] == ({}, {"message": "no recording"})
    assert got["ollama"] == ({}, {"error": "no recording"})
    assert got["mistral"][1]["message"] == "no recording"
    assert _by_name()["bedrock"].error_answer(502, "x", "m")[0] == {
        "x-amzn-errortype": "ServiceUnavailableException"}
