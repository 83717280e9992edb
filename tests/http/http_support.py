"""Helpers shared by the HTTP tests: a sequenced store, the record-stop-replay routine and a
server quoting every key it is sent (in a refusal, a 200, a 200 stream's error event), as it
is or in another spelling."""

from __future__ import annotations

import asyncio
import base64
import collections
import http.server
import pathlib
import re
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import orjson
from fake_provider import FakeProvider

import dejacache
from dejacache import MemoryStore, Record
from dejacache.http import _passing, codings, recording, transport

__all__ = ["CLIENTS", "FORMS", "SPELLINGS", "EventServer", "KeyRefuser", "KeySpeller",
           "SeqStore", "WatchedPassing", "WatchedRecorder", "fetch", "leaked",
           "record_then_replay", "watch_passing", "watch_recorders"]


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


#: The clients dejacache intercepts, by the name :func:`fetch` takes.
CLIENTS = ("httpx", "requests", "urllib3", "aiohttp")


def fetch(client: str, method: str, url: str, headers: dict[str, str] | None = None,
          body: bytes | None = None) -> tuple[int, Any]:
    """One request through the real ``client`` (:data:`CLIENTS`): its status, and its body
    as JSON (text when not JSON). The clients are imported here: the suites of other
    environments (``gen2/``, ``legacy/``) import this module without them."""
    headers = headers or {}
    if client == "aiohttp":
        return asyncio.run(_aiohttp_fetch(method, url, headers, body))
    import httpx
    import requests
    import urllib3

    if client == "httpx":
        r = httpx.request(method, url, headers=headers, content=body)
        status, text = r.status_code, r.text
    elif client == "requests":
        rr = requests.request(method, url, headers=headers, data=body, timeout=10)
        status, text = rr.status_code, rr.text
    else:
        ru = urllib3.PoolManager().request(method, url, headers=headers, body=body)
        status, text = ru.status, ru.data.decode()
    return status, _json_or_text(text)


async def _aiohttp_fetch(method: str, url: str, headers: dict[str, str], body: bytes | None
                         ) -> tuple[int, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.request(method, url, headers=headers,
                                                       data=body) as r:
        return r.status, _json_or_text(await r.text())


def _json_or_text(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def send_json(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    """A loopback handler's whole JSON answer: status, the two headers, the body."""
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Quote(http.server.BaseHTTPRequestHandler):
    """``/v1/things``: 401, quoting the keys; ``/v1/echo``: 200 with an ``error`` field
    quoting them; ``/v1/stream``: a 200 event stream whose second event is an error quoting
    them, each key cut in two across writes (a mid-stream error, as providers send one)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        quoted = f"{self.headers.get('x-api-key')} {self.headers.get('authorization')} {self.path}"
        error = {"error": {"message": f"Incorrect API key provided: {quoted}"}}
        if self.path.startswith("/v1/stream"):
            self._stream(error)
        else:
            send_json(self, 200 if self.path.startswith("/v1/echo") else 401,
                      orjson.dumps(error))

    def _stream(self, error: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()  # (HTTP/1.0: the body ends when the connection closes)
        self.wfile.write(b'data: {"delta": "hi"}\n\n')
        wire = b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
        cuts = sorted(wire.index(k.encode()) + len(k) // 2 for k in KeyRefuser.KEYS)
        for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True):
            self.wfile.write(wire[a:b])
            self.wfile.flush()
            time.sleep(0.005)  # one read each: the key reaches the client in two chunks

    def log_message(self, *args: Any) -> None:
        pass


class KeyRefuser:
    """A loopback server quoting every key it is sent, as providers do ("Incorrect API key
    provided: KEY"): keys of no known shape, under no credential name in the answer, so only
    the request knows them. ``url`` refuses them (401) and carries ``KEYS[2]`` as ``?key=``;
    ``at("echo")`` and ``at("stream")`` quote them in a 200 (``_Quote``); send ``HEADERS``."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "plain-api-key-41c9e2", "bearer-token-7d0a3f", "query-key-93b1c7")
    HEADERS: ClassVar[dict[str, str]] = {"x-api-key": KEYS[0], "authorization": f"Bearer {KEYS[1]}"}
    HANDLER: ClassVar[type[http.server.BaseHTTPRequestHandler]]

    def __enter__(self) -> KeyRefuser:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self.HANDLER)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.url = self.at("things")
        return self

    def at(self, path: str) -> str:
        return f"{self.base}/v1/{path}?key={self.KEYS[2]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @classmethod
    def held(cls, text: str) -> list[str]:
        """The keys ``text`` holds as they are."""
        return [k for k in cls.KEYS if k in text]


def leaked(folder: pathlib.Path, refuser: type[KeyRefuser] | None = None) -> list[str]:
    """The keys ``refuser`` (:class:`KeyRefuser`) quoted that some file under ``folder``
    holds, in any spelling (:meth:`KeySpeller.held`)."""
    data = b"".join(f.read_bytes() for f in folder.rglob("*") if f.is_file())
    assert b"Incorrect API key provided" in data  # the answer itself was kept
    return (refuser or KeyRefuser).held(data.decode(errors="replace"))


KeyRefuser.HANDLER = _Quote

# How a server may spell a key it quotes: PHP's JSON escaping ``/``; an encoder writing some
# characters as ``\uXXXX`` (``+`` and ``=`` here, in either case of hex digits, ``/`` left
# alone); a URL's percent-encoding, in either case of hex digits.
SPELLINGS: dict[str, Callable[[str], str]] = {
    "slash": lambda k: k.replace("/", "\\/"),
    "unicode": lambda k: k.replace("+", "\\u002B").replace("=", "\\u003d"),
    "percent": lambda k: urllib.parse.quote(k, safe=""),
    "percent-lower": lambda k: re.sub("%..", lambda m: m.group(0).lower(),
                                      urllib.parse.quote(k, safe="")),
    # An echo of the request's bytes, base64-encoded: the key a byte into the blob (standard
    # alphabet, padded), or two (base64url, unpadded, as a JWT's payload).
    "base64": lambda k: base64.b64encode(b"\x00" + k.encode() + b"\x01").decode(),
    "base64url": lambda k: base64.urlsafe_b64encode(b"<<" + k.encode()).decode().rstrip("="),
}
# Where the spelling survives what dejacache keeps: a JSON body (parsed, so only the
# percent-encoding survives), JSON served as text, an error message that embeds the
# upstream's JSON document as a string, an event stream's ``data:`` kept as text.
FORMS = ("json", "text", "double", "stream")


class KeySpeller(KeyRefuser):
    """:class:`KeyRefuser` with keys holding ``/``, ``+`` and ``=`` (as session tokens do),
    quoted in another spelling: ``at(FORM/SPELLING)`` (:data:`FORMS`, :data:`SPELLINGS`),
    always 200."""

    KEYS: ClassVar[tuple[str, ...]] = (
        "plain/api+key=41c9e2qx", "bearer+token/7d0a3fqy==", "query/key+93b1c7qz=")
    HEADERS: ClassVar[dict[str, str]] = {"x-api-key": KEYS[0], "authorization": f"Bearer {KEYS[1]}"}

    @classmethod
    def route(cls, path: str) -> str:
        return f"/v1/{path}?key={urllib.parse.quote(cls.KEYS[2], safe='')}"

    def at(self, path: str) -> str:
        return self.base + self.route(path)

    @classmethod
    def held(cls, text: str) -> list[str]:
        """The keys ``text`` holds in any spelling: each ends in a run of letters and digits
        that every spelling writes as it is, and nothing else does."""
        decoded = b"".join(_base64_readings(text))
        return [k for k in cls.KEYS if re.split(r"[^A-Za-z0-9]", k.rstrip("="))[-1] in text
                or k.encode() in decoded]


def _base64_readings(text: str) -> list[bytes]:
    """What each run of base64 characters in ``text`` decodes to, from each alignment."""
    out = []
    for run in re.findall(r"[A-Za-z0-9+/_\-]{16,}", text):
        std = run.replace("-", "+").replace("_", "/")
        for k in range(4):
            cut = std[k:][:len(std) - k - ((len(std) - k) % 4 == 1)]
            out.append(base64.b64decode(cut + "=" * (-len(cut) % 4)) + b"\n")
    return out


class _Spell(http.server.BaseHTTPRequestHandler):
    """``/v1/FORM/SPELLING``: a 200 quoting the keys spelt so (:class:`KeySpeller`)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        url = urllib.parse.urlsplit(self.path)
        form, spelling = url.path.split("/")[2:4]
        spell = SPELLINGS[spelling]
        key = urllib.parse.parse_qs(url.query)["key"][0]
        said = (f"Incorrect API key provided: {spell(self.headers['x-api-key'])} "
                f"{spell(self.headers['authorization'])} https://h{url.path}?key={spell(key)}")
        doc = ('{"error": {"message": "' + said + '"}}').encode()  # (spelt as it is)
        if form == "stream":
            self._stream(doc)
            return
        if form == "double":
            doc = orjson.dumps({"error": {"message": "upstream said: " + doc.decode()}})
        self.send_response(200)
        self.send_header("content-type", "text/plain" if form == "text" else "application/json")
        self.send_header("content-length", str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)

    def _stream(self, doc: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b'data: {"delta": "hi"}\n\n')
        self.wfile.flush()
        time.sleep(0.005)
        self.wfile.write(b"event: error\ndata: " + doc + b"\n\n")

    def log_message(self, *args: Any) -> None:
        pass


KeySpeller.HANDLER = _Spell


class WatchedRecorder(recording.Recorder):
    """A stream recorder that notes, after each chunk, the most bytes it held for the
    recording: its events and the wire bytes it kept (what it holds, counted apart from its
    own ``held``)."""

    seen: ClassVar[list[WatchedRecorder]] = []

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.peak = 0
        WatchedRecorder.seen.append(self)

    def feed(self, chunk: bytes) -> int:
        stage = super().feed(chunk)
        held = sum(len(e) for _, e in self.events) + sum(len(w) for w in self.wire or ())
        self.peak = max(self.peak, held)
        return stage


class WatchedPassing:
    """A whole answer read up to the bound and handed on (``_passing.Passing``): the sizes of
    the chunks it held when it passed the bound, and the bytes pulled from the rest of its
    body since (only as the caller reads them)."""

    def __init__(self, passing: _passing.Passing) -> None:
        self.held = [len(c) for c in passing.held]
        self.pulled = 0
        rest = passing.rest
        passing.rest = self._apulled(rest) if hasattr(rest, "__anext__") else self._pulled(rest)

    def _pulled(self, rest: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in rest:
            self.pulled += len(chunk)
            yield chunk

    async def _apulled(self, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in rest:
            self.pulled += len(chunk)
            yield chunk


def watch_passing(monkeypatch: Any, *modules: Any) -> list[WatchedPassing]:
    """Every whole answer read past the bound from now on (by the exchange, and by the
    ``read_bounded``/``aread_bounded`` of ``modules`` too: the proxy's), in order."""
    seen: list[WatchedPassing] = []

    def noted(read: Any) -> Any:
        if isinstance(read, _passing.Passing):
            seen.append(WatchedPassing(read))
        return read

    async def aread(live: Any) -> Any:
        return noted(await _passing.aread_bounded(live))

    for module in (transport, *modules):
        if hasattr(module, "read_bounded"):
            monkeypatch.setattr(module, "read_bounded",
                                lambda live: noted(_passing.read_bounded(live)))
        monkeypatch.setattr(module, "aread_bounded", aread)
    return seen


def watch_recorders(monkeypatch: Any) -> list[WatchedRecorder]:
    """Every stream recorder the exchange makes from now on (the test's monkeypatch undoes
    it), in order."""
    monkeypatch.setattr(WatchedRecorder, "seen", [])
    monkeypatch.setattr(transport, "Recorder", WatchedRecorder)
    return WatchedRecorder.seen


class _Events(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _EventHTTPServer

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:  # (ThreadingHTTPServer: requests are counted from several threads)
            srv.calls += 1
            call = srv.calls  # this request's number: later ones count on meanwhile
        time.sleep(srv.delay)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(srv.events):
            data = b"data: " + orjson.dumps({"n": i, "call": call}) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


class _EventHTTPServer(http.server.ThreadingHTTPServer):
    events = 50
    delay = 0.0
    calls = 0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lock = threading.Lock()


class EventServer:
    """A loopback server answering every GET with ``events`` server-sent events (~25 bytes
    each), one per chunk, after ``delay`` seconds: a stream no request asks for by its body,
    so a call reads it whole (``transport._read_events``)."""

    def __init__(self, events: int = 50, delay: float = 0.0) -> None:
        self.server = _EventHTTPServer(("127.0.0.1", 0), _Events)
        self.server.events, self.server.delay = events, delay

    def __enter__(self) -> EventServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/events"
        return self

    @property
    def calls(self) -> int:
        return self.server.calls

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Counted:
    """A real decoder step, the size of each piece it yields noted in ``sizes``."""

    def __init__(self, step: Any, sizes: list[int]) -> None:
        self._step, self._sizes = step, sizes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._step, name)

    def decompress(self, data: bytes) -> bytes:
        out: bytes = self._step.decompress(data)
        self._sizes.append(len(out))
        return out


def count_decoded(monkeypatch: Any) -> list[int]:
    """The size of every piece any decoder step of ``codings.py`` yields from now on: what
    dejacache held of a body it decoded (not RSS)."""
    sizes: list[int] = []
    real = codings.decompressor

    def counted(name: str, bound: int | None = None) -> Any:
        step = real(name, bound)
        return None if step is None else _Counted(step, sizes)

    monkeypatch.setattr(codings, "decompressor", counted)
    return sizes
