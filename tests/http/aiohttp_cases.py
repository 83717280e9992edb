"""What the aiohttp tests run, once recording and once replaying in a fresh process.

``python aiohttp_cases.py MODE CASSETTE TOOL_URL CHAT_URL REFUSED_URL`` runs every case with a
plain ``aiohttp.ClientSession`` inside ``dejacache.cassette(CASSETTE, mode=MODE)`` and prints
one JSON object of outcomes. The credentials sent (``SECRETS``) must appear in no file.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import orjson
from cases_support import rotated

import dejacache

SECRETS = rotated({
    "authorization": "Bearer sk-aio-SECRET-0001",
    "api-key": "apikey-aio-SECRET-0002",
    "query": "qkey-aio-SECRET-0003",
    "cookie": "cookie-aio-SECRET-0004",
})
_WIRE = {"content-encoding", "content-length", "transfer-encoding", "set-cookie",
         "connection", "keep-alive"}


def _headers(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() not in _WIRE}


async def cases(tool: str, chat: str, refused: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    auth = {"Authorization": SECRETS["authorization"], "api-key": SECRETS["api-key"]}
    async with aiohttp.ClientSession(cookies={"sid": SECRETS["cookie"]}) as s:
        async with s.get(tool + "/weather", params={"city": "Paris", "key": SECRETS["query"]},
                         headers=auth) as r:
            out["weather"] = [r.status, await r.json(), _headers(r.headers), r.reason]
        async with s.get(tool + "/redirect", params={"city": "Oslo"}) as r:
            out["redirect"] = [r.status, await r.json(), [h.status for h in r.history],
                               r.url.path]
        async with s.get(tool + "/events") as r:
            out["events"] = [c.decode() async for c in r.content.iter_any()]
        async with s.get(tool + "/download") as r:
            out["download_lines"] = [line.decode() async for line in r.content]
        async with s.get(tool + "/download") as r:
            out["download_7"] = [c.decode() async for c in r.content.iter_chunked(7)]
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with s.post(chat + "/chat/completions", json=body, headers=auth) as r:
            out["chat_stream"] = (await r.read()).decode()
        async with s.get(tool + "/gzip") as r:
            out["gzip"] = await r.json()
        async with s.post(tool + "/echo", json={"q": "forecast"}) as r:
            out["echo"] = await r.json()
        out["status"] = []
        for code in (404, 500):
            async with s.get(f"{tool}/status/{code}") as r:
                out["status"].append([r.status, await r.json()])
        try:
            async with s.get(tool + "/status/503", raise_for_status=True):
                pass
        except aiohttp.ClientResponseError as exc:
            out["raised_status"] = [type(exc).__name__, exc.status]
        try:
            await s.get(refused + "/x")
        except aiohttp.ClientError as exc:
            out["refused"] = [type(exc).__name__, str(exc)]
        try:
            await s.get(tool + "/slow", timeout=aiohttp.ClientTimeout(sock_read=0.4))
        except aiohttp.ClientError as exc:
            out["timeout"] = [type(exc).__name__, isinstance(exc, asyncio.TimeoutError)]
    return out


def main(argv: list[str]) -> None:
    mode, path, tool, chat, refused = argv
    with dejacache.cassette(path, mode=mode):  # type: ignore[arg-type]
        out = asyncio.run(cases(tool, chat, refused))
    sys.stdout.write(orjson.dumps(out).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
