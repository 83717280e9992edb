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
