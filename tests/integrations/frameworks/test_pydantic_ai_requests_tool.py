"""A pydantic-ai agent whose tool calls a web API with ``requests`` (``.venv-fw3``).

The whole run is recorded: the model's calls (openai over httpx2) and the tool's own HTTP call
(``requests`` over urllib3, ``src/dejacache/http/via_urllib3.py``), in one cassette. Replayed
under ``CI=true`` with both servers stopped and their ports held by listeners that count
connections: none, the same answer, and the tool ran again with the recorded web answer.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai runs in .venv-fw3 (make test-frameworks)")
requests = pytest.importorskip("requests")

from fake_tool_api import ToolAPI  # noqa: E402
from fw_cases import on_fresh_loop  # noqa: E402
from fw_provider import DropListener  # noqa: E402

import dejacache  # noqa: E402
from conftest import KEY  # noqa: E402

API_KEY = "weather-api-SECRET-0001"


def _run(base_url: str, api_url: str, calls: list[str]) -> str:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def get_weather(city: str) -> str:
        """Look up the current weather in a city.

        Args:
            city: The name of the city.
        """
        r = requests.get(api_url + "/weather", params={"city": city, "key": API_KEY},
                         timeout=10)
        r.raise_for_status()
        data = r.json()
        calls.append(city)
        return f"sunny in {data['city']}, {data['temp']}C ({data['nonce']})"

    client = AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, tools=[Tool(get_weather)], instructions="Answer with the tool.")
    return on_fresh_loop(lambda: str(agent.run_sync("Weather in Paris?").output),
                         client.close)


def test_a_requests_tool_inside_the_agent_replays_whole(
    provider: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ToolAPI().start()
    path = tmp_path / "run.json"
    calls: list[str] = []
    try:
        with dejacache.cassette(path) as tape:
            assert tape.mode == "auto"
            live = _run(provider.openai_url, api.url, calls)
    finally:
        api.stop()
    assert calls == ["Paris"] and len(api.requests) == 1
    assert "Tool said sunny in Paris, 21C" in live, live
    model_calls = provider.count()
    assert model_calls >= 2

    provider.stop()
    drops = [DropListener(provider.port), DropListener(api.port)]
    try:
        monkeypatch.setenv("CI", "true")
        calls.clear()
        with dejacache.cassette(path) as tape:
            assert tape.mode == "replay"
            replayed = _run(provider.openai_url, api.url, calls)
    finally:
        for d in drops:
            d.close()
    assert [d.count for d in drops] == [0, 0]
    assert replayed == live
    assert calls == ["Paris"]  # the tool ran, its web call answered from the cassette
    assert provider.count() == model_calls and len(api.requests) == 1
    assert API_KEY.encode() not in path.read_bytes()
