"""HTTP errors and transport failures replay as the SDK's own exceptions, retries in order."""

from __future__ import annotations

import pathlib
from typing import Any

import anthropic
import openai
import pytest
from fake_provider import FakeProvider
from http_support import KeyRefuser, SeqStore, leaked

import dejacache

USER: list[Any] = [{"role": "user", "content": "hi"}]


def oai(fake: FakeProvider, **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=fake.openai_url, api_key="sk-x", **kw)


def chat(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(model="gpt-test", messages=USER).model_dump()


def test_4xx_replays_as_the_sdk_error(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    fake.script.append({"status": 400})
    with oai(fake) as client:
        with dejacache.scope(mode="record", store=store), \
                pytest.raises(openai.BadRequestError) as live:
            chat(client)
        fake.stop()
        with dejacache.scope(mode="replay", store=store), \
                pytest.raises(openai.BadRequestError) as again:
            chat(client)
    assert again.value.status_code == 400
    assert again.value.body == live.value.body
    assert again.value.message == live.value.message


def test_retries_replay_in_order_from_a_sequenced_store(
    fake: FakeProvider, seq_store: SeqStore
) -> None:
    fake.script.extend([{"status": 500}, {"status": 429}])
    with oai(fake, max_retries=2) as client:
        with dejacache.scope(mode="record", store=seq_store):
            live = chat(client)
        assert fake.count() == 3
        assert seq_store.entries() == 3  # 500, 429, 200 under one key, in order
        fake.stop()
        seq_store.rewind()
        with dejacache.scope(mode="replay", store=seq_store):
            again = chat(client)
    assert again == live
    assert fake.count() == 3


def test_runtime_cache_does_not_keep_transient_failures(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    fake.script.append({"status": 503})
    with oai(fake, max_retries=1) as client, dejacache.scope(mode="auto", store=store):
        first = chat(client)
        assert len(store) == 1  # only the 200
        assert chat(client) == first
    assert fake.count() == 2


def test_dropped_connection_is_recorded_and_replayed(
    fake: FakeProvider, seq_store: SeqStore
) -> None:
    fake.script.append({"drop": True})
    with oai(fake) as client:
        with dejacache.scope(mode="record", store=seq_store), \
                pytest.raises(openai.APIConnectionError):
            chat(client)
        fake.stop()
        seq_store.rewind()
        with dejacache.scope(mode="replay", store=seq_store), \
                pytest.raises(openai.APIConnectionError) as again:
            chat(client)
    assert type(again.value.__cause__).__name__ == "RemoteProtocolError"


def test_timeout_is_recorded_and_replayed(fake: FakeProvider, seq_store: SeqStore) -> None:
    fake.script.append({"sleep": 0.6})
    with oai(fake, timeout=0.15) as client:
        with dejacache.scope(mode="record", store=seq_store), \
                pytest.raises(openai.APITimeoutError):
            chat(client)
        fake.stop()
        seq_store.rewind()
        with dejacache.scope(mode="replay", store=seq_store), \
                pytest.raises(openai.APITimeoutError) as again:
            chat(client)
    assert type(again.value.__cause__).__name__ == "ReadTimeout"


def test_anthropic_overloaded_then_ok(fake: FakeProvider, seq_store: SeqStore) -> None:
    fake.script.append({"status": 529})
    with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=1) as client:
        def run() -> Any:
            return client.messages.create(model="claude-test", max_tokens=9,
                                          messages=USER).model_dump()

        with dejacache.scope(mode="record", store=seq_store):
            live = run()
        fake.stop()
        seq_store.rewind()
        with dejacache.scope(mode="replay", store=seq_store):
            again = run()
        seq_store.rewind()
        seq_store.tape = {k: v[:1] for k, v in seq_store.tape.items()}  # only the failure
        with dejacache.scope(mode="replay", store=seq_store), \
                pytest.raises(dejacache.ReplayMiss) as miss:
            run()  # the SDK retries; the retry has no recording: refused, never live
        # The miss is also an AnthropicError, which the SDK lets through unwrapped.
        assert isinstance(miss.value, anthropic.AnthropicError)
        assert "all its recordings were already replayed" in str(miss.value)
        seq_store.rewind()
        with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0) as strict, \
                dejacache.scope(mode="replay", store=seq_store), \
                pytest.raises(anthropic.APIStatusError) as err:
            strict.messages.create(model="claude-test", max_tokens=9, messages=USER)
    assert live == again
    assert err.value.status_code == 529


def test_an_error_answer_quoting_the_requests_key_is_stored_without_it(
        tmp_path: pathlib.Path) -> None:
    # The caller still gets the answer as it came; a replay quotes the placeholder.
    cassette = tmp_path / "echo.json"
    with KeyRefuser() as server, dejacache.cassette(cassette, "record"), \
            dejacache.http_client() as client:
        live = client.post(server.url, json={"q": 1}, headers=KeyRefuser.HEADERS)
    assert live.status_code == 401 and all(k in live.text for k in KeyRefuser.KEYS)
    assert leaked(tmp_path) == []
    with dejacache.cassette(cassette, "replay"), dejacache.http_client() as client:
        again = client.post(server.url, json={"q": 1}, headers=KeyRefuser.HEADERS)
    assert again.status_code == 401
    assert again.json()["error"]["message"].count("<REDACTED>") == 3


@pytest.mark.parametrize("lib", ["httpx", "httpx2"])
@pytest.mark.parametrize(("stream", "tail"), [(False, "\n"), (True, "\n"), (False, "\x00")],
                         ids=["whole", "stream", "nul"])
def test_a_transport_error_quoting_the_requests_key_is_stored_without_it(
        tmp_path: pathlib.Path, lib: str, stream: bool, tail: str) -> None:
    # A key read from a file with its newline: h11 refuses it, quoting it ("Illegal header
    # value b'KEY\n'"), and the error a cassette keeps to replay held the key. With a NUL
    # the message writes it escaped (``\x00``): the key alone is looked for too.
    cassette = tmp_path / "refused.json"
    key = KeyRefuser.KEYS[0]

    def send(server: KeyRefuser) -> None:
        with dejacache.http_client(library=lib) as client:
            client.post(server.url, json={"q": 1, "stream": stream},
                        headers={"x-api-key": key + tail})

    module = pytest.importorskip(lib)
    with KeyRefuser() as server:
        with dejacache.cassette(cassette, "record"), \
                pytest.raises(module.LocalProtocolError, match=key):
            send(server)
        assert "Illegal header value" in cassette.read_text()
        assert key not in cassette.read_text()
        with dejacache.cassette(cassette, "replay"), \
                pytest.raises(module.LocalProtocolError, match="<REDACTED>"):
            send(server)
