"""litellm against the loopback provider, shared by the legacy and gen2 environments.

litellm reads an Anthropic stream up to ``message_delta`` and never closes it; its async
calls go through aiohttp (``LiteLLMAiohttpTransport``) unless ``DISABLE_AIOHTTP_TRANSPORT`` is
set. Each case records a streamed call, stops the server and replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider import FakeProvider
from http_support import record_then_replay

__all__ = ["import_litellm", "litellm_loop", "stream_case"]

USER: list[Any] = [{"role": "user", "content": "one two three"}]


def import_litellm() -> Any:
    # Without this litellm fetches its price table from GitHub at import time.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        litellm = pytest.importorskip("litellm")
    litellm.telemetry = False
    return litellm


def _kwargs(fake: FakeProvider, provider: str) -> dict[str, Any]:
    if provider == "anthropic":
        return {"model": "anthropic/m", "api_base": fake.url + "/v1/messages", "api_key": "k",
                "messages": USER, "max_tokens": 9}
    return {"model": "openai/m", "api_base": fake.openai_url, "api_key": "k",
            "messages": USER}


def _chunks(chunks: list[Any]) -> list[Any]:
    return [(c.choices[0].delta.content, c.choices[0].finish_reason) for c in chunks]


@contextlib.contextmanager
def litellm_loop(litellm: Any) -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop for litellm's async calls, and everything litellm bound to it closed after.

    litellm makes its module-level async client (Anthropic calls go through it) once per
    process, with the transport ``DISABLE_AIOHTTP_TRANSPORT`` picks at that moment, and caches
    the others: each loop gets a fresh one, and the cache is emptied afterwards.
    """
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    loop = asyncio.new_event_loop()
    aclient = AsyncHTTPHandler(timeout=60.0, client_alias="module level aclient")
    litellm.module_level_aclient = aclient
    try:
        yield loop
    finally:
        loop.run_until_complete(_close_clients(litellm, aclient))
        loop.close()


async def _close_clients(litellm: Any, aclient: Any) -> None:
    # litellm's own close_litellm_async_clients misses the SDK clients it caches (openai's
    # AsyncOpenAI has close(), not aclose()), and their sockets then fail the run at exit.
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    cached = list(getattr(cache, "cache_dict", {}).values())
    for obj in [aclient, *cached]:
        close = getattr(obj, "aclose", None) or getattr(obj, "close", None)
        if close is None:
            continue
        with contextlib.suppress(Exception):
            done = close()
            if inspect.isawaitable(done):
                await done
    if cache is not None:
        cache.flush_cache()


def stream_case(litellm: Any, fake: FakeProvider, provider: str, is_async: bool) -> Any:
    """Stream one completion live under record, then replay it with the server stopped."""
    kwargs = _kwargs(fake, provider)

    def run() -> Any:
        if not is_async:
            return _chunks(list(litellm.completion(stream=True, **kwargs)))

        async def arun() -> Any:
            s = await litellm.acompletion(stream=True, **kwargs)
            return _chunks([c async for c in s])

        with litellm_loop(litellm) as loop:
            return loop.run_until_complete(arun())

    live, again = record_then_replay(fake, run)
    assert live == again
    text = "".join(c or "" for c, _ in live)
    assert ("Claude-ish reply" if provider == "anthropic" else "Hello from the fake") in text
    assert any(f for _, f in live)  # the finish reason came through
    return live
