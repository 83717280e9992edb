"""``dejacache import`` of cassettes written by the real vcrpy around the real SDKs.

Each test records with ``vcr.use_cassette`` against the loopback provider, converts the YAML
with ``dejacache import``, stops the provider and replays under ``dejacache.cassette(out,
mode="replay")``: the same answers, streams as real SDK streams, no request sent, and the fake
API keys vcrpy wrote into its file are nowhere in the cassette.

vcrpy intercepts plain httpx, so this runs in ``.venv-import`` (openai 2.x, anthropic 0.x;
``make test-import``); elsewhere every test here skips.
"""

from __future__ import annotations

import gzip
import http.client
import json
import pathlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

vcr = pytest.importorskip("vcr", reason="vcrpy runs in .venv-import (make test-import)")
openai = pytest.importorskip("openai")
if int(openai.__version__.partition(".")[0]) >= 3:  # a dev venv with the benchmark peers
    pytest.skip("vcrpy patches httpx, which openai 3.x no longer sends through (httpx2): "
                "runs in .venv-import (make test-import)", allow_module_level=True)
anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx")

import dejacache  # noqa: E402
from dejacache.cli import main  # noqa: E402
from loopback_provider import fake_provider_module  # noqa: E402

FakeProvider = fake_provider_module().FakeProvider

OPENAI_KEY = "sk-proj-FAKEopenaiKEY0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-FAKEanthropicKEY0123456789"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"name": "get_weather", "description": "weather",
                     "input_schema": {"type": "object", "properties": {}}}]

# vcrpy's own patching noise on the httpx it wraps; DejacacheWarning still fails a test.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture
def fake() -> Iterator[Any]:
    server = FakeProvider(chunk_delay=0.001).start()
    yield server
    server.stop()


def _clients(base: str, *, replay: bool) -> tuple[Any, Any]:
    """SDK clients; under replay they go through dejacache's httpx transport."""
    kw: dict[str, Any] = {}
    if replay:
        kw = {"http_client": dejacache.http_client(library="httpx")}
    oc = openai.OpenAI(base_url=base + "/v1", api_key=OPENAI_KEY, max_retries=0, **kw)
    if replay:
        kw = {"http_client": dejacache.http_client(library="httpx")}
    ac = anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0, **kw)
    return oc, ac


def _agent(oc: Any, ac: Any) -> dict[str, Any]:
    """One of each: a chat completion, a streamed one, an Anthropic tool loop and stream."""
    out: dict[str, Any] = {}
    r = oc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    out["chat"] = r.choices[0].message.content
    stream = oc.chat.completions.create(model="gpt-4o-mini", messages=USER, stream=True)
    out["stream_type"] = type(stream).__name__
    chunks = list(stream)
    out["chunk_types"] = {type(c).__name__ for c in chunks}
    out["stream"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    first = ac.messages.create(model="claude-x", max_tokens=64, messages=USER, tools=TOOLS)
    call = first.content[0]
    out["tool_use"] = (call.type, call.id)
    final = ac.messages.create(model="claude-x", max_tokens=64, tools=TOOLS, messages=[
        *USER, {"role": "assistant", "content": [c.model_dump() for c in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "sunny"}]}])
    out["final"] = final.content[0].text
    events = list(ac.messages.create(model="claude-x", max_tokens=64, messages=USER,
                                     stream=True))
    out["anthropic_events"] = [type(e).__name__ for e in events]
    out["anthropic_stream"] = "".join(e.delta.text for e in events
                                      if e.type == "content_block_delta")
    return out


def _run_agent(base: str, *, replay: bool) -> dict[str, Any]:
    # Closed here: an SDK client is garbage in a reference cycle, and its pooled socket to the
    # provider otherwise leaks until whichever later test the collector happens to run in.
    oc, ac = _clients(base, replay=replay)
    with oc, ac:
        return _agent(oc, ac)


def _record(fake: Any, path: pathlib.Path) -> dict[str, Any]:
    with vcr.use_cassette(str(path), record_mode="all"):
        live = _run_agent(fake.url, replay=False)
    assert path.exists()
    return live


def _import(src: pathlib.Path, out: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["import", str(src), "-o", str(out)]) == 0
    return capsys.readouterr().out


def test_openai_and_anthropic_replay_from_an_imported_vcr_cassette(
    fake: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "vcr.yaml", tmp_path / "imported.json"
    live = _record(fake, src)
    raw = src.read_bytes()
    assert OPENAI_KEY.encode() in raw and ANTHROPIC_KEY.encode() in raw  # vcrpy kept them
    assert b"text/event-stream" in raw

    text = _import(src, out, capsys)
    assert "converted: 5 call(s)" in text and "skipped: 0 call(s)" in text
    assert "request header authorization: 2" in text and "request header x-api-key: 3" in text
    assert "response header set-cookie: 3" in text

    seen = fake.count()
    fake.stop()
    with dejacache.cassette(out, mode="replay") as tape:
        again = _run_agent(fake.url, replay=True)
    assert again == live
    assert again["stream_type"] == "Stream" and again["chunk_types"] == {"ChatCompletionChunk"}
    assert again["anthropic_events"][0] == "RawMessageStartEvent"
    assert tape.counters.replayed == 5 and tape.counters.missed == 0
    assert not tape.unused
    assert fake.count() == seen  # nothing reached the (stopped) provider

    data = out.read_bytes()
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, "server-secret"):
        assert secret.encode() not in data


# ---------------------------------------------------------------- serializers that parse bodies


class ParsedBodies:
    """A vcrpy serializer that keeps JSON bodies parsed, in the shape pydantic-ai's test suite
    writes: a JSON request or response body becomes a ``parsed_body`` mapping and its ``body``
    is removed; header names are lowercased and credentials dropped. (Written for this test;
    registered with vcrpy's own ``register_serializer``.)"""

    _DROPPED = frozenset({"authorization", "x-api-key", "set-cookie"})

    @classmethod
    def serialize(cls, cassette: dict[str, Any]) -> str:
        for it in cassette["interactions"]:
            for side in ("request", "response"):
                data = it[side]
                data["headers"] = {k.lower(): v for k, v in data["headers"].items()
                                   if k.lower() not in cls._DROPPED}
                if data["headers"].get("content-type", [""])[0].startswith("application/json"):
                    body = data.pop("body")
                    data["parsed_body"] = json.loads(body["string"] if side == "response"
                                                     else body)
        return str(yaml.safe_dump(cassette, allow_unicode=True))

    @staticmethod
    def deserialize(text: str) -> dict[str, Any]:
        raise NotImplementedError("these tests only record")


yaml = pytest.importorskip("yaml")


def test_a_cassette_whose_serializer_parsed_the_bodies_replays(
    fake: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "parsed.yaml", tmp_path / "imported.json"
    recorder = vcr.VCR()
    recorder.register_serializer("parsed", ParsedBodies)
    with recorder.use_cassette(str(src), serializer="parsed", record_mode="all"):
        live = _run_agent(fake.url, replay=False)
    raw = src.read_text()
    assert raw.count("parsed_body:") == 5 + 3  # every request; the answers that are not streams
    assert "string: '{" not in raw  # no JSON body is left as text

    text = _import(src, out, capsys)
    assert "converted: 5 call(s)" in text and "skipped: 0 call(s)" in text
    assert b'"json":null' not in out.read_bytes().replace(b" ", b"")

    seen = fake.count()
    fake.stop()
    with dejacache.cassette(out, mode="replay") as tape:
        again = _run_agent(fake.url, replay=True)
    assert again == live
    assert tape.counters.replayed == 5 and tape.counters.missed == 0 and not tape.unused
    assert fake.count() == seen
    oc, ac = _clients(fake.url, replay=True)
    with dejacache.cassette(out, mode="replay"), oc, ac, pytest.raises(dejacache.ReplayMiss):
        # the request bodies were imported: another question misses
        oc.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": "bye"}])


async def test_an_imported_recording_replays_through_the_async_clients(
    fake: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "vcr.yaml", tmp_path / "imported.json"
    with vcr.use_cassette(str(src), record_mode="all"), \
            openai.OpenAI(base_url=fake.openai_url, api_key=OPENAI_KEY, max_retries=0) as oc:
        live = oc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    _import(src, out, capsys)
    fake.stop()
    async with dejacache.cassette(out, mode="replay"), openai.AsyncOpenAI(
            base_url=fake.openai_url, api_key="another-key",
            http_client=dejacache.async_http_client(library="httpx")) as aoc:
        again = await aoc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert again.choices[0].message.content == live.choices[0].message.content
    assert again.id == live.id


def test_a_different_request_misses_instead_of_getting_the_imported_answer(
    fake: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "vcr.yaml", tmp_path / "imported.json"
    with vcr.use_cassette(str(src), record_mode="all"), \
            openai.OpenAI(base_url=fake.openai_url, api_key=OPENAI_KEY, max_retries=0) as oc:
        oc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    _import(src, out, capsys)
    fake.stop()
    oc, ac = _clients(fake.url, replay=True)
    with dejacache.cassette(out, mode="replay"), oc, ac, \
            pytest.raises(dejacache.ReplayMiss, match="'hi' -> 'bye'"):
        oc.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": "bye"}])


# ---------------------------------------------------------------- compressed bodies


class _GzipFront(BaseHTTPRequestHandler):
    """Forwards to the fake provider and answers gzip-compressed, as real providers do."""

    upstream = 0
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=10)
        try:
            conn.request("POST", self.path, body, {"content-type": "application/json"})
            resp = conn.getresponse()
            data, status = resp.read(), resp.status
            ctype = resp.getheader("content-type") or "application/json"
        finally:
            conn.close()
        packed = gzip.compress(data)
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-encoding", "gzip")
        self.send_header("content-length", str(len(packed)))
        self.end_headers()
        self.wfile.write(packed)


@pytest.fixture
def gzip_front(fake: Any) -> Iterator[str]:
    handler = type("Front", (_GzipFront,), {"upstream": fake.port})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_gzip_bodies_vcrpy_kept_compressed_are_decoded(
    fake: Any, gzip_front: str, tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "vcr.yaml", tmp_path / "imported.json"
    with vcr.use_cassette(str(src), record_mode="all"), \
            openai.OpenAI(base_url=gzip_front + "/v1", api_key=OPENAI_KEY, max_retries=0) as oc:
        live = oc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    raw = src.read_bytes()
    assert b"!!binary" in raw and b"gzip" in raw  # the wire bytes, as vcrpy stores them
    _import(src, out, capsys)
    fake.stop()
    oc, ac = _clients(gzip_front, replay=True)
    with dejacache.cassette(out, mode="replay"), oc, ac:
        again = oc.chat.completions.create(model="gpt-4o-mini", messages=USER)
    assert again.choices[0].message.content == live.choices[0].message.content
    assert b"content-encoding" not in out.read_bytes()


def test_credentials_in_the_query_are_neither_keyed_nor_written(
    fake: Any, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "vcr.yaml", tmp_path / "imported.json"
    url = fake.openai_url + "/embeddings"
    with vcr.use_cassette(str(src), record_mode="all"):
        live = httpx.post(url, params={"key": "QUERYSECRET123"},
                          json={"model": "e", "input": "x"}).json()
    text = _import(src, out, capsys)
    assert "query parameter key: 1" in text
    assert b"QUERYSECRET123" not in out.read_bytes()
    fake.stop()
    with dejacache.cassette(out, mode="replay"), \
            dejacache.http_client(library="httpx") as client:
        again = client.post(url, params={"key": "another-key"},
                            json={"model": "e", "input": "x"}).json()
    assert again == live
