"""smolagents (``.venv-fw3``): a ``ToolCallingAgent``, plain and with ``stream_outputs``.

smolagents writes tool calls and their results into message text ("Calling tools: [...]",
"Observation: ...") and ends a run when the model calls ``final_answer``; the provider plays
that part (fw_provider.py). Its tools are sync functions only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("smolagents", reason="smolagents runs in .venv-fw3 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases

from conftest import KEY


class Smolagents(Adapter):
    ways: ClassVar[dict[str, bool]] = {"plain": False, "stream_outputs": False}
    async_tools = False

    def tool(self, fn: Callable[..., Any]) -> Any:
        from smolagents import tool

        return tool(fn)

    def schema(self, tool: Any) -> Any:
        from smolagents.models import get_tool_json_schema

        return (get_tool_json_schema(tool), tool.inputs, tool.output_type)

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from smolagents import OpenAIServerModel, ToolCallingAgent

        model = OpenAIServerModel(model_id="gpt-4o-mini", api_base=base_url, api_key=KEY,
                                  client_kwargs={"max_retries": 0})
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=3, verbosity_level=0,
                                 stream_outputs=way == "stream_outputs")
        try:
            if way == "plain":
                return str(agent.run("Weather in Paris?"))
            steps = list(agent.run("Weather in Paris?", stream=True))
            return str(steps[-1].output)
        finally:
            model.client.close()


class TestSmolagents(FrameworkCases):
    adapter = Smolagents()
