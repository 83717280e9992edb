"""OpenAI (and OpenAI-compatible servers: Azure, vLLM, LiteLLM proxies, local runtimes)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..._core.cache_fields import FIELDS
from ._base import END, FINISHING, IN_PROGRESS, Provider

__all__ = ["PROVIDER", "OpenAI"]

# Endpoint path suffix -> call name. Longest suffixes first so "chat/completions" wins over
# "completions".
_ENDPOINTS = (
    ("/chat/completions", "openai.chat.completions"),
    ("/completions", "openai.completions"),
    ("/responses", "openai.responses"),
    ("/embeddings", "openai.embeddings"),
    ("/moderations", "openai.moderations"),
    ("/images/generations", "openai.images.generations"),
    ("/audio/speech", "openai.audio.speech"),
    ("/audio/transcriptions", "openai.audio.transcriptions"),
)

# A chunk whose finish_reason is a string, not null. Inside a JSON string a quote is escaped,
# so generated text that mentions finish_reason cannot match.
_FINISHED = re.compile(r'"finish_reason"\s*:\s*"')
_RESPONSE_ENDS = ("response.completed", "response.failed", "response.incomplete")
# GET /v1/responses/{id} (a background response polled) and POST .../{id}/cancel answer the
# response object itself.
_RESPONSE_URL = re.compile(r"/responses/(resp_[\w-]+)(?:/cancel)?$")


class OpenAI(Provider):
    name = "openai"
    priority = 20
    # Abuse-monitoring tags: they identify the end user, never change the answer, and differ
    # between test runs that are otherwise identical.
    volatile = frozenset({"user", "safety_identifier"})
    # What is cached, for how long and where: never what the model reads (keyed without).
    cache_fields = FIELDS["openai"]
    # chat: tool_calls[].id (fed back as tool_call_id); responses: response id (fed back as
    # previous_response_id, and in the URL polling a background response: ``url_id``), output
    # item ids and call_id (fed back in function_call_output).
    alias_keys = frozenset({"id", "call_id"})
    upstream = "https://api.openai.com"

    def url_id(self, path: str) -> str | None:
        m = _RESPONSE_URL.search(path)
        return m.group(1) if m else None

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        if host.endswith("openai.com") or host.endswith("openai.azure.com"):
            return True
        return any(path.endswith(s) for s, _ in _ENDPOINTS) or (
            "/responses/" in path and _RESPONSE_URL.search(path) is not None)

    def vouched(self, host: str, headers: Mapping[str, str]) -> bool:
        # The host, or what only OpenAI's SDKs (and their Stainless-made kin) send: a form
        # posted to ``/forms/7/responses`` has neither, and its ``user`` field is data.
        if host.endswith(("openai.com", "openai.azure.com")):
            return True
        return any(k.lower().startswith(("x-stainless-", "openai-")) for k in headers)

    def stage(self, event: str) -> int:
        # chat/completions: the chunk with finish_reason completes the answer (a usage chunk
        # may follow), "data: [DONE]" ends it; the responses API ends with one of
        # _RESPONSE_ENDS. With n > 1 choices the first finish_reason comes early: reading ahead
        # from there is still correct, only the later chunks then arrive together.
        if event.startswith("event: response."):
            head = event[:40]
            return END if any(k in head for k in _RESPONSE_ENDS) else IN_PROGRESS
        if "data: [DONE]" in event:
            return END
        return FINISHING if _FINISHED.search(event) else IN_PROGRESS

    def endpoint(self, host: str, path: str) -> str:
        for suffix, name in _ENDPOINTS:
            if path.endswith(suffix):
                return name
        parts = [p for p in path.split("/") if p and p != "v1"]
        # "/v1/responses/resp_123" style reads: keep the resource name, drop the id.
        return "openai." + (parts[0] if parts else "other")


PROVIDER = OpenAI()
