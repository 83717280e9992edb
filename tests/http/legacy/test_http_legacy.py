"""The httpx-era clients: openai 1.x, anthropic 0.x and litellm, over plain httpx.

They cannot share a virtualenv with openai 3.x / anthropic 2.x, so ``make test`` builds
``.venv-legacy`` and runs this directory there (``make test-legacy``). In the main venv every
test here skips.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
if int(openai.__version__.split(".")[0]) >= 2 or int(anthropic.__version__.split(".")[0]) >= 1:
    pytest.skip("httpx-era clients run in .venv-legacy (make test-legacy)",
                allow_module_level=True)

import httpx  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402
from http_support import SeqStore, record_then_replay  # noqa: E402
from litellm_cases import import_litellm, litellm_loop, stream_case  # noqa: E402
from sdk_miss_cases import CLIENTS, miss  # noqa: E402

import dejacache  # noqa: E402

USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]


def test_openai_1x_sync_chat_stream_tools(fake: FakeProvider) -> None:
    def run() -> Any:
        with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as c:
            assert isinstance(c._client, httpx.Client)
            r = c.chat.completions.create(model="m", messages=USER)
            chunks = [x.model_dump() for x in c.chat.completions.create(
                model="m", messages=USER, stream=True)]
            msgs: list[Any] = [{"role": "user", "content": "weather?"}]
            first = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0]
            msgs += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "hail"}]
            second = c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
            emb = c.embeddings.create(model="e", input="x")
            return [r.model_dump(), chunks, second.model_dump(), emb.data[0].embedding]

    live, again = record_then_replay(fake, run)
    assert live == again
    assert "Tool said hail" in again[2]["choices"][0]["message"]["content"]


def test_openai_1x_async(fake: FakeProvider) -> None:
    async def run() -> Any:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as c:
            r = await c.chat.completions.create(model="m", messages=USER)
            s = await c.chat.completions.create(model="m", messages=USER, stream=True)
            return [r.model_dump(), [x.model_dump() async for x in s]]

    live, again = record_then_replay(fake, lambda: asyncio.run(run()))
    assert live == again


def test_openai_1x_errors_and_retries(fake: FakeProvider, seq_store: SeqStore) -> None:
    fake.script.extend([{"status": 500}, {"status": 400}])
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=1) as c:
        with dejacache.scope(mode="record", store=seq_store), \
                pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="m", messages=USER)
        fake.stop()
        seq_store.rewind()
        with dejacache.scope(mode="replay", store=seq_store), \
                pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(model="m", messages=USER)
    assert err.value.status_code == 400


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", CLIENTS)
def test_a_replay_miss_through_every_client(
    fake: FakeProvider, tmp_path: Any, name: str, stream: bool,
) -> None:
    exc, sent = miss(name, fake, tmp_path / "c.json", stream)
    if "Anthropic" in name:  # anthropic 0.x lets its own root error through
        assert isinstance(exc, dejacache.ReplayMiss), repr(exc)
        assert sent == 1
        return
    # openai 1.x retries every exception its transport raises and wraps it (no exemption
    # for its own errors, unlike 2.x): the miss is its cause, sent 1 + max_retries times.
    assert isinstance(exc, openai.APIConnectionError)
    assert isinstance(exc.__cause__, dejacache.ReplayMiss)
    assert sent == 3


def test_anthropic_0x_messages_and_stream(fake: FakeProvider) -> None:
    def run() -> Any:
        with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0) as c:
            m = c.messages.create(model="m", max_tokens=9, messages=USER)
            with c.messages.stream(model="m", max_tokens=9, messages=USER) as s:
                texts = list(s.text_stream)
                final = s.get_final_message()
            return [m.model_dump(), texts, final.model_dump()]

    live, again = record_then_replay(fake, run)
    assert live == again


def test_anthropic_0x_async_stream(fake: FakeProvider) -> None:
    async def run() -> Any:
        async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="k",
                                            max_retries=0) as c, \
                c.messages.stream(model="m", max_tokens=9, messages=USER) as s:
            return [t async for t in s.text_stream]

    live, again = record_then_replay(fake, lambda: asyncio.run(run()))
    assert live == again


@pytest.fixture
def litellm() -> Any:
    return import_litellm()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("transport", ["sync", "aiohttp", "httpx"])
def test_litellm_streams(litellm: Any, fake: FakeProvider, provider: str, transport: str,
                         aiohttp_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm stops reading an Anthropic stream at message_delta and never closes it: these
    # were recorded only when message_stop shared a socket read with it.
    if transport == "httpx":
        monkeypatch.setenv("DISABLE_AIOHTTP_TRANSPORT", "True")
    else:
        monkeypatch.delenv("DISABLE_AIOHTTP_TRANSPORT", raising=False)
    stream_case(litellm, fake, provider, is_async=transport != "sync")
    assert len(aiohttp_calls) == (transport == "aiohttp")  # live only: the replay never sends


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_litellm_sync_and_async(litellm: Any, fake: FakeProvider) -> None:
    with litellm_loop(litellm) as loop:
        def run() -> Any:
            o = litellm.completion(model="openai/m", api_base=fake.openai_url, api_key="k",
                                   messages=USER)
            a = litellm.completion(model="anthropic/m", api_base=fake.url + "/v1/messages",
                                   api_key="k", messages=USER, max_tokens=9)

            async def arun() -> Any:
                ao = await litellm.acompletion(model="openai/m", api_base=fake.openai_url,
                                               api_key="k", messages=[{"role": "user",
                                                                       "content": "async"}])
                s = await litellm.acompletion(model="anthropic/m", api_key="k",
                                              messages=USER, max_tokens=9, stream=True,
                                              api_base=fake.url + "/v1/messages")
                return (ao.choices[0].message.content,
                        [c.choices[0].delta.content async for c in s])

            return [o.choices[0].message.content, a.choices[0].message.content,
                    loop.run_until_complete(arun())]

        live, again = record_then_replay(fake, run)
    assert live == again
    assert live[0].startswith("Hello from the fake model")
