"""The openai 2.x generation: openai 2.x, current litellm (aiohttp for async), anthropic 0.x.

This is what litellm and langwatch-scenario users install today; it cannot share a venv with
openai 3.x / anthropic 2.x, so ``make test`` builds ``.venv-gen2`` and runs this directory
there (``make test-gen2``). In the main venv every test here skips.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

openai = pytest.importorskip("openai")
if int(openai.__version__.split(".")[0]) != 2:
    pytest.skip("the openai 2.x generation runs in .venv-gen2 (make test-gen2)",
                allow_module_level=True)

import httpx  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402
from http_support import record_then_replay  # noqa: E402
from litellm_cases import import_litellm, stream_case  # noqa: E402
from sdk_miss_cases import CLIENTS, miss  # noqa: E402

import dejacache  # noqa: E402

USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]

# litellm's own noise; DejacacheWarning (a UserWarning) must still fail a test.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
              pytest.mark.filterwarnings("ignore:.*ReadOnly. qualifier:UserWarning")]


# ---------------------------------------------------------------- the openai 2.x SDK


def test_openai_2x_sync_chat_stream_tools(fake: FakeProvider) -> None:
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
            return [r.model_dump(), chunks, second.model_dump()]

    live, again = record_then_replay(fake, run)
    assert live == again
    assert "Tool said hail" in again[2]["choices"][0]["message"]["content"]


def test_openai_2x_async_streams(fake: FakeProvider) -> None:
    async def run() -> Any:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as c:
            s = await c.chat.completions.create(model="m", messages=USER, stream=True)
            chat = [x.model_dump() async for x in s]
            r = await c.responses.create(model="m", input="hi", stream=True)
            events = [e.type async for e in r]
            return [chat, events]

    live, again = record_then_replay(fake, lambda: asyncio.run(run()))
    assert live == again
    assert live[1][-1] == "response.completed"


def test_openai_2x_stream_left_at_finish_reason(fake: FakeProvider) -> None:
    # A caller that stops at the chunk carrying finish_reason and never reads [DONE].
    store = dejacache.MemoryStore()
    fake.script.append({"end_delay": 0.05})
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as c, \
            dejacache.scope(mode="auto", store=store):
        s = c.chat.completions.create(model="m", messages=USER, stream=True)
        seen = []
        for chunk in s:
            seen.append(chunk.model_dump())
            if chunk.choices and chunk.choices[0].finish_reason:
                break
        assert len(store) == 1
        again = [x.model_dump() for x in c.chat.completions.create(
            model="m", messages=USER, stream=True)]
        s.close()
    assert again == seen
    assert fake.count() == 1


def test_openai_2x_over_aiohttp(fake: FakeProvider) -> None:
    # openai[aiohttp]: DefaultAioHttpClient sends through httpx-aiohttp's transport.
    async def run() -> Any:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k", max_retries=0,
                                      http_client=openai.DefaultAioHttpClient()) as c:
            s = await c.chat.completions.create(model="m", messages=USER, stream=True)
            chunks = []
            async for x in s:
                chunks.append(x.model_dump())
                if x.choices and x.choices[0].finish_reason:
                    break  # and [DONE] is never read
            r = await c.chat.completions.create(model="m", messages=USER)
            return [chunks, r.model_dump()]

    live, again = record_then_replay(fake, lambda: asyncio.run(run()))
    assert live == again


def test_anthropic_0x_stream(fake: FakeProvider) -> None:
    anthropic = pytest.importorskip("anthropic")

    def run() -> Any:
        with anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0) as c, \
                c.messages.stream(model="m", max_tokens=9, messages=USER) as s:
            return list(s.text_stream)

    live, again = record_then_replay(fake, run)
    assert live == again


# ---------------------------------------------------------------- litellm


@pytest.fixture
def litellm() -> Any:
    return import_litellm()


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_litellm_sync_stream(litellm: Any, fake: FakeProvider, provider: str) -> None:
    stream_case(litellm, fake, provider, is_async=False)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_litellm_async_stream_over_aiohttp(
    litellm: Any, fake: FakeProvider, provider: str, aiohttp_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DISABLE_AIOHTTP_TRANSPORT", raising=False)
    stream_case(litellm, fake, provider, is_async=True)
    assert len(aiohttp_calls) == 1  # the live call went through aiohttp; the replay did not


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_litellm_async_stream_over_httpx(
    litellm: Any, fake: FakeProvider, provider: str, aiohttp_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISABLE_AIOHTTP_TRANSPORT", "True")
    stream_case(litellm, fake, provider, is_async=True)
    assert aiohttp_calls == []


def test_a_replay_miss_is_not_retried_by_the_sdk(
    fake: FakeProvider, caplog: pytest.LogCaptureFixture, tmp_path: Any
) -> None:
    # openai 2.x retries any transport exception and wraps it in APIConnectionError, but lets
    # its own OpenAIError through: the miss is raised as both, so it is neither retried (three
    # misses and seconds of back-off) nor reduced to "Connection error.".
    import logging

    caplog.set_level(logging.DEBUG, logger="openai")
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=3) as c, \
            dejacache.cassette(tmp_path / "c.json", "replay") as tape:
        for stream in (False, True):
            with pytest.raises(dejacache.ReplayMiss) as err:
                c.chat.completions.create(model="m", messages=USER, stream=stream)
            assert isinstance(err.value, openai.OpenAIError)
            assert "no recording of openai.chat.completions" in str(err.value)
        assert tape.counters.missed == 2
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]
    assert fake.count() == 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", CLIENTS)
def test_a_replay_miss_through_every_client_is_neither_retried_nor_wrapped(
    fake: FakeProvider, tmp_path: Any, name: str, stream: bool,
) -> None:
    # Recognised by the User-Agent, the async and Azure clients were not: each miss was
    # sent three times with back-off and surfaced as APIConnectionError.
    exc, sent = miss(name, fake, tmp_path / "c.json", stream)
    assert isinstance(exc, dejacache.ReplayMiss), repr(exc)
    assert sent == 1


# ---------------------------------------------------------------- transports imported late

# A fresh interpreter in which litellm, and with it its aiohttp transport module, is imported
# only inside the block (as dspy does): that transport used to go unpatched, so recording
# stored nothing and the replay made live calls.
_LAZY_LITELLM = """
import asyncio, json, os, sys, warnings
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
warnings.simplefilter("ignore")
import dejacache
MOD = "litellm.llms.custom_httpx.aiohttp_transport"
path, mode, url = sys.argv[1:4]
assert "litellm" not in sys.modules and MOD not in sys.modules, "imported too early"

async def main():
    with dejacache.cassette(path, mode) as tape:
        import litellm
        litellm.telemetry = False
        kw = {"model": "openai/m", "api_base": url, "api_key": "k",
              "messages": [{"role": "user", "content": "one two"}]}
        whole = await litellm.acompletion(**kw)
        s = await litellm.acompletion(stream=True, **kw)
        chunks = [c.choices[0].delta.content async for c in s]
        patched = hasattr(sys.modules[MOD].LiteLLMAiohttpTransport.handle_async_request,
                          "__dejacache_patch__")
        counts = (tape.counters.recorded, tape.counters.replayed)
    return {"answer": [whole.choices[0].message.content, chunks], "patched": patched,
            "counts": counts}

print(json.dumps(asyncio.run(main())))
"""


def test_litellm_imported_inside_the_block_is_recorded_and_replayed(
    fake: FakeProvider, tmp_path: Any
) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / "lazy.json"

    def run(mode: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-c", _LAZY_LITELLM, str(path), mode, fake.openai_url],
            capture_output=True, text=True, timeout=180,
            env={**os.environ, "DISABLE_AIOHTTP_TRANSPORT": "False"},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    live = run("record")
    assert live["patched"] and live["counts"] == [2, 0]
    assert fake.count() == 2
    fake.stop()
    again = run("replay")
    assert again["counts"] == [0, 2]
    assert again["answer"] == live["answer"]
    assert "Hello from the fake" in again["answer"][0]
    assert fake.count() == 2  # the stopped provider saw nothing more
