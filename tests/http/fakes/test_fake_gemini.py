"""The Gemini fake, driven by the real google-genai client (sync on httpx2, async on aiohttp
when aiohttp is installed, as in this venv), with no dejacache involved: answers, streams,
function calling, usage and ids parse into google-genai's types; errors are its own
``ClientError`` / ``ServerError``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

genai = pytest.importorskip("google.genai")

import httpx2  # noqa: E402
from fake_gemini import FakeGemini  # noqa: E402
from fakes_support import raw_chunks, sent_headers  # noqa: E402
from google.genai import errors, types  # noqa: E402

MODEL = "gemini-2.0-flash"
KEY = "AIzaFakeGeminiKey"

# google-genai subclasses aiohttp's ClientSession for its async client, which aiohttp warns
# about; -W error would turn that into a failure of every async call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning")


@pytest.fixture
def client(gemini: FakeGemini) -> Iterator[Any]:
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=gemini.url))
    yield c
    c.close()


@pytest.fixture
async def aclient(gemini: FakeGemini) -> AsyncIterator[Any]:
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=gemini.url))
    yield c.aio
    await c.aio.aclose()
    c.close()


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_generate_content_varies_per_call(client: Any, gemini: FakeGemini) -> None:
    first = client.models.generate_content(model=MODEL, contents="hi")
    second = client.models.generate_content(model=MODEL, contents="hi")
    assert isinstance(client._api_client._httpx_client, httpx2.Client)
    assert isinstance(first, types.GenerateContentResponse)
    assert first.text != second.text and first.response_id != second.response_id
    assert first.model_version == MODEL
    usage = first.usage_metadata
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert first.candidates[0].finish_reason == types.FinishReason.STOP
    req = gemini.requests[0]
    # The key travels as a header, never in the URL.
    assert sent_headers(req)["x-goog-api-key"] == KEY
    assert req["path"].endswith(f"/models/{MODEL}:generateContent") and "key=" not in req["path"]


def test_generate_content_stream(client: Any, gemini: FakeGemini) -> None:
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    assert len(chunks) > 3
    assert "".join(c.text for c in chunks).startswith("Hello from the fake model")
    assert len({c.response_id for c in chunks}) == 1
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[0].usage_metadata.candidates_token_count is None
    assert chunks[-1].usage_metadata.candidates_token_count > 0
    assert gemini.requests[0]["path"].endswith(":streamGenerateContent?alt=sse")


def test_stream_is_one_event_per_chunk(gemini: FakeGemini) -> None:
    chunks = raw_chunks(f"{gemini.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
                        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                        {"x-goog-api-key": KEY})
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\r\n\r\n")
        assert orjson.loads(chunk[6:])["responseId"]


def test_automatic_function_calling(client: Any, gemini: FakeGemini) -> None:
    config = types.GenerateContentConfig(tools=[get_weather])
    resp = client.models.generate_content(model=MODEL, contents="weather?", config=config)
    assert "sunny in Paris" in resp.text
    sent = gemini.requests[1]["body"]["contents"][-1]["parts"][0]
    assert sent["functionResponse"]["name"] == "get_weather"


def test_function_call_without_automatic_calling(client: Any) -> None:
    config = types.GenerateContentConfig(
        tools=[get_weather],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    resp = client.models.generate_content(model=MODEL, contents="weather?", config=config)
    (call,) = resp.function_calls
    assert call.name == "get_weather" and call.args == {"city": "Paris"}


async def test_async_generate_content_and_stream(aclient: Any) -> None:
    first = await aclient.models.generate_content(model=MODEL, contents="hi")
    assert aclient._api_client._use_aiohttp()
    assert first.text.startswith("Hello from the fake model")
    chunks = [c async for c in await aclient.models.generate_content_stream(
        model=MODEL, contents="hi")]
    assert "".join(c.text for c in chunks) != first.text
    assert chunks[-1].usage_metadata.total_token_count > 0


@pytest.mark.parametrize(("status", "kind", "name"), [
    (429, errors.ClientError, "RESOURCE_EXHAUSTED"), (500, errors.ServerError, "INTERNAL")])
def test_errors_are_google_genais_own(client: Any, gemini: FakeGemini, status: int,
                                      kind: type[Exception], name: str) -> None:
    gemini.script.append({"status": status})
    with pytest.raises(kind) as info:
        client.models.generate_content(model=MODEL, contents="hi")
    assert info.value.code == status and info.value.status == name


async def test_async_error(aclient: Any, gemini: FakeGemini) -> None:
    gemini.script.append({"status": 429})
    with pytest.raises(errors.ClientError) as info:
        await aclient.models.generate_content(model=MODEL, contents="hi")
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"


def test_a_missing_key_is_refused(gemini: FakeGemini) -> None:
    with httpx2.Client() as http:
        resp = http.post(f"{gemini.url}/v1beta/models/{MODEL}:generateContent", json={})
    assert resp.status_code == 403
    assert resp.json()["error"]["status"] == "PERMISSION_DENIED"
