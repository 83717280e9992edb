"""PrefixMonitor against the real SDKs (openai 3.x, anthropic 2.x over httpx2) and a loopback
provider that caches prompts and reports it (cache_provider.py).

The agent under test is the shape that breaks prompt caches: one that rebuilds its system
prompt with the current time every turn, against the same agent with the prompt built once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import dejacache
from dejacache import PrefixBreak, PrefixMonitor
from dejacache.errors import ConfigurationError
from runtime.cache_provider import CachingProvider
from runtime.prefix_agents import (
    INSTRUCTIONS,
    QUESTIONS,
    anthropic_client,
    build_system,
    openai_client,
    run_anthropic,
    run_openai,
    ticking,
)


@pytest.fixture
def provider() -> Iterator[CachingProvider]:
    server = CachingProvider().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _memory_store(memory_store: dejacache.MemoryStore) -> None:
    """Requests go through dejacache in its default mode (auto), into a fresh store."""


def time_offset(system: str) -> int:
    # a break inside the clock is named where the clock starts, as its hazard is
    return system.index("2026-05-01 12:04:31")


CLOCKS = ("2026-05-01 12:04:31", "2026-05-01 12:05:02")


# ---------------------------------------------------------------- Anthropic


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_rebuilt_prompt_breaks_every_turn_at_the_clock(
    provider: CachingProvider, stream: bool
) -> None:
    monitor = PrefixMonitor()
    with monitor:
        run_anthropic(provider, rebuild=True, stream=stream)
    breaks = monitor.breaks
    assert [b.turn for b in breaks] == [2, 3, 4]
    first = breaks[0]
    assert (first.reason, first.segment, first.path) == ("system", "system", "system[0].text")
    assert first.offset == time_offset(build_system("12:04:31"))
    assert (first.before, first.after) == CLOCKS
    assert "`system[0].text` at offset 7," in str(first)
    # The provider agrees: nothing read from its cache after turn 1, everything rewritten.
    turns = monitor.turns
    assert [t.reported_cached for t in turns] == [0, 0, 0, 0]
    assert all(t.expected_cached == 0 for t in turns)
    assert all(b.tokens > 1_800 for b in breaks)
    # claude-sonnet-4 input $3/M: each break rewrites ~1,900 tokens at 1.25x instead of 0.1x.
    assert all(0.006 < b.cost < 0.008 for b in breaks)
    (report,) = monitor.report().values()
    assert (report.turns, report.breaks, report.reported_cached) == (4, 3, 0)
    assert report.hit_ratio == 0.0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_frozen_prompt_has_no_breaks_and_is_read_from_cache(
    provider: CachingProvider, stream: bool
) -> None:
    monitor = PrefixMonitor()
    with monitor:
        run_anthropic(provider, rebuild=False, stream=stream)
    assert monitor.breaks == []
    turns = monitor.turns
    assert turns[0].reported_cached == 0
    for t in turns[1:]:
        assert t.reported_cached is not None and t.reported_cached > 1_800
        # Expected reuse (the monitor's own estimate) within 2% of what the provider reports.
        assert abs(t.expected_cached - t.reported_cached) <= 0.01 * t.reported_cached
    (report,) = monitor.report().values()
    assert report.breaks == 0 and report.hit_ratio is not None and report.hit_ratio > 0.7


def test_first_turn_flags_the_clock_before_it_costs_anything(provider: CachingProvider) -> None:
    monitor = PrefixMonitor()
    with monitor, anthropic_client(provider) as client:
        client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[
            {"role": "user", "content": "hi"}], system=[
            {"type": "text", "text": build_system("12:04:31"),
             "cache_control": {"type": "ephemeral"}}])
    assert monitor.breaks == []
    (hazard,) = monitor.hazards
    assert (hazard.kind, hazard.path, hazard.text) == ("timestamp", "system[0].text",
                                                       "2026-05-01 12:04:31")


# ---------------------------------------------------------------- OpenAI chat


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_rebuilt_prompt_keeps_only_the_part_before_the_clock(
    provider: CachingProvider, stream: bool
) -> None:
    monitor = PrefixMonitor()
    with monitor:
        run_openai(provider, rebuild=True, stream=stream)
    breaks = monitor.breaks
    assert [(b.turn, b.reason, b.path) for b in breaks] == [
        (n, "system", "messages[0].content[0].text") for n in (2, 3, 4)]
    assert breaks[0].offset == time_offset(build_system("12:04:31"))
    assert (breaks[0].before, breaks[0].after) == CLOCKS
    # OpenAI caches in 128-token steps up to the change: the instructions before the clock
    # stay cached, the monitor expects exactly that, and only the rest is lost.
    for t in monitor.turns[1:]:
        assert t.reported_cached is not None and t.reported_cached >= 1_792
        assert t.expected_cached == t.reported_cached
    assert all(0 <= b.tokens <= 256 for b in breaks)


def test_openai_frozen_prompt_has_no_breaks(provider: CachingProvider) -> None:
    monitor = PrefixMonitor()
    with monitor:
        run_openai(provider, rebuild=False)
    assert monitor.breaks == []
    turns = monitor.turns
    assert turns[0].reported_cached == 0
    for prev, t in itertools.pairwise(turns):
        # Everything the previous turn sent, in 128-token steps, is read back.
        assert t.reported_cached == prev.prompt_tokens // 128 * 128
        assert abs(t.expected_cached - t.reported_cached) <= 128


def test_openai_responses_async_instructions(provider: CachingProvider) -> None:
    async def run(rebuild: bool) -> PrefixMonitor:
        clock = ticking()
        monitor = PrefixMonitor()
        client = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="sk-test",
                                    max_retries=0, http_client=dejacache.async_http_client())
        instructions = "" if rebuild else build_system(clock())
        history: list[Any] = []
        async with monitor, client:
            for question in QUESTIONS:
                if rebuild:
                    instructions = build_system(clock())
                history.append({"role": "user", "content": question})
                r = await client.responses.create(model="gpt-5", instructions=instructions,
                                                  input=history)
                history.append({"role": "assistant", "content": r.output_text})
        return monitor

    rebuilt = asyncio.run(run(rebuild=True))
    assert [(b.reason, b.segment, b.path) for b in rebuilt.breaks] == [
        ("system", "instructions", "instructions")] * 3
    # A fresh start: the frozen run's first request equals the rebuilt run's, and served from
    # dejacache's store it would never reach (and warm) the provider's cache.
    provider.clear()
    dejacache.configure(store=dejacache.MemoryStore())
    frozen = asyncio.run(run(rebuild=False))
    assert frozen.breaks == []
    assert all((t.reported_cached or 0) > 1_800 for t in frozen.turns[1:])


# ---------------------------------------------------------------- sessions, replay, feeding


def test_sessions_come_from_agent_session(provider: CachingProvider) -> None:
    monitor = PrefixMonitor()
    with monitor, openai_client(provider) as client:
        for turn in range(2):
            for name, prompt in (("alice", "A" * 5000), ("bob", "B" * 5000)):
                with dejacache.agent_session(session_id=name):
                    client.chat.completions.create(model="gpt-4.1", messages=[
                        {"role": "system", "content": prompt},
                        *[{"role": "user", "content": f"q{i}"} for i in range(turn + 1)]])
    report = monitor.report()
    assert sorted(report) == ["alice", "bob"]
    assert monitor.breaks == []  # interleaved sessions are not compared with each other
    assert all(r.turns == 2 and r.reported_cached == 1152 for r in report.values())


def test_one_session_per_block_without_agent_session(provider: CachingProvider) -> None:
    monitor = PrefixMonitor()
    for _ in range(2):
        with monitor, openai_client(provider) as client:
            client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": "hi"}])
    assert len(monitor.report()) == 2


def test_replayed_calls_are_observed_as_answered_by_dejacache(
    provider: CachingProvider, tmp_path: Any
) -> None:
    path = tmp_path / "agent.json"
    with dejacache.cassette(path, mode="record"):
        run_anthropic(provider, rebuild=True)
    provider.stop()
    monitor = PrefixMonitor()
    with monitor, dejacache.cassette(path, mode="replay"):
        run_anthropic(provider, rebuild=True)
    # The agent's prompt still breaks the provider's cache at the clock: named, priced as it
    # would be once sent, and marked as answered from the cassette.
    assert [(b.reason, b.local) for b in monitor.breaks] == [("system", True)] * 3
    assert all(b.cost > 0.006 for b in monitor.breaks)
    # The provider saw none of it: no usage of its own, nothing counted as its tokens.
    assert [(t.local, t.reported_cached) for t in monitor.turns] == [(True, None)] * 4
    (report,) = monitor.report().values()
    assert (report.turns, report.local_turns, report.breaks) == (4, 4, 3)
    assert (report.prompt_tokens, report.reported_cached, report.cost) == (0, None, 0.0)


def test_observe_directly_with_a_clock_names_ttl() -> None:
    now = [0.0]
    monitor = PrefixMonitor(clock=lambda: now[0])
    body: dict[str, Any] = {"model": "claude-sonnet-4-6", "system": [
        {"type": "text", "text": INSTRUCTIONS, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}]}
    assert monitor.observe(body, provider="anthropic", session="s") == []
    now[0] = 301.0  # one second past the 5-minute lifetime
    (brk,) = monitor.observe(body, provider="anthropic", session="s")
    assert isinstance(brk, PrefixBreak)
    assert brk.reason == "ttl" and brk.tokens > 1_800
    # A 1-hour marker survives the same gap.
    hour = {**body, "system": [{"type": "text", "text": INSTRUCTIONS,
                                "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    monitor.observe(hour, provider="anthropic", session="h")
    now[0] += 1200.0
    assert monitor.observe(hour, provider="anthropic", session="h") == []


def test_observe_reads_sdk_usage_objects_and_rejects_unknown_providers(
    provider: CachingProvider, request: pytest.FixtureRequest
) -> None:
    client = anthropic.Anthropic(base_url=provider.url, api_key="x", max_retries=0)
    request.addfinalizer(client.close)
    body = {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": [
        {"type": "text", "text": INSTRUCTIONS, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}]}
    monitor = PrefixMonitor()
    for _ in range(2):
        msg = client.messages.create(**body)  # type: ignore[call-overload]
        monitor.observe(body, provider="anthropic", session="s", usage=msg.usage)
    first, second = monitor.turns
    assert first.reported_cached == 0 and second.reported_cached is not None
    assert abs(second.expected_cached - second.reported_cached) <= 2
    with pytest.raises(ConfigurationError, match="provider must be one of"):
        monitor.observe(body, provider="bedrock")
    with pytest.raises(ConfigurationError, match="JSON object"):
        monitor.observe(b"[1, 2]", provider="openai")


def test_prices_override_and_unknown_models_cost_nothing() -> None:
    def breaks(monitor: PrefixMonitor, model: str) -> list[PrefixBreak]:
        for now in ("12:04:31", "12:05:02"):
            monitor.observe({"model": model, "messages": [
                {"role": "system", "content": f"Now: {now}. " + INSTRUCTIONS}]}, provider="openai",
                session=model)
        return [b for b in monitor.breaks if b.session == model]

    (free,) = breaks(PrefixMonitor(), "my-local-model")
    assert free.tokens > 0 and free.cost == 0.0
    (priced,) = breaks(PrefixMonitor(prices={"my-local": (10.0, 20.0)}), "my-local-model")
    assert priced.cost == pytest.approx(priced.tokens * 10.0 / 1e6 * 0.5)
