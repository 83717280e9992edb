"""Automatic interception: patched only while a block is open, restored after, opt-outs."""

from __future__ import annotations

import importlib
import pathlib
import threading
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fake_provider import FakeProvider

import dejacache

# The package re-exports the ``intercept`` class under the module's name.
intercept_mod = importlib.import_module("dejacache.http.intercept")

ORIGINALS = {
    lib: (lib.HTTPTransport.handle_request, lib.AsyncHTTPTransport.handle_async_request)
    for lib in (httpx, httpx2)
}


def patched(lib: Any) -> bool:
    return (lib.HTTPTransport.handle_request,
            lib.AsyncHTTPTransport.handle_async_request) != ORIGINALS[lib]


def test_patches_live_only_while_a_block_is_open() -> None:
    assert not patched(httpx2) and not patched(httpx)
    with dejacache.scope(mode="replay"):
        assert patched(httpx2) and patched(httpx)
        with dejacache.scope(mode="auto"):
            assert intercept_mod.active() == 2
        assert patched(httpx2)
    assert not patched(httpx2) and not patched(httpx)
    assert intercept_mod.active() == 0


def test_refcount_across_threads() -> None:
    inside = threading.Event()
    done = threading.Event()

    def worker() -> None:
        with dejacache.scope(mode="auto"):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    with dejacache.scope(mode="auto"):
        pass
    assert patched(httpx2)  # the worker's block is still open
    done.set()
    t.join()
    assert not patched(httpx2)


def test_calls_outside_blocks_pass_through_while_another_thread_holds_one(
    fake: FakeProvider,
) -> None:
    store = dejacache.MemoryStore()
    inside = threading.Event()
    done = threading.Event()

    def worker() -> None:
        with dejacache.scope(mode="replay", store=store):
            inside.set()
            done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    try:
        assert patched(httpx2)
        with httpx2.Client() as c:  # main thread, no block: live and untouched
            assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200
    finally:
        done.set()
        t.join()
    assert fake.count() == 1 and len(store) == 0


def test_sdk_client_built_before_the_block_is_intercepted(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client:
        with dejacache.scope(mode="record", store=store):
            live = client.embeddings.create(model="e", input="x").model_dump()
        assert len(store) == 1
        live_again = client.embeddings.create(model="e", input="x").model_dump()
        assert live_again != live  # outside the block: a real call, fresh vectors
        fake.stop()
        with dejacache.scope(mode="replay", store=store):
            assert client.embeddings.create(model="e", input="x").model_dump() == live


def test_intercept_alone_uses_configured_settings(fake: FakeProvider) -> None:
    dejacache.configure(store=dejacache.MemoryStore(), mode="auto")
    with dejacache.intercept(), httpx2.Client() as c:
        a = c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()
        b = c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()
    assert a == b and fake.count() == 1
    assert not patched(httpx2)


def test_ignore_hosts_lets_calls_through(fake: FakeProvider) -> None:
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
            dejacache.intercept(ignore_hosts=["127.0.0.1"]), httpx2.Client() as c:
        assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200
    assert fake.count() == 1


def test_ignore_hosts_from_the_environment(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEJACACHE_IGNORE_HOSTS", "example.invalid, 127.0.0.1")
    with dejacache.scope(mode="replay", store=dejacache.MemoryStore()), httpx.Client() as c:
        assert c.post(fake.openai_url + "/embeddings", json={"input": "x"}).status_code == 200


def test_intercept_without_any_http_library_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(intercept_mod, "available", lambda: [])
    with pytest.raises(dejacache.ConfigurationError, match="neither httpx nor httpx2"), \
            dejacache.intercept():
        pass
    assert intercept_mod.active() == 0
    with dejacache.scope(mode="auto"):  # plain blocks stay silent: they may not need HTTP
        pass


def test_intercept_as_decorator(fake: FakeProvider) -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.intercept()
    def call() -> Any:
        with httpx2.Client() as c:
            return c.post(fake.openai_url + "/embeddings", json={"input": "x"}).json()

    assert call() == call()
    assert fake.count() == 1


def test_cassette_records_and_replays_sdk_calls(
    fake: FakeProvider, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "agent.json"
    fake.script.append({"status": 500})

    def agent(client: openai.OpenAI) -> Any:
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        s = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}],
                                           stream=True)
        again = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}])
        return [r.model_dump(), [c.model_dump() for c in s], again.model_dump()]

    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-SECRET", max_retries=1) as client:
        with dejacache.cassette(path, mode="record"):
            live = agent(client)
        fake.stop()
        with dejacache.cassette(path, mode="replay"):
            again = agent(client)
    assert live == again
    assert live[0] != live[2]  # the same request asked twice got two recorded answers
    text = path.read_text()
    assert "SECRET" not in text and "openai.chat.completions" in text


def test_cassette_with_async_streams_and_gather(
    fake: FakeProvider, tmp_path: pathlib.Path
) -> None:
    import asyncio

    import anthropic

    path = tmp_path / "async.json"
    prompts = ["one", "two", "three"]

    async def agent() -> Any:
        async with anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-SECRET",
                                            max_retries=0) as client:
            async def ask(p: str) -> Any:
                async with client.messages.stream(
                        model="m", max_tokens=9,
                        messages=[{"role": "user", "content": p}]) as s:
                    return (await s.get_final_message()).model_dump()

            return await asyncio.gather(*(ask(p) for p in prompts))

    with dejacache.cassette(path, mode="record"):
        live = asyncio.run(agent())
    fake.stop()
    with dejacache.cassette(path, mode="replay") as tape:
        again = asyncio.run(agent())
    assert live == again
    assert tape.counters.replayed == 3
    assert "SECRET" not in path.read_text()


def test_library_imported_inside_a_block_is_patched_on_import(fake: FakeProvider) -> None:
    import subprocess
    import sys

    code = f"""
import sys
import dejacache
assert "httpx" not in sys.modules and "httpx2" not in sys.modules, "imported too early"
with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
    import httpx2
    try:
        httpx2.post("{fake.openai_url}/embeddings", json={{"input": "x"}})
    except dejacache.ReplayMiss:
        print("refused")
import httpx2
print("patched after", hasattr(httpx2.HTTPTransport.handle_request, "__dejacache_patch__"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "refused" in proc.stdout
    assert "patched after False" in proc.stdout
    assert fake.count() == 0
