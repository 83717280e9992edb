"""Google Gemini: the Gemini API (generativelanguage) and Vertex AI's ``publishers/google``
models, as google-genai calls them.

Calls are ``POST .../models/{model}:{method}``; a stream is ``:streamGenerateContent?alt=sse``
(the request body has no ``stream`` field), or, without ``alt=sse``, one JSON array of the same
chunks. Answers carry ``usageMetadata``, ``modelVersion``
and ``responseId``. The API key travels as the ``x-goog-api-key`` header (google-genai) or the
``?key=`` query parameter (REST examples): request headers are never stored or keyed, and
``key`` is an authenticating query parameter (``_secrets.AUTH_QUERY``), left out of keys and
stored requests alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._base import FINISHING, IN_PROGRESS, Provider, int_fields, last_str

__all__ = ["PROVIDER", "Gemini", "model_of"]

# ".../models/gemini-2.5-flash:generateContent": the model, then the method after a colon.
# The colon-method form is Google's (AIP-136 custom methods); other APIs rarely use it.
_CALL = re.compile(r"/models/([^/:]+):([A-Za-z]+)$")
_HOSTS = ("generativelanguage.googleapis.com", "aiplatform.googleapis.com")
# A streamed answer is complete at the event that carries a finish reason: usage and the
# last text come with it, and the server then ends the body. Inside a JSON string a quote is
# escaped, so generated text that mentions finishReason cannot match.
_FINISHED = re.compile(r'"finishReason"\s*:\s*"')
_STREAMS = ("streamGenerateContent",)
# HTTP status -> the canonical status name Google's errors carry beside the code.
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
           502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


class Gemini(Provider):
    name = "gemini"
    priority = 30
    # functionCall.id (google-genai copies it into the functionResponse it sends back) and
    # responseId.
    alias_keys = frozenset({"id", "responseId"})
    upstream = "https://generativelanguage.googleapis.com"

    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        return {}, {"error": {"code": status, "message": message,
                              "status": _STATUS.get(status, "UNKNOWN")}}

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        return host.endswith(_HOSTS) or _CALL.search(path) is not None

    def endpoint(self, host: str, path: str) -> str:
        m = _CALL.search(path)
        if m is None:
            parts = [p for p in path.split("/") if p and not p.startswith("v1")]
            return "gemini." + (_snake(parts[0]) if parts else "other")
        method = m.group(2)
        # A stream and a whole answer are one call, as OpenAI's stream=True is.
        return "gemini." + _snake("generateContent" if method in _STREAMS else method)

    def asks_stream(self, path: str, body: Any) -> bool:
        return path.endswith(_STREAMS)

    def stage(self, event: str) -> int:
        return FINISHING if _FINISHED.search(event) else IN_PROGRESS

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        # Streams repeat usageMetadata on every event, the prompt count first and the full
        # counts with the finish reason: the last one holds them all.
        meta: dict[str, int] = {}
        for obj in _chunks(body, events):
            if isinstance(obj, dict) and isinstance(obj.get("usageMetadata"), dict):
                meta = int_fields(obj["usageMetadata"])
        if not meta:
            return None
        # OpenAI's names, which stats and the price table read. The prompt count includes
        # the cached tokens (as OpenAI's prompt_tokens does); thinking tokens are billed as
        # output, and candidatesTokenCount leaves them out.
        prompt = meta.get("promptTokenCount", 0) + meta.get("toolUsePromptTokenCount", 0)
        output = meta.get("candidatesTokenCount", 0) + meta.get("thoughtsTokenCount", 0)
        out = {"prompt_tokens": prompt, "completion_tokens": output,
               "total_tokens": meta.get("totalTokenCount", prompt + output)}
        if "cachedContentTokenCount" in meta:
            out["cached_tokens"] = meta["cachedContentTokenCount"]
        if "thoughtsTokenCount" in meta:
            out["thoughts_tokens"] = meta["thoughtsTokenCount"]
        return out

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        if type(body) is list:  # a JSON-array stream: its chunks are the events
            return last_str("modelVersion", None, _chunks(body, events))
        return last_str("modelVersion", body, events)


def _chunks(body: Any, events: Iterable[Any]) -> list[Any]:
    """The parts of an answer that may carry usage and model: the body, or the chunks of a
    stream. ``:streamGenerateContent`` without ``?alt=sse`` answers with one JSON array of
    the chunks an SSE stream would send as events (llm-gemini asks for it that way), so a
    list body is read chunk by chunk."""
    head = list(body) if type(body) is list else [body]
    return [*head, *events]


def model_of(path: str) -> str:
    """The model a call's URL path names (``.../models/gemini-2.5-flash:generateContent``:
    Gemini request bodies carry none); "" when it names none."""
    m = _CALL.search(path)
    return m.group(1) if m is not None else ""


PROVIDER = Gemini()
