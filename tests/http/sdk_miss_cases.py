"""A replay miss through every client class of the Stainless SDKs, in every SDK generation.

Shared by the main suite (openai 3.x / anthropic 2.x on httpx2), ``gen2`` (openai 2.x) and
``legacy`` (openai 1.x / anthropic 0.x): each asks every client class for a call its cassette
does not hold and reports what was raised and how many requests the client sent, counted by
the SDK's own ``http_client`` (its retries included).
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import anthropic
import openai
from fake_provider import FakeProvider

import dejacache

__all__ = ["CLIENTS", "miss"]

CLIENTS = ("OpenAI", "AsyncOpenAI", "AzureOpenAI", "AsyncAzureOpenAI", "Anthropic",
           "AsyncAnthropic")
USER: list[Any] = [{"role": "user", "content": "never recorded"}]


def _client(name: str, fake: FakeProvider, http: Any) -> Any:
    module: Any = anthropic if "Anthropic" in name else openai
    kw: dict[str, Any] = {"api_key": "k", "max_retries": 2, "http_client": http}
    if "Azure" in name:
        kw.update(azure_endpoint=fake.url, api_version="2024-06-01")
    else:
        kw["base_url"] = fake.url if module is anthropic else fake.openai_url
    return getattr(module, name)(**kw)


def _create(client: Any, stream: bool) -> Any:
    if isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
        return client.messages.create(model="m", max_tokens=9, messages=USER, stream=stream)
    return client.chat.completions.create(model="m", messages=USER, stream=stream)


def miss(name: str, fake: FakeProvider, path: pathlib.Path,
         stream: bool) -> tuple[BaseException, int]:
    """What ``name``'s client raises for a call ``path`` (a replay cassette) lacks, and how
    many requests it sent for it."""
    sent: list[Any] = []
    module: Any = anthropic if "Anthropic" in name else openai

    async def run_async() -> None:
        async def hook(request: Any) -> None:
            sent.append(request)

        http = module.DefaultAsyncHttpxClient(event_hooks={"request": [hook]})
        async with _client(name, fake, http) as client:
            await _create(client, stream)

    def run_sync() -> None:
        http = module.DefaultHttpxClient(event_hooks={"request": [sent.append]})
        with _client(name, fake, http) as client:
            _create(client, stream)

    with dejacache.cassette(path, mode="replay"):
        try:
            asyncio.run(run_async()) if name.startswith("Async") else run_sync()
        except Exception as exc:
            return exc, len(sent)
    raise AssertionError(f"{name}: a call the cassette does not hold was answered")
