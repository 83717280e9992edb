"""Ollama's native API (``/api/chat``, ``/api/generate``, ``/api/embed``): answers carry
``model`` and the token counters ``prompt_eval_count`` / ``eval_count``; streams (the API's
default) are NDJSON, one JSON object per line, the counters on the last (``done: true``).

Ollama listens on localhost:11434, where any other service may answer ``/api/chat`` too; it
is matched only with the ollama client's user agent or at ollama.com, and declares nothing
volatile and no ids, so a wrong match changes a call's name and usage, never its answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._base import Provider, last_str

__all__ = ["PROVIDER", "Ollama"]

_PATHS = {"/api/chat": "ollama.chat", "/api/generate": "ollama.generate",
          "/api/embed": "ollama.embed", "/api/embeddings": "ollama.embeddings"}


def _suffix(path: str) -> str | None:
    for p in _PATHS:
        if path.endswith(p):
            return p
    return None


class Ollama(Provider):
    name = "ollama"
    priority = 40
    alias_keys = frozenset()  # Ollama's answers have no ids
    upstream = "http://127.0.0.1:11434"  # where a local Ollama listens

    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        return {}, {"error": message}

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        if _suffix(path) is None:
            return False
        # ollama-python and ollama-js send "ollama-python/0.6.3 (...)", "ollama-js/...".
        return host.endswith("ollama.com") or headers.get("user-agent", "").startswith(
            "ollama-")

    def endpoint(self, host: str, path: str) -> str:
        found = _suffix(path)
        return _PATHS[found] if found else "ollama.other"

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        out: dict[str, int] = {}
        for obj in (body, *events):
            if not isinstance(obj, dict):
                continue
            prompt, done = obj.get("prompt_eval_count"), obj.get("eval_count")
            if type(prompt) is int or type(done) is int:
                p = prompt if type(prompt) is int else 0
                d = done if type(done) is int else 0
                out = {"prompt_tokens": p, "completion_tokens": d, "total_tokens": p + d}
        return out or None

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        return last_str("model", body, events)


PROVIDER = Ollama()
