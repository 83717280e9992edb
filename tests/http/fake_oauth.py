"""A loopback OAuth server and upload API: credentials in form, multipart and JSON bodies.

Every answer carries a fresh nonce (a replay is told apart from a live call) and fresh tokens,
which the server keeps in ``issued`` so a test can check that none reached a file.

- ``POST /token`` (form): a JSON token answer, as Google's: ``access_token`` ``ya29.``, and
  another ``ya29.`` token under an ordinary name (``session.handle``).
- ``POST /login/oauth/access_token`` (form): a form-encoded answer, as GitHub's classic OAuth
  endpoint gives (``access_token=...&scope=...&token_type=bearer``), the token of no known shape.
- ``POST /upload`` (multipart): the field names, file names and sizes it received.
- ``POST /echo`` (JSON): the request back, and a fresh ``ya29.`` token under ``result``.
"""

from __future__ import annotations

import secrets
import urllib.parse
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import orjson

from provider_support import LoopbackHandler, LoopbackProvider, QuietServer

__all__ = ["OAuthAPI"]


class _Handler(LoopbackHandler):
    fake: OAuthAPI

    def _body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _issue(self, prefix: str) -> str:
        token = prefix + secrets.token_hex(16)
        with self.fake._lock:
            self.fake.issued.append(token)
        return token

    def do_POST(self) -> None:
        raw = self._body()
        ctype = self.headers.get("content-type", "")
        with self.fake._lock:
            self.fake.requests.append({"path": self.path, "content-type": ctype, "body": raw})
        nonce = secrets.token_hex(4)
        if self.path == "/token":
            form = dict(urllib.parse.parse_qsl(raw.decode()))
            return self.send_json(200, {
                "access_token": self._issue("ya29.a0AfB_"), "token_type": "Bearer",
                "expires_in": 3599, "grant_type": form.get("grant_type"),
                "session": {"handle": self._issue("ya29.c.c0ASRK0Ga")}, "nonce": nonce})
        if self.path == "/login/oauth/access_token":
            out = urllib.parse.urlencode({"access_token": self._issue("plain-"),
                                          "scope": "repo,gist", "token_type": "bearer",
                                          "nonce": nonce}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/x-www-form-urlencoded")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return None
        if self.path == "/upload":
            return self.send_json(200, {**_parts(ctype, raw), "nonce": nonce})
        if self.path == "/echo":
            return self.send_json(200, {"echo": orjson.loads(raw), "nonce": nonce,
                                        "result": self._issue("ya29.a0Echo")})
        return self.send_json(404, {"error": "no such path", "path": self.path})


def _parts(ctype: str, raw: bytes) -> dict[str, Any]:
    msg = BytesParser(policy=HTTP).parsebytes(
        b"content-type: " + ctype.encode() + b"\r\n\r\n" + raw)
    fields, files = [], {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        filename = part.get_filename()
        if filename is None:
            fields.append(name)
        else:
            files[name] = [filename, len(part.get_payload(decode=True) or b"")]
    return {"fields": fields, "files": files}


class OAuthAPI(LoopbackProvider):
    handler = _Handler
    server_class = QuietServer

    def __init__(self) -> None:
        super().__init__()
        self.issued: list[str] = []
