"""Calls from gather, executors and bare threads inside a replay block: served or refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import openai
import pytest
from fake_provider import FakeProvider

import dejacache

PROMPTS = [f"question {i}" for i in range(5)]


def ask(client: openai.OpenAI, prompt: str) -> Any:
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}]
    ).model_dump()


def record(fake: FakeProvider, store: dejacache.MemoryStore) -> dict[str, Any]:
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client, \
            dejacache.scope(mode="record", store=store):
        return {p: ask(client, p) for p in PROMPTS}


def test_gather_is_served_in_replay(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    live = record(fake, store)
    fake.stop()

    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as client:
            async def one(p: str) -> Any:
                r = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": p}])
                return r.model_dump()

            return await asyncio.gather(*(one(p) for p in reversed(PROMPTS + PROMPTS[:2])))

    with dejacache.scope(mode="replay", store=store):
        got = asyncio.run(run())
    assert got == [live[p] for p in reversed(PROMPTS + PROMPTS[:2])]
    assert fake.count() == len(PROMPTS)


def test_identical_concurrent_misses_go_live_once(fake: FakeProvider) -> None:
    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="k",
                                      max_retries=0) as client:
            rs = await asyncio.gather(*(client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "same"}]) for _ in range(4)))
            return [r.model_dump() for r in rs]

    fake.latency = 0.05
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
        got = asyncio.run(run())
    assert all(g == got[0] for g in got)
    assert fake.count() == 1


def test_user_threads_are_served_from_the_block(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    live = record(fake, store)
    fake.stop()
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client, \
            dejacache.scope(mode="replay", store=store):
        # A plain executor: its threads carry no context, and are routed to this block.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            pooled = list(pool.map(lambda p: ask(client, p), PROMPTS))
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(ask(client, PROMPTS[0])))
        t.start()
        t.join()
    assert pooled == [live[p] for p in PROMPTS]
    assert box == [live[PROMPTS[0]]]
    assert fake.count() == len(PROMPTS)


def test_bare_thread_with_two_blocks_open_fails_closed(fake: FakeProvider) -> None:
    store = dejacache.MemoryStore()
    record(fake, store)
    seen = fake.count()
    opened = threading.Event()
    release = threading.Event()

    def other_block() -> None:
        with dejacache.scope(mode="replay", store=dejacache.MemoryStore()):
            opened.set()
            release.wait(10)

    holder = threading.Thread(target=other_block)
    holder.start()
    opened.wait(10)
    errors: list[BaseException] = []
    try:
        with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=0) as client, \
                dejacache.scope(mode="auto", store=store):
            def bare() -> None:
                try:
                    ask(client, "never recorded")
                except BaseException as exc:
                    errors.append(exc)

            t = threading.Thread(target=bare)
            t.start()
            t.join()
    finally:
        release.set()
        holder.join()
    assert len(errors) == 1 and isinstance(errors[0], dejacache.ReplayMiss)
    assert "cannot be attributed" in str(errors[0])
    assert fake.count() == seen  # the server (still running) never saw it


def test_replay_miss_never_opens_a_socket(fake: FakeProvider) -> None:
    with openai.OpenAI(base_url=fake.openai_url, api_key="k", max_retries=2) as client, \
            dejacache.scope(mode="replay", store=dejacache.MemoryStore()), \
            pytest.raises(dejacache.ReplayMiss) as miss:
        ask(client, "anything")
    assert fake.count() == 0
    assert "openai.chat.completions" in str(miss.value)
