"""A loopback web API of the kind an agent's tools call (weather, search, CRM): plain HTTP/1.1.

Every answer carries a fresh nonce, so a replay that returns what was recorded is told apart
from a new live call; the server counts the connections it accepted and the requests it read.

- ``GET /traces?trace_id=...``: the trace asked for, as JSON.
- ``GET /weather?city=...&key=...``: JSON, with a ``Set-Cookie`` session and an
  ``x-request-id``; the ``key`` query parameter is an API key (never to be stored).
- ``GET /redirect?city=...``: a 302 to ``/weather`` (the same query).
- ``GET /download``: ``text/plain`` in five HTTP chunks, each written and flushed on its own.
- ``GET /events``: server-sent events (``text/event-stream``), one per chunk.
- ``GET /gzip``: a JSON answer sent ``Content-Encoding: gzip``.
- ``POST /echo``: the JSON body back, with a nonce.
- ``GET /status/<n>``: status ``n`` with a JSON error body.
- ``GET /slow``: answers after ``SLOW`` seconds (for read timeouts).
- ``GET /me``: the user the ``Authorization`` bearer token (or ``Cookie: session=``) names,
  as JSON, or as CSV when the request asks ``Accept: text/csv``; 401 without either.
- ``GET /prefs``: the settings the request asks with, as JSON: its ``theme`` cookie, its
  ``X-Token-Limit`` header and its ``key`` query parameter (a sort key).
- ``POST /text``: the body read as text in the charset its ``Content-Type`` names (UTF-8
  when none), as JSON.
- ``POST /validate``: 422 quoting the JSON or form body it was sent, field by field, as a
  FastAPI validation error does (``{"detail": [{"loc": [...], "input": ...}]}``).
"""

from __future__ import annotations

import gzip
import secrets
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from provider_support import LoopbackHandler, LoopbackProvider, QuietServer

__all__ = ["SLOW", "ToolAPI"]

SLOW = 1.5


class _CountingServer(QuietServer):
    connections = 0
    lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            type(self).connections += 1
        super().process_request(request, client_address)


class _Handler(LoopbackHandler):
    fake: ToolAPI

    def _log(self, body: Any = None) -> None:
        with self.fake._lock:
            self.fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                       "body": body})

    def do_GET(self) -> None:
        self._log()
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        nonce = secrets.token_hex(4)
        if url.path == "/weather":
            return self.send_json(200, {"city": query.get("city"), "temp": 21, "nonce": nonce},
                                  {"set-cookie": "session=SESSION-COOKIE-" + nonce,
                                   "x-request-id": "req-" + nonce})
        if url.path == "/me":
            return self._me(nonce)
        if url.path == "/prefs":
            cookies = dict(p.strip().partition("=")[::2]
                           for p in self.headers.get("cookie", "").split(";") if p.strip())
            return self.send_json(200, {"theme": cookies.get("theme"), "key": query.get("key"),
                                        "limit": self.headers.get("x-token-limit"),
                                        "nonce": nonce})
        if url.path == "/traces":
            return self.send_json(200, {"trace_id": query.get("trace_id"), "nonce": nonce})
        if url.path == "/redirect":
            self.send_response(302)
            self.send_header("location", "/weather?" + url.query)
            self.send_header("content-length", "0")
            self.end_headers()
            return None
        if url.path == "/download":
            self.start_stream("text/plain")
            for i in range(5):
                self.write_event(f"part {i} {nonce}\n")
                time.sleep(0.002)
            return self.end_stream()
        if url.path == "/events":
            self.start_stream("text/event-stream")
            for i in range(4):
                self.write_event(f"data: {orjson.dumps({'i': i, 'nonce': nonce}).decode()}\n\n")
                time.sleep(0.002)
            return self.end_stream()
        if url.path == "/gzip":
            out = gzip.compress(orjson.dumps({"zipped": True, "nonce": nonce}))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return None
        if url.path.startswith("/status/"):
            status = int(url.path.rsplit("/", 1)[1])
            return self.send_json(status, {"error": {"code": status, "nonce": nonce}})
        if url.path == "/slow":
            time.sleep(SLOW)
            return self.send_json(200, {"slow": True, "nonce": nonce})
        return self.send_json(404, {"error": "no such path", "path": url.path})

    def _me(self, nonce: str) -> None:
        auth = self.headers.get("authorization", "")
        cookie = self.headers.get("cookie", "")
        user = (auth.removeprefix("Bearer ").removesuffix("-token") if auth
                else cookie.partition("session=")[2].partition(";")[0] or None)
        if not user:
            return self.send_json(401, {"error": "who are you?", "nonce": nonce})
        if "text/csv" in self.headers.get("accept", ""):
            out = f"user,nonce\n{user},{nonce}\n".encode()
            self.send_response(200)
            self.send_header("content-type", "text/csv")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return None
        return self.send_json(200, {"user": user, "nonce": nonce})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path in ("/text", "/validate"):
            return self._raw(path)
        body = self.read_json()
        self._log(body)
        return self.send_json(200, {"echo": body, "nonce": secrets.token_hex(4)})

    def _raw(self, path: str) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self._log(raw)
        ctype = self.headers.get("content-type", "")
        if path == "/text":
            charset = ctype.partition("charset=")[2].partition(";")[0].strip() or "utf-8"
            return self.send_json(200, {"text": raw.decode(charset), "nonce": secrets.token_hex(4)})
        fields = (orjson.loads(raw).items() if "json" in ctype
                  else [(k, v[0]) for k, v in parse_qs(raw.decode()).items()])
        return self.send_json(422, {"detail": [
            {"loc": ["body", k], "msg": "rejected", "input": v} for k, v in fields]})


class ToolAPI(LoopbackProvider):
    handler = _Handler

    def __init__(self) -> None:
        super().__init__()
        # A server class per instance: its connection count is this server's own.
        self.server_class = type("Server", (_CountingServer,), {"connections": 0})

    @property
    def connections(self) -> int:
        return int(self.server_class.connections)  # type: ignore[attr-defined]
