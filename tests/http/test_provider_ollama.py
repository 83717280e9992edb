"""The Ollama provider module with the real ollama client (httpx, sync and async) against the
chat-APIs fake: recorded here, replayed in a fresh process with the fake stopped
(0 connections), the same SDK objects, NDJSON streams line by line, 429 / 500 as ollama's
``ResponseError``, and ``prompt_eval_count`` / ``eval_count`` and the model read."""

from __future__ import annotations

import pathlib
from typing import Any

import httpx
import orjson
import pytest

ollama = pytest.importorskip("ollama")

from fake_chat_apis import FakeChatAPIs  # noqa: E402
from provider_replay import record_then_replay_fresh  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.providers import detect  # noqa: E402
from dejacache.http.providers.ollama import PROVIDER  # noqa: E402

MODEL = "llama3.2"
USER: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.fixture
def chat_apis() -> Any:
    server = FakeChatAPIs(chunk_delay=0.001).start()
    yield server
    server.stop()


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
      city: the city
    """
    return f"sunny in {city}"


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json")


def _fail(status: int) -> list[Any]:
    return [{"role": "user", "content": f"fail {status}"}]


def _tool_turn(first: Any) -> list[Any]:
    (call,) = first.message.tool_calls
    return [*USER, first.message, {"role": "tool", "tool_name": call.function.name,
                                   "content": get_weather(**call.function.arguments)}]


def scenario(base_url: str) -> dict[str, Any]:
    """A chat, an NDJSON stream, a tool round trip, a 429 and a 500."""
    out: dict[str, Any] = {}
    with ollama.Client(host=base_url) as client:
        resp = client.chat(model=MODEL, messages=USER)
        assert isinstance(resp, ollama.ChatResponse)
        out["text"] = _dump(resp)
        out["stream"] = [_dump(p) for p in client.chat(model=MODEL, messages=USER, stream=True)]
        first = client.chat(model=MODEL, messages=USER, tools=[get_weather])
        final = client.chat(model=MODEL, messages=_tool_turn(first), tools=[get_weather])
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                client.chat(model=MODEL, messages=_fail(status))
            except ollama.ResponseError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.error]
    return out


async def async_scenario(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with ollama.AsyncClient(host=base_url) as client:
        out["text"] = _dump(await client.chat(model=MODEL, messages=USER))
        out["stream"] = [_dump(p) async for p in await client.chat(model=MODEL, messages=USER,
                                                                   stream=True)]
        first = await client.chat(model=MODEL, messages=USER, tools=[get_weather])
        final = await client.chat(model=MODEL, messages=_tool_turn(first), tools=[get_weather])
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                await client.chat(model=MODEL, messages=_fail(status))
            except ollama.ResponseError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.error]
    return out


@pytest.mark.parametrize("run", [scenario, async_scenario], ids=["sync", "async"])
def test_record_then_replay_in_a_fresh_process(chat_apis: FakeChatAPIs, tmp_path: pathlib.Path,
                                               run: Any) -> None:
    cas = tmp_path / "ollama.json"
    live, again = record_then_replay_fresh(chat_apis, cas, run, "ollama.chat")
    assert again["tokens_saved"] > 0
    assert live["429"][:2] == ["ResponseError", 429] and live["500"][:2] == ["ResponseError", 500]
    parts = live["stream"]
    assert len(parts) > 3 and parts[-1]["done"] and not parts[0]["done"]
    assert "Tool said sunny in Paris" in live["tools"][1]["message"]["content"]
    view = dejacache.load_cassette(cas)
    ok = [s for s in view.steps if s.usage]
    assert len(ok) == 4
    for step in ok:
        assert step.kind == "model" and step.model == MODEL and step.cost == 0  # runs locally
    stream = next(s for s in view.steps if "events" in s.response)
    # One stored event per NDJSON line, each parsed for the counters on the last.
    assert len(stream.response["events"]) == len(parts)
    assert (stream.input_tokens, stream.output_tokens) == (
        parts[-1]["prompt_eval_count"], parts[-1]["eval_count"])
    assert stream.response["model"] == MODEL


def test_an_ndjson_stream_replays_one_line_per_chunk(chat_apis: FakeChatAPIs,
                                                     tmp_path: pathlib.Path) -> None:
    cas = tmp_path / "lines.json"
    body = {"model": MODEL, "messages": USER, "stream": True}

    def lines() -> list[bytes]:
        with httpx.Client() as http, http.stream("POST", f"{chat_apis.url}/api/chat",
                                                 json=body) as r:
            return list(r.iter_raw())

    with dejacache.cassette(cas, mode="record"):
        live = lines()
    chat_apis.stop()
    with dejacache.cassette(cas, mode="replay"):
        again = lines()
    assert b"".join(again) == b"".join(live)
    assert len(again) > 3 and all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in again)
    assert all("done" in orjson.loads(c) for c in again)


def test_matching_never_takes_an_unrelated_local_service() -> None:
    ua = {"user-agent": "ollama-python/0.6.3 (x86_64 linux) Python/3.11.7"}
    assert detect("127.0.0.1", "/api/chat", ua) is PROVIDER
    assert detect("ollama.com", "/api/generate", {}) is PROVIDER
    # Another service's /api/chat on localhost is the generic provider's: nothing volatile,
    # nothing aliased, named by its host.
    assert detect("localhost", "/api/chat", {"user-agent": "python-httpx/0.28"}).name == "http"
    assert detect("127.0.0.1", "/v1/other", ua).name == "http"
    assert PROVIDER.volatile == frozenset() and PROVIDER.alias_keys == frozenset()
    assert PROVIDER.endpoint("h", "/api/generate") == "ollama.generate"
    last = {"model": MODEL, "done": True, "prompt_eval_count": 4, "eval_count": 9}
    assert PROVIDER.usage(None, [{"done": False}, last]) == {
        "prompt_tokens": 4, "completion_tokens": 9, "total_tokens": 13}
