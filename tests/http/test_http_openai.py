"""The real openai SDK (3.x, httpx2) recorded against a loopback server, replayed without it."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fake_provider import FakeProvider
from http_support import record_then_replay

import dejacache

TOOLS_CHAT: list[Any] = [{
    "type": "function",
    "function": {"name": "get_weather", "description": "weather for a city",
                 "parameters": {"type": "object",
                                "properties": {"city": {"type": "string"}}}},
}]
TOOLS_RESP: list[Any] = [{
    "type": "function", "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}]
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET", max_retries=0) as c:
        yield c


def async_client(fake: FakeProvider) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET", max_retries=0)


def chat_agent(client: openai.OpenAI) -> list[Any]:
    """Two turns with a tool call: the tool_call id goes back in the second request."""
    msgs: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    first = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS_CHAT)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    second = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS_CHAT)
    return [first.model_dump(), second.model_dump()]


def test_chat_completion_replays_the_same_object(fake: FakeProvider, client: openai.OpenAI) -> None:

    def run() -> Any:
        r = client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
        assert isinstance(r, openai.types.chat.ChatCompletion)
        return r.model_dump()

    live, again = record_then_replay(fake, run)
    assert live == again
    assert "reply" in again["choices"][0]["message"]["content"]


def test_chat_stream_replays_the_same_chunks(fake: FakeProvider, client: openai.OpenAI) -> None:

    def run() -> Any:
        stream = client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True  # type: ignore[arg-type]
        )
        assert isinstance(stream, openai.Stream)
        return [c.model_dump() for c in stream]

    live, again = record_then_replay(fake, run)
    assert len(live) > 3
    assert live == again


def test_chat_tool_calling_two_turns(fake: FakeProvider, client: openai.OpenAI) -> None:
    live, again = record_then_replay(fake, lambda: chat_agent(client))
    assert live == again
    assert "Tool said sunny" in again[1]["choices"][0]["message"]["content"]


def test_rerecording_one_turn_keeps_later_turns_matching(
    fake: FakeProvider, client: openai.OpenAI
) -> None:
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        first_run = chat_agent(client)
    # Re-record turn 1 only: the live server hands out a new tool_call id...
    turn1 = [k for k, r in store.iterate() if b"tool_call_id" not in r.request]
    assert len(turn1) == 1
    store.delete(turn1[0])
    with dejacache.scope(mode="auto", store=store):
        second_run = chat_agent(client)
    new_id = second_run[0]["choices"][0]["message"]["tool_calls"][0]["id"]
    assert new_id != first_run[0]["choices"][0]["message"]["tool_calls"][0]["id"]
    # ...and turn 2, which sends that new id back, still hits the old recording.
    assert second_run[1] == first_run[1]
    assert fake.count() == 3


def test_responses_api_with_previous_response_id(fake: FakeProvider, client: openai.OpenAI) -> None:

    def run() -> Any:
        first = client.responses.create(model="gpt-test", input="weather?", tools=TOOLS_RESP)
        call = first.output[0]
        assert call.type == "function_call"
        second = client.responses.create(
            model="gpt-test", previous_response_id=first.id, tools=TOOLS_RESP,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}],
        )
        return [first.model_dump(), second.model_dump(), second.output_text]

    live, again = record_then_replay(fake, run)
    assert live == again
    assert "Tool said rain" in again[2]


def test_responses_stream(fake: FakeProvider, client: openai.OpenAI) -> None:

    def run() -> Any:
        events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
        assert events[-1].type == "response.completed"
        return [e.model_dump() for e in events]

    live, again = record_then_replay(fake, run)
    assert live == again


def test_embeddings(fake: FakeProvider, client: openai.OpenAI) -> None:

    def run() -> Any:
        r = client.embeddings.create(model="emb-test", input=["a", "b"])
        return [d.embedding for d in r.data]

    live, again = record_then_replay(fake, run)
    assert live == again
    assert len(again) == 2 and len(again[0]) == 4


def test_async_client_chat_stream_tools_and_embeddings(fake: FakeProvider) -> None:
    async def agent() -> Any:
        async with async_client(fake) as client:
            return await turns(client)

    async def turns(client: openai.AsyncOpenAI) -> Any:
        r = await client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
        stream = await client.chat.completions.create(
            model="gpt-test", messages=USER, stream=True  # type: ignore[arg-type]
        )
        assert isinstance(stream, openai.AsyncStream)
        chunks = [c.model_dump() async for c in stream]
        msgs: list[Any] = [{"role": "user", "content": "weather?"}]
        first = await client.chat.completions.create(model="gpt-test", messages=msgs,
                                                     tools=TOOLS_CHAT)
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        msgs += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "warm"}]
        second = await client.chat.completions.create(model="gpt-test", messages=msgs,
                                                      tools=TOOLS_CHAT)
        emb = await client.embeddings.create(model="emb-test", input="x")
        resp_events = [e.model_dump() async for e in await client.responses.create(
            model="gpt-test", input="hi", stream=True)]
        return [r.model_dump(), chunks, second.model_dump(), emb.data[0].embedding, resp_events]

    live, again = record_then_replay(fake, lambda: asyncio.run(agent()))
    assert live == again
    assert "Tool said warm" in again[2]["choices"][0]["message"]["content"]


def test_usage_is_reported_as_tokens_saved(fake: FakeProvider, client: openai.OpenAI) -> None:
    record_then_replay(
        fake, lambda: client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
    )
    st = dejacache.stats().by_name["openai.chat.completions"]
    assert st.hits == 1 and st.tokens_saved == 18


@pytest.mark.parametrize("mode", ["auto"])
def test_auto_mode_hits_without_going_live(
    fake: FakeProvider, client: openai.OpenAI, mode: str
) -> None:
    with dejacache.scope(mode=mode, store=dejacache.MemoryStore()):
        a = client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
        b = client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
    assert a.model_dump() == b.model_dump()
    assert fake.count() == 1


def test_responses_rerecord_keeps_previous_response_id_turn_matching(
    fake: FakeProvider, client: openai.OpenAI
) -> None:
    def run() -> Any:
        first = client.responses.create(model="gpt-test", input="weather?", tools=TOOLS_RESP)
        call = first.output[0]
        second = client.responses.create(
            model="gpt-test", previous_response_id=first.id, tools=TOOLS_RESP,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "fog"}],
        )
        return [first.model_dump(), second.model_dump()]

    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        one = run()
    (turn1,) = [k for k, r in store.iterate() if b"previous_response_id" not in r.request]
    store.delete(turn1)
    with dejacache.scope(mode="auto", store=store):
        two = run()
    assert two[0]["id"] != one[0]["id"]
    assert two[1] == one[1]
    assert fake.count() == 3


def test_sqlite_store_round_trip(fake: FakeProvider, client: openai.OpenAI,
                                 tmp_path: pathlib.Path) -> None:
    def run() -> Any:
        r = client.chat.completions.create(model="gpt-test", messages=USER)  # type: ignore[arg-type]
        s = client.chat.completions.create(model="gpt-test", messages=USER, stream=True)  # type: ignore[arg-type]
        return r.model_dump(), [c.model_dump() for c in s]

    with dejacache.scope(mode="record", store=dejacache.SQLiteStore(tmp_path / "c.db")) as blk:
        live = run()
    assert blk.store is not None
    blk.store.close()
    fake.stop()
    store = dejacache.SQLiteStore(tmp_path / "c.db")  # a fresh connection: what a new run sees
    with dejacache.scope(mode="replay", store=store):
        assert run() == live
    store.close()
