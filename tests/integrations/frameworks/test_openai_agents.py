"""openai-agents (``.venv-fw3``): ``Runner.run_sync`` and ``Runner.run_streamed``, Responses API."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("agents", reason="openai-agents runs in .venv-fw3 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases, on_fresh_loop

from conftest import KEY


class OpenAIAgents(Adapter):
    ways: ClassVar[dict[str, bool]] = {"plain": False, "streamed": True}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from agents import function_tool

        return function_tool(fn)

    def schema(self, tool: Any) -> Any:
        return (tool.name, tool.description, tool.params_json_schema, tool.strict_json_schema)

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
        from openai import AsyncOpenAI

        set_tracing_disabled(True)
        client = AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        agent = Agent(name="weather", instructions="Answer with the tool.", tools=tools,
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        if way == "plain":
            # run_sync reuses the thread's default loop and shuts its async generators down
            # after each run: a second run there warns when httpx2 starts its auth flow.
            return on_fresh_loop(
                lambda: str(Runner.run_sync(agent, "Weather in Paris?").final_output),
                client.close)

        async def streamed() -> str:
            async with client:
                result = Runner.run_streamed(agent, "Weather in Paris?")
                async for _ in result.stream_events():
                    pass
                return str(result.final_output)

        return asyncio.run(streamed())


class TestOpenAIAgents(FrameworkCases):
    adapter = OpenAIAgents()
