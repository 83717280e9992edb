"""A langwatch-scenario run recorded by its test's cassette: the judge's prompt carries the
run's OpenTelemetry digest (wall-clock timestamps, span ids, durations), which differs on
every run (copied into a temporary project as test_scenario.py)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import scenario

pytestmark = [pytest.mark.dejacache,
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]


class OpenAIAgent(scenario.AgentAdapter):
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def call(self, input: scenario.AgentInput) -> str:
        async with openai.AsyncOpenAI(base_url=self.base_url,
                                      api_key="sk-agent-test-key-987654") as client:
            r = await client.chat.completions.create(model="gpt-4o-mini",
                                                     messages=input.messages)
        return r.choices[0].message.content or ""


async def test_refund_scenario(provider: Any, scenario_config: Any) -> None:
    result = await scenario.run(
        name="Refund request", description="A customer wants a refund for a broken kettle",
        agents=[OpenAIAgent(provider.base_url), scenario.UserSimulatorAgent(),
                scenario.JudgeAgent(criteria=["Agent answers every message",
                                              "Agent stays polite"])])
    assert result.success, result.reasoning
