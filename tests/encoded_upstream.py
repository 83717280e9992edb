"""An upstream that answers every POST with the exact bytes a test sets: a body under the
``content-encoding`` the test names, whether or not it is what that header says (a plain
body labelled ``gzip``, a gzip stream cut short, stacked codings), whole or as a chunked
stream one piece per write."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from provider_support import LoopbackHandler, LoopbackProvider

#: An OpenAI chat stream, as its events' text.
EVENTS = [
    'data: {"id":"chatcmpl-enc","object":"chat.completion.chunk","model":"gpt-test",'
    '"choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":null}]}\n\n',
    'data: {"id":"chatcmpl-enc","object":"chat.completion.chunk","model":"gpt-test",'
    '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    "data: [DONE]\n\n",
]
PLAIN = "".join(EVENTS).encode()


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def deflated(data: bytes) -> bytes:
    return zlib.compress(data)


def pieces(data: bytes, n: int = 3) -> list[bytes]:
    """``data`` in ``n`` writes of about equal size."""
    size = -(-len(data) // n)
    return [data[i:i + size] for i in range(0, len(data), size)]


class _Handler(LoopbackHandler):
    fake: EncodedUpstream

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.fake._lock:
            self.fake.requests.append(self.path)
            self.fake.bodies.append(body)
        content_type, encoding, chunks, streamed = self.fake.answer
        headers = {"content-encoding": encoding, "x-request-id": "req-enc"}
        if streamed:
            self.start_stream(content_type, headers)
            for c in chunks:
                self.write_event(c)
            self.end_stream()
            return
        body = b"".join(chunks)
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


class EncodedUpstream(LoopbackProvider):
    """``answer``: (content type, content-encoding, the body's chunks, streamed or not)."""

    handler = _Handler

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []  # each request's body, as it came
        self.answer: tuple[str, str, list[bytes], bool] = ("text/event-stream", "gzip",
                                                           pieces(gzipped(PLAIN)), True)

    def serve(self, encoding: str, chunks: list[bytes], *, streamed: bool = True,
              content_type: str = "text/event-stream") -> Any:
        self.answer = (content_type, encoding, chunks, streamed)
        return self
