"""The Mistral route of the chat-APIs fake, driven by the real mistralai client (httpx2, sync
and async) with no dejacache involved: answers, streams, tool calls and usage parse into
mistralai's models; 429 and 500 are its ``SDKError``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mistralai.client")

import httpx2
from fake_chat_apis import FakeChatAPIs
from fakes_support import sent_headers
from mistralai.client import Mistral, errors, models

MODEL = "mistral-small-latest"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture
def client(chat_apis: FakeChatAPIs) -> Iterator[Mistral]:
    with Mistral(api_key="mistral-fake-key", server_url=chat_apis.url) as c:
        yield c


def test_complete_varies_per_call(client: Mistral, chat_apis: FakeChatAPIs) -> None:
    first = client.chat.complete(model=MODEL, messages=USER)
    second = client.chat.complete(model=MODEL, messages=USER)
    assert isinstance(client.sdk_configuration.client, httpx2.Client)
    assert isinstance(first, models.ChatCompletionResponse)
    assert first.id != second.id and len(first.id) == 32
    assert first.choices[0].message.content != second.choices[0].message.content
    assert first.model == MODEL
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    req = chat_apis.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert sent_headers(req)["authorization"] == "Bearer mistral-fake-key"


def test_stream(client: Mistral) -> None:
    events = list(client.chat.stream(model=MODEL, messages=USER))
    assert all(isinstance(e, models.CompletionEvent) for e in events)
    text = "".join(e.data.choices[0].delta.content or "" for e in events)
    assert text.startswith("Hello from the fake model")
    assert events[-1].data.choices[0].finish_reason == "stop"
    assert events[-1].data.usage.total_tokens > 0
    assert events[0].data.usage is None


def test_tool_round_trip(client: Mistral) -> None:
    first = client.chat.complete(model=MODEL, messages=USER, tools=TOOLS)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and len(call.id) == 9
    msgs = [*USER, first.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "name": "get_weather",
             "content": "sunny"}]
    final = client.chat.complete(model=MODEL, messages=msgs, tools=TOOLS)
    assert "Tool said sunny" in final.choices[0].message.content


async def test_async_complete_and_stream(chat_apis: FakeChatAPIs) -> None:
    async with Mistral(api_key="mistral-fake-key", server_url=chat_apis.url) as client:
        assert isinstance(client.sdk_configuration.async_client, httpx2.AsyncClient)
        resp = await client.chat.complete_async(model=MODEL, messages=USER)
        assert resp.choices[0].message.content.startswith("Hello from the fake model")
        events = [e async for e in await client.chat.stream_async(model=MODEL, messages=USER)]
        assert events[-1].data.usage.total_tokens > 0


@pytest.mark.parametrize("status", [429, 500])
def test_errors_are_mistrals_own(client: Mistral, chat_apis: FakeChatAPIs, status: int) -> None:
    chat_apis.script.append({"status": status})
    with pytest.raises(errors.SDKError) as info:
        client.chat.complete(model=MODEL, messages=USER)
    assert info.value.status_code == status


async def test_async_stream_error(chat_apis: FakeChatAPIs) -> None:
    chat_apis.script.append({"status": 429})
    async with Mistral(api_key="mistral-fake-key", server_url=chat_apis.url) as client:
        with pytest.raises(errors.SDKError) as info:
            await client.chat.stream_async(model=MODEL, messages=USER)
    assert info.value.status_code == 429
