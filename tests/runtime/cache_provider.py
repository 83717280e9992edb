"""A loopback provider that caches prompts the way the real ones say they do, and reports it.

Independent of dejacache's monitor and planner on purpose (its own rendering, its own token
count, its own reading of the providers' documentation), so a test can hold their predictions
against what a provider reports:

- Anthropic (``/v1/messages``): renders tools, system blocks, then messages; caches only at
  ``cache_control`` breakpoints (a top-level one marks the last block), prefixes of 1,024
  tokens or more; a breakpoint reads the longest cached prefix ending at a block boundary at
  most 20 content blocks before it; a request with more than 4 markers is refused (400, as
  Anthropic answers it). Entries live 5 minutes, or an hour when the marker says
  ``"ttl": "1h"``, each read renewing them. Usage: ``input_tokens`` (uncached),
  ``cache_read_input_tokens``, ``cache_creation_input_tokens`` and its split by lifetime
  (``cache_creation``). Streams too (usage in ``message_start``).
- OpenAI chat (``/v1/chat/completions``) and Responses (``/v1/responses``): a request goes to
  the machine of a hash of its first 256 tokens and its ``prompt_cache_key``; a route takes 15
  requests a minute, the next ones in that minute spill to a second machine, then a third
  (each machine its own cache). Before gpt-5.6 every prompt of 1,024 tokens or more is cached
  in 128-token steps and a request reads the longest cached step it repeats; entries live 5
  minutes idle, 24 hours with ``prompt_cache_retention="24h"``. From gpt-5.6 entries are
  written only at breakpoints (one implicit at the latest user or tool message unless
  ``prompt_cache_options.mode`` is ``"explicit"``, and the parts marked
  ``prompt_cache_breakpoint``), read at any message boundary, live 30 minutes (12 hours for a
  ``"12h"`` breakpoint), and writes are reported as ``cache_write_tokens``.

- Gemini (``/{version}/models/{model}:generateContent``, what google-genai calls): implicit
  caching, renders the system instruction, the tools, then the contents; a request reads the
  longest prefix (to the character) it shares with a live earlier prompt of the same model
  when that is at least the model's minimum (4,096 tokens for the Pro models, 1,024 for the
  others), each read renewing it; prompts live 5 minutes. Usage as Gemini reports it:
  ``promptTokenCount`` counts every prompt token, ``cachedContentTokenCount`` (and
  ``cacheTokensDetails``) the cached ones, left out when none were (proto3 JSON drops zeros).
  Explicit caches: ``POST /{version}/cachedContents`` creates one (system instruction, tools,
  contents, ``ttl``; answered with its name, times and ``usageMetadata.totalTokenCount``); a
  request naming it in ``cachedContent`` reads all of it while it lives (reported in
  ``cachedContentTokenCount``, and in ``promptTokenCount`` with the request's own tokens).

Tokens are characters / 4 of the rendered text. ``requests`` holds each request body parsed,
``raw`` as it arrived. ``clock``: seconds, read once per request
(a benchmark passes its own to play hours of traffic in seconds). ``clear()`` forgets every
cache (an expiry).
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import itertools
import re
import time
from collections.abc import Callable
from typing import Any

import orjson

from provider_support import (
    LoopbackHandler,
    LoopbackProvider,
    QuietServer,
    anthropic_stream,
    chat_chunk,
)

__all__ = ["CachingProvider"]

MIN_TOKENS = 1024
BLOCK = 128
LOOKBACK = 20  # content blocks an Anthropic breakpoint looks back
MAX_MARKS = 4  # cache_control markers a Messages request may carry
ROUTE_CHARS = 256 * 4  # the routed head: 256 tokens
ROUTE_RPM = 15  # requests a minute one route serves
ANTHROPIC_TTL, ANTHROPIC_LONG = 300.0, 3600.0
OPENAI_TTL, OPENAI_LONG = 300.0, 86400.0
GPT56_TTL, GPT56_LONG = 1800.0, 43200.0
GEMINI_TTL, GEMINI_PRO_MIN = 300.0, 4096
_MARKS = ("cache_control", "prompt_cache_breakpoint")
_GEMINI = re.compile(r"/v1[a-z0-9]*/models/([^/:]+):generateContent")
_GEMINI_CACHES = re.compile(r"/v1[a-z0-9]*/cachedContents")


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _common(a: str, b: str) -> int:
    """Characters ``a`` and ``b`` share at their start (halving on slices: C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tokens(text: str) -> int:
    return len(text) // 4


def _unmark(value: Any) -> Any:
    """What the model sees: no cache marker anywhere, string content as one text block."""
    if isinstance(value, dict):
        out = {k: _unmark(v) for k, v in value.items() if k not in _MARKS}
        if isinstance(out.get("content"), str) and "role" in out:
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    if isinstance(value, list):
        return [_unmark(v) for v in value]
    return value


def _mark(value: Any) -> Any:
    """The first cache marker inside ``value`` (None: none)."""
    if isinstance(value, dict):
        for k in _MARKS:
            if value.get(k) is not None:
                return value[k]
        return next((m for m in map(_mark, value.values()) if m is not None), None)
    if isinstance(value, list):
        return next((m for m in map(_mark, value) if m is not None), None)
    return None


def _gemini_text(body: dict[str, Any]) -> str:
    """A Gemini request (or cache) rendered: system instruction, tools, contents."""
    system = body.get("systemInstruction")
    return "".join(_render(v) for v in [*([system] if system else []),
                                        *(body.get("tools") or []),
                                        *(body.get("contents") or [])])


def _count_marks(value: Any) -> int:
    if isinstance(value, dict):
        return int(value.get("cache_control") is not None) + sum(
            _count_marks(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_marks(v) for v in value)
    return 0


def _render(value: Any) -> str:
    return orjson.dumps(_unmark(value), option=orjson.OPT_SORT_KEYS).decode() + "\n"


def _blocks(value: Any) -> int:
    content = value.get("content") if isinstance(value, dict) else None
    return len(content) if isinstance(content, list) and content else 1


class _Handler(LoopbackHandler):
    fake: CachingProvider

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = orjson.loads(raw) if raw else {}
        fake = self.fake
        with fake._lock:
            fake.requests.append(body)
            fake.raw.append(raw)
        path = self.path.split("?")[0]
        n = next(fake._n)
        now = fake.clock()
        if path == "/v1/messages":
            return self._messages(body, n, now)
        if path == "/v1/chat/completions":
            parts = [(_render(t), None, "tool") for t in body.get("tools") or []]
            parts += [(_render(m), _mark(m), m.get("role")) for m in body.get("messages") or []]
            total, cached, written = fake.openai_usage(body, parts, now)
            details: dict[str, int] = {"cached_tokens": cached}
            if written is not None:
                details["cache_write_tokens"] = written
            usage = {"prompt_tokens": total, "completion_tokens": 5,
                     "total_tokens": total + 5, "prompt_tokens_details": details}
            return self._chat(body, n, usage)
        if path == "/v1/responses":
            return self._responses(body, n, now)
        gemini = _GEMINI.fullmatch(path)
        if gemini is not None:
            return self._gemini(gemini.group(1), body, n, now)
        if _GEMINI_CACHES.fullmatch(path):
            return self.send_json(200, self.fake.create_cache(body, n, now))
        self.send_json(404, {"error": {"message": f"no route {path}"}})

    def _responses(self, body: dict[str, Any], n: int, now: float) -> None:
        parts = [(_render(t), None, "tool") for t in body.get("tools") or []]
        parts.append((_render(body.get("instructions") or ""), None, "system"))
        inp = body.get("input")
        items = [{"role": "user", "content": inp}] if isinstance(inp, str) else inp or []
        parts += [(_render(i), _mark(i), i.get("role") or (
            "tool" if i.get("type") == "function_call_output" else None)) for i in items]
        total, cached, written = self.fake.openai_usage(body, parts, now)
        details: dict[str, int] = {"cached_tokens": cached}
        if written is not None:
            details["cache_write_tokens"] = written
        self.send_json(200, {
            "id": f"resp_{n:06d}", "object": "response", "created_at": 1700000000 + n,
            "status": "completed", "model": body.get("model"), "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": f"msg_{n:06d}", "status": "completed",
                        "role": "assistant", "content": [
                            {"type": "output_text", "text": f"reply {n}", "annotations": []}]}],
            "usage": {"input_tokens": total, "output_tokens": 5, "total_tokens": total + 5,
                      "input_tokens_details": details,
                      "output_tokens_details": {"reasoning_tokens": 0}},
        })

    def _gemini(self, model: str, body: dict[str, Any], n: int, now: float) -> None:
        text = _gemini_text(body)
        held = self.fake.explicit(body.get("cachedContent"), now)
        if held is not None:  # an explicit cache: its text first, read in full
            text = held + text
            cached = _tokens(held)
        else:
            cached = self.fake.gemini_cached(model, text, now)
        total = _tokens(text)
        usage: dict[str, Any] = {"promptTokenCount": total, "candidatesTokenCount": 5,
                                 "totalTokenCount": total + 5,
                                 "promptTokensDetails": [{"modality": "TEXT",
                                                          "tokenCount": total}]}
        if cached:
            usage["cachedContentTokenCount"] = cached
            usage["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
        self.send_json(200, {
            "candidates": [{"content": {"parts": [{"text": f"reply {n}"}], "role": "model"},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": model, "responseId": f"resp-{n:06d}"})

    def _chat(self, body: dict[str, Any], n: int, usage: dict[str, Any]) -> None:
        model = body.get("model")
        reply = self.fake.reply(body, n)
        if not body.get("stream"):
            return self.send_json(200, {
                "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1700000000 + n,
                "model": model, "usage": usage,
                "choices": [{"index": 0, "finish_reason": reply.get("finish", "stop"),
                             "logprobs": None, "message": reply["message"]}],
            })
        cid, created = f"chatcmpl-{n}", 1700000000 + n
        # Usage last, in a chunk with no choices: what OpenAI sends for include_usage.
        self.send_sse([chat_chunk(cid, created, model, {"role": "assistant",
                                                        "content": f"reply {n}"}),
                       chat_chunk(cid, created, model, {}, "stop"),
                       chat_chunk(cid, created, model, None, usage=usage),
                       "data: [DONE]\n\n"])

    def _messages(self, body: dict[str, Any], n: int, now: float) -> None:
        marks = _count_marks(body)
        if marks > MAX_MARKS:  # what Anthropic answers: the request is refused
            return self.send_json(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"A maximum of {MAX_MARKS} blocks with cache_control may be "
                           f"provided. Found {marks}."}})
        usage = self.fake.anthropic_usage(body, now)
        content, stop = self.fake.message_reply(body, n)
        msg = {"id": f"msg_{n:06d}", "type": "message", "role": "assistant",
               "model": body.get("model"), "content": content,
               "stop_reason": stop, "stop_sequence": None,
               "usage": {**usage, "output_tokens": 5}}
        if not body.get("stream"):
            return self.send_json(200, msg)
        # The cache usage already in message_start, as Anthropic reports it.
        self.send_sse(anthropic_stream(msg, {**usage, "output_tokens": 1},
                                       {"type": "text", "text": ""},
                                       [{"type": "text_delta", "text": f"reply {n}"}]))


class CachingProvider(LoopbackProvider):
    """See the module. ``replies``: an optional function ``(api, body, n)`` scripting the
    answers (a tool-calling agent): for ``"chat"`` the assistant message, for ``"messages"``
    (content blocks, stop reason); default a plain text reply."""

    handler = _Handler
    server_class = QuietServer  # agents that close their clients mid-keep-alive: expected

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 replies: Callable[[str, dict[str, Any], int], Any] | None = None) -> None:
        super().__init__()
        self.clock = clock
        self._replies = replies
        self.cache: dict[str, tuple[float, float]] = {}  # key -> (expires, lifetime)
        self.routes: dict[str, collections.deque[float]] = {}
        self.gemini: dict[str, list[list[Any]]] = {}  # model -> [prompt text, expires]
        self.caches: dict[str, tuple[str, float]] = {}  # explicit: name -> (text, expires)
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []  # the request bodies as they arrived
        self._n = itertools.count(1)

    def clear(self) -> None:
        with self._lock:
            self.cache.clear()
            self.routes.clear()
            self.gemini.clear()
            self.caches.clear()

    def reply(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        if self._replies is not None:
            message = self._replies("chat", body, n)
            return {"message": message,
                    "finish": "tool_calls" if message.get("tool_calls") else "stop"}
        return {"message": {"role": "assistant", "content": f"reply {n}", "refusal": None}}

    def message_reply(self, body: dict[str, Any], n: int) -> tuple[list[Any], str]:
        if self._replies is not None:
            content, stop = self._replies("messages", body, n)
            return content, stop
        return [{"type": "text", "text": f"reply {n}"}], "end_turn"

    # ------------------------------------------------------------ the cache

    def _hit(self, key: str, now: float) -> bool:
        """A live entry (renewed by this read); a dead one is dropped."""
        entry = self.cache.get(key)
        if entry is None:
            return False
        if now > entry[0]:
            del self.cache[key]
            return False
        self.cache[key] = (now + entry[1], entry[1])
        return True

    def _put(self, key: str, now: float, life: float) -> None:
        old = self.cache.get(key)
        life = max(life, old[1]) if old is not None and now <= old[0] else life
        self.cache[key] = (now + life, life)

    def anthropic_usage(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        parts: list[tuple[str, Any, int]] = []
        for tool in body.get("tools") or []:
            parts.append((_render(tool), _mark(tool), 1))
        system = body.get("system") or []
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        for block in system:
            parts.append((_render(block), _mark(block), 1))
        for msg in body.get("messages") or []:
            parts.append((_render(msg), _mark(msg), _blocks(msg)))
        if isinstance(body.get("cache_control"), dict) and parts:
            text, mark, blocks = parts[-1]
            parts[-1] = (text, mark or body["cache_control"], blocks)
        ends, text, count = [], "", 0
        for rendered, mark, blocks in parts:
            text += rendered
            count += blocks
            ends.append((text, mark, count))
        total = _tokens(text)
        marks = [i for i, (_, m, _) in enumerate(ends) if m is not None]
        key = str(body.get("model"))
        with self._lock:
            read = 0
            for j in range(max(marks, default=-1), -1, -1):
                near = any(b >= j and ends[b][2] - ends[j][2] <= LOOKBACK for b in marks)
                if near and self._hit(key + _h(ends[j][0]), now):
                    read = _tokens(ends[j][0])
                    break
            written = long = 0
            lower = read
            for b in marks:
                prefix, mark, _ = ends[b]
                tokens = _tokens(prefix)
                if tokens < MIN_TOKENS:
                    continue
                hour = isinstance(mark, dict) and mark.get("ttl") == "1h"
                self._put(key + _h(prefix), now, ANTHROPIC_LONG if hour else ANTHROPIC_TTL)
                if tokens > lower:
                    written += tokens - lower
                    long += (tokens - lower) if hour else 0
                    lower = tokens
        return {"input_tokens": total - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written,
                "cache_creation": {"ephemeral_5m_input_tokens": written - long,
                                   "ephemeral_1h_input_tokens": long}}

    def create_cache(self, body: dict[str, Any], n: int, now: float) -> dict[str, Any]:
        """``POST cachedContents``: the cache created, answered as Gemini answers it."""
        name = f"cachedContents/cache-{n:06d}"
        text = _gemini_text(body)
        ttl = float(str(body.get("ttl") or "3600s").rstrip("s"))
        with self._lock:
            self.caches[name] = (text, now + ttl)

        def stamp(t: float) -> str:
            return datetime.datetime.fromtimestamp(1_798_000_000 + t, datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.000000Z")

        return {"name": name, "model": body.get("model"), "createTime": stamp(now),
                "updateTime": stamp(now), "expireTime": stamp(now + ttl),
                "usageMetadata": {"totalTokenCount": _tokens(text)}}

    def explicit(self, name: Any, now: float) -> str | None:
        """The text a live explicit cache ``name`` holds (None: no such cache)."""
        with self._lock:
            found = self.caches.get(name) if isinstance(name, str) else None
        return found[0] if found is not None and now <= found[1] else None

    def gemini_cached(self, model: str, text: str, now: float) -> int:
        """Implicit caching: tokens of the longest live prefix ``text`` shares with an earlier
        prompt of ``model`` (see the module); ``text`` kept for the next requests."""
        minimum = GEMINI_PRO_MIN if "-pro" in model else MIN_TOKENS
        with self._lock:
            prompts = self.gemini.setdefault(model, [])
            live = [p for p in prompts if now <= p[1]]
            best, hit = 0, None
            for p in live:
                common = _common(p[0], text)
                if _tokens(text[:common]) >= minimum and common > best:
                    best, hit = common, p
            if hit is not None:
                hit[1] = now + GEMINI_TTL
            live = [p for p in live if not text.startswith(p[0])]
            live.append([text, now + GEMINI_TTL])
            self.gemini[model] = live
        return _tokens(text[:best]) if best else 0

    def _machine(self, body: dict[str, Any], text: str, now: float) -> str:
        route = _h(f"{body.get('model')}\0{text[:ROUTE_CHARS]}\0"
                   f"{body.get('prompt_cache_key') or ''}")
        window = self.routes.setdefault(route, collections.deque())
        while window and window[0] <= now - 60.0:
            window.popleft()
        machine = f"{route}/{len(window) // ROUTE_RPM}"
        window.append(now)
        return machine

    def openai_usage(self, body: dict[str, Any], parts: list[tuple[str, Any, Any]],
                     now: float) -> tuple[int, int, int | None]:
        """(prompt tokens, cached tokens, written tokens or None before gpt-5.6)."""
        text = "".join(p[0] for p in parts)
        total = _tokens(text)
        model = str(body.get("model") or "")
        with self._lock:
            machine = self._machine(body, text, now)
            if model.startswith(("gpt-5.6", "gpt-5.7", "gpt-6")):
                return (total, *self._breakpoints(body, parts, machine, now))
            life = OPENAI_LONG if body.get("prompt_cache_retention") == "24h" else OPENAI_TTL
            cached = 0
            n = MIN_TOKENS
            while n <= total:
                key = machine + _h(text[: n * 4])
                if self._hit(key, now):
                    cached = n
                self._put(key, now, life)
                n += BLOCK
        return total, cached, None

    def _breakpoints(self, body: dict[str, Any], parts: list[tuple[str, Any, Any]],
                     machine: str, now: float) -> tuple[int, int]:
        options = body.get("prompt_cache_options") or {}
        explicit = [i for i, p in enumerate(parts) if p[1] is not None]
        points = {i: p[1] for i, p in enumerate(parts) if p[1] is not None}
        if options.get("mode") != "explicit":
            explicit = explicit[-3:]
            latest = max((i for i, p in enumerate(parts) if p[2] in ("user", "tool")),
                         default=len(parts) - 1)
            points = {i: points[i] for i in explicit}
            points.setdefault(latest, {})
        ends, text = [], ""
        for rendered, _, _ in parts:
            text += rendered
            ends.append(text)
        read = 0
        for j in range(max(points, default=-1), -1, -1):
            if self._hit(machine + _h(ends[j]), now):
                read = _tokens(ends[j])
                break
        written, lower = 0, read
        for i in sorted(points):
            tokens = _tokens(ends[i])
            if tokens < MIN_TOKENS:
                continue
            mark = points[i]
            long = isinstance(mark, dict) and mark.get("ttl") == "12h"
            self._put(machine + _h(ends[i]), now, GPT56_LONG if long else GPT56_TTL)
            if tokens > lower:
                written += tokens - lower
                lower = tokens
        return read, written
