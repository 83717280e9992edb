"""The Cohere provider module with the real cohere v2 client (httpx, sync and async) against
the chat-APIs fake: recorded here, replayed in a fresh process with the fake stopped
(0 connections), the same SDK objects, streams event by event (``message-start`` ...
``message-end``), 429 / 500 as cohere's ``TooManyRequestsError`` / ``InternalServerError``,
usage (billed units) and cost read, and the bearer key in no file written."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

cohere = pytest.importorskip("cohere")

from cohere.core.api_error import ApiError  # noqa: E402
from fake_chat_apis import FakeChatAPIs  # noqa: E402
from provider_replay import assert_no_secrets, record_then_replay_fresh  # noqa: E402

import dejacache  # noqa: E402
from dejacache.http.providers import detect  # noqa: E402
from dejacache.http.providers.cohere import PROVIDER  # noqa: E402

MODEL = "command-a-03-2025"
KEY = "co-secret-key-93e0d1"
USER: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
NO_RETRY: Any = {"max_retries": 0}  # cohere retries 429 and 5xx twice by default


@pytest.fixture
def chat_apis() -> Any:
    server = FakeChatAPIs(chunk_delay=0.001).start()
    yield server
    server.stop()


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json")


def _fail(status: int) -> list[Any]:
    return [{"role": "user", "content": f"fail {status}"}]


def _tool_turn(first: Any) -> list[Any]:
    (call,) = first.message.tool_calls
    return [*USER, {"role": "assistant", "tool_plan": first.message.tool_plan,
                    "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]


def scenario(base_url: str) -> dict[str, Any]:
    """A chat, a stream, a tool round trip (the call id sent back), a 429 and a 500."""
    out: dict[str, Any] = {}
    with cohere.ClientV2(api_key=KEY, base_url=base_url) as client:
        out["text"] = _dump(client.chat(model=MODEL, messages=USER))
        out["stream"] = [_dump(e) for e in client.chat_stream(model=MODEL, messages=USER)]
        first = client.chat(model=MODEL, messages=USER, tools=TOOLS)
        final = client.chat(model=MODEL, messages=_tool_turn(first), tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                client.chat(model=MODEL, messages=_fail(status), request_options=NO_RETRY)
            except ApiError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.body]
    return out


async def async_scenario(base_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with cohere.AsyncClientV2(api_key=KEY, base_url=base_url) as client:
        out["text"] = _dump(await client.chat(model=MODEL, messages=USER))
        out["stream"] = [_dump(e) async for e in client.chat_stream(model=MODEL,
                                                                    messages=USER)]
        first = await client.chat(model=MODEL, messages=USER, tools=TOOLS)
        final = await client.chat(model=MODEL, messages=_tool_turn(first), tools=TOOLS)
        out["tools"] = [_dump(first), _dump(final)]
        for status in (429, 500):
            try:
                await client.chat(model=MODEL, messages=_fail(status),
                                  request_options=NO_RETRY)
            except ApiError as exc:
                out[str(status)] = [type(exc).__name__, exc.status_code, exc.body]
    return out


@pytest.mark.parametrize("run", [scenario, async_scenario], ids=["sync", "async"])
def test_record_then_replay_in_a_fresh_process(chat_apis: FakeChatAPIs, tmp_path: pathlib.Path,
                                               run: Any) -> None:
    cas = tmp_path / "cohere.json"
    live, again = record_then_replay_fresh(chat_apis, cas, run, "cohere.chat")
    # Cohere's answers name no model: the replay prices them by the model the request asked.
    assert again["tokens_saved"] > 0 and again["dollars_saved"] > 0
    assert live["429"][:2] == ["TooManyRequestsError", 429]
    assert live["500"][:2] == ["InternalServerError", 500]
    kinds = [e["type"] for e in live["stream"]]
    assert kinds[0] == "message-start" and kinds[-1] == "message-end" and len(kinds) > 4
    assert "Tool said sunny" in live["tools"][1]["message"]["content"][0]["text"]
    assert_no_secrets(tmp_path, [KEY])
    view = dejacache.load_cassette(cas)
    ok = [s for s in view.steps if s.usage]
    assert len(ok) == 4
    for step in ok:
        # Cohere's answers do not name the model: it is read from the request.
        assert step.kind == "model" and step.model == MODEL and step.cost > 0
    billed = live["stream"][-1]["delta"]["usage"]["billed_units"]
    stream = next(s for s in view.steps if "events" in s.response)
    assert (stream.input_tokens, stream.output_tokens) == (
        billed["input_tokens"], billed["output_tokens"])


def test_matching_and_usage() -> None:
    assert detect("127.0.0.1", "/v2/chat", {"x-fern-sdk-name": "cohere"}) is PROVIDER
    assert detect("api.cohere.com", "/v2/chat", {}) is PROVIDER
    assert detect("127.0.0.1", "/v2/chat", {}).name == "http"
    assert PROVIDER.endpoint("api.cohere.com", "/v2/embed") == "cohere.embed"
    usage = {"billed_units": {"input_tokens": 5, "output_tokens": 7},
             "tokens": {"input_tokens": 65, "output_tokens": 7}, "cached_tokens": 0}
    assert PROVIDER.usage({"usage": usage}, []) == {
        "input_tokens": 5, "output_tokens": 7, "tokens.input_tokens": 65,
        "tokens.output_tokens": 7, "cached_tokens": 0}
    assert PROVIDER.stage("event: message-end\ndata: {}\n\n") == 2
