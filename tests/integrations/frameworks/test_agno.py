"""agno (``.venv-fw3``): an ``Agent`` with ``OpenAIChat``, ``run`` and ``arun``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("agno", reason="agno runs in .venv-fw3 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases

from conftest import KEY


class Agno(Adapter):
    ways: ClassVar[dict[str, bool]] = {"run": False, "arun": True}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from agno.tools import tool

        return tool(fn)

    def schema(self, tool: Any) -> Any:
        fn = tool.model_copy(deep=True)
        fn.process_entrypoint()
        return fn.to_dict()

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from agno.agent import Agent
        from agno.models.openai import OpenAIChat

        model = OpenAIChat(id="gpt-4o-mini", base_url=base_url, api_key=KEY, max_retries=0)
        agent = Agent(model=model, tools=tools, telemetry=False)
        # agno builds the OpenAI client on first use and never closes it.
        if way == "run":
            try:
                return str(agent.run("Weather in Paris?").content)
            finally:
                if model.client is not None:
                    model.client.close()

        async def go() -> str:
            try:
                return str((await agent.arun("Weather in Paris?")).content)
            finally:
                if model.async_client is not None:
                    await model.async_client.close()

        return asyncio.run(go())


class TestAgno(FrameworkCases):
    adapter = Agno()
