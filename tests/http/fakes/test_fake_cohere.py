"""The Cohere route of the chat-APIs fake, driven by the real cohere v2 client (httpx, sync
and async) with no dejacache involved: answers, typed stream events, tool calls and usage
parse into cohere's types; 429 and 500 are its ``TooManyRequestsError`` /
``InternalServerError``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

cohere = pytest.importorskip("cohere")

import httpx  # noqa: E402
from cohere.errors import InternalServerError, TooManyRequestsError  # noqa: E402
from fake_chat_apis import FakeChatAPIs  # noqa: E402
from fakes_support import sent_headers  # noqa: E402

MODEL = "command-a-03-2025"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
NO_RETRY: Any = {"max_retries": 0}  # cohere retries 429 and 5xx twice by default


@pytest.fixture
def client(chat_apis: FakeChatAPIs) -> Iterator[Any]:
    with cohere.ClientV2(api_key="co-fake-key", base_url=chat_apis.url) as c:
        yield c


def test_chat_varies_per_call(client: Any, chat_apis: FakeChatAPIs) -> None:
    first = client.chat(model=MODEL, messages=USER)
    second = client.chat(model=MODEL, messages=USER)
    assert isinstance(client._client_wrapper.httpx_client.httpx_client, httpx.Client)
    assert first.id != second.id
    assert first.message.content[0].text != second.message.content[0].text
    assert first.finish_reason == "COMPLETE"
    assert first.usage.billed_units.output_tokens == first.usage.tokens.output_tokens > 0
    req = chat_apis.requests[0]
    assert req["path"] == "/v2/chat"
    assert sent_headers(req)["authorization"] == "Bearer co-fake-key"


def test_stream_event_types(client: Any) -> None:
    events = list(client.chat_stream(model=MODEL, messages=USER))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message-start", "content-start"]
    assert kinds[-2:] == ["content-end", "message-end"]
    assert set(kinds[2:-2]) == {"content-delta"}
    text = "".join(e.delta.message.content.text for e in events if e.type == "content-delta")
    assert text.startswith("Hello from the fake model")
    assert events[0].id and events[-1].delta.usage.billed_units.output_tokens > 0


def test_tool_call_and_stream(client: Any) -> None:
    first = client.chat(model=MODEL, messages=USER, tools=TOOLS)
    assert first.finish_reason == "TOOL_CALL" and first.message.tool_plan
    (call,) = first.message.tool_calls
    msgs = [*USER, {"role": "assistant", "tool_plan": first.message.tool_plan,
                    "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    final = client.chat(model=MODEL, messages=msgs, tools=TOOLS)
    assert "Tool said sunny" in final.message.content[0].text
    kinds = [e.type for e in client.chat_stream(model=MODEL, messages=USER, tools=TOOLS)]
    assert kinds == ["message-start", "tool-plan-delta", "tool-call-start", "tool-call-delta",
                     "tool-call-end", "message-end"]


async def test_async_chat_and_stream(chat_apis: FakeChatAPIs) -> None:
    async with cohere.AsyncClientV2(api_key="co-fake-key", base_url=chat_apis.url) as client:
        resp = await client.chat(model=MODEL, messages=USER)
        assert resp.message.content[0].text.startswith("Hello from the fake model")
        events = [e async for e in client.chat_stream(model=MODEL, messages=USER)]
        assert events[-1].type == "message-end"
        chat_apis.script.append({"status": 429})
        with pytest.raises(TooManyRequestsError):
            await client.chat(model=MODEL, messages=USER, request_options=NO_RETRY)


@pytest.mark.parametrize(("status", "kind"), [(429, TooManyRequestsError),
                                              (500, InternalServerError)])
def test_errors_are_coheres_own(client: Any, chat_apis: FakeChatAPIs, status: int,
                                kind: type[Exception]) -> None:
    chat_apis.script.append({"status": status})
    with pytest.raises(kind) as info:
        client.chat(model=MODEL, messages=USER, request_options=NO_RETRY)
    assert info.value.status_code == status and info.value.body["message"]
