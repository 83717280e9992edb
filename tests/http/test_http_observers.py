"""Observers see each LLM exchange the transports handle, without taking part in it."""

from __future__ import annotations

import contextvars
import gzip
from collections.abc import Iterator

import openai
import orjson
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.errors import DejacacheWarning
from dejacache.http import observers


@pytest.fixture
def seen() -> Iterator[list[observers.Exchange]]:
    got: list[observers.Exchange] = []
    observers.add(got.append)
    yield got
    observers.remove(got.append)
    assert not observers.watching()


def test_whole_and_streamed_answers_with_usage(fake: FakeProvider,
                                               seen: list[observers.Exchange]) -> None:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-x", max_retries=0,
                       http_client=dejacache.http_client()) as client:
        client.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "hi"}])
        chunks = client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "again"}], stream=True,
            stream_options={"include_usage": True})
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole, streamed = seen
    assert (whole.provider, whole.endpoint, whole.status) == ("openai",
                                                              "openai.chat.completions", 200)
    assert orjson.loads(whole.request)["messages"][0]["content"] == "hi"
    assert whole.usage is not None and whole.usage["prompt_tokens"] == 11
    assert streamed.usage is not None and streamed.usage["prompt_tokens"] == 11


def test_a_failing_observer_warns_and_the_call_succeeds(fake: FakeProvider) -> None:
    def broken(ex: observers.Exchange) -> None:
        raise RuntimeError("observer bug")

    observers.add(broken)
    try:
        with openai.OpenAI(base_url=fake.openai_url, api_key="sk-x", max_retries=0,
                           http_client=dejacache.http_client()) as client, \
                pytest.warns(DejacacheWarning, match="observer bug"):
            reply = client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
    finally:
        observers.remove(broken)
    observers.remove(broken)  # removing twice is a no-op


def test_compressed_pass_through_bodies_are_followed() -> None:
    got: list[observers.Exchange] = []
    base = observers.Exchange("openai", "openai.chat.completions", b"{}", 200, None,
                              contextvars.copy_context())
    observers.add(got.append)
    try:
        watch = observers._Watch(base, "application/json", "gzip")
        data = gzip.compress(orjson.dumps({"usage": {"prompt_tokens": 7}}))
        watch.feed(data[:5])
        watch.feed(data[5:])
        watch.finish()
        watch.finish()  # once only
        unknown = observers._Watch(base, "application/json", "br")
        unknown.feed(b"\x00\x01")
        unknown.finish()
    finally:
        observers.remove(got.append)
    assert [g.usage for g in got] == [{"prompt_tokens": 7}, None]
