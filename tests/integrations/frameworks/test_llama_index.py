"""llama-index (``.venv-fw2``): a ``FunctionAgent`` with llama-index-llms-openai, streamed
(``stream_events``) and plain (awaiting the run)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("llama_index.core",
                    reason="llama-index runs in .venv-fw2 (make test-frameworks)")
pytest.importorskip("llama_index.llms.openai", reason="llama-index-llms-openai runs in .venv-fw2")

from fw_cases import Adapter, FrameworkCases

from conftest import KEY

# llama-index-workflows lists a FunctionAgent's steps with inspect.getmembers, which reads
# every deprecated pydantic attribute of the agent: their warnings, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]


@pytest.fixture(autouse=True)
def _offline_tokenizer() -> None:
    """The agent's memory counts tokens with tiktoken, which downloads its encoding on first
    use (the loopback guard catches it): a whitespace tokenizer keeps the run offline."""
    from llama_index.core import Settings

    Settings.tokenizer = str.split


class LlamaIndex(Adapter):
    ways: ClassVar[dict[str, bool]] = {"streamed": True, "plain": True}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from llama_index.core.tools import FunctionTool

        return FunctionTool.from_defaults(fn)

    def schema(self, tool: Any) -> Any:
        return tool.metadata.to_openai_tool()

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        from llama_index.core.agent.workflow import FunctionAgent
        from llama_index.llms.openai import OpenAI

        async def go() -> str:
            llm = OpenAI(model="gpt-4o-mini", api_base=base_url, api_key=KEY, max_retries=0)
            agent = FunctionAgent(tools=tools, llm=llm, system_prompt="Answer with the tool.")
            handler = agent.run(user_msg="Weather in Paris?")
            if way == "streamed":
                async for _ in handler.stream_events():
                    pass
            return str(await handler)

        return asyncio.run(go())


class TestLlamaIndex(FrameworkCases):
    adapter = LlamaIndex()
