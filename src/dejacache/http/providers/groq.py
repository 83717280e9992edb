"""Groq (api.groq.com/openai/v1): OpenAI-compatible chat completions with Groq's ``x_groq``
extras; a stream reports its usage in ``x_groq.usage`` on its last chunk."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._base import last_str, usage_ints
from .openai import OpenAI

__all__ = ["PROVIDER", "Groq"]


class Groq(OpenAI):
    name = "groq"
    priority = 15  # before OpenAI, whose "/chat/completions" suffix matches Groq's paths
    # "user" is OpenAI's end-user tag, accepted and ignored the same way (OpenAI's reason).
    volatile = frozenset({"user"})
    # The completion id and tool_calls[].id (fed back as tool_call_id); x_groq.id too.
    alias_keys = frozenset({"id"})
    upstream = "https://api.groq.com"  # the SDK's paths start /openai/v1

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        # "/openai/v1/..." alone is not Groq's (Azure OpenAI's v1 API uses it too): the host,
        # or the groq SDK's own user agent at any other host.
        return host.endswith("groq.com") or headers.get("user-agent", "").startswith(
            ("Groq/", "AsyncGroq/"))

    def vouched(self, host: str, headers: Mapping[str, str]) -> bool:
        return True  # (matched by its host or its SDK's user agent only)

    def endpoint(self, host: str, path: str) -> str:
        if path.startswith("/openai/"):
            path = path[len("/openai"):]
        return "groq" + super().endpoint(host, path)[len("openai"):]

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        evs = list(events)
        found = super().usage(body, evs)
        for ev in evs:  # streams: usage rides in x_groq on the last chunk
            x = ev.get("x_groq") if isinstance(ev, dict) else None
            if isinstance(x, dict):
                found = usage_ints(x.get("usage")) or found
        return found

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        return last_str("model", body, events)


PROVIDER = Groq()
