"""What every loopback test provider shares: the server, the wire formats, the response shapes.

The providers (``tests/http/fake_provider.py``, ``fake_bedrock.py``, ``fake_gemini.py``,
``fake_chat_apis.py``, ``tests/runtime/cache_provider.py``,
``tests/integrations/frameworks/fw_provider.py``,
``tests/integrations/langwatch_scenario/scenario_provider.py``) differ in what they answer;
how they listen, read a request, follow a test's script and put an answer on the wire is the
same, and lives here so a fix to the framing (one event per chunk, flushed) reaches all of
them at once.

Imported as a top-level module: ``tests/`` is on ``sys.path`` for pytest (pyproject's
``pythonpath``) and for the benchmarks that borrow these providers (they insert it).
"""

from __future__ import annotations

import collections
import itertools
import secrets
import socket
import struct
import threading
import time
import zlib
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

import orjson

__all__ = ["DropListener", "LoopbackHandler", "LoopbackProvider", "QuietServer",
           "ScriptedHandler", "ScriptedProvider", "anthropic_events", "anthropic_stream",
           "chat_chunk", "chat_chunk_data", "chat_message", "chat_stream", "chat_stream_data",
           "eventstream_message", "reply_text", "rid", "sse_data", "sse_event", "tokens",
           "tool_call", "words"]


def rid(prefix: str) -> str:
    """A fresh id: answers must differ per call so a replay is told apart from a live call."""
    return prefix + secrets.token_hex(6)


def reply_text(n: int, tool_result: Any = None) -> str:
    """The n-th answer's text: fresh per call (a nonce), quoting a tool's result when given."""
    nonce = secrets.token_hex(3)
    if tool_result is not None:
        return f"Tool said {tool_result} (reply {n}, {nonce})"
    return f"Hello from the fake model, reply {n} ({nonce})"


def words(text: str) -> list[str]:
    """``text`` as stream pieces: word by word, each with the space that follows it."""
    parts = text.split(" ")
    return [w + (" " if i < len(parts) - 1 else "") for i, w in enumerate(parts)]


def tokens(value: Any) -> int:
    """A token count that grows with the input: characters / 4 of its JSON, at least 1."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return max(1, len(text) // 4)


# ---------------------------------------------------------------- server and lifecycle


class QuietServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: fifty streams opened at once had some of
    # their connections reset on loopback (ReadError), before any handler ran.
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or abandon a stream hang up mid-answer: expected there.
        return None


class DropListener:
    """Holds a port: accepts each connection, counts it and closes it unanswered."""

    def __init__(self, port: int) -> None:
        self.count = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.count += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


class LoopbackHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive, chunked streams), silent, with the writers the providers use."""

    fake: Any  # the provider serving this request, set on the per-start subclass
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm on, the body waits
    # for the client's delayed ACK (~40 ms per JSON answer on loopback).
    disable_nagle_algorithm = True

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
    # client never gets two events in one socket read by luck.

    def start_stream(self, content_type: str = "text/event-stream",
                     headers: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def write_event(self, event: str | bytes) -> None:
        data = event.encode() if isinstance(event, str) else event
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


class ScriptedHandler(LoopbackHandler):
    """A request to a ``ScriptedProvider``: logged, then bent by the script's next entry."""

    fake: ScriptedProvider
    ov: dict[str, Any]

    def begin(self, body: Any) -> bool:
        """Log the request and take the next override; False when it dropped the connection
        (nothing more to write). ``sleep`` and the provider's ``latency`` delay the answer."""
        fake = self.fake
        with fake._lock:
            fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        ov = self.ov = fake.override() or {}
        if ov.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return False
        if ov.get("sleep"):
            time.sleep(float(ov["sleep"]))
        if fake.latency:
            time.sleep(fake.latency)
        return True

    def write_stream(self, events: Sequence[str | bytes], content_type: str,
                     headers: dict[str, str]) -> None:
        """The stream, bent by the override's ``cut``/``no_end``/``end_delay`` and spaced by
        the provider's ``chunk_delay``; a client that hangs up ends it quietly."""
        ov = self.ov
        self.start_stream(content_type, {**headers, **ov.get("headers", {})})
        cut = ov.get("cut")
        if ov.get("no_end"):
            events = events[:-1]
        last = len(events) - 1
        try:
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
                self.write_event(ev)
            self.end_stream()
        except (BrokenPipeError, ConnectionResetError):
            return


class ScriptedProvider(LoopbackProvider):
    """A provider whose answers vary per call (``next_n``) and whose next answers a test
    bends by queueing overrides on ``script`` (what each key does is in the provider's
    docstring; ``drop``, ``sleep``, ``cut``, ``no_end``, ``end_delay`` and ``headers`` mean
    the same everywhere). ``requests`` logs path, headers and body of every request."""

    handler: ClassVar[type[ScriptedHandler]]
    server_class = QuietServer  # clients time out and abandon streams here on purpose

    def __init__(self, *, chunk_delay: float = 0.0, latency: float = 0.0) -> None:
        super().__init__()
        self.chunk_delay = chunk_delay
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.script: collections.deque[dict[str, Any]] = collections.deque()
        self._counter = itertools.count(1)

    def next_n(self) -> int:
        with self._lock:
            return next(self._counter)

    def override(self) -> dict[str, Any] | None:
        with self._lock:
            return self.script.popleft() if self.script else None


# ---------------------------------------------------------------- wire formats


def sse_data(payload: Any) -> str:
    """An OpenAI chat stream event: data only."""
    return "data: " + orjson.dumps(payload).decode() + "\n\n"


def sse_event(kind: str, data: dict[str, Any]) -> str:
    """A named event whose payload repeats its name as ``type`` first (Anthropic, Responses,
    Cohere)."""
    return f"event: {kind}\ndata: {orjson.dumps({'type': kind, **data}).decode()}\n\n"


def eventstream_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One ``application/vnd.amazon.eventstream`` message, as AWS frames it: a prelude (total
    length, headers length, both big-endian u32) and its CRC32, the headers (name length u8,
    name, type 7 = string, value length u16, value), the payload, and the CRC32 of everything
    before it."""
    raw = b"".join(bytes([len(k)]) + k + b"\x07" + struct.pack(">H", len(v)) + v
                   for k, v in ((k.encode(), v.encode()) for k, v in headers.items()))
    prelude = struct.pack(">II", 12 + len(raw) + len(payload) + 4, len(raw))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


# ---------------------------------------------------------------- OpenAI chat completions


def tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": rid("call_"), "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(args).decode()}}


def chat_message(text: str | None, call: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if call is not None:
        message["tool_calls"] = [call]
    return message


def chat_chunk_data(cid: str, created: int, model: Any, delta: dict[str, Any] | None,
                    finish: str | None = None,
                    usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` is the usage-only chunk with no choices
    that OpenAI sends last when asked for usage."""
    c: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                         "model": model,
                         "choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                               "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


def chat_chunk(cid: str, created: int, model: Any, delta: dict[str, Any] | None,
               finish: str | None = None, usage: dict[str, Any] | None = None) -> str:
    """``chat_chunk_data`` as its stream event."""
    return sse_data(chat_chunk_data(cid, created, model, delta, finish, usage))


def chat_stream_data(cid: str, created: int, model: Any, pieces: list[str],
                     call: dict[str, Any] | None,
                     usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A chat answer as chunks: the role, then ``pieces`` of text or the tool call, the
    finish with its usage. Each provider splits its own text into pieces."""
    chunks = [chat_chunk_data(cid, created, model, {"role": "assistant", "content": ""})]
    if call is not None:
        chunks.append(chat_chunk_data(cid, created, model,
                                      {"tool_calls": [{"index": 0, **call}]}))
        chunks.append(chat_chunk_data(cid, created, model, {}, "tool_calls", usage))
    else:
        chunks += [chat_chunk_data(cid, created, model, {"content": p}) for p in pieces]
        chunks.append(chat_chunk_data(cid, created, model, {}, "stop", usage))
    return chunks


def chat_stream(cid: str, created: int, model: Any, pieces: list[str],
                call: dict[str, Any] | None, usage: dict[str, Any] | None) -> list[str]:
    """``chat_stream_data`` as stream events, ended by ``[DONE]``."""
    chunks = chat_stream_data(cid, created, model, pieces, call, usage)
    return [sse_data(c) for c in chunks] + ["data: [DONE]\n\n"]


# ---------------------------------------------------------------- Anthropic messages


def anthropic_events(msg: dict[str, Any], start_usage: dict[str, Any],
                     block: dict[str, Any], deltas: list[dict[str, Any]], *,
                     ping: bool = False) -> list[dict[str, Any]]:
    """``msg`` (one content block) as message stream events, each with its ``type`` first:
    ``block`` opens the block, each of ``deltas`` is one ``content_block_delta``;
    ``start_usage`` is ``message_start``'s usage."""
    def ev(kind: str, **data: Any) -> dict[str, Any]:
        return {"type": kind, **data}

    events = [ev("message_start", message={**msg, "content": [], "stop_reason": None,
                                           "usage": start_usage})]
    if ping:
        events.append(ev("ping"))
    events.append(ev("content_block_start", index=0, content_block=block))
    events += [ev("content_block_delta", index=0, delta=d) for d in deltas]
    events.append(ev("content_block_stop", index=0))
    events.append(ev("message_delta",
                     delta={"stop_reason": msg["stop_reason"], "stop_sequence": None},
                     usage={"output_tokens": msg["usage"]["output_tokens"]}))
    events.append(ev("message_stop"))
    return events


def anthropic_stream(msg: dict[str, Any], start_usage: dict[str, Any],
                     block: dict[str, Any], deltas: list[dict[str, Any]], *,
                     ping: bool = False) -> list[str]:
    """``anthropic_events`` as server-sent events."""
    return [sse_event(e["type"], e)
            for e in anthropic_events(msg, start_usage, block, deltas, ping=ping)]
