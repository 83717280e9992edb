"""What storing a live answer without the request's credentials costs on the record path.

    .venv/bin/python benchmarks/bench_unechoed.py [--budget 1.0]

Every live answer, whatever its status, is looked through for the credentials of the request
it answers (``exchange.unechoed``) before it is stored. Cells: the look alone on the stored
value, given the body it was read from (as the drivers do) and written whole (as before the
body was searched); with ``--record`` instead, one recorded call through ``Transport`` over
an ``httpx2.MockTransport`` into a ``MemoryStore`` (the whole record path: key, read,
store), with and without credentials in the request (run it against two checkouts, by
``PYTHONPATH``, to compare before and after). Answers: a 2 KB chat completion, a 1 MB one
(one long string, or lines and links), a 1 MB embeddings answer (floats), a 200-event
stream, an echo of the request's bytes base64-encoded, holding the key, and 2 KB and 200 KB
answers with and without base64 (a PNG in one line, or wrapped in MIME lines) looked through
for a long key and for short credentials (``--short``: a 12-character API key and a Basic
password of 6). Then the request side: a body looked through for the request's own
credentials before it is keyed (``exchange.unquoted``, on the record and the replay path
alike), 2 KB and 200 KB of JSON, without the key (the common case) and quoting it.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
from _timing import md_table

import dejacache
from dejacache.http import Transport
from dejacache.http.exchange import response_value
from dejacache.http.headers import credential_values
from dejacache.http.providers.openai import PROVIDER

KEY = "sk-bench-echo-7f3a9c2d1e0b4a5f6e7d8c9b0a1f2e3d"
CREDENTIALED = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
# Short credentials: an API key of 12 characters and Basic ``alice:hunt3r``.
SHORT = {"authorization": "Basic " + base64.b64encode(b"alice:hunt3r").decode(),
         "x-api-key": "k3y-7f3a9c2d"}
# The other headers an SDK sends with each call.
SDK_HEADERS = [("accept", "application/json"), ("content-type", "application/json"),
               ("user-agent", "OpenAI/Python 1.99.0"), ("x-stainless-lang", "python"),
               ("x-stainless-package-version", "1.99.0"), ("x-stainless-os", "Linux"),
               ("x-stainless-arch", "x64"), ("x-stainless-runtime", "CPython"),
               ("x-stainless-runtime-version", "3.11.7"), ("x-stainless-retry-count", "0"),
               ("x-stainless-read-timeout", "600"), ("accept-encoding", "gzip, deflate"),
               ("connection", "keep-alive"), ("host", "api.openai.com"),
               ("content-length", "120")]


def completion(size: int, line: str = "lorem ipsum dolor sit amet ") -> bytes:
    filler = (line * (size // len(line) + 1))[: max(size - 420, 10)]
    return orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": filler}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 400, "total_tokens": 420},
    })


def embeddings(size: int) -> bytes:
    n = size // 20
    return orjson.dumps({"object": "list", "model": "e", "data": [
        {"object": "embedding", "index": 0,
         "embedding": [0.0123456789 * (i % 97) - 0.5 for i in range(n)]}]})


def with_base64(size: int, wrapped: bool) -> bytes:
    """An answer carrying a picture of ``size`` bytes as base64 (no credential in it), in one
    line or wrapped at 76 characters (MIME)."""
    raw = bytes((i * 7919 + (i >> 5)) % 251 for i in range(size * 3 // 4))
    coded = (base64.encodebytes(raw) if wrapped else base64.b64encode(raw)).decode()
    return orjson.dumps({"id": "r-1", "content": [{"type": "image", "data": coded}]})


def stream(events: int) -> bytes:
    out = []
    for k in range(events):
        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                 "model": "m", "choices": [{"index": 0, "delta": {"content": f"tok{k} "},
                                            "finish_reason": None}]}
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


ANSWERS: dict[str, tuple[str, bytes]] = {
    "json 2 KB": ("application/json", completion(2048)),
    "json 1 MB": ("application/json", completion(1 << 20)),
    # Lines and links: a body with backslashes (``\\n``) and ``%``, written and searched.
    "json 1 MB, lines": ("application/json", completion(
        1 << 20, "lorem ipsum https://h/a%2Fb dolor sit amet\n")),
    "embeddings 1 MB": ("application/json", embeddings(1 << 20)),
    "sse 200 events": ("text/event-stream", stream(200)),
    "json 200 KB": ("application/json", completion(200 << 10)),
    "json 200 KB, lines": ("application/json", completion(
        200 << 10, "lorem ipsum https://h/a%2Fb dolor sit amet\n")),
    "base64 2 KB": ("application/json", with_base64(2 << 10, False)),
    "base64 2 KB, MIME lines": ("application/json", with_base64(2 << 10, True)),
    "base64 200 KB": ("application/json", with_base64(200 << 10, False)),
    "base64 200 KB, MIME lines": ("application/json", with_base64(200 << 10, True)),
    # An echo server answering the request's bytes as a data URL: the key inside base64.
    "echo, base64 64 KB": ("application/json", orjson.dumps({"data": (
        "data:application/octet-stream;base64," + base64.b64encode(
            b"\x89PNG" * 12_000 + KEY.encode() + b"\x00" * 100).decode())})),
}


def median_us(op: Callable[[], Any], budget: float) -> float:
    for _ in range(3):
        op()
    samples = []
    end = time.perf_counter() + budget
    while time.perf_counter() < end or len(samples) < 7:
        t = time.perf_counter_ns()
        op()
        samples.append(time.perf_counter_ns() - t)
    return statistics.median(samples) / 1000


def recorded_call(ctype: str, body: bytes, headers: dict[str, str]) -> Callable[[], Any]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": ctype}, content=body)

    client = httpx2.Client(transport=Transport(httpx2.MockTransport(handler)))
    asks = {"model": "m", "stream": ctype == "text/event-stream"}

    def op() -> Any:
        with dejacache.scope(mode="record", store=dejacache.MemoryStore()):
            return client.post("http://127.0.0.1:9/v1/chat/completions", json=asks,
                               headers=headers).read()

    return op


def look_alone(ctype: str, body: bytes, wire: bool,
               sent: dict[str, str] = CREDENTIALED) -> Callable[[], Any]:
    """The look alone, on the value stored (``wire``: given the body it was read from, as
    the drivers give it; else the value written whole)."""
    from dejacache.http.exchange import unechoed
    from dejacache.http.sse import SSESplitter

    value = response_value(200, [("content-type", ctype)], ctype, PROVIDER, body=body)
    given: bytes | None = body if wire else None
    if ctype == "text/event-stream":  # a stream's events are looked at as they were cut
        value = response_value(200, [("content-type", ctype)], ctype, PROVIDER,
                               events=[[0.0, e] for e in SSESplitter().feed(body)])
        given = None
    creds = credential_values(sent.items())
    return lambda: unechoed(value, creds, given)


def request_body(size: int, quoting: bool) -> bytes:
    text = "the quick brown fox jumps over the lazy dog " * 23
    turns = [{"role": "user", "content": text} for _ in range(max(size // 1030, 1))]
    if quoting:
        turns[-1] = {"role": "user", "content": f"call the tool with {KEY}"}
    return orjson.dumps({"model": "m", "messages": turns})


def request_rows(budget: float) -> list[list[str]]:
    from dejacache.http.exchange import unquoted

    headers = [*SDK_HEADERS, *CREDENTIALED.items()]
    rows = []
    for label, size in (("json 2 KB", 2048), ("json 200 KB", 200 * 1024)):
        cells = []
        for quoting in (False, True):
            body = request_body(size, quoting)
            cells.append(median_us(lambda body=body: unquoted(body, headers), budget))
        rows.append([label, *(f"{c:.1f}" for c in cells)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true", help="a short budget (make bench-quick)")
    ap.add_argument("--record", action="store_true",
                    help="the whole record path instead (runs on any checkout)")
    ap.add_argument("--short", action="store_true",
                    help="short credentials (a 12-character key, a 6-character password)")
    args = ap.parse_args()
    sent = SHORT if args.short else CREDENTIALED
    budget = 0.1 if args.quick else args.budget
    heads = ("record, key", "record, none") if args.record else ("look, wire", "look, whole")
    rows = []
    for name, (ctype, body) in ANSWERS.items():
        if args.record:
            ops = [recorded_call(ctype, body, sent), recorded_call(ctype, body, {})]
        else:
            ops = [look_alone(ctype, body, True, sent), look_alone(ctype, body, False, sent)]
        rows.append([name, *(f"{median_us(op, budget):.1f}" for op in ops)])
    print("## bench_unechoed.py: a live answer stored without the request's credentials\n")
    print(md_table(["answer", f"{heads[0]} (us)", f"{heads[1]} (us)"], rows))
    if not args.record:
        found = median_us(lambda: credential_values([*SDK_HEADERS, *CREDENTIALED.items()]),
                          budget)
        none = median_us(lambda: credential_values(SDK_HEADERS), budget)
        print(f"\nFinding the request's credentials: {found:.1f} us ({none:.1f} us with none).")
        print("\n## A request body quoting its own credentials (exchange.unquoted)\n")
        print(md_table(["body", "without the key (us)", "quoting it (us)"],
                       request_rows(budget)))


if __name__ == "__main__":
    main()
