"""Observers see each LLM exchange the transports handle, without taking part in it."""

from __future__ import annotations

import contextvars
import gzip
from collections.abc import Iterator

import openai
import orjson
import pytest
from fake_provider import FakeProvider
from http_support import count_decoded

import dejacache
from dejacache.errors import DejacacheWarning
from dejacache.http import observers, recording


@pytest.fixture
def seen() -> Iterator[list[observers.Exchange]]:
    got: list[observers.Exchange] = []
    token = observers.watch(got.append)
    yield got
    observers.unwatch(token, got.append)
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

    token = observers.watch(broken)
    try:
        with openai.OpenAI(base_url=fake.openai_url, api_key="sk-x", max_retries=0,
                           http_client=dejacache.http_client()) as client, \
                pytest.warns(DejacacheWarning, match="observer bug"):
            reply = client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
    finally:
        observers.unwatch(token, broken)
    assert not observers.watching()


def test_compressed_pass_through_bodies_are_followed() -> None:
    got: list[observers.Exchange] = []
    token = observers.watch(got.append)
    base = observers.Exchange("openai", "openai.chat.completions", b"{}", 200, None,
                              contextvars.copy_context())
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
        observers.unwatch(token, got.append)
    assert [g.usage for g in got] == [{"prompt_tokens": 7}, None]


@pytest.mark.parametrize("encoding", ["gzip", ""])
def test_a_whole_answer_past_the_bound_is_followed_without_usage_and_not_held(
        monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    # A decompression bomb (or a plain download) is not buffered whole to find its usage:
    # the parse holds the recording bound at most, then lets go and reports no usage.
    monkeypatch.setattr(recording, "MAX_RECORDED_STREAM", 4096)
    made = count_decoded(monkeypatch)
    got: list[observers.Exchange] = []
    token = observers.watch(got.append)
    base = observers.Exchange("openai", "openai.chat.completions", b"{}", 200, None,
                              contextvars.copy_context())
    plain = orjson.dumps({"usage": {"prompt_tokens": 7}, "pad": "0" * 1024 * 1024})
    data = gzip.compress(plain) if encoding else plain
    try:
        watch = observers._Watch(base, "application/json", encoding)
        for i in range(0, len(data), 1000):
            watch.feed(data[i:i + 1000])
        assert watch.buffer is None
        watch.finish()
    finally:
        observers.unwatch(token, got.append)
    assert [g.usage for g in got] == [None]
    assert sum(made) <= 4097


def test_an_observer_sees_its_own_context_only(fake: FakeProvider,
                                               seen: list[observers.Exchange]) -> None:
    """Watching is per context: a thread that does not carry this one (started by someone
    else) makes requests the observer never sees."""
    import threading

    def ask(content: str) -> None:
        with openai.OpenAI(base_url=fake.openai_url, api_key="sk-x", max_retries=0,
                           http_client=dejacache.http_client()) as client:
            client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": content}])

    t = threading.Thread(target=ask, args=("elsewhere",))
    t.start()
    t.join(10)
    ask("here")
    assert [orjson.loads(ex.request)["messages"][0]["content"] for ex in seen] == ["here"]


def test_answers_from_the_store_are_marked_local(fake: FakeProvider,
                                                 seen: list[observers.Exchange]) -> None:
    with dejacache.scope(store=dejacache.MemoryStore()), openai.OpenAI(
            base_url=fake.openai_url, api_key="sk-x", max_retries=0,
            http_client=dejacache.http_client()) as client:
        for stream in (False, False, True, True):
            kwargs: dict[str, object] = {"stream": True} if stream else {}
            reply = client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": "hi"}], **kwargs)  # type: ignore[call-overload]
            if stream:
                list(reply)
    assert [ex.local for ex in seen] == [False, True, False, True]
    assert fake.count() == 2
