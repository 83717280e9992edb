"""An openai-agents run whose tool comes from the ticket-desk MCP server, inside a cassette:
run where it is recorded (the test process) and where it is replayed (a fresh interpreter:
``python agents_mcp_flow.py SPEC CASSETTE MODE MODEL_URL`` prints the answer as JSON; MODE
``default`` leaves it to the cassette: ``replay`` under ``CI``).

``SPEC`` names the MCP server as the test started it: ``{"transport": "stdio", "command",
"args", "env"}`` or ``{"transport": "streamable-http", "url"}``. The model is the loopback
provider at ``MODEL_URL``, which calls the first tool it is offered with ``{"city": "Paris"}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

KEY = "sk-framework-test-0123456789"


def mcp_server(spec: dict[str, Any]) -> Any:
    from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, create_static_tool_filter

    only_weather = create_static_tool_filter(allowed_tool_names=["get_weather"])
    if spec["transport"] == "stdio":
        return MCPServerStdio(params={"command": spec["command"], "args": spec["args"],
                                      "env": spec.get("env") or {}},
                              tool_filter=only_weather, client_session_timeout_seconds=30)
    return MCPServerStreamableHttp(params={"url": spec["url"]}, tool_filter=only_weather,
                                   client_session_timeout_seconds=30)


async def ask(spec: dict[str, Any], path: str, mode: str, model_url: str) -> dict[str, Any]:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    import dejacache

    set_tracing_disabled(True)
    t0 = time.perf_counter()
    async with dejacache.cassette(path, mode=None if mode == "default" else mode):
        server = mcp_server(spec)
        async with server, AsyncOpenAI(base_url=model_url, api_key=KEY, max_retries=0) as client:
            agent = Agent(name="weather", instructions="Answer with the tool.",
                          mcp_servers=[server],
                          model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
            result = await Runner.run(agent, "Weather in Paris?")
    return {"answer": str(result.final_output), "seconds": time.perf_counter() - t0}


def main() -> None:
    out = asyncio.run(ask(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
