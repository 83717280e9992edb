"""Recordings for the report tests: real SDK calls against the loopback provider."""

from __future__ import annotations

import pathlib
from typing import Any

import anthropic
import openai

import dejacache

SECRET = "sk-proj-Report0Secret0Value0123456789abcdef"


def record_run(fake: Any, path: pathlib.Path, *, city: str = "Lisbon",
               extra_tool: bool = False) -> pathlib.Path:
    """A small agent run: two model turns (OpenAI), a tool, an Anthropic call."""
    oa = openai.OpenAI(base_url=fake.openai_url, api_key=SECRET, max_retries=0)
    an = anthropic.Anthropic(base_url=fake.url, api_key=SECRET, max_retries=0)

    @dejacache.cache(name="tools.get_weather", kind="tool")
    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city, "temp_c": 21}

    @dejacache.cache(name="tools.get_hotels", kind="tool")
    def get_hotels(city: str) -> list[str]:
        return ["Casa", "Palacio"]

    system = {"role": "system", "content": "You plan trips. <b>Be brief</b>. " * 40}
    first = {"role": "user", "content": f"Weather in {city}? <script>alert(1)</script>",
             "metadata_api_key": SECRET}
    with dejacache.cassette(path, "record"), dejacache.intercept():
        r1 = oa.chat.completions.create(model="gpt-4o-mini", messages=[system, {
            "role": "user", "content": first["content"]}], user=SECRET)
        get_weather(city)
        if extra_tool:
            get_hotels(city)
        oa.chat.completions.create(model="gpt-4o-mini", messages=[
            system, {"role": "user", "content": first["content"]},
            {"role": "assistant", "content": r1.choices[0].message.content},
            {"role": "user", "content": "And tomorrow?"}])
        an.messages.create(model="claude-sonnet-4-6", max_tokens=64,
                           messages=[{"role": "user", "content": "Summarise the plan."}])
    return path
