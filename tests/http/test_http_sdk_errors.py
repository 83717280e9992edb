"""A replay miss reaches the test as itself, at once, through every client class of the SDKs
(openai 3.x, anthropic 2.x here; ``gen2`` and ``legacy`` run the same cases on the older
generations)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from fake_provider import FakeProvider
from sdk_miss_cases import CLIENTS, miss

import dejacache
from dejacache.http.sdk_errors import sdk_root_error


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", CLIENTS)
def test_a_replay_miss_is_neither_retried_nor_wrapped(
    fake: FakeProvider, tmp_path: Any, name: str, stream: bool,
) -> None:
    """The SDK was recognised by its User-Agent (``OpenAI/Python``), which the async and Azure
    clients spell otherwise: their misses were retried twice with back-off and surfaced as
    ``APIConnectionError`` ("Connection error.")."""
    exc, sent = miss(name, fake, tmp_path / "c.json", stream)
    assert isinstance(exc, dejacache.ReplayMiss), repr(exc)
    assert sent == 1  # the SDK sent it once: no retry
    root = anthropic.AnthropicError if "Anthropic" in name else openai.OpenAIError
    assert isinstance(exc, root)
    assert not isinstance(exc, (openai.APIConnectionError, anthropic.APIConnectionError))
    assert fake.count() == 0


def test_a_request_no_sdk_sent_gets_the_plain_miss(fake: FakeProvider, tmp_path: Any) -> None:
    import httpx2

    with dejacache.cassette(tmp_path / "c.json", mode="replay"), httpx2.Client() as c, \
            pytest.raises(dejacache.ReplayMiss) as err:
        c.post(fake.openai_url + "/chat/completions", json={"model": "m"},
               headers={"User-Agent": "OpenAI/Python 9.9"})
    assert type(err.value) is dejacache.ReplayMiss


def test_the_root_error_is_never_one_the_sdks_retry() -> None:
    class Frame:  # what the search reads of a frame
        f_back = None

        def __init__(self, conn: type) -> None:
            self.f_globals = {"APIConnectionError": conn}

    assert sdk_root_error(Frame(openai.APIConnectionError)) is openai.OpenAIError  # type: ignore[arg-type]
    assert sdk_root_error(Frame(anthropic.APITimeoutError)) is anthropic.AnthropicError  # type: ignore[arg-type]

    class APIError(Exception):  # an SDK whose root is its retried APIError
        pass

    class APIConnectionError(APIError):
        pass

    assert sdk_root_error(Frame(APIConnectionError)) is None  # type: ignore[arg-type]
