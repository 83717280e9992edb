"""Every streamed body the exchange splits into events is handed on as it arrives while it is
recorded, not after the whole answer: server-sent events, an AWS eventstream (Bedrock's
ConverseStream) and newline-delimited JSON (Ollama). The server here sends its first event,
then waits until the client has read it before sending the rest: a body held back until its
end would stall the server until its wait times out."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

import dejacache
from provider_support import QuietServer, eventstream_message

WAIT = 10.0

BODIES: dict[str, tuple[str, list[bytes]]] = {
    "ndjson": ("application/x-ndjson",
               [b'{"message":{"content":"one"},"done":false}\n',
                b'{"message":{"content":"two"},"done":true}\n']),
    "eventstream": ("application/vnd.amazon.eventstream",
                    [eventstream_message({":event-type": "contentBlockDelta",
                                          ":message-type": "event"}, b'{"delta":{"text":"one"}}'),
                     eventstream_message({":event-type": "messageStop",
                                          ":message-type": "event"}, b'{"stopReason":"end"}')]),
    "sse": ("text/event-stream", [b'data: {"n": 1}\n\n', b"data: [DONE]\n\n"]),
}


class _Server:
    def __init__(self) -> None:
        self.read_first = threading.Event()
        self.waited_in_vain = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                ctype, parts = BODIES[self.path.strip("/")]
                self.send_response(200)
                self.send_header("content-type", ctype)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, part in enumerate(parts):
                    if i == 1 and not outer.read_first.wait(WAIT):
                        outer.waited_in_vain = True
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_a_recorded_stream_reaches_the_caller_as_it_arrives(server: _Server, kind: str) -> None:
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store), dejacache.http_client() as http, \
            http.stream("POST", f"{server.url}/{kind}", json={"stream": True}) as resp:
        got = []
        for chunk in resp.iter_bytes():
            got.append(chunk)
            server.read_first.set()
    assert not server.waited_in_vain, "the first event was held back until the body ended"
    whole = b"".join(BODIES[kind][1])
    assert b"".join(got) == whole
    with dejacache.scope(mode="replay", store=store), dejacache.http_client() as http, \
            http.stream("POST", f"{server.url}/{kind}", json={"stream": True}) as resp:
        replayed = list(resp.iter_bytes())
    assert b"".join(replayed) == whole
    assert len(replayed) == 2  # one event per chunk
