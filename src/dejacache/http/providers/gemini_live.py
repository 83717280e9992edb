"""Gemini's Live API over a WebSocket (``client.aio.live.connect(...)``: ``.../ws/google.ai.
generativelanguage.v1beta.GenerativeService.BidiGenerateContent``, and Vertex AI's
``LlmBidiService/BidiGenerateContent``): the session's name, the function-call ids the
client sends back in ``toolResponse``, and the tokens each turn's ``usageMetadata`` reports.

The API key travels as the ``x-goog-api-key`` header (google-genai) or the ``?key=`` query
parameter (raw clients): neither is keyed nor stored. The model is named by the client's
``setup`` message, not by the server's answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._base import Provider, int_fields

__all__ = ["PROVIDER", "GeminiLive"]


def _by_modality(details: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and type(d.get("tokenCount")) is int:
            m = str(d.get("modality", "")).lower()
            out[m] = out.get(m, 0) + d["tokenCount"]
    return out


class GeminiLive(Provider):
    name = "gemini"
    priority = 25  # before ``gemini``
    alias_keys = frozenset({"id"})

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        return "BidiGenerateContent" in path

    def endpoint(self, host: str, path: str) -> str:
        return "gemini.live"

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        """Each turn's ``usageMetadata`` among ``events``, summed, in OpenAI's names, with
        audio and text apart (priced apart)."""
        total: dict[str, int] = {}
        for ev in events:
            meta = ev.get("usageMetadata") if isinstance(ev, dict) else None
            if not isinstance(meta, dict):
                continue
            m = int_fields(meta)
            prompt = m.get("promptTokenCount", 0) + m.get("toolUsePromptTokenCount", 0)
            output = m.get("responseTokenCount", m.get("candidatesTokenCount", 0)) + m.get(
                "thoughtsTokenCount", 0)
            got_in = _by_modality(meta.get("promptTokensDetails"))
            got_out = _by_modality(meta.get("responseTokensDetails"))
            flat = {"prompt_tokens": prompt, "completion_tokens": output,
                    "total_tokens": m.get("totalTokenCount", prompt + output)}
            for k, v in (("input_audio_tokens", got_in.get("audio")),
                         ("input_text_tokens", got_in.get("text")),
                         ("output_audio_tokens", got_out.get("audio")),
                         ("output_text_tokens", got_out.get("text")),
                         ("cached_tokens", m.get("cachedContentTokenCount"))):
                if v is not None:
                    flat[k] = v
            for k, v in flat.items():
                total[k] = total.get(k, 0) + v
        return total or None


PROVIDER = GeminiLive()
