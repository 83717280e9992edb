"""The Gemini provider module with the real google-genai client against the loopback Gemini
fake: recorded here, replayed in a fresh process with the fake stopped (0 connections), the
same SDK objects, streams event by event, Google's errors as google-genai's own, usage,
model and cost read, and the API key (header or ``?key=``) in no file written."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson
import pytest

genai = pytest.importorskip("google.genai")

import httpx2  # noqa: E402
from fake_gemini import FakeGemini  # noqa: E402
from google.genai import errors, types  # noqa: E402
from provider_replay import assert_no_secrets, record, replay_fresh  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.providers import detect  # noqa: E402
from dejacache.http.providers.gemini import PROVIDER  # noqa: E402

MODEL = "gemini-2.5-flash"
# Not shaped like a Google key (AIza...): only the header and query rules can hide them.
KEY = "gemini-header-key-7f3a9c"
QUERY_KEY = "gemini-query-key-51be02"

# google-genai subclasses aiohttp's ClientSession for its async client, which aiohttp warns
# about; -W error would turn that into a failure of every async call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning")


@pytest.fixture
def gemini() -> Any:
    server = FakeGemini(chunk_delay=0.001).start()
    yield server
    server.stop()


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _dump(resp: Any) -> Any:
    # The raw HTTP headers are the transport's (content-length is gone in a replay), not the
    # answer's.
    return resp.model_dump(mode="json", exclude={"sdk_http_response"})


def _error(exc: errors.APIError) -> Any:
    return {"type": type(exc).__name__, "code": exc.code, "status": exc.status,
            "message": exc.message}


def _client(base_url: str) -> Any:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=base_url))


def sync_scenario(base_url: str) -> dict[str, Any]:
    """generateContent, a stream, two function-calling turns, a 429, a 500, and a raw
    request carrying the key as ``?key=``."""
    out: dict[str, Any] = {}
    with _client(base_url) as client:
        assert isinstance(client._api_client._httpx_client, httpx2.Client)
        resp = client.models.generate_content(model=MODEL, contents="hi")
        assert isinstance(resp, types.GenerateContentResponse)
        out["text"] = _dump(resp)
        chunks = list(client.models.generate_content_stream(model=MODEL, contents="stream"))
        assert all(isinstance(c, types.GenerateContentResponse) for c in chunks)
        out["stream"] = [_dump(c) for c in chunks]
        config = types.GenerateContentConfig(tools=[get_weather])
        out["tools"] = _dump(client.models.generate_content(
            model=MODEL, contents="weather?", config=config))
        for status in (429, 500):
            try:
                client.models.generate_content(model=MODEL, contents=f"fail {status}")
            except errors.APIError as exc:
                out[str(status)] = _error(exc)
    with httpx2.Client() as http:
        r = http.post(f"{base_url}/v1beta/models/{MODEL}:generateContent",
                      params={"key": QUERY_KEY}, json={"contents": [{"parts": [{"text": "q"}]}]})
        out["query_key"] = [r.status_code, r.json()]
    return out


async def async_scenario(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = _client(base_url)
    try:
        aio = client.aio
        out["text"] = _dump(await aio.models.generate_content(model=MODEL, contents="hi"))
        out["stream"] = [_dump(c) async for c in await aio.models.generate_content_stream(
            model=MODEL, contents="stream")]
        config = types.GenerateContentConfig(tools=[get_weather])
        out["tools"] = _dump(await aio.models.generate_content(
            model=MODEL, contents="weather?", config=config))
        for status in (429, 500):
            try:
                await aio.models.generate_content(model=MODEL, contents=f"fail {status}")
            except errors.APIError as exc:
                out[str(status)] = _error(exc)
        await aio.aclose()
    finally:
        client.close()
    return out


def _script_errors(gemini: FakeGemini) -> None:
    # The fake answers its script in request order: hi, the stream, two tool turns, 429, 500.
    gemini.script.extend([{}, {}, {}, {}, {"status": 429}, {"status": 500}])


def _check_replay(cas: pathlib.Path, live: dict[str, Any], again: dict[str, Any],
                  calls: int) -> None:
    assert again["out"] == live
    assert again["attempts"] == []  # not one connection, to the fake or anywhere
    assert again["misses"] == 0 and again["hits"] == again["replayed"] == calls
    assert again["by_name"] == ["gemini.generate_content"]
    assert again["tokens_saved"] > 0 and again["dollars_saved"] > 0
    assert live["429"]["type"] == "ClientError" and live["429"]["status"] == "RESOURCE_EXHAUSTED"
    assert live["500"]["type"] == "ServerError" and live["500"]["code"] == 500
    assert len(live["stream"]) > 3
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"]
                   for c in live["stream"]).startswith("Hello from the fake model")
    assert "sunny in Paris" in live["tools"]["candidates"][0]["content"]["parts"][0]["text"]
    view = dejacache.load_cassette(cas)
    ok = [s for s in view.steps if s.usage]
    assert len(ok) == calls - 2  # the 429 and the 500 carry no usage
    for step in ok:
        assert step.name == "gemini.generate_content" and step.kind == "model"
        assert step.model == MODEL and step.tokens_exact and step.cost > 0
    text = live["text"]["usage_metadata"]
    assert ok[0].input_tokens == text["prompt_token_count"]
    assert ok[0].output_tokens == text["candidates_token_count"]


def test_sync_record_then_replay_in_a_fresh_process(gemini: FakeGemini,
                                                    tmp_path: pathlib.Path) -> None:
    cas = tmp_path / "gemini.json"
    _script_errors(gemini)
    live = record(cas, sync_scenario, gemini.url)
    gemini.stop()
    again = replay_fresh(cas, sync_scenario, gemini.url)
    _check_replay(cas, live, again, calls=7)
    assert again["out"]["query_key"][0] == 200
    assert_no_secrets(tmp_path, [KEY, QUERY_KEY])
    # The stream was handed on (and recorded) event by event as it arrived.
    doc = orjson.loads(cas.read_bytes())
    (stream,) = [e for e in doc["entries"] if "events" in e["response"]]
    offsets = [ev[0] for ev in stream["response"]["events"]]
    assert len(offsets) == len(live["stream"]) and offsets == sorted(offsets)
    assert offsets[-1] > offsets[0]
    assert stream["request"]["path"].endswith(":streamGenerateContent")
    assert stream["request"]["query"] == {"alt": "sse"}
    (raw,) = [e for e in doc["entries"] if e["request"]["path"].startswith("/v1beta")]
    assert "query" not in raw["request"]  # ?key= is neither keyed nor stored


def test_async_record_then_replay_in_a_fresh_process(gemini: FakeGemini,
                                                     tmp_path: pathlib.Path) -> None:
    cas = tmp_path / "gemini-async.json"
    _script_errors(gemini)
    live = record(cas, async_scenario, gemini.url)
    gemini.stop()
    again = replay_fresh(cas, async_scenario, gemini.url)
    assert "query_key" not in live  # the async scenario sends no raw request
    _check_replay(cas, live, again, calls=6)
    assert_no_secrets(tmp_path, [KEY])


# ---------------------------------------------------------------- the module itself


def test_matching_and_names() -> None:
    path = f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert detect("generativelanguage.googleapis.com", "/v1beta/files", {}) is PROVIDER
    assert detect("127.0.0.1", path, {}) is PROVIDER
    vertex = f"/v1/projects/p/locations/us-central1/publishers/google/models/{MODEL}"
    assert detect("us-central1-aiplatform.googleapis.com", vertex + ":generateContent",
                  {}) is PROVIDER
    assert PROVIDER.endpoint("h", path) == "gemini.generate_content"
    assert PROVIDER.endpoint("h", f"/v1beta/models/{MODEL}:countTokens") == "gemini.count_tokens"
    assert PROVIDER.endpoint("h", "/v1beta/models/text-embedding-004:batchEmbedContents") == (
        "gemini.batch_embed_contents")
    assert PROVIDER.asks_stream(path, None) and not PROVIDER.asks_stream(
        f"/v1beta/models/{MODEL}:generateContent", {"stream": True})
    assert detect("127.0.0.1", "/v1/chat/completions", {}).name == "openai"


def test_usage_counts_thoughts_as_output_and_keeps_cached() -> None:
    events = [{"usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10}},
              {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                 "thoughtsTokenCount": 7, "cachedContentTokenCount": 4,
                                 "totalTokenCount": 22}, "modelVersion": "gemini-2.5-pro"}]
    assert PROVIDER.usage(None, events) == {
        "prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22, "cached_tokens": 4,
        "thoughts_tokens": 7}
    assert PROVIDER.model(None, events) == "gemini-2.5-pro"
    assert PROVIDER.usage({"candidates": []}, []) is None


def test_the_finishing_event_is_told_by_its_field_not_its_text() -> None:
    done = 'data: {"candidates":[{"finishReason":"STOP"}]}\r\n\r\n'
    quoted = 'data: {"candidates":[{"content":{"parts":[{"text":"\\"finishReason\\": \\"x"}]}}]}'
    assert PROVIDER.stage(done) == 1 and PROVIDER.stage(quoted) == 0


def test_a_miss_report_names_no_key(gemini: FakeGemini, tmp_path: pathlib.Path) -> None:
    cas = tmp_path / "miss.json"
    url = f"{gemini.url}/v1beta/models/{MODEL}:generateContent"

    def ask(text: str) -> Any:
        with httpx2.Client() as http:
            return http.post(url, params={"key": QUERY_KEY}, headers={"x-goog-api-key": KEY},
                             json={"contents": [{"parts": [{"text": text}]}]})

    with dejacache.cassette(cas, mode="record"):
        assert ask("recorded").status_code == 200
    gemini.stop()
    with dejacache.cassette(cas, mode="replay"), pytest.raises(dejacache.ReplayMiss) as miss:
        ask("asked now")
    report = str(miss.value)
    assert "gemini.generate_content" in report and "'recorded' -> 'asked now'" in report
    assert KEY not in report and QUERY_KEY not in report
    assert_no_secrets(tmp_path, [KEY, QUERY_KEY])


def test_a_json_array_stream_is_read_for_usage_and_model() -> None:
    # ``:streamGenerateContent`` without ``?alt=sse`` (llm-gemini) answers with one JSON array
    # of the chunks an SSE stream would send, usageMetadata complete on the last.
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "Pel"}]}}],
         "usageMetadata": {"promptTokenCount": 9}, "modelVersion": "gemini-3.6-flash"},
        {"candidates": [{"content": {"parts": [{"text": "ly"}]}, "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2,
                           "thoughtsTokenCount": 5, "totalTokenCount": 16},
         "modelVersion": "gemini-3.6-flash"},
    ]
    assert PROVIDER.usage(chunks, []) == {"prompt_tokens": 9, "completion_tokens": 7,
                                          "total_tokens": 16, "thoughts_tokens": 5}
    assert PROVIDER.model(chunks, []) == "gemini-3.6-flash"
    assert PROVIDER.usage([], []) is None and PROVIDER.model([], []) is None
