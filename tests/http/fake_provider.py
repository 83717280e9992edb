"""A loopback server that speaks enough OpenAI and Anthropic to drive the real SDKs.

Every answer carries fresh ids and a fresh nonce in its text, so a replay that returns what
was recorded is distinguishable from a new live call. Tool calling follows a fixed script: a
request that offers tools and has no tool result yet gets a tool call; one that carries the
result gets a final text quoting it.

Streams are written one event per write (one HTTP chunk, flushed), ``chunk_delay`` seconds
apart, so a client never gets two events in one socket read by luck and chunking cannot hide
a recorder that waits for an event the caller never reads.

``script`` queues overrides for the next requests: ``{"status": 500}`` (an error body in the
provider's shape), ``{"drop": True}`` (close the connection without answering),
``{"sleep": 2.0}`` (answer late, for timeouts), ``{"cut": 2}`` (stop a stream after 2 events),
``{"end_delay": 0.5}`` (wait that long before a stream's end marker: the last event),
``{"no_end": True}`` (end the body without the end marker, as some compatible servers do),
``{"headers": {...}}`` (more response headers, on a JSON answer or a stream).

The Responses API keeps what it answered: ``GET /v1/responses/{id}`` returns it again, and a
``background=True`` request answers ``queued`` at once and then moves one state per poll
(``queued`` -> ``in_progress`` -> ``completed``, the output only in the last), as the real
API's background mode does.
"""

from __future__ import annotations

import base64
import collections
import itertools
import secrets
import struct
from typing import Any

import orjson

from provider_support import (
    ScriptedHandler,
    ScriptedProvider,
    anthropic_stream,
    chat_message,
    chat_stream,
    rid,
    sse_event,
    tool_call,
    words,
)

__all__ = ["FakeProvider"]


class _Handler(ScriptedHandler):
    fake: FakeProvider

    def do_POST(self) -> None:
        body = self.read_json()
        if not self.begin(body):
            return
        ov = self.ov
        anthropic = self.path.startswith("/v1/messages")
        if "status" in ov:
            return self._error(int(ov["status"]), anthropic)
        path = self.path.split("?")[0]
        if path == "/v1/chat/completions":
            return self._chat(body, ov)
        if path == "/v1/responses":
            return self._responses(body, ov)
        if path == "/v1/embeddings":
            return self._embeddings(body)
        if path == "/v1/messages":
            return self._messages(body, ov)
        self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_GET(self) -> None:
        if not self.begin(None):
            return
        path = self.path.split("?")[0]
        if path.startswith("/v1/responses/"):
            return self._poll(path.removeprefix("/v1/responses/"))
        self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        # A request id and a cookie on every answer: the recorder must keep the one and
        # never store the other.
        self.send_json(status, data, {"x-request-id": rid("req_"),
                                      "set-cookie": "session=server-secret", **(headers or {}),
                                      **self.ov.get("headers", {})})

    def _error(self, status: int, anthropic: bool) -> None:
        msg = f"fake failure {status} #{self.fake.next_n()}"
        if anthropic:
            kind = "overloaded_error" if status >= 500 else "invalid_request_error"
            data: Any = {"type": "error", "error": {"type": kind, "message": msg}}
        else:
            data = {"error": {"message": msg, "type": "invalid_request_error", "param": None,
                              "code": f"e{status}"}}
        # retry-after-ms keeps the SDKs' retry back-off at a millisecond in tests.
        self._json(status, data, {"retry-after-ms": "1"})

    def _sse(self, events: list[str], ov: dict[str, Any]) -> None:
        self.write_stream(events, "text/event-stream; charset=utf-8",
                          {"x-request-id": rid("req_")})

    # ------------------------------------------------------------ OpenAI chat

    def _chat(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        nonce = secrets.token_hex(3)
        cid = rid("chatcmpl-")
        model = body.get("model", "gpt-test")
        msgs = body.get("messages", [])
        last = msgs[-1] if msgs else {}
        call = None
        text: str | None = None
        if body.get("tools") and last.get("role") != "tool":
            call = tool_call(body["tools"][0]["function"]["name"], {"city": "Paris"})
        elif last.get("role") == "tool":
            text = f"Tool said {last.get('content')} (reply {n}, {nonce})"
        else:
            text = f"Hello from the fake model, reply {n} ({nonce})"
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if body.get("stream") and ov.get("no_usage"):
            # The real API: a stream reports usage only with stream_options.include_usage.
            usage = None  # type: ignore[assignment]
        if body.get("stream"):
            return self._sse(chat_stream(cid, 1700000000 + n, model, words(text or ""), call,
                                         usage), ov)
        self._json(200, {
            "id": cid, "object": "chat.completion", "created": 1700000000 + n, "model": model,
            "choices": [{"index": 0, "message": chat_message(text, call),
                         "finish_reason": "tool_calls" if call else "stop",
                         "logprobs": None}],
            "usage": usage, "system_fingerprint": "fp_" + nonce,
        })

    # ------------------------------------------------------------ OpenAI responses

    def _responses(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        nonce = secrets.token_hex(3)
        resp_id = rid("resp_")
        inp = body.get("input")
        outputs: list[dict[str, Any]]
        fc_out = None
        if isinstance(inp, list):
            fc_out = next((i for i in inp if isinstance(i, dict)
                           and i.get("type") == "function_call_output"), None)
        if body.get("tools") and fc_out is None:
            outputs = [{"type": "function_call", "id": rid("fc_"), "call_id": rid("call_"),
                        "name": body["tools"][0]["name"], "status": "completed",
                        "arguments": orjson.dumps({"city": "Paris"}).decode()}]
        else:
            text = (f"Tool said {fc_out['output']} after {body.get('previous_response_id')}"
                    if fc_out else f"Responses reply {n} ({nonce})")
            outputs = [{"type": "message", "id": rid("msg_"), "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        resp = {
            "id": resp_id, "object": "response", "created_at": 1700000000 + n,
            "status": "completed", "model": body.get("model", "gpt-test"), "output": outputs,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools", []),
            "previous_response_id": body.get("previous_response_id"),
            "usage": {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }
        if body.get("background"):
            resp["background"] = True
            self.fake.background[resp_id] = collections.deque(
                [{**resp, "status": "in_progress", "output": [], "usage": None}, resp])
            return self._json(200, {**resp, "status": "queued", "output": [], "usage": None})
        self.fake.stored[resp_id] = resp
        if not body.get("stream"):
            return self._json(200, resp)
        seq = itertools.count()

        def ev(kind: str, data: dict[str, Any]) -> str:
            return sse_event(kind, {"sequence_number": next(seq), **data})

        start = {**resp, "status": "in_progress", "output": [], "usage": None}
        events = [ev("response.created", {"response": start})]
        first = outputs[0]
        if first["type"] == "message":
            text = first["content"][0]["text"]
            for word in text.split(" "):
                events.append(ev("response.output_text.delta", {
                    "item_id": first["id"], "output_index": 0, "content_index": 0,
                    "delta": word + " ", "logprobs": []}))
        events.append(ev("response.completed", {"response": resp}))
        self._sse(events, ov)

    def _poll(self, resp_id: str) -> None:
        """The next state of a background response (the last one stays), or a stored one."""
        with self.fake._lock:
            states = self.fake.background.get(resp_id)
            if states is not None:
                resp = states.popleft() if len(states) > 1 else states[0]
            else:
                resp = self.fake.stored.get(resp_id)
        if resp is None:
            return self._json(404, {"error": {"message": f"No response with id '{resp_id}'.",
                                              "type": "invalid_request_error"}})
        self._json(200, resp)

    # ------------------------------------------------------------ OpenAI embeddings

    def _embeddings(self, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        items = inputs if isinstance(inputs, list) else [inputs]
        data = []
        for i, _ in enumerate(items):
            vec = [secrets.randbelow(1000) / 1000.0 for _ in range(4)]
            emb: Any = vec
            if body.get("encoding_format") == "base64":
                emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        self._json(200, {"object": "list", "data": data, "model": body.get("model"),
                         "usage": {"prompt_tokens": 3, "total_tokens": 3}})

    # ------------------------------------------------------------ Anthropic messages

    def _messages(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        nonce = secrets.token_hex(3)
        mid = rid("msg_")
        msgs = body.get("messages", [])
        last = msgs[-1] if msgs else {}
        content = last.get("content")
        result = None
        if isinstance(content, list):
            result = next((c for c in content if isinstance(c, dict)
                           and c.get("type") == "tool_result"), None)
        blocks: list[dict[str, Any]]
        if body.get("tools") and result is None:
            blocks = [{"type": "tool_use", "id": rid("toolu_"),
                       "name": body["tools"][0]["name"], "input": {"city": "Paris"}}]
            stop = "tool_use"
        else:
            text = (f"Tool {result['tool_use_id']} said {result['content']} ({nonce})"
                    if result else f"Claude-ish reply {n} ({nonce})")
            blocks = [{"type": "text", "text": text}]
            stop = "end_turn"
        usage = {"input_tokens": 12, "output_tokens": 6}
        msg = {"id": mid, "type": "message", "role": "assistant", "model": body.get("model"),
               "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return self._json(200, msg)
        block = blocks[0]
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": word + " "}
                      for word in block["text"].split(" ")]
        else:
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta",
                       "partial_json": orjson.dumps(block["input"]).decode()}]
        self._sse(anthropic_stream(msg, {"input_tokens": 12, "output_tokens": 1}, start, deltas,
                                   ping=True), ov)


# ---------------------------------------------------------------- the provider


class FakeProvider(ScriptedProvider):
    handler = _Handler

    def __init__(self, *, chunk_delay: float = 0.0, latency: float = 0.0) -> None:
        super().__init__(chunk_delay=chunk_delay, latency=latency)
        self.stored: dict[str, dict[str, Any]] = {}  # Responses API answers, by id
        self.background: dict[str, collections.deque[dict[str, Any]]] = {}  # states to come

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"
