"""The real anthropic SDK (2.x, httpx2): messages, the messages.stream helper, tool use."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from fake_provider import FakeProvider
from http_support import record_then_replay

import dejacache

TOOLS: list[Any] = [{"name": "get_weather", "description": "weather for a city",
                     "input_schema": {"type": "object",
                                      "properties": {"city": {"type": "string"}}}}]
USER: list[Any] = [{"role": "user", "content": "hello"}]


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-SECRET", max_retries=0) as c:
        yield c


def tool_agent(client: anthropic.Anthropic) -> list[Any]:
    msgs: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    first = client.messages.create(model="claude-test", max_tokens=100, messages=msgs,
                                   tools=TOOLS)
    use = next(b for b in first.content if b.type == "tool_use")
    msgs += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                           "content": "sunny"}]}]
    second = client.messages.create(model="claude-test", max_tokens=100, messages=msgs,
                                    tools=TOOLS)
    return [first.model_dump(), second.model_dump()]


def test_messages_create(fake: FakeProvider, client: anthropic.Anthropic) -> None:
    def run() -> Any:
        m = client.messages.create(model="claude-test", max_tokens=50, messages=USER)
        assert isinstance(m, anthropic.types.Message)
        return m.model_dump()

    live, again = record_then_replay(fake, run)
    assert live == again


def test_messages_stream_helper(fake: FakeProvider, client: anthropic.Anthropic) -> None:
    def run() -> Any:
        with client.messages.stream(model="claude-test", max_tokens=50, messages=USER) as s:
            texts = list(s.text_stream)
            final = s.get_final_message()
        return texts, final.model_dump()

    live, again = record_then_replay(fake, run)
    assert live == again
    assert "".join(again[0]).startswith("Claude-ish reply")
    assert again[1]["usage"]["output_tokens"] == 6


def test_raw_stream_events(fake: FakeProvider, client: anthropic.Anthropic) -> None:
    def run() -> Any:
        stream = client.messages.create(model="claude-test", max_tokens=50, messages=USER,
                                        stream=True)
        return [e.model_dump() for e in stream]

    live, again = record_then_replay(fake, run)
    assert live == again
    assert again[-1]["type"] == "message_stop"


def test_tool_use_two_turns(fake: FakeProvider, client: anthropic.Anthropic) -> None:
    live, again = record_then_replay(fake, lambda: tool_agent(client))
    assert live == again
    assert "said sunny" in again[1]["content"][0]["text"]


def test_streamed_tool_use(fake: FakeProvider, client: anthropic.Anthropic) -> None:
    def run() -> Any:
        with client.messages.stream(model="claude-test", max_tokens=50, messages=USER,
                                    tools=TOOLS) as s:
            final = s.get_final_message()
        assert final.content[0].type == "tool_use"
        return final.model_dump()

    live, again = record_then_replay(fake, run)
    assert live == again


def test_async_messages_and_stream(fake: FakeProvider) -> None:
    async def agent() -> Any:
        async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="k",
                                            max_retries=0) as client:
            m = await client.messages.create(model="claude-test", max_tokens=50, messages=USER)
            async with client.messages.stream(model="claude-test", max_tokens=50,
                                              messages=USER) as s:
                texts = [t async for t in s.text_stream]
                final = await s.get_final_message()
            return [m.model_dump(), texts, final.model_dump()]

    live, again = record_then_replay(fake, lambda: asyncio.run(agent()))
    assert live == again


def test_rerecording_turn_one_keeps_the_tool_result_turn_matching(
    fake: FakeProvider, client: anthropic.Anthropic
) -> None:
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        first_run = tool_agent(client)
    turn1 = [k for k, r in store.iterate() if b"tool_use_id" not in r.request]
    store.delete(turn1[0])
    with dejacache.scope(mode="auto", store=store):
        second_run = tool_agent(client)
    assert second_run[0]["content"][0]["id"] != first_run[0]["content"][0]["id"]
    assert second_run[1] == first_run[1]  # fed the new tool_use id, still the old recording
    assert fake.count() == 3
