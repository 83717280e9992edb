"""The Mistral provider module with the real mistralai client (httpx2) against the chat-APIs
fake: recorded here, replayed in a fresh process with the fake stopped (0 connections), the
same SDK objects, streams event by event, 429 / 500 as mistralai's ``SDKError``, usage,
model and cost read, and the bearer key in no file written."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytest.importorskip("mistralai.client")

from fake_chat_apis import FakeChatAPIs
from mistralai.client import Mistral, errors, models
from provider_replay import assert_no_secrets, record_then_replay_fresh

import dejacache
from dejacache.http.providers import detect
from dejacache.http.providers.mistral import PROVIDER

MODEL = "mistral-small-latest"
KEY = "mistral-secret-key-8d21"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture
def chat_apis() -> Any:
    server = FakeChatAPIs(chunk_delay=0.001).start()
    yield server
    server.stop()


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json")


def scenario(base_url: str) -> dict[str, Any]:
    """A completion, a stream, a tool round trip (the call id sent back), a 429 and a 500."""
    out: dict[str, Any] = {}
    with Mistral(api_key=KEY, server_url=base_url) as client:
        resp = client.chat.complete(model=MODEL, messages=USER)
        assert isinstance(resp, models.ChatCompletionResponse)
        out["text"] = _dump(resp)
        events = list(client.chat.stream(model=MODEL, messages=USER))
        assert all(isinstance(e, models.CompletionEvent) for e in events)
        out["stream"] = [_dump(e) for e in events]
        first = client.chat.complete(model=MODEL, messages=USER, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls
        msgs = [*USER, first.choices[0].message,
                {"role": "tool", "tool_call_id": call.id, "name": "get_weather",
                 "content": "sunny"}]
        final = client.chat.complete(model=MODEL, messages=msgs, tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                client.chat.complete(model=MODEL, messages=[
                    {"role": "user", "content": f"fail {status}"}])
            except errors.SDKError as exc:
                # A stored JSON body replays as the same JSON, its keys in sorted order.
                out[str(status)] = [type(exc).__name__, exc.status_code, json.loads(exc.body)]
    return out


async def async_scenario(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Mistral(api_key=KEY, server_url=base_url) as client:
        chat = client.chat
        out["text"] = _dump(await chat.complete_async(model=MODEL, messages=USER))
        out["stream"] = [_dump(e) async for e in await chat.stream_async(model=MODEL,
                                                                         messages=USER)]
        first = await chat.complete_async(model=MODEL, messages=USER, tools=TOOLS)
        (call,) = first.choices[0].message.tool_calls
        msgs = [*USER, first.choices[0].message,
                {"role": "tool", "tool_call_id": call.id, "name": "get_weather",
                 "content": "sunny"}]
        final = await chat.complete_async(model=MODEL, messages=msgs, tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                await chat.complete_async(model=MODEL, messages=[
                    {"role": "user", "content": f"fail {status}"}])
            except errors.SDKError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, json.loads(exc.body)]
    return out


@pytest.mark.parametrize("run", [scenario, async_scenario], ids=["sync", "async"])
def test_record_then_replay_in_a_fresh_process(chat_apis: FakeChatAPIs, tmp_path: pathlib.Path,
                                               run: Any) -> None:
    cas = tmp_path / "mistral.json"
    live, again = record_then_replay_fresh(chat_apis, cas, run, "mistral.chat.completions")
    assert again["tokens_saved"] > 0 and again["dollars_saved"] > 0
    assert live["429"][:2] == ["SDKError", 429] and live["500"][:2] == ["SDKError", 500]
    assert len(live["stream"]) > 3 and live["stream"][-1]["data"]["usage"]["total_tokens"] > 0
    assert "Tool said sunny" in live["tools"][1]["choices"][0]["message"]["content"]
    assert_no_secrets(tmp_path, [KEY])
    view = dejacache.load_cassette(cas)
    ok = [s for s in view.steps if s.usage]
    assert len(ok) == 4
    for step in ok:
        assert step.kind == "model" and step.model == MODEL and step.cost > 0
    assert ok[0].input_tokens == live["text"]["usage"]["prompt_tokens"]
    stream = next(s for s in view.steps if "events" in s.response)
    assert stream.output_tokens == live["stream"][-1]["data"]["usage"]["completion_tokens"]
    # The tool call's id is aliased: the second turn sends it back.
    tool_step = view.steps[2]
    assert tool_step.response["ids"][1] == live["tools"][0]["choices"][0]["message"][
        "tool_calls"][0]["id"]


def test_matching() -> None:
    ua = {"user-agent": "mistral-client-python/3.7.0"}
    assert detect("127.0.0.1", "/v1/chat/completions", ua) is PROVIDER
    assert detect("api.mistral.ai", "/v1/chat/completions", {}) is PROVIDER
    # Without the SDK's user agent its paths are OpenAI's.
    assert detect("127.0.0.1", "/v1/chat/completions", {}).name == "openai"
    assert PROVIDER.endpoint("api.mistral.ai", "/v1/chat/completions") == (
        "mistral.chat.completions")
    assert PROVIDER.endpoint("api.mistral.ai", "/v1/fim/completions") == (
        "mistral.fim.completions")
    assert PROVIDER.endpoint("api.mistral.ai", "/v1/embeddings") == "mistral.embeddings"
    assert PROVIDER.volatile == frozenset()
