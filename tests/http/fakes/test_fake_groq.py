"""The Groq route of the chat-APIs fake, driven by the real groq client (httpx, sync and
async) with no dejacache involved: answers, streams with ``x_groq``, tool calls and usage
parse into groq's types; 429 and 500 are its ``RateLimitError`` / ``InternalServerError``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

groq = pytest.importorskip("groq")

import httpx  # noqa: E402
from fake_chat_apis import FakeChatAPIs  # noqa: E402
from fakes_support import sent_headers  # noqa: E402

MODEL = "llama-3.3-70b-versatile"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def client(chat_apis: FakeChatAPIs) -> Iterator[Any]:
    with groq.Groq(api_key="gsk_fake", base_url=chat_apis.url, max_retries=0) as c:
        yield c


def test_create_varies_per_call(client: Any, chat_apis: FakeChatAPIs) -> None:
    first = client.chat.completions.create(model=MODEL, messages=USER)
    second = client.chat.completions.create(model=MODEL, messages=USER)
    assert isinstance(client._client, httpx.Client)
    assert first.id != second.id and first.x_groq.id != second.x_groq.id
    assert first.choices[0].message.content != second.choices[0].message.content
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert first.usage.queue_time is not None and first.model == MODEL
    req = chat_apis.requests[0]
    assert req["path"] == "/openai/v1/chat/completions"
    assert sent_headers(req)["authorization"] == "Bearer gsk_fake"


def test_stream_reports_usage_in_x_groq(client: Any) -> None:
    chunks = list(client.chat.completions.create(model=MODEL, messages=USER, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.startswith("Hello from the fake model")
    assert chunks[0].x_groq.id == chunks[-1].x_groq.id
    assert chunks[-1].x_groq.usage.total_tokens > 0 and chunks[-1].usage is None


def test_tool_round_trip(client: Any) -> None:
    first = client.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    (call,) = first.choices[0].message.tool_calls
    msgs = [*USER, first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    final = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS)
    assert "Tool said sunny" in final.choices[0].message.content


async def test_async_create_and_stream(chat_apis: FakeChatAPIs) -> None:
    async with groq.AsyncGroq(api_key="gsk_fake", base_url=chat_apis.url,
                              max_retries=0) as client:
        resp = await client.chat.completions.create(model=MODEL, messages=USER)
        assert resp.choices[0].message.content.startswith("Hello from the fake model")
        stream = await client.chat.completions.create(model=MODEL, messages=USER, stream=True)
        chunks = [c async for c in stream]
        assert chunks[-1].x_groq.usage.total_tokens > 0
        chat_apis.script.append({"status": 429})
        with pytest.raises(groq.RateLimitError):
            await client.chat.completions.create(model=MODEL, messages=USER)


@pytest.mark.parametrize(("status", "kind"), [(429, "RateLimitError"),
                                              (500, "InternalServerError")])
def test_errors_are_groqs_own(client: Any, chat_apis: FakeChatAPIs, status: int,
                              kind: str) -> None:
    chat_apis.script.append({"status": status})
    with pytest.raises(getattr(groq, kind)) as info:
        client.chat.completions.create(model=MODEL, messages=USER)
    assert info.value.status_code == status
