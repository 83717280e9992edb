"""A request body quoting the request's own credentials: keyed and stored with a token naming
each (``<credential:x-api-key>``), never the credential, through every client; a replay
with another key still hits, a body that differs elsewhere misses."""

from __future__ import annotations

import asyncio
import base64
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import requests
from fake_tool_api import ToolAPI

import dejacache
from dejacache.errors import ReplayMiss

KEY = "k7Qz9WmXv2Lp4Rt8Yn3Bc6Hd"
OTHER = "ci9Zq2Wx7Lm4Pt8Rv3Yb6Nh"


@pytest.fixture
def tool() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


def _body(key: str, shape: str, extra: str = "") -> dict[str, Any]:
    """The request arguments (httpx's and requests' alike) of a body quoting ``key``."""
    blob = base64.b64encode(f"token={key}".encode()).decode()
    if shape == "json":  # (``api_key``: a credential's name, masked by it too)
        return {"json": {"note": f"use {key} here{extra}", "k": key, "blob": blob,
                         "deep": [{"as": {"sent": key}}], "api_key": key}}
    if shape == "text":
        return {"content": f"plain text {key} end{extra}".encode(),
                "headers": {"content-type": "text/plain"}}
    if shape == "form":
        return {"data": {"field": key, "password": key, "other": f"x{extra}"}}
    return {"data": {"field": key}, "files": {"upload": ("a.txt", f"file {key}{extra}".encode(),
                                                         "text/plain")}}


def _httpx(url: str, key: str, kw: dict[str, Any]) -> Any:
    kw = {**kw, "headers": {**kw.get("headers", {}), "x-api-key": key}}
    return httpx.post(url, **kw).json()


def _async(url: str, key: str, kw: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with httpx.AsyncClient() as client:
            kw2 = {**kw, "headers": {**kw.get("headers", {}), "x-api-key": key}}
            return (await client.post(url, **kw2)).json()

    return asyncio.run(go())


def _requests(url: str, key: str, kw: dict[str, Any]) -> Any:
    kw = {**kw, "headers": {**kw.get("headers", {}), "x-api-key": key}}
    if "content" in kw:
        kw["data"] = kw.pop("content")
    return requests.post(url, timeout=10, **kw).json()


def _aiohttp(url: str, key: str, kw: dict[str, Any]) -> Any:
    import aiohttp

    async def go() -> Any:
        headers = {**kw.get("headers", {}), "x-api-key": key}
        data: Any = kw.get("content", kw.get("data"))
        if "files" in kw:
            data = aiohttp.FormData(kw["data"])
            name, (filename, content, ctype) = next(iter(kw["files"].items()))
            data.add_field(name, content, filename=filename, content_type=ctype)
        async with aiohttp.ClientSession() as s, s.post(
                url, headers=headers, json=kw.get("json"), data=data) as r:
            return await r.json()

    return asyncio.run(go())


CLIENTS: dict[str, Callable[[str, str, dict[str, Any]], Any]] = {
    "httpx": _httpx, "httpx-async": _async, "requests": _requests, "aiohttp": _aiohttp}
SHAPES = ("json", "text", "form", "multipart")


def spellings_of(key: str) -> list[bytes]:
    """``key`` and the base64 runs any blob holding it holds, whatever its offset there (the
    base64 of its whole 3-byte groups from each of its first three bytes), both alphabets."""
    data = key.encode()
    runs = [base64.b64encode(data[s:s + (len(data) - s) // 3 * 3]) for s in range(3)]
    return [data, *runs, *(r.replace(b"+", b"-").replace(b"/", b"_") for r in runs)]


def leaks(path: pathlib.Path, key: str) -> list[bytes]:
    data = path.read_bytes()
    return [s for s in spellings_of(key) if s in data]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_body_quoting_its_own_key_is_stored_and_keyed_with_a_token(
        tool: ToolAPI, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, client: str,
        shape: str) -> None:
    path = tmp_path / "c.json"
    send = CLIENTS[client]
    url = tool.url + "/text"
    with dejacache.cassette(path, mode="record"):
        live = send(url, KEY, _body(KEY, shape))
    assert KEY in str(live)  # the server was sent the key itself
    assert leaks(path, KEY) == []
    assert b"<credential:x-api-key>" in path.read_bytes()
    tool.stop()
    # CI: its own key, quoted by its body as the recording's was, and its own masking key
    # (every digest differs): the same call.
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "another-machine")
    with dejacache.cassette(path, mode="replay"):
        # (the answer echoed the key: the recording holds it masked, its nonce as it was)
        assert send(url, OTHER, _body(OTHER, shape))["nonce"] == live["nonce"]
        with pytest.raises(ReplayMiss):
            send(url, OTHER, _body(OTHER, shape, extra=" and more"))


def test_the_token_names_the_credential_the_body_quotes(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    # Two requests alike but for which of their credentials the body hands on: two keys,
    # each answered with its own recording in the other order.
    path = tmp_path / "c.json"
    headers = {"x-api-key": KEY, "x-auth-token": OTHER}

    def ask(which: str) -> Any:
        return httpx.post(tool.url + "/echo", headers=headers, json={"hand_on": which}).json()

    with dejacache.cassette(path, mode="record"):
        live = {k: ask(k) for k in (KEY, OTHER)}
    entries = orjson.loads(path.read_bytes())["entries"]
    assert sorted(e["request"]["body"]["hand_on"] for e in entries) == [
        "<credential:x-api-key>", "<credential:x-auth-token>"]
    assert len({e["key"] for e in entries}) == 2
    assert leaks(path, KEY) == leaks(path, OTHER) == []
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        again = {k: ask(k) for k in (OTHER, KEY)}
    assert {k: a["nonce"] for k, a in again.items()} == {k: a["nonce"] for k, a in live.items()}


def test_a_query_credential_quoted_by_the_body_is_a_token_too(
        tool: ToolAPI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        live = httpx.post(tool.url + "/text", params={"access_token": KEY},
                          content=f"token {KEY}".encode()).json()
    assert leaks(path, KEY) == []
    assert b"<credential:query:access_token>" in path.read_bytes()
    tool.stop()
    with dejacache.cassette(path, mode="replay"):
        assert httpx.post(tool.url + "/text", params={"access_token": OTHER},
                          content=f"token {OTHER}".encode()).json()["nonce"] == live["nonce"]
