"""The Groq provider module with the real groq client (httpx, sync and async) against the
chat-APIs fake: recorded here, replayed in a fresh process with the fake stopped
(0 connections), the same SDK objects, streams event by event (usage from ``x_groq``), 429 /
500 as groq's ``RateLimitError`` / ``InternalServerError``, usage, model and cost read, and the
bearer key in no file written."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

groq = pytest.importorskip("groq")

from fake_chat_apis import FakeChatAPIs  # noqa: E402
from provider_replay import assert_no_secrets, record_then_replay_fresh  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.providers import detect  # noqa: E402
from dejacache.http.providers.groq import PROVIDER  # noqa: E402

MODEL = "llama-3.3-70b-versatile"
KEY = "gsk_groq-secret-key-4c19"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def chat_apis() -> Any:
    server = FakeChatAPIs(chunk_delay=0.001).start()
    yield server
    server.stop()


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json")


def _fail(status: int) -> list[Any]:
    return [{"role": "user", "content": f"fail {status}"}]


def _tool_turn(first: Any) -> list[Any]:
    (call,) = first.choices[0].message.tool_calls
    return [*USER, first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]


def scenario(base_url: str) -> dict[str, Any]:
    """A completion, a stream, a tool round trip (the call id sent back), a 429 and a 500."""
    out: dict[str, Any] = {}
    with groq.Groq(api_key=KEY, base_url=base_url, max_retries=0) as client:
        create = client.chat.completions.create
        out["text"] = _dump(create(model=MODEL, messages=USER))
        out["stream"] = [_dump(c) for c in create(model=MODEL, messages=USER, stream=True)]
        first = create(model=MODEL, messages=USER, tools=TOOLS)
        final = create(model=MODEL, messages=_tool_turn(first), tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                create(model=MODEL, messages=_fail(status))
            except groq.APIStatusError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.body]
    return out


async def async_scenario(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with groq.AsyncGroq(api_key=KEY, base_url=base_url, max_retries=0) as client:
        create = client.chat.completions.create
        out["text"] = _dump(await create(model=MODEL, messages=USER))
        out["stream"] = [_dump(c) async for c in await create(model=MODEL, messages=USER,
                                                              stream=True)]
        first = await create(model=MODEL, messages=USER, tools=TOOLS)
        final = await create(model=MODEL, messages=_tool_turn(first), tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                await create(model=MODEL, messages=_fail(status))
            except groq.APIStatusError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.body]
    return out


@pytest.mark.parametrize("run", [scenario, async_scenario], ids=["sync", "async"])
def test_record_then_replay_in_a_fresh_process(chat_apis: FakeChatAPIs, tmp_path: pathlib.Path,
                                               run: Any) -> None:
    cas = tmp_path / "groq.json"
    live, again = record_then_replay_fresh(chat_apis, cas, run, "groq.chat.completions")
    assert again["tokens_saved"] > 0 and again["dollars_saved"] > 0
    assert live["429"][:2] == ["RateLimitError", 429]
    assert live["500"][:2] == ["InternalServerError", 500]
    assert len(live["stream"]) > 3
    assert "Tool said sunny" in live["tools"][1]["choices"][0]["message"]["content"]
    assert_no_secrets(tmp_path, [KEY])
    view = dejacache.load_cassette(cas)
    ok = [s for s in view.steps if s.usage]
    assert len(ok) == 4
    for step in ok:
        assert step.kind == "model" and step.model == MODEL and step.cost > 0
    stream = next(s for s in view.steps if "events" in s.response)
    # The stream's usage rides in x_groq on its last chunk.
    x_usage = live["stream"][-1]["x_groq"]["usage"]
    assert (stream.input_tokens, stream.output_tokens) == (
        x_usage["prompt_tokens"], x_usage["completion_tokens"])


def test_matching() -> None:
    ua = {"user-agent": "Groq/Python 1.7.0"}
    assert detect("127.0.0.1", "/openai/v1/chat/completions", ua) is PROVIDER
    assert detect("api.groq.com", "/openai/v1/chat/completions", {}) is PROVIDER
    assert detect("127.0.0.1", "/openai/v1/chat/completions",
                  {"user-agent": "AsyncGroq/Python 1.7.0"}) is PROVIDER
    # Azure OpenAI's v1 API has the same path: without Groq's host or SDK it is OpenAI's.
    assert detect("x.openai.azure.com", "/openai/v1/chat/completions", {}).name == "openai"
    assert PROVIDER.endpoint("api.groq.com", "/openai/v1/chat/completions") == (
        "groq.chat.completions")
    assert PROVIDER.endpoint("api.groq.com", "/openai/v1/audio/transcriptions") == (
        "groq.audio.transcriptions")


def test_stream_usage_comes_from_x_groq() -> None:
    events = [{"id": "a", "x_groq": {"id": "req_1"}},
              {"id": "a", "x_groq": {"id": "req_1", "usage": {
                  "prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                  "queue_time": 0.01}}}]
    assert PROVIDER.usage(None, events) == {"prompt_tokens": 3, "completion_tokens": 4,
                                            "total_tokens": 7}
