"""One loopback server for the chat APIs of Mistral, Groq, Cohere and Ollama, each at the path
its SDK calls below the base URL it is given (``server_url=``, ``base_url=``, ``host=``):

- Mistral ``POST /v1/chat/completions``: OpenAI-shaped (32-hex ``id``, ``usage``); streams are
  data-only SSE chunks ended by ``[DONE]``, the usage on the last chunk; tool calls carry
  Mistral's 9-character ids.
- Groq ``POST /openai/v1/chat/completions``: OpenAI-shaped with Groq's extras: ``x_groq.id``
  (its request id), timing fields in ``usage``, ``system_fingerprint``, ``service_tier``; a
  stream has ``x_groq.id`` on its first chunk and ``x_groq.usage`` on its last.
- Cohere ``POST /v2/chat``: v2 shapes (``message.content`` blocks, ``finish_reason``
  COMPLETE / TOOL_CALL, ``usage.billed_units`` and ``usage.tokens``); with ``"stream": true``
  named SSE events ``message-start``, ``content-start``, ``content-delta`` per word,
  ``content-end``, ``message-end`` (the usage), or ``tool-plan-delta`` and ``tool-call-*``.
- Ollama ``POST /api/chat``: ``message``, ``done``/``done_reason`` and the counters
  (``prompt_eval_count``, ``eval_count``, durations in ns); streaming (the API's default) is
  NDJSON, one JSON object per line, the last with ``done: true`` and the counters. Ollama has
  no ids: answers differ by their text and ``created_at``.

Tool calling follows ``FakeProvider``'s script. ``script`` overrides (besides
``ScriptedProvider``'s): ``{"status": 429}`` answers the error body each API sends for that
status (Groq adds its ``retry-after`` header).
"""

from __future__ import annotations

import datetime
import secrets
import string
import time
import uuid
from typing import Any

import orjson

from provider_support import (
    ScriptedHandler,
    ScriptedProvider,
    chat_message,
    chat_stream_data,
    reply_text,
    rid,
    sse_data,
    sse_event,
    tokens,
    words,
)

__all__ = ["FakeChatAPIs"]

_ALNUM = string.ascii_letters + string.digits


def _mistral_call_id() -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(9))


def _openai_turn(body: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
    """(the first offered tool, the last message's tool result) of an OpenAI-shaped request:
    a tool call is due when a tool is offered and no result came back yet."""
    msgs = body.get("messages") or []
    last = msgs[-1] if msgs else {}
    result = last.get("content") if last.get("role") == "tool" else None
    tools = body.get("tools") or []
    return (tools[0] if tools else None), result


class _Handler(ScriptedHandler):
    fake: FakeChatAPIs

    def do_POST(self) -> None:
        body = self.read_json()
        if not self.begin(body):
            return
        path = self.path.split("?")[0]
        api = {"/v1/chat/completions": "mistral", "/openai/v1/chat/completions": "groq",
               "/v2/chat": "cohere", "/api/chat": "ollama"}.get(path)
        if api is None:
            return self.send_json(404, {"error": f"no route {path}"})
        if "status" in self.ov:
            return self._error(api, int(self.ov["status"]))
        getattr(self, "_" + api)(body)

    def _json(self, data: Any, headers: dict[str, str] | None = None) -> None:
        self.send_json(200, data, {**(headers or {}), **self.ov.get("headers", {})})

    def _error(self, api: str, status: int) -> None:
        n = self.fake.next_n()
        headers: dict[str, str] = {}
        data: Any
        if api == "mistral":
            kind = "rate_limited" if status == 429 else "internal_server_error"
            data = {"object": "error", "message": f"{kind} #{n}", "type": kind,
                    "param": None, "code": str(status * 10)}
        elif api == "groq":
            kind = "tokens" if status == 429 else "internal_server_error"
            data = {"error": {"message": f"{kind} #{n}", "type": kind,
                              "code": "rate_limit_exceeded" if status == 429 else None}}
            if status == 429:
                headers["retry-after"] = "1"
        elif api == "cohere":
            data = {"id": str(uuid.uuid4()), "message": f"error {status} #{n}"}
        else:
            data = {"error": f"error {status} #{n}"}
        self.send_json(status, data, {**headers, **self.ov.get("headers", {})})

    # ------------------------------------------------------------ Mistral and Groq

    def _mistral(self, body: dict[str, Any]) -> None:
        self._openai_like(body, cid=uuid.uuid4().hex, call_id=_mistral_call_id())

    def _groq(self, body: dict[str, Any]) -> None:
        self._openai_like(body, cid="chatcmpl-" + str(uuid.uuid4()), call_id=rid("call_"),
                          groq={"id": "req_" + secrets.token_hex(13)})

    def _openai_like(self, body: dict[str, Any], *, cid: str, call_id: str,
                     groq: dict[str, Any] | None = None) -> None:
        n = self.fake.next_n()
        tool, result = _openai_turn(body)
        model = body.get("model")
        call = None
        text = None
        if tool is not None and result is None:
            call = {"id": call_id, "type": "function", "function": {
                "name": tool["function"]["name"], "arguments": '{"city": "Paris"}'}}
        else:
            text = reply_text(n, result)
        prompt, completion = tokens(body.get("messages")), tokens(call or text)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        extra: dict[str, Any] = {}
        if groq is not None:
            usage.update(queue_time=0.01, prompt_time=0.002, completion_time=0.02,
                         total_time=0.022)
            extra = {"system_fingerprint": "fp_" + secrets.token_hex(5),
                     "service_tier": "on_demand"}
        created = int(time.time())
        if not body.get("stream"):
            message = chat_message(text, call)
            del message["refusal"]  # OpenAI's field; neither Mistral nor Groq sends it
            finish = "tool_calls" if call else "stop"
            return self._json({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish,
                             "logprobs": None}],
                "usage": usage, **extra, **({"x_groq": groq} if groq else {})})
        chunks = chat_stream_data(cid, created, model, words(text or ""), call,
                                  None if groq else usage)
        if groq is not None:
            for c in chunks:
                c.update(extra)
            chunks[0]["x_groq"] = groq
            chunks[-1]["x_groq"] = {**groq, "usage": usage}
        events = [sse_data(c) for c in chunks] + ["data: [DONE]\n\n"]
        self.write_stream(events, "text/event-stream", {})

    # ------------------------------------------------------------ Cohere v2

    def _cohere(self, body: dict[str, Any]) -> None:
        n = self.fake.next_n()
        tool, result = _openai_turn(body)
        if isinstance(result, list):  # content blocks: [{"type": "text", "text": ...}]
            result = result[0].get("text", result[0])
        message: dict[str, Any] = {"role": "assistant"}
        if tool is not None and result is None:
            message["tool_plan"] = "I will look up the weather."
            message["tool_calls"] = [{
                "id": f"{tool['function']['name']}_{secrets.token_hex(4)}", "type": "function",
                "function": {"name": tool["function"]["name"],
                             "arguments": '{"city": "Paris"}'}}]
            finish = "TOOL_CALL"
        else:
            message["content"] = [{"type": "text", "text": reply_text(n, result)}]
            finish = "COMPLETE"
        prompt = tokens(body.get("messages"))
        completion = tokens(message)
        usage = {"billed_units": {"input_tokens": prompt, "output_tokens": completion},
                 "tokens": {"input_tokens": prompt + 60, "output_tokens": completion},
                 "cached_tokens": 0}
        mid = str(uuid.uuid4())
        if not body.get("stream"):
            return self._json({"id": mid, "message": message, "finish_reason": finish,
                               "usage": usage})
        events = [sse_event("message-start", {"id": mid, "delta": {"message": {
            "role": "assistant", "content": [], "tool_plan": "", "tool_calls": [],
            "citations": []}}})]
        if "tool_calls" in message:
            call = message["tool_calls"][0]
            events += [
                sse_event("tool-plan-delta", {"delta": {"message": {
                    "tool_plan": message["tool_plan"]}}}),
                sse_event("tool-call-start", {"index": 0, "delta": {"message": {"tool_calls": {
                    **call, "function": {**call["function"], "arguments": ""}}}}}),
                sse_event("tool-call-delta", {"index": 0, "delta": {"message": {"tool_calls": {
                    "function": {"arguments": call["function"]["arguments"]}}}}}),
                sse_event("tool-call-end", {"index": 0})]
        else:
            events.append(sse_event("content-start", {"index": 0, "delta": {"message": {
                "content": {"type": "text", "text": ""}}}}))
            events += [sse_event("content-delta", {"index": 0, "delta": {"message": {
                "content": {"text": w}}}}) for w in words(message["content"][0]["text"])]
            events.append(sse_event("content-end", {"index": 0}))
        events.append(sse_event("message-end", {"delta": {"finish_reason": finish,
                                                          "usage": usage}}))
        self.write_stream(events, "text/event-stream", {})

    # ------------------------------------------------------------ Ollama

    def _ollama(self, body: dict[str, Any]) -> None:
        n = self.fake.next_n()
        tool, result = _openai_turn(body)
        model = body.get("model")
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if tool is not None and result is None:
            message["tool_calls"] = [{"function": {"name": tool["function"]["name"],
                                                   "arguments": {"city": "Paris"}}}]
        else:
            message["content"] = reply_text(n, result)
        prompt, completion = tokens(body.get("messages")), tokens(message)
        done = {"done_reason": "stop", "done": True, "total_duration": 5_000_000 + n,
                "load_duration": 1_000_000, "prompt_eval_count": prompt,
                "prompt_eval_duration": 2_000_000, "eval_count": completion,
                "eval_duration": 2_000_000}

        def line(msg: dict[str, Any], **rest: Any) -> dict[str, Any]:
            stamp = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
            return {"model": model, "created_at": stamp, "message": msg, **rest}

        if body.get("stream") is False:
            return self._json(line(message, **done))
        if "tool_calls" in message:
            parts = [line(message, done=False)]
        else:
            parts = [line({"role": "assistant", "content": w}, done=False)
                     for w in words(message["content"])]
        parts.append(line({"role": "assistant", "content": ""}, **done))
        self.write_stream([orjson.dumps(p) + b"\n" for p in parts], "application/x-ndjson", {})


class FakeChatAPIs(ScriptedProvider):
    handler = _Handler
