"""Helpers shared by the HTTP tests: a sequenced store, the record-stop-replay routine and a
server refusing every key by quoting it."""

from __future__ import annotations

import collections
import http.server
import pathlib
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import orjson
from fake_provider import FakeProvider

import dejacache
from dejacache import MemoryStore, Record

__all__ = ["KeyRefuser", "SeqStore", "leaked", "record_then_replay"]


class SeqStore(MemoryStore):
    """What a cassette looks like to the engine: the n-th get of a key gets the n-th put."""

    sequenced = True

    def __init__(self) -> None:
        super().__init__()
        self.tape: dict[str, list[Record]] = collections.defaultdict(list)
        self.pos: collections.Counter[str] = collections.Counter()

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        self.tape[key].append(record)
        super().put(key, record, ttl=ttl)

    def get(self, key: str) -> Record | None:
        tape = self.tape.get(key, [])
        i = self.pos[key]
        if i >= len(tape):
            return None
        self.pos[key] += 1
        return tape[i]

    def rewind(self) -> None:
        self.pos.clear()

    def entries(self) -> int:
        return sum(len(t) for t in self.tape.values())


def record_then_replay(fake: FakeProvider, run: Callable[[], Any]) -> tuple[Any, Any]:
    """Run live under record, stop the server, run again under replay; return both results."""
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        live = run()
    seen = fake.count()
    assert seen > 0
    fake.stop()
    with dejacache.scope(mode="replay", store=store):
        again = run()
    assert fake.count() == seen  # nothing reached the (stopped) server
    return live, again


def send_json(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    """A loopback handler's whole JSON answer: status, the two headers, the body."""
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Refuse(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        quoted = f"{self.headers.get('x-api-key')} {self.headers.get('authorization')} {self.path}"
        send_json(self, 401, orjson.dumps(
            {"error": {"message": f"Incorrect API key provided: {quoted}"}}))

    def log_message(self, *args: Any) -> None:
        pass


class KeyRefuser:
    """A loopback server refusing every key, quoting it, as providers do ("Incorrect API key
    provided: KEY"): keys of no known shape, under no credential name in the answer, so only
    the request knows them. ``url`` carries ``KEYS[2]`` as ``?key=``; send ``HEADERS``."""

    KEYS = ("plain-api-key-41c9e2", "bearer-token-7d0a3f", "query-key-93b1c7")
    HEADERS: ClassVar[dict[str, str]] = {"x-api-key": KEYS[0], "authorization": f"Bearer {KEYS[1]}"}

    def __enter__(self) -> KeyRefuser:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.server_port
        self.url = f"http://127.0.0.1:{port}/v1/things?key={self.KEYS[2]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def leaked(folder: pathlib.Path) -> list[str]:
    """The keys :class:`KeyRefuser` quoted that some file under ``folder`` holds."""
    data = b"".join(f.read_bytes() for f in folder.rglob("*") if f.is_file())
    assert b"Incorrect API key provided" in data  # the answer itself was kept
    return [k for k in KeyRefuser.KEYS if k.encode() in data]
