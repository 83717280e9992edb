"""OpenAI (and OpenAI-compatible servers: Azure, vLLM, LiteLLM proxies, local runtimes)."""

from __future__ import annotations

from collections.abc import Mapping

from ._base import Provider

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


class OpenAI(Provider):
    name = "openai"
    priority = 20
    # Abuse-monitoring tags: they identify the end user, never change the answer, and differ
    # between test runs that are otherwise identical.
    volatile = frozenset({"user", "safety_identifier"})
    # chat: tool_calls[].id (fed back as tool_call_id); responses: response id (fed back as
    # previous_response_id), output item ids and call_id (fed back in function_call_output).
    alias_keys = frozenset({"id", "call_id"})

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        if host.endswith("openai.com") or host.endswith("openai.azure.com"):
            return True
        return any(path.endswith(s) for s, _ in _ENDPOINTS)

    def terminal(self, event: str) -> bool:
        # chat/completions ends with "data: [DONE]"; the responses API with one of these events.
        if "data: [DONE]" in event:
            return True
        head = event[:40]
        return head.startswith("event: response.") and any(
            k in head for k in ("response.completed", "response.failed", "response.incomplete")
        )

    def endpoint(self, host: str, path: str) -> str:
        for suffix, name in _ENDPOINTS:
            if path.endswith(suffix):
                return name
        parts = [p for p in path.split("/") if p and p != "v1"]
        # "/v1/responses/resp_123" style reads: keep the resource name, drop the id.
        return "openai." + (parts[0] if parts else "other")


PROVIDER = OpenAI()
