"""langgraph + langchain-openai (``.venv-fw3``): ``langchain.agents.create_agent`` (a langgraph
graph; langgraph 1.x moved its prebuilt ReAct agent there), ``invoke`` and a streaming
``ainvoke``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

pytest.importorskip("langgraph", reason="langgraph runs in .venv-fw3 (make test-frameworks)")
pytest.importorskip("langchain_openai", reason="langchain-openai runs in .venv-fw3")

from fw_cases import Adapter, FrameworkCases

from conftest import KEY


class LangGraph(Adapter):
    ways: ClassVar[dict[str, bool]] = {"invoke": False, "ainvoke_streaming": True}

    def tool(self, fn: Callable[..., Any]) -> Any:
        from langchain_core.tools import tool

        return tool(fn)

    def schema(self, tool: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return convert_to_openai_tool(tool)

    def run(self, way: str, tools: list[Any], base_url: str) -> str:
        import openai
        from langchain.agents import create_agent
        from langchain_openai import ChatOpenAI

        question = {"messages": [("user", "Weather in Paris?")]}

        def agent(**http: Any) -> Any:
            llm = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key=KEY,
                             max_retries=0, streaming=way != "invoke", **http)
            return create_agent(llm, tools)

        # langchain-openai caches one default HTTP client per base URL, bound to the first
        # event loop that uses it: each run brings (and closes) its own, as an app with one
        # loop per request would.
        if way == "invoke":
            with openai.DefaultHttpxClient() as http:
                return str(agent(http_client=http).invoke(question)["messages"][-1].content)

        async def go() -> str:
            async with openai.DefaultAsyncHttpxClient() as http:
                result = await agent(http_async_client=http).ainvoke(question)
                return str(result["messages"][-1].content)

        return asyncio.run(go())


class TestLangGraph(FrameworkCases):
    adapter = LangGraph()
