"""SSE streams: stored only when complete, replayed in order, optionally at recorded pace."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.http.sse import SSESplitter, event_data

USER: list[Any] = [{"role": "user", "content": "one two three four five six"}]


def test_splitter_cuts_events_across_arbitrary_chunks() -> None:
    raw = b"event: a\ndata: {\"x\": 1}\n\ndata: [DONE]\r\n\r\n: comment\n\ndata: tail"
    for size in (1, 3, 7, len(raw)):
        sp = SSESplitter()
        out: list[str] = []
        for i in range(0, len(raw), size):
            out += sp.feed(raw[i:i + size])
        out += sp.flush()
        assert out == ["event: a\ndata: {\"x\": 1}\n\n", "data: [DONE]\r\n\r\n",
                       ": comment\n\n", "data: tail"]
    assert event_data(out[0]) == {"x": 1}
    assert event_data(out[1]) is None


def test_abandoned_stream_is_not_stored(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client, \
            dejacache.scope(mode="auto", store=store):
        stream = client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        with pytest.warns(dejacache.DejacacheWarning,
                          match=r"openai.chat.completions \(model 'm'\) stream was closed"):
            stream.close()
        assert len(store) == 0
        # Read to the end, the same call is stored and then served.
        live = [c.model_dump() for c in client.chat.completions.create(
            model="m", messages=USER, stream=True)]  # type: ignore[arg-type]
        assert len(store) == 1
        again = [c.model_dump() for c in client.chat.completions.create(
            model="m", messages=USER, stream=True)]  # type: ignore[arg-type]
    assert live == again
    assert fake.count() == 2


def test_stream_cut_by_the_server_is_not_stored(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    fake.script.append({"cut": 3})
    # anthropic 2.17 wraps the transport's error in its own APIConnectionError (older
    # releases let httpx's through): either way the read failed, and nothing is stored.
    with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0) as client, \
            dejacache.scope(mode="record", store=store), \
            pytest.raises((httpx2.TransportError, anthropic.APIConnectionError)) as err, \
            client.messages.stream(model="m", max_tokens=9, messages=USER) as s:
        s.get_final_message()
    cause = err.value if isinstance(err.value, httpx2.TransportError) else err.value.__cause__
    assert isinstance(cause, httpx2.TransportError)
    assert len(store) == 0


def test_async_abandoned_stream_is_not_stored(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()

    async def run() -> None:
        async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="k",
                                            max_retries=0) as client, \
                client.messages.stream(model="m", max_tokens=9, messages=USER) as s:
            async for _ in s.text_stream:
                break

    with dejacache.scope(mode="auto", store=store), \
            pytest.warns(dejacache.DejacacheWarning, match="anthropic.messages .*closed"):
        asyncio.run(run())
    assert len(store) == 0


@pytest.mark.parametrize("is_async", [False, True])
def test_realtime_replays_the_recorded_pace(is_async: bool) -> None:
    fake = FakeProvider(chunk_delay=0.04).start()
    store = dejacache.MemoryStore()

    def read(realtime: bool) -> tuple[list[Any], float]:
        with dejacache.http_client(realtime=realtime) as http:
            client = openai.OpenAI(base_url=fake.openai_url, api_key="k", http_client=http)
            t0 = time.perf_counter()
            chunks = [c.model_dump() for c in client.chat.completions.create(
                model="m", messages=USER, stream=True)]  # type: ignore[arg-type]
            return chunks, time.perf_counter() - t0

    async def aread(realtime: bool) -> tuple[list[Any], float]:
        async with dejacache.async_http_client(realtime=realtime) as http:
            client = openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k", http_client=http)
            t0 = time.perf_counter()
            stream = await client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
            chunks = [c.model_dump() async for c in stream]
            return chunks, time.perf_counter() - t0

    def go(realtime: bool) -> tuple[list[Any], float]:
        return asyncio.run(aread(realtime)) if is_async else read(realtime)

    try:
        with dejacache.scope(mode="record", store=store):
            live, live_s = go(False)
    finally:
        fake.stop()
    with dejacache.scope(mode="replay", store=store):
        fast, fast_s = go(False)
        paced, paced_s = go(True)
    assert live == fast == paced
    assert live_s > 0.3  # 9 events, 40 ms apart
    assert fast_s < live_s / 3
    assert paced_s > live_s * 0.8


def test_recorded_events_are_readable_text(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    with httpx2.Client() as http, dejacache.scope(mode="record", store=store), \
            http.stream("POST", fake.url + "/v1/messages", headers={"anthropic-version": "1"},
                        json={"model": "m", "stream": True, "messages": USER}) as r:
        body = b"".join(r.iter_bytes())
    ((_, rec),) = list(store.iterate())
    value = dejacache.JsonCodec().decode(rec.value, key=_, namespace="default")
    assert "".join(text for _, text in value["events"]).encode() == body
    assert value["events"][0][1].startswith("event: message_start")
    assert value["usage"] == {"input_tokens": 12, "output_tokens": 6}
    assert rec.name == "anthropic.messages"


@pytest.mark.parametrize("is_async", [False, True])
def test_a_stream_closed_early_releases_its_connection_when_warnings_are_errors(
        fake: FakeProvider, is_async: bool) -> None:
    """Closing a stream before its end warns that it was not recorded; under -W error (this
    suite's setting, an in-process proxy under pytest) the warning raised before the live
    answer was closed, and its connection was never given back: with a pool of one, the
    next call waited for it until the pool timed out."""
    limits = httpx2.Limits(max_connections=1)
    timeout = httpx2.Timeout(10, pool=2)
    store = dejacache.MemoryStore()

    def run() -> list[Any]:
        with httpx2.Client(limits=limits, timeout=timeout) as http:
            client = openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0,
                                   http_client=http)
            stream = client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
            next(iter(stream))
            with pytest.raises(dejacache.DejacacheWarning, match="stream was closed"):
                stream.close()
            return [c.model_dump() for c in client.chat.completions.create(
                model="m", messages=USER, stream=True)]  # type: ignore[arg-type]

    async def arun() -> list[Any]:
        async with httpx2.AsyncClient(limits=limits, timeout=timeout) as http:
            client = openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k", max_retries=0,
                                        http_client=http)
            stream = await client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[arg-type]
            await stream.__anext__()
            with pytest.raises(dejacache.DejacacheWarning, match="stream was closed"):
                await stream.close()
            return [c.model_dump() async for c in await client.chat.completions.create(
                model="m", messages=USER, stream=True)]  # type: ignore[arg-type]

    with dejacache.scope(mode="auto", store=store):
        chunks = asyncio.run(arun()) if is_async else run()
    assert chunks and len(store) == 1  # the second call was served live, read whole, kept
