"""What the urllib3/requests tests run, once recording and once replaying in a fresh process.

``python urllib3_cases.py MODE CASSETTE TOOL_URL CHAT_URL REFUSED_URL`` runs every case inside
``dejacache.cassette(CASSETTE, mode=MODE)`` and prints one JSON object: each case's outcome
(status, headers that are the answer's own, body, chunks, or the exception's class). The test
compares the two runs. The credentials sent here (``SECRETS``) must appear in no file.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson
import requests
import urllib3
from cases_support import rotated

import dejacache

SECRETS = rotated({
    "authorization": "Bearer sk-tool-SECRET-0001",
    "api-key": "apikey-SECRET-0002",
    "query": "qkey-SECRET-0003",
    "cookie": "cookie-SECRET-0004",
})
# Headers that describe the wire (or a cookie, never stored): not the answer's content.
_WIRE = {"content-encoding", "content-length", "transfer-encoding", "set-cookie",
         "connection", "keep-alive"}


def _headers(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() not in _WIRE}


def _error(exc: BaseException) -> dict[str, Any]:
    reason = getattr(exc, "reason", None)
    if isinstance(exc, requests.RequestException) and exc.args:
        cause = exc.args[0]  # what urllib3 raised
        reason = getattr(cause, "reason", cause)
    return {"error": type(exc).__module__ + "." + type(exc).__qualname__,
            "reason": type(reason).__name__ if reason is not None else None}


def requests_cases(tool: str, chat: str, refused: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    auth = {"Authorization": SECRETS["authorization"], "api-key": SECRETS["api-key"]}
    r = requests.get(tool + "/weather", params={"city": "Paris", "key": SECRETS["query"]},
                     headers=auth, cookies={"sid": SECRETS["cookie"]}, timeout=10)
    out["weather"] = [r.status_code, r.json(), _headers(r.headers), r.reason]
    r = requests.get(tool + "/redirect", params={"city": "Oslo"}, timeout=10)
    out["redirect"] = [r.status_code, r.json(), [h.status_code for h in r.history],
                       r.url.split("/", 3)[3]]
    with requests.get(tool + "/download", stream=True, timeout=10) as r:
        out["download"] = b"".join(r.iter_content(None)).decode()
        r.raw.release_conn()
    with requests.get(tool + "/download", stream=True, timeout=10) as r:
        out["download_7"] = [c.decode() for c in r.iter_content(chunk_size=7)]
    with requests.get(tool + "/events", stream=True, timeout=10) as r:
        out["events_lines"] = [line.decode() for line in r.iter_lines()]
    with requests.get(tool + "/events", stream=True, timeout=10) as r:
        out["events_chunks"] = [c.decode() for c in r.iter_content(None)]
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with requests.post(chat + "/chat/completions", json=body, stream=True, timeout=10,
                       headers=auth) as r:
        out["chat_stream"] = [c.decode() for c in r.iter_content(None)]
    r = requests.get(tool + "/gzip", timeout=10)
    out["gzip"] = [r.json(), r.headers.get("content-encoding") is None]
    r = requests.post(tool + "/echo", json={"q": "forecast"}, timeout=10)
    out["echo"] = r.json()
    with requests.Session() as s:
        s.headers["Authorization"] = SECRETS["authorization"]
        out["status"] = [[x.status_code, x.json()] for x in
                         (s.get(tool + "/status/404"), s.get(tool + "/status/500"))]
    for name, call in (("refused", lambda: requests.get(refused + "/x", timeout=5)),
                       ("timeout", lambda: requests.get(tool + "/slow", timeout=0.4))):
        try:
            call()
        except requests.RequestException as exc:
            out[name] = _error(exc)
    return out


def urllib3_cases(tool: str, refused: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with urllib3.PoolManager() as pool:
        r = pool.request("GET", tool + "/weather?city=Rome&key=" + SECRETS["query"])
        out["pool"] = [r.status, orjson.loads(r.data), _headers(r.headers)]
        r = pool.request("GET", tool + "/events", preload_content=False)
        out["pool_stream"] = [c.decode() for c in r.stream(None)]
        r.release_conn()
        r = pool.request("GET", tool + "/events", preload_content=False)
        out["pool_stream_64k"] = [c.decode() for c in r.stream(2**16)]  # botocore's read size
        r.release_conn()
        r = pool.request("GET", tool + "/download", preload_content=False)
        out["pool_read"] = [r.read(9).decode(), r.read().decode()]
        r.release_conn()
        r = pool.request("GET", tool + "/gzip")
        out["pool_gzip"] = orjson.loads(r.data)
    host, port = tool.rsplit("/", 1)[1].split(":")
    with urllib3.HTTPConnectionPool(host, int(port)) as conn:
        r = conn.urlopen("POST", "/echo", body=b'{"direct": 1}',
                         headers={"content-type": "application/json"})
        out["conn"] = [r.status, orjson.loads(r.data)]
    for name, retries in (("refused_raw", False), ("refused_retried", None)):
        try:
            urllib3.request("GET", refused + "/x", retries=retries, timeout=5)
        except urllib3.exceptions.HTTPError as exc:
            out[name] = _error(exc)
    try:
        urllib3.request("GET", tool + "/slow", retries=False, timeout=0.4)
    except urllib3.exceptions.HTTPError as exc:
        out["timeout_raw"] = _error(exc)
    return out


def main(argv: list[str]) -> None:
    mode, path, tool, chat, refused = argv
    with dejacache.cassette(path, mode=mode):  # type: ignore[arg-type]
        out = {**requests_cases(tool, chat, refused), **urllib3_cases(tool, refused)}
    sys.stdout.write(orjson.dumps(out).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
