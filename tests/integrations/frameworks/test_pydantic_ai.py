"""pydantic-ai (``.venv-fw3``): ``Agent.run_sync`` and ``Agent.run_stream``, chat completions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai runs in .venv-fw3 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases, on_fresh_loop

from conftest import KEY


class PydanticAI(Adapter):
    ways: ClassVar[dict[str, bool]] = {"plain": False, "run_stream": True}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from pydantic_ai import Tool

        return Tool(fn)

    def schema(self, tool: Any) -> Any:
        return tool.tool_def

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from openai import AsyncOpenAI
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        client = AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, tools=tools, instructions="Answer with the tool.")
        if way == "plain":
            return on_fresh_loop(lambda: str(agent.run_sync("Weather in Paris?").output),
                                 client.close)

        async def streamed() -> str:
            async with client, agent.run_stream("Weather in Paris?") as result:
                async for _ in result.stream_text(delta=True):
                    pass
                return str(await result.get_output())

        return asyncio.run(streamed())


class TestPydanticAI(FrameworkCases):
    adapter = PydanticAI()
