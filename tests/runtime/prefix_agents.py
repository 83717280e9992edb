"""A small agent on the real openai and anthropic SDKs, shared by the prefix-monitor tests:
it rebuilds its system prompt with the current time every turn (``rebuild=True``) or builds it
once, the two shapes the prefix monitor tells apart."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anthropic
import openai

import dejacache
from runtime.cache_provider import CachingProvider

__all__ = ["INSTRUCTIONS", "QUESTIONS", "anthropic_agent", "anthropic_client", "build_system",
           "openai_agent", "openai_client", "run_anthropic", "run_openai", "ticking"]

INSTRUCTIONS = ("You are a meticulous travel assistant. Answer with the cheapest option first, "
                "then the fastest, and say which rules you applied. ") * 60  # ~1,900 tokens
QUESTIONS = ["Paris to Lyon tomorrow?", "And back on Sunday?", "Any night trains?",
             "Book the first one."]
TURNS = len(QUESTIONS)


def build_system(now: str) -> str:
    # Where hermes-style gateways put the clock: after the long, stable instructions.
    return INSTRUCTIONS + f"\nCurrent time: 2026-05-01 {now}. Be brief."


def ticking() -> Callable[[], str]:
    """A wall clock read once per message build (deterministic: +31 s a read)."""
    seconds = itertools.count(12 * 3600 + 4 * 60 + 31, 31)

    def now() -> str:
        s = next(seconds)
        return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"

    return now


def anthropic_agent(client: anthropic.Anthropic, *, rebuild: bool, stream: bool = False) -> None:
    clock = ticking()
    system = "" if rebuild else build_system(clock())
    history: list[dict[str, Any]] = []
    for question in QUESTIONS:
        if rebuild:
            system = build_system(clock())
        # The cache marker moves to the newest message each turn; earlier turns go back to
        # plain string content. Neither changes what the provider caches.
        sent = [*history, {"role": "user", "content": [
            {"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}]}]
        kwargs: dict[str, Any] = dict(
            model="claude-sonnet-4-6", max_tokens=64, messages=sent,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}])
        if stream:
            with client.messages.stream(**kwargs) as s:
                answer = s.get_final_message().content[0]
        else:
            answer = client.messages.create(**kwargs).content[0]
        assert answer.type == "text"
        history += [{"role": "user", "content": question},
                    {"role": "assistant", "content": answer.text}]


def openai_agent(client: openai.OpenAI, *, rebuild: bool, stream: bool = False) -> None:
    clock = ticking()
    system = "" if rebuild else build_system(clock())
    history: list[dict[str, Any]] = []
    for question in QUESTIONS:
        if rebuild:
            system = build_system(clock())
        history.append({"role": "user", "content": question})
        messages: Any = [{"role": "system", "content": system}, *history]
        if stream:
            chunks = client.chat.completions.create(
                model="gpt-4.1", messages=messages, stream=True,
                stream_options={"include_usage": True})
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(model="gpt-4.1", messages=messages)\
                .choices[0].message.content or ""
        history.append({"role": "assistant", "content": text})


def anthropic_client(provider: CachingProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0,
                               http_client=dejacache.http_client())


def openai_client(provider: CachingProvider) -> openai.OpenAI:
    return openai.OpenAI(base_url=provider.url + "/v1", api_key="sk-test", max_retries=0,
                         http_client=dejacache.http_client())


def run_anthropic(provider: CachingProvider, **kwargs: Any) -> None:
    with anthropic_client(provider) as client:
        anthropic_agent(client, **kwargs)


def run_openai(provider: CachingProvider, **kwargs: Any) -> None:
    with openai_client(provider) as client:
        openai_agent(client, **kwargs)
