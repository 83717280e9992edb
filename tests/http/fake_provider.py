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
``{"no_end": True}`` (end the body without the end marker, as some compatible servers do).
"""

from __future__ import annotations

import base64
import collections
import itertools
import secrets
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = ["FakeProvider"]


def _rid(prefix: str) -> str:
    return prefix + secrets.token_hex(6)


class FakeProvider:
    def __init__(self, *, chunk_delay: float = 0.0, latency: float = 0.0) -> None:
        self.chunk_delay = chunk_delay
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.script: collections.deque[dict[str, Any]] = collections.deque()
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FakeProvider:
        provider = self

        class Handler(_Handler):
            fake = provider

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.05})
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def next_n(self) -> int:
        with self._lock:
            return next(self._counter)

    def override(self) -> dict[str, Any] | None:
        with self._lock:
            return self.script.popleft() if self.script else None


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or abandon a stream hang up mid-answer: expected here.
        return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeProvider
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    # ------------------------------------------------------------ plumbing

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = orjson.loads(raw) if raw else {}
        fake = self.fake
        with fake._lock:
            fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        ov = fake.override() or {}
        if ov.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if ov.get("sleep"):
            time.sleep(float(ov["sleep"]))
        if fake.latency:
            time.sleep(fake.latency)
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

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        out = orjson.dumps(data)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("x-request-id", _rid("req_"))
        self.send_header("set-cookie", "session=server-secret")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(out)

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
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-request-id", _rid("req_"))
        self.end_headers()
        cut = ov.get("cut")
        if ov.get("no_end"):
            events = events[:-1]
        last = len(events) - 1
        for i, ev in enumerate(events):
            if cut is not None and i >= cut:
                self.close_connection = True
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            if i and self.fake.chunk_delay:
                time.sleep(self.fake.chunk_delay)
            if i == last and ov.get("end_delay"):
                time.sleep(float(ov["end_delay"]))
            data = ev.encode()
            try:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return

    # ------------------------------------------------------------ OpenAI chat

    def _chat(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        nonce = secrets.token_hex(3)
        cid = _rid("chatcmpl-")
        model = body.get("model", "gpt-test")
        msgs = body.get("messages", [])
        last = msgs[-1] if msgs else {}
        tool_call = None
        if body.get("tools") and last.get("role") != "tool":
            tool_call = {"id": _rid("call_"), "type": "function",
                         "function": {"name": body["tools"][0]["function"]["name"],
                                      "arguments": orjson.dumps({"city": "Paris"}).decode()}}
            text = None
        elif last.get("role") == "tool":
            text = f"Tool said {last.get('content')} (reply {n}, {nonce})"
        else:
            text = f"Hello from the fake model, reply {n} ({nonce})"
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if body.get("stream"):
            def chunk(delta: dict[str, Any], finish: Any = None, use: Any = None) -> str:
                c = {"id": cid, "object": "chat.completion.chunk", "created": 1700000000 + n,
                     "model": model, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}]}
                if use is not None:
                    c["usage"] = use
                return "data: " + orjson.dumps(c).decode() + "\n\n"

            events = [chunk({"role": "assistant", "content": ""})]
            if tool_call is not None:
                events.append(chunk({"tool_calls": [{"index": 0, **tool_call}]}))
                events.append(chunk({}, "tool_calls", usage))
            else:
                assert text is not None
                words = text.split(" ")
                events += [chunk({"content": w + (" " if i < len(words) - 1 else "")})
                           for i, w in enumerate(words)]
                events.append(chunk({}, "stop", usage))
            events.append("data: [DONE]\n\n")
            return self._sse(events, ov)
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if tool_call is not None:
            message["tool_calls"] = [tool_call]
        self._json(200, {
            "id": cid, "object": "chat.completion", "created": 1700000000 + n, "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_call else "stop",
                         "logprobs": None}],
            "usage": usage, "system_fingerprint": "fp_" + nonce,
        })

    # ------------------------------------------------------------ OpenAI responses

    def _responses(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        nonce = secrets.token_hex(3)
        rid = _rid("resp_")
        inp = body.get("input")
        outputs: list[dict[str, Any]]
        fc_out = None
        if isinstance(inp, list):
            fc_out = next((i for i in inp if isinstance(i, dict)
                           and i.get("type") == "function_call_output"), None)
        if body.get("tools") and fc_out is None:
            outputs = [{"type": "function_call", "id": _rid("fc_"), "call_id": _rid("call_"),
                        "name": body["tools"][0]["name"], "status": "completed",
                        "arguments": orjson.dumps({"city": "Paris"}).decode()}]
        else:
            text = (f"Tool said {fc_out['output']} after {body.get('previous_response_id')}"
                    if fc_out else f"Responses reply {n} ({nonce})")
            outputs = [{"type": "message", "id": _rid("msg_"), "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}]
        resp = {
            "id": rid, "object": "response", "created_at": 1700000000 + n, "status": "completed",
            "model": body.get("model", "gpt-test"), "output": outputs,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools", []),
            "previous_response_id": body.get("previous_response_id"),
            "usage": {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }
        if not body.get("stream"):
            return self._json(200, resp)
        seq = itertools.count()

        def ev(kind: str, data: dict[str, Any]) -> str:
            payload = {"type": kind, "sequence_number": next(seq), **data}
            return f"event: {kind}\ndata: {orjson.dumps(payload).decode()}\n\n"

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
        mid = _rid("msg_")
        msgs = body.get("messages", [])
        last = msgs[-1] if msgs else {}
        content = last.get("content")
        result = None
        if isinstance(content, list):
            result = next((c for c in content if isinstance(c, dict)
                           and c.get("type") == "tool_result"), None)
        blocks: list[dict[str, Any]]
        if body.get("tools") and result is None:
            blocks = [{"type": "tool_use", "id": _rid("toolu_"),
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

        def ev(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {orjson.dumps({'type': kind, **data}).decode()}\n\n"

        events = [ev("message_start", {"message": {**msg, "content": [], "stop_reason": None,
                                                   "usage": {"input_tokens": 12,
                                                             "output_tokens": 1}}}),
                  ev("ping", {})]
        block = blocks[0]
        if block["type"] == "text":
            events.append(ev("content_block_start", {"index": 0,
                                                     "content_block": {"type": "text",
                                                                       "text": ""}}))
            for word in block["text"].split(" "):
                events.append(ev("content_block_delta", {
                    "index": 0, "delta": {"type": "text_delta", "text": word + " "}}))
        else:
            events.append(ev("content_block_start", {"index": 0, "content_block": {
                **block, "input": {}}}))
            events.append(ev("content_block_delta", {"index": 0, "delta": {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block["input"]).decode()}}))
        events.append(ev("content_block_stop", {"index": 0}))
        events.append(ev("message_delta", {"delta": {"stop_reason": stop,
                                                     "stop_sequence": None},
                                           "usage": {"output_tokens": 6}}))
        events.append(ev("message_stop", {}))
        self._sse(events, ov)
