"""A loopback provider that caches prompts the way the real ones say they do, and reports it.

Independent of dejacache's monitor on purpose (its own rendering, its own token count), so a
test can hold the monitor's expected reuse against what a provider reports:

- Anthropic (``/v1/messages``): renders tools, system blocks, then messages; caches only at
  ``cache_control`` breakpoints, prefixes of 1,024 tokens or more; a later request reads the
  longest cached prefix it repeats. Usage: ``input_tokens`` (uncached), ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``. Streams too (usage in ``message_start``).
- OpenAI chat (``/v1/chat/completions``) and Responses (``/v1/responses``): caches every prompt
  of 1,024 tokens or more in 128-token steps; usage reports ``cached_tokens``.

Tokens are characters / 4 of the rendered text. ``clear()`` forgets the cache (an expiry).
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import orjson

from provider_support import LoopbackHandler, LoopbackProvider, anthropic_stream, chat_chunk

__all__ = ["CachingProvider"]

MIN_TOKENS = 1024
BLOCK = 128


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _tokens(text: str) -> int:
    return len(text) // 4


def _unmark(value: Any) -> Any:
    """What the model sees: no cache_control anywhere, string content as one text block."""
    if isinstance(value, dict):
        out = {k: _unmark(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(out.get("content"), str) and "role" in out:
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(value, list):
        return [_unmark(v) for v in value]
    return value


def _marked(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_marked(v) for v in value.values())
    if isinstance(value, list):
        return any(_marked(v) for v in value)
    return False


def _render(value: Any) -> str:
    return orjson.dumps(_unmark(value), option=orjson.OPT_SORT_KEYS).decode() + "\n"


class _Handler(LoopbackHandler):
    fake: CachingProvider

    def do_POST(self) -> None:
        body = self.read_json()
        fake = self.fake
        with fake._lock:
            fake.requests.append(body)
        path = self.path.split("?")[0]
        n = next(fake._n)
        if path == "/v1/messages":
            return self._messages(body, n)
        if path == "/v1/chat/completions":
            text = "".join(_render(t) for t in body.get("tools") or [])
            text += "".join(_render(m) for m in body.get("messages") or [])
            total, cached = fake.openai_cached(text)
            usage = {"prompt_tokens": total, "completion_tokens": 5,
                     "total_tokens": total + 5, "prompt_tokens_details": {"cached_tokens": cached}}
            return self._chat(body, n, usage)
        if path == "/v1/responses":
            text = "".join(_render(t) for t in body.get("tools") or [])
            text += _render(body.get("instructions") or "")
            text += _render(body.get("input"))
            total, cached = fake.openai_cached(text)
            return self.send_json(200, {
                "id": f"resp_{n:06d}", "object": "response", "created_at": 1700000000 + n,
                "status": "completed", "model": body.get("model"), "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [],
                "output": [{"type": "message", "id": f"msg_{n:06d}", "status": "completed",
                            "role": "assistant", "content": [
                                {"type": "output_text", "text": f"reply {n}",
                                 "annotations": []}]}],
                "usage": {"input_tokens": total, "output_tokens": 5, "total_tokens": total + 5,
                          "input_tokens_details": {"cached_tokens": cached},
                          "output_tokens_details": {"reasoning_tokens": 0}},
            })
        self.send_json(404, {"error": {"message": f"no route {path}"}})

    def _chat(self, body: dict[str, Any], n: int, usage: dict[str, Any]) -> None:
        model = body.get("model")
        if not body.get("stream"):
            return self.send_json(200, {
                "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1700000000 + n,
                "model": model, "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": f"reply {n}",
                                         "refusal": None}}],
            })
        cid, created = f"chatcmpl-{n}", 1700000000 + n
        # Usage last, in a chunk with no choices: what OpenAI sends for include_usage.
        self.send_sse([chat_chunk(cid, created, model, {"role": "assistant",
                                                        "content": f"reply {n}"}),
                       chat_chunk(cid, created, model, {}, "stop"),
                       chat_chunk(cid, created, model, None, usage=usage),
                       "data: [DONE]\n\n"])

    def _messages(self, body: dict[str, Any], n: int) -> None:
        usage = self.fake.anthropic_usage(body)
        msg = {"id": f"msg_{n:06d}", "type": "message", "role": "assistant",
               "model": body.get("model"), "content": [{"type": "text", "text": f"reply {n}"}],
               "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {**usage, "output_tokens": 5}}
        if not body.get("stream"):
            return self.send_json(200, msg)
        # The cache usage already in message_start, as Anthropic reports it.
        self.send_sse(anthropic_stream(msg, {**usage, "output_tokens": 1},
                                       {"type": "text", "text": ""},
                                       [{"type": "text_delta", "text": f"reply {n}"}]))


class CachingProvider(LoopbackProvider):
    handler = _Handler

    def __init__(self) -> None:
        super().__init__()
        self.cache: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self._n = itertools.count(1)

    def clear(self) -> None:
        with self._lock:
            self.cache.clear()

    # ------------------------------------------------------------ caching

    def anthropic_usage(self, body: dict[str, Any]) -> dict[str, int]:
        parts: list[tuple[str, bool]] = []
        for tool in body.get("tools") or []:
            parts.append((_render(tool), _marked(tool)))
        system = body.get("system") or []
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        for block in system:
            parts.append((_render(block), _marked(block)))
        for msg in body.get("messages") or []:
            parts.append((_render(msg), _marked(msg)))
        prefixes, text = [], ""
        for rendered, marked in parts:
            text += rendered
            prefixes.append((text, marked))
        total = _tokens(text)
        with self._lock:
            last_bp = max((i for i, (_, m) in enumerate(prefixes) if m), default=-1)
            read = 0
            for i in range(last_bp + 1):
                if _h(prefixes[i][0]) in self.cache:
                    read = _tokens(prefixes[i][0])
            created = 0
            for prefix, marked in prefixes:
                if marked and _tokens(prefix) >= MIN_TOKENS and _h(prefix) not in self.cache:
                    self.cache.add(_h(prefix))
            if last_bp >= 0 and _tokens(prefixes[last_bp][0]) >= MIN_TOKENS:
                created = _tokens(prefixes[last_bp][0]) - read
        return {"input_tokens": total - read - created, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": created}

    def openai_cached(self, text: str) -> tuple[int, int]:
        total = _tokens(text)
        with self._lock:
            cached = 0
            n = MIN_TOKENS
            while n <= total:
                key = _h(text[: n * 4])
                if key in self.cache:
                    cached = n
                self.cache.add(key)
                n += BLOCK
        return total, cached
