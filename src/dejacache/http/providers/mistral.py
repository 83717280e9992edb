"""Mistral (api.mistral.ai): OpenAI-shaped chat completions, streams ended by ``[DONE]``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._base import last_str
from .openai import OpenAI

__all__ = ["PROVIDER", "Mistral"]


class Mistral(OpenAI):
    name = "mistral"
    priority = 15  # before OpenAI, whose "/chat/completions" suffix matches Mistral's paths
    # Mistral's API has no end-user tag: nothing in a request is known not to change the answer.
    volatile = frozenset()
    # The completion id and tool_calls[].id (9 characters, fed back as tool_call_id).
    alias_keys = frozenset({"id"})
    upstream = "https://api.mistral.ai"

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        # Its paths are OpenAI's: at any other host (a proxy, a test server) only the
        # mistralai SDK's own user agent tells the two apart.
        return host.endswith("mistral.ai") or headers.get("user-agent", "").startswith(
            "mistral-client-")

    def endpoint(self, host: str, path: str) -> str:
        # "/v1/chat/completions" -> "mistral.chat.completions"; "/v1/fim/completions" and
        # "/v1/agents/completions" keep their resource name.
        for kind in ("fim", "agents"):
            if path.endswith(f"/{kind}/completions"):
                return f"mistral.{kind}.completions"
        return "mistral" + super().endpoint(host, path)[len("openai"):]

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        return last_str("model", body, events)

    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        return {}, {"object": "error", "message": message, "type": kind, "param": None,
                    "code": None}


PROVIDER = Mistral()
