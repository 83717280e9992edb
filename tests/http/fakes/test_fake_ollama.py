"""The Ollama route of the chat-APIs fake, driven by the real ollama client (httpx, sync and
async) with no dejacache involved: answers, NDJSON streams, tool calls and the token counters
parse into ollama's types; errors are its ``ResponseError``."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

ollama = pytest.importorskip("ollama")

import httpx  # noqa: E402
from fake_chat_apis import FakeChatAPIs  # noqa: E402
from fakes_support import raw_chunks  # noqa: E402

MODEL = "llama3.2"
USER = [{"role": "user", "content": "hi"}]


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
      city: the city
    """
    return f"sunny in {city}"


@pytest.fixture
def client(chat_apis: FakeChatAPIs) -> Iterator[ollama.Client]:
    with ollama.Client(host=chat_apis.url) as c:
        yield c


def test_chat_varies_per_call(client: ollama.Client, chat_apis: FakeChatAPIs) -> None:
    first = client.chat(model=MODEL, messages=USER)
    second = client.chat(model=MODEL, messages=USER)
    assert isinstance(client._client, httpx.Client)
    assert isinstance(first, ollama.ChatResponse)
    assert first.message.content != second.message.content
    assert first.done and first.done_reason == "stop" and first.model == MODEL
    assert first.prompt_eval_count > 0 and first.eval_count > 0
    assert chat_apis.requests[0]["path"] == "/api/chat"
    assert chat_apis.requests[0]["body"]["stream"] is False


def test_stream(client: ollama.Client) -> None:
    parts = list(client.chat(model=MODEL, messages=USER, stream=True))
    assert "".join(p.message.content for p in parts).startswith("Hello from the fake model")
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].eval_count > 0


def test_stream_is_one_line_per_chunk(chat_apis: FakeChatAPIs) -> None:
    chunks = raw_chunks(f"{chat_apis.url}/api/chat", {"model": MODEL, "messages": USER})
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.endswith(b"\n") and chunk.count(b"\n") == 1
        assert "done" in orjson.loads(chunk)


def test_tool_round_trip(client: ollama.Client) -> None:
    first = client.chat(model=MODEL, messages=USER, tools=[get_weather])
    (call,) = first.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    result = get_weather(**call.function.arguments)
    msgs = [*USER, first.message, {"role": "tool", "content": result,
                                   "tool_name": "get_weather"}]
    final = client.chat(model=MODEL, messages=msgs, tools=[get_weather])
    assert "Tool said sunny in Paris" in final.message.content


async def test_async_chat_and_stream(chat_apis: FakeChatAPIs) -> None:
    async with ollama.AsyncClient(host=chat_apis.url) as client:
        resp = await client.chat(model=MODEL, messages=USER)
        assert resp.message.content.startswith("Hello from the fake model")
        parts = [p async for p in await client.chat(model=MODEL, messages=USER, stream=True)]
        assert parts[-1].done
        chat_apis.script.append({"status": 429})
        with pytest.raises(ollama.ResponseError) as info:
            await client.chat(model=MODEL, messages=USER)
        assert info.value.status_code == 429


@pytest.mark.parametrize("status", [429, 500])
def test_errors_are_ollamas_own(client: ollama.Client, chat_apis: FakeChatAPIs,
                                status: int) -> None:
    chat_apis.script.append({"status": status})
    stream = client.chat(model=MODEL, messages=USER, stream=True)
    with pytest.raises(ollama.ResponseError) as info:
        next(stream)  # a stream's request is sent when it is first read
    assert info.value.status_code == status and info.value.error.startswith("error")
