"""The OpenAI and Anthropic SDKs' aiohttp option, once recording and once replaying.

``python aiohttp_sdk_cases.py MODE CASSETTE PROVIDER_URL``: ``AsyncOpenAI`` and
``AsyncAnthropic`` with ``http_client=DefaultAioHttpClient()`` (an httpx transport over
aiohttp), a whole answer and a stream each, inside ``dejacache.cassette(CASSETTE, mode=MODE)``;
prints the SDK objects as JSON.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import anthropic
import openai
import orjson

import dejacache

USER: list[Any] = [{"role": "user", "content": "hi"}]
KEYS = {"openai": "sk-openai-aio-SECRET-0001", "anthropic": "sk-ant-aio-SECRET-0002"}


async def cases(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEYS["openai"], max_retries=0,
                                  http_client=openai.DefaultAioHttpClient()) as c:
        out["transport"] = type(c._client._transport).__module__
        r = await c.chat.completions.create(model="m", messages=USER)
        out["openai"] = r.model_dump()
        s = await c.chat.completions.create(model="m", messages=USER, stream=True)
        out["openai_stream"] = [x.model_dump() async for x in s]
    async with anthropic.AsyncAnthropic(base_url=url, api_key=KEYS["anthropic"], max_retries=0,
                                        http_client=anthropic.DefaultAioHttpClient()) as a:
        m = await a.messages.create(model="m", max_tokens=9, messages=USER)
        out["anthropic"] = m.model_dump()
        async with a.messages.stream(model="m", max_tokens=9, messages=USER) as st:
            out["anthropic_stream"] = [t async for t in st.text_stream]
    return out


def main(argv: list[str]) -> None:
    mode, path, url = argv
    with dejacache.cassette(path, mode=mode):  # type: ignore[arg-type]
        out = asyncio.run(cases(url))
    sys.stdout.write(orjson.dumps(out).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
