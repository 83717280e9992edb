"""crewai (``.venv-fw2``): a one-agent crew with one tool, ``kickoff`` plain and streamed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("crewai", reason="crewai runs in .venv-fw2 (make test-frameworks)")

from fw_cases import Adapter, FrameworkCases

from conftest import KEY

# crewai's Agent reads its own deprecated pydantic fields while it sets itself up.
pytestmark = pytest.mark.filterwarnings(r"ignore::DeprecationWarning:crewai\..*")


class CrewAI(Adapter):
    ways: ClassVar[dict[str, bool]] = {"plain": False, "stream": False}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from crewai.tools import tool

        return tool(fn)

    def schema(self, tool: Any) -> Any:
        return (tool.name, tool.description, tool.args_schema.model_json_schema())

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from crewai import LLM, Agent, Crew, Task

        stream = way == "stream"
        llm = LLM(model="openai/gpt-4o-mini", base_url=base_url, api_key=KEY, stream=stream,
                  max_retries=0)
        agent = Agent(role="forecaster", goal="Report the weather", backstory="Uses tools.",
                      tools=tools, llm=llm, max_iter=3, verbose=False)
        task = Task(description="Weather in Paris?", expected_output="One sentence.",
                    agent=agent)
        crew = Crew(agents=[agent], tasks=[task], verbose=False, stream=stream)
        if not stream:
            return str(crew.kickoff().raw)
        streaming = crew.kickoff()
        for _ in streaming:
            pass
        return str(streaming.result.raw)


class TestCrewAI(FrameworkCases):
    adapter = CrewAI()
