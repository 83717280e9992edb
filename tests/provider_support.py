"""What every loopback test provider shares: the server, the wire formats, the response shapes.

The providers (``tests/http/fake_provider.py``, ``tests/runtime/cache_provider.py``,
``tests/integrations/frameworks/fw_provider.py``,
``tests/integrations/langwatch_scenario/scenario_provider.py``) differ in what they answer;
how they listen, read a request and put an answer on the wire is the same, and lives here so
a fix to the framing (one event per chunk, flushed) reaches all of them at once.

Imported as a top-level module: ``tests/`` is on ``sys.path`` for pytest (pyproject's
``pythonpath``) and for the benchmarks that borrow these providers (they insert it).
"""

from __future__ import annotations

import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

import orjson

__all__ = ["LoopbackHandler", "LoopbackProvider", "QuietServer", "anthropic_stream",
           "chat_chunk", "chat_message", "chat_stream", "rid", "sse_data", "sse_event",
           "tool_call"]


def rid(prefix: str) -> str:
    """A fresh id: answers must differ per call so a replay is told apart from a live call."""
    return prefix + secrets.token_hex(6)


# ---------------------------------------------------------------- server and lifecycle


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or abandon a stream hang up mid-answer: expected there.
        return None


class LoopbackHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, chunked streams), silent, with the writers the providers use."""

    fake: Any  # the provider serving this request, set on the per-start subclass
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        return orjson.loads(raw) if raw else {}

    def send_json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        out = orjson.dumps(data)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(out)

    # Streams: one event per HTTP chunk, flushed on its own, as real providers stream, so a
    # client never gets two events in one socket read by luck (issue 8).

    def start_stream(self, content_type: str = "text/event-stream",
                     headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def write_event(self, event: str) -> None:
        data = event.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def send_sse(self, events: list[str], content_type: str = "text/event-stream") -> None:
        self.start_stream(content_type)
        for event in events:
            self.write_event(event)
        self.end_stream()


class LoopbackProvider:
    """A provider on 127.0.0.1 serving ``handler`` from a daemon thread.

    ``start`` binds ``self.port`` (0 picks a free one; a provider stopped and started again
    keeps its port); every request's handler sees this provider as ``self.fake``.
    """

    handler: ClassVar[type[LoopbackHandler]]
    # The plain server reports a handler's exception on stderr; a provider whose clients
    # hang up on purpose (timeouts, abandoned streams) uses QuietServer.
    server_class: ClassVar[type[ThreadingHTTPServer]] = ThreadingHTTPServer

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> Self:
        handler = type("Handler", (self.handler,), {"fake": self})
        self._server = self.server_class(("127.0.0.1", self.port), handler)
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

    def count(self) -> int:
        with self._lock:
            return len(self.requests)


# ---------------------------------------------------------------- wire formats


def sse_data(payload: Any) -> str:
    """An OpenAI chat stream event: data only."""
    return "data: " + orjson.dumps(payload).decode() + "\n\n"


def sse_event(kind: str, data: dict[str, Any]) -> str:
    """A named event whose payload repeats its name as ``type`` first (Anthropic, Responses)."""
    return f"event: {kind}\ndata: {orjson.dumps({'type': kind, **data}).decode()}\n\n"


# ---------------------------------------------------------------- OpenAI chat completions


def tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": rid("call_"), "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(args).decode()}}


def chat_message(text: str | None, call: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if call is not None:
        message["tool_calls"] = [call]
    return message


def chat_chunk(cid: str, created: int, model: Any, delta: dict[str, Any] | None,
               finish: str | None = None, usage: dict[str, Any] | None = None) -> str:
    """One ``chat.completion.chunk`` event; ``delta=None`` is the usage-only chunk with no
    choices that OpenAI sends last when asked for usage."""
    c: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                         "model": model,
                         "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return sse_data(c)


def chat_stream(cid: str, created: int, model: Any, pieces: list[str],
                call: dict[str, Any] | None, usage: dict[str, Any]) -> list[str]:
    """A chat answer as stream events: the role, then ``pieces`` of text or the tool call,
    the finish with its usage, ``[DONE]``. Each provider splits its own text into pieces."""
    events = [chat_chunk(cid, created, model, {"role": "assistant", "content": ""})]
    if call is not None:
        events.append(chat_chunk(cid, created, model, {"tool_calls": [{"index": 0, **call}]}))
        events.append(chat_chunk(cid, created, model, {}, "tool_calls", usage))
    else:
        events += [chat_chunk(cid, created, model, {"content": p}) for p in pieces]
        events.append(chat_chunk(cid, created, model, {}, "stop", usage))
    events.append("data: [DONE]\n\n")
    return events


# ---------------------------------------------------------------- Anthropic messages


def anthropic_stream(msg: dict[str, Any], start_usage: dict[str, Any],
                     block: dict[str, Any], deltas: list[dict[str, Any]], *,
                     ping: bool = False) -> list[str]:
    """``msg`` (one content block) as a message stream: ``block`` opens the block, each of
    ``deltas`` is one ``content_block_delta``; ``start_usage`` is ``message_start``'s usage."""
    events = [sse_event("message_start", {"message": {**msg, "content": [],
                                                      "stop_reason": None,
                                                      "usage": start_usage}})]
    if ping:
        events.append(sse_event("ping", {}))
    events.append(sse_event("content_block_start", {"index": 0, "content_block": block}))
    events += [sse_event("content_block_delta", {"index": 0, "delta": d}) for d in deltas]
    events.append(sse_event("content_block_stop", {"index": 0}))
    events.append(sse_event("message_delta", {
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))
    events.append(sse_event("message_stop", {}))
    return events
