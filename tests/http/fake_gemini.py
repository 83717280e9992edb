"""A loopback Gemini API (generativelanguage) that google-genai reaches through
``http_options=types.HttpOptions(base_url=...)``.

- ``POST /{version}/models/{model}:generateContent``: ``candidates`` (one, ``role: model``,
  ``finishReason: STOP``), ``usageMetadata`` (prompt / candidates / total token counts and the
  prompt's per-modality details), ``modelVersion`` and a fresh ``responseId``.
- ``POST /{version}/models/{model}:streamGenerateContent?alt=sse``: the same answer as server
  sent events, one ``GenerateContentResponse`` per word, each carrying ``modelVersion``, the
  shared ``responseId`` and ``usageMetadata`` (the prompt count until the last event, which has
  the full counts and the finish reason). Events end with ``\\r\\n\\r\\n``, as Google sends them.

The API key must arrive as the ``x-goog-api-key`` header (what google-genai sends) or the
``key`` query parameter (what REST examples use); without one the answer is Google's 403.
Tool calling follows ``FakeProvider``'s script: function declarations offered and no
``functionResponse`` yet gets a ``functionCall`` part; one gets a text quoting the response.

``script`` overrides (besides ``ScriptedProvider``'s): ``{"status": 429}`` answers Google's
error JSON for that status (``{"error": {"code", "message", "status"}}``: 429
RESOURCE_EXHAUSTED, 500 INTERNAL, 503 UNAVAILABLE, 400 INVALID_ARGUMENT, ...).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from provider_support import ScriptedHandler, ScriptedProvider, reply_text, tokens, words

__all__ = ["ERRORS", "FakeGemini"]

# status -> (status name, message) as the Gemini API answers them.
ERRORS: dict[int, tuple[str, str]] = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    403: ("PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without "
                               "established identity). Please use API Key or other form of "
                               "API consumer identity to call this API."),
    404: ("NOT_FOUND", "models/unknown is not found for API version v1beta."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: ("INTERNAL", "An internal error has occurred. Please retry or report in "
                      "https://developers.generativeai.google/guide/troubleshooting"),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
}


def _response_id() -> str:
    # Gemini's ids: 16 random bytes, URL-safe base64 without padding (22 characters).
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")


def _sse(payload: dict[str, Any]) -> str:
    return "data: " + orjson.dumps(payload).decode() + "\r\n\r\n"


class _Handler(ScriptedHandler):
    fake: FakeGemini

    def do_POST(self) -> None:
        body = self.read_json()
        if not self.begin(body):
            return
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if not (self.headers.get("x-goog-api-key") or query.get("key")):
            return self._error(403)
        if "status" in self.ov:
            return self._error(int(self.ov["status"]))
        _, _, rest = unquote(url.path).partition("/models/")
        model, _, method = rest.partition(":")
        if method == "generateContent":
            return self._generate(model, body, stream=False)
        if method == "streamGenerateContent":
            return self._generate(model, body, stream=True)
        self._error(404, f"Method {method} not found.")

    def _error(self, status: int, message: str | None = None) -> None:
        name, text = ERRORS.get(status, ("UNKNOWN", "Unknown error."))
        self.send_json(status, {"error": {"code": status, "message": message or text,
                                          "status": name}},
                       {"content-type": "application/json; charset=UTF-8",
                        **self.ov.get("headers", {})})

    def _generate(self, model: str, body: dict[str, Any], *, stream: bool) -> None:
        n = self.fake.next_n()
        contents = body.get("contents") or []
        parts = contents[-1].get("parts", []) if contents else []
        result = next((p["functionResponse"] for p in parts if "functionResponse" in p), None)
        decls = [d for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]
        part: dict[str, Any]
        if decls and result is None:
            part = {"functionCall": {"name": decls[0]["name"], "args": {"city": "Paris"}}}
        else:
            part = {"text": reply_text(n, result and result.get("response"))}
        prompt = tokens([body.get("systemInstruction"), contents])
        output = tokens(part)
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": output,
                 "totalTokenCount": prompt + output,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
        base = {"modelVersion": model, "responseId": _response_id()}
        if not stream:
            return self.send_json(200, {
                "candidates": [{"content": {"parts": [part], "role": "model"},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, **base,
            }, {"content-type": "application/json; charset=UTF-8"})
        pieces = [{"text": w} for w in words(part["text"])] if "text" in part else [part]
        events = []
        for i, piece in enumerate(pieces):
            candidate: dict[str, Any] = {"content": {"parts": [piece], "role": "model"},
                                         "index": 0}
            running = {"promptTokenCount": prompt, "totalTokenCount": prompt,
                       "promptTokensDetails": usage["promptTokensDetails"]}
            if i == len(pieces) - 1:
                candidate["finishReason"] = "STOP"
                running = usage
            events.append(_sse({"candidates": [candidate], "usageMetadata": running, **base}))
        self.write_stream(events, "text/event-stream", {})


class FakeGemini(ScriptedProvider):
    handler = _Handler
