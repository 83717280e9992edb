"""PrefixMonitor as a user first uses it: ``with PrefixMonitor() as monitor: run_agent()`` with
no other dejacache block open, the SDKs' own clients (sync, async, streams) and the threads an
agent starts, against the loopback provider that caches prompts and reports it
(cache_provider.py). The monitor sees every request made inside it, caches none, creates no
store, and the caller gets what the provider sent."""

from __future__ import annotations

import asyncio
import pathlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest

import dejacache
from dejacache import PrefixMonitor
from dejacache.cli import main
from dejacache.report import load_run
from dejacache.runtime import current_session
from runtime.cache_provider import CachingProvider
from runtime.prefix_agents import QUESTIONS, anthropic_agent, build_system, openai_agent


@pytest.fixture
def provider() -> Iterator[CachingProvider]:
    server = CachingProvider().start()
    yield server
    server.stop()


@pytest.fixture
def project(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A new user's project: the working directory, and dejacache's default place for files."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'agent'\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("DEJACACHE_DIR")
    dejacache.configure()
    return root


def sdk(provider: CachingProvider, name: str) -> Any:
    """The SDK's own client, as a user builds it (no dejacache client)."""
    if name == "openai":
        return openai.OpenAI(base_url=provider.url + "/v1", api_key="sk-test", max_retries=0)
    return anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0)


AGENTS: dict[str, Callable[..., None]] = {"openai": openai_agent, "anthropic": anthropic_agent}


# ---------------------------------------------------------------- sees what is made inside


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", ["openai", "anthropic"])
def test_a_monitor_alone_sees_the_sdk_requests_made_inside_it(
    provider: CachingProvider, project: pathlib.Path, name: str, stream: bool
) -> None:
    with PrefixMonitor() as monitor, sdk(provider, name) as client:
        AGENTS[name](client, rebuild=True, stream=stream)
    assert [b.turn for b in monitor.breaks] == [2, 3, 4]
    assert all(b.reason == "system" and not b.local for b in monitor.breaks)
    (report,) = monitor.report().values()
    assert (report.turns, report.local_turns, report.breaks) == (4, 0, 3)
    assert report.reported_cached is not None  # the provider's own usage, read in passing
    # Every request reached the provider, and nothing was kept anywhere.
    assert len(provider.requests) == len(QUESTIONS)
    assert not (project / ".dejacache").exists()


def test_the_caller_gets_what_the_provider_sent_and_nothing_is_cached(
    provider: CachingProvider, project: pathlib.Path
) -> None:
    body: dict[str, Any] = {"model": "gpt-4.1", "messages": [
        {"role": "system", "content": build_system("12:04:31")},
        {"role": "user", "content": "hi"}]}
    with PrefixMonitor() as monitor, sdk(provider, "openai") as client:
        first = client.chat.completions.create(**body)
        again = client.chat.completions.create(**body)
        chunks = list(client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}))
    # Three answers, each the provider's own (its ids count its requests): none from a cache.
    assert (first.id, again.id, chunks[0].id) == ("chatcmpl-1", "chatcmpl-2", "chatcmpl-3")
    assert first.choices[0].message.content == "reply 1"
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached > 1_800  # the provider's prompt cache, not ours
    assert [t.reported_cached for t in monitor.turns] == [0, cached, cached]
    assert monitor.breaks == [] and not (project / ".dejacache").exists()


def test_async_clients_and_streams_inside_async_with(
    provider: CachingProvider, project: pathlib.Path
) -> None:
    system = build_system("12:04:31")
    chat: list[Any] = [{"role": "user", "content": QUESTIONS[0]}]
    turns = [chat, [*chat, {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": QUESTIONS[1]}]]

    async def run() -> PrefixMonitor:
        oai = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="sk-test",
                                 max_retries=0)
        ant = anthropic.AsyncAnthropic(base_url=provider.url, api_key="sk-ant-test",
                                       max_retries=0)
        async with PrefixMonitor() as monitor, oai, ant:
            with dejacache.agent_session(session_id="openai"):
                for messages in turns:
                    await oai.chat.completions.create(model="gpt-4.1", messages=[
                        {"role": "system", "content": system}, *messages])
            with dejacache.agent_session(session_id="anthropic"):
                for messages in turns:
                    async with ant.messages.stream(
                            model="claude-sonnet-4-6", max_tokens=8, messages=messages,
                            system=[{"type": "text", "text": system,
                                     "cache_control": {"type": "ephemeral"}}]) as s:
                        assert (await s.get_final_message()).content
        return monitor

    monitor = asyncio.run(run())
    report = monitor.report()
    assert sorted(report) == ["anthropic", "openai"]
    assert all(r.turns == 2 and r.breaks == 0 for r in report.values())
    # Turn 2 of each conversation read turn 1's prefix from the provider's cache.
    assert all((r.reported_cached or 0) > 1_800 for r in report.values())
    assert len(provider.requests) == 4 and not (project / ".dejacache").exists()


def test_threads_and_executor_tasks_the_agent_starts_are_seen(
    provider: CachingProvider, project: pathlib.Path
) -> None:
    """hermes-agent sends each request from a thread it starts; other agents use executors.
    The thread gets the monitor and the conversation's name, never the session itself: a
    tenant stays out of a thread that may outlive the turn."""
    inside: dict[str, Any] = {}

    def ask(client: Any, question: str) -> None:
        inside.setdefault("session", current_session())
        client.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "system", "content": build_system("12:04:31")},
            {"role": "user", "content": question}])

    def nested(client: Any) -> None:  # a thread started by a thread the agent started
        inner = threading.Thread(target=ask, args=(client, QUESTIONS[2]))
        inner.start()
        inner.join(10)

    with sdk(provider, "openai") as client, ThreadPoolExecutor(2) as pool, \
            dejacache.agent_session(tenant="acme", session_id="chat-1"), \
            PrefixMonitor() as monitor:
        t = threading.Thread(target=ask, args=(client, QUESTIONS[0]))
        t.start()
        t.join(10)
        pool.submit(ask, client, QUESTIONS[1]).result(10)
        outer = threading.Thread(target=nested, args=(client,))
        outer.start()
        outer.join(10)
    assert [t.session for t in monitor.turns] == ["acme/chat-1"] * 3
    assert inside["session"] is None
    assert len(provider.requests) == 3 and not (project / ".dejacache").exists()


def test_requests_made_outside_it_are_not_seen(provider: CachingProvider) -> None:
    """A thread that was running before the monitor opened is not the monitor's business,
    even while it is open."""
    go, done = threading.Event(), threading.Event()

    def elsewhere() -> None:
        go.wait(10)
        with sdk(provider, "openai") as other:
            other.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": "someone else"}])
        done.set()

    t = threading.Thread(target=elsewhere)
    t.start()
    with PrefixMonitor() as monitor, sdk(provider, "openai") as client:
        go.set()
        assert done.wait(10)
        client.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "mine"}])
    t.join(10)
    after = sdk(provider, "openai")
    with after:
        after.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "after"}])
    assert len(provider.requests) == 3
    (turn,) = monitor.turns
    assert turn.prompt_tokens < 100  # "mine" only


def test_inside_other_blocks_the_monitor_adds_no_caching(
    provider: CachingProvider, project: pathlib.Path
) -> None:
    """A monitor changes nothing about what dejacache does around it."""
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
    with dejacache.scope(mode="off"), PrefixMonitor() as monitor, \
            sdk(provider, "openai") as client:
        client.chat.completions.create(**body)  # type: ignore[call-overload]
        client.chat.completions.create(**body)  # type: ignore[call-overload]
    assert len(provider.requests) == 2 and len(monitor.turns) == 2
    assert not (project / ".dejacache").exists()
    # intercept() caches into the default store, as its documentation says, monitor or not;
    # the monitor marks the answer intercept() served as one the provider never saw.
    with dejacache.intercept(), PrefixMonitor() as watched, sdk(provider, "openai") as client:
        client.chat.completions.create(**body)  # type: ignore[call-overload]
        client.chat.completions.create(**body)  # type: ignore[call-overload]
    assert len(provider.requests) == 3 and (project / ".dejacache" / "cache.db").exists()
    assert [t.local for t in watched.turns] == [False, True]


def test_leases_inside_and_outside_a_monitor_keep_their_sessions(
    provider: CachingProvider
) -> None:
    """A lease carries its whole context into the agent's threads; a monitor around it or
    inside it does not narrow that, and the monitor names the lease's conversation."""
    pool: dejacache.AgentPool[Any] = dejacache.AgentPool(
        lambda model: sdk(provider, "openai"), signature=("model",),
        on_evict=lambda c: c.close())
    seen: list[Any] = []

    def ask(client: Any) -> None:
        seen.append(current_session())
        client.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "hi"}])

    def turn(client: Any) -> None:
        t = threading.Thread(target=ask, args=(client,))
        t.start()
        t.join(10)

    with PrefixMonitor() as outer, pool.lease("chat:1", model="m") as client:
        turn(client)
    with pool.lease("chat:2", model="m") as client, PrefixMonitor() as inner:
        turn(client)
    pool.close()
    assert [s.session_id for s in seen] == ["chat:1", "chat:2"]
    assert [t.session for t in outer.turns] == ["chat:1"]
    assert [t.session for t in inner.turns] == ["chat:2"]


def test_closing_the_last_monitor_removes_every_patch(provider: CachingProvider) -> None:
    from dejacache.http.intercept import active
    from dejacache.runtime import _lease_threads

    original = threading.Thread.start
    monitor = PrefixMonitor()

    @monitor
    async def turn(n: int, gate: asyncio.Event) -> None:
        client = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="sk-test",
                                    max_retries=0)
        async with client:
            await client.chat.completions.create(model="gpt-4.1", messages=[
                {"role": "user", "content": f"turn {n}"}])
        if n == 0:
            await gate.wait()  # the first one to enter leaves last

    async def main() -> None:
        gate = asyncio.Event()
        first = asyncio.create_task(turn(0, gate))
        await asyncio.sleep(0)
        await turn(1, gate)
        gate.set()
        await first

    asyncio.run(main())
    assert len(monitor.turns) == 2 and len(monitor.report()) == 1
    assert active() == 0 and not _lease_threads.patched()
    assert threading.Thread.start is original
    # And after it, the SDK's requests are nobody's business again.
    with sdk(provider, "openai") as client:
        client.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "after"}])
    assert len(monitor.turns) == 2


# ---------------------------------------------------------------- answers dejacache served


def test_answers_from_dejacaches_store_are_not_counted_as_the_providers(
    provider: CachingProvider
) -> None:
    store = dejacache.MemoryStore()
    runs = []
    for _ in range(2):
        with dejacache.scope(store=store), PrefixMonitor() as monitor, \
                sdk(provider, "anthropic") as client:
            anthropic_agent(client, rebuild=False)
        runs.append(monitor)
    live, cached = runs
    assert len(provider.requests) == len(QUESTIONS)  # the second run never reached it
    (first,) = live.report().values()
    (second,) = cached.report().values()
    assert (first.reported_cached or 0) > 5_000
    # The provider saw none of the second run: no tokens, no cache reads, no hit ratio.
    assert (second.prompt_tokens, second.reported_cached, second.hit_ratio) == (0, None, None)
    assert [t.reported_cached for t in cached.turns] == [None] * 4
    assert all(t.local for t in cached.turns) and not any(t.local for t in live.turns)
    assert (second.turns, second.local_turns, second.breaks) == (4, 4, 0)
    assert first.local_turns == 0


# ---------------------------------------------------------------- hazards, not breaks


def _one_turn(client: anthropic.Anthropic, *, tools_marked: bool,
              system_marked: bool) -> None:
    tool: dict[str, Any] = {"name": "search", "description": "Search trains. " * 200,
                            "input_schema": {"type": "object", "properties": {
                                "q": {"type": "string"}}}}
    system: dict[str, Any] = {"type": "text", "text": "Answer from the timetable. " * 200}
    if tools_marked:
        tool["cache_control"] = {"type": "ephemeral"}
    if system_marked:
        system["cache_control"] = {"type": "ephemeral"}
    client.messages.create(model="claude-sonnet-4-6", max_tokens=8, tools=[tool],  # type: ignore[list-item]
                           system=[system], messages=[  # type: ignore[list-item]
                               {"role": "user", "content": "Paris to Lyon tomorrow? " * 8}])


def test_a_first_turn_never_breaks_and_below_minimum_is_a_hazard(
    provider: CachingProvider
) -> None:
    # (In an uncached scope, as earlier releases observed only inside dejacache blocks.)
    with dejacache.scope(mode="off"), PrefixMonitor() as monitor, \
            sdk(provider, "anthropic") as client:
        with dejacache.agent_session(session_id="tools-only"):
            _one_turn(client, tools_marked=True, system_marked=False)  # ~780 tokens cacheable
        with dejacache.agent_session(session_id="tools-and-system"):
            _one_turn(client, tools_marked=True, system_marked=True)  # ~2,070 + a short tail
    assert monitor.breaks == []
    report = monitor.report()
    assert [h.kind for h in report["tools-only"].hazards] == ["below_minimum"]
    assert report["tools-and-system"].hazards == ()
    assert [h.kind for h in monitor.hazards] == ["below_minimum"]
    # The provider agrees: it wrote the second prefix to its cache, not the first.
    written = [t.reported_written for t in monitor.turns]
    assert written[0] == 0 and (written[1] or 0) > 2_000


def test_an_uncached_tail_is_not_taken_for_the_prefix() -> None:
    """Tools + system marked (~2,070 tokens) and a 51-token question, with usage that names
    only the uncached tail (``input_tokens``: Anthropic leaves the cached part out)."""
    body = {"model": "claude-sonnet-4-6", "max_tokens": 8, "tools": [
        {"name": "search", "description": "Search trains. " * 200,
         "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "system": [{"type": "text", "text": "Answer from the timetable. " * 200,
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Paris to Lyon tomorrow? " * 8}]}
    monitor = PrefixMonitor()
    for session, usage in (("tail", {"input_tokens": 51, "output_tokens": 5}),
                           ("written", {"input_tokens": 51, "cache_read_input_tokens": 0,
                                        "cache_creation_input_tokens": 2_069})):
        assert monitor.observe(body, provider="anthropic", session=session, usage=usage) == []
    assert monitor.breaks == [] and monitor.hazards == []


def test_first_turn_hazards_are_reported_per_session(provider: CachingProvider) -> None:
    with dejacache.scope(mode="off"), PrefixMonitor() as monitor, \
            sdk(provider, "anthropic") as client:
        for name, now in (("a", "12:04:31"), ("b", "12:05:02")):
            with dejacache.agent_session(session_id=name):
                client.messages.create(
                    model="claude-sonnet-4-6", max_tokens=8,
                    messages=[{"role": "user", "content": "hi"}],
                    system=[{"type": "text", "text": build_system(now),
                             "cache_control": {"type": "ephemeral"}}])
    report = monitor.report()
    for name, now in (("a", "12:04:31"), ("b", "12:05:02")):
        (h,) = report[name].hazards
        assert (h.session, h.kind, h.text) == (name, "timestamp", f"2026-05-01 {now}")
    assert len(monitor.hazards) == 1  # the monitor's list: each kind and place once


def test_one_turn_recordings_show_hazards_and_no_breaks(
    provider: CachingProvider, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six one-turn tests, three of them under the minimum and one with no cache marker:
    ``prefix-report`` and the HTML report count no break."""
    tapes = tmp_path / "cassettes"
    marks = [(True, False), (False, False), (True, True), (False, True), (True, False)]
    for i, (tools_marked, system_marked) in enumerate(marks):
        with dejacache.cassette(tapes / f"test_{i}.json", mode="record"), \
                sdk(provider, "anthropic") as client:
            _one_turn(client, tools_marked=tools_marked, system_marked=system_marked)
    with dejacache.cassette(tapes / "test_5.json", mode="record"), \
            sdk(provider, "anthropic") as client:
        client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "text", "text": "short",
                                          "cache_control": {"type": "ephemeral"}}]}])
    assert main(["prefix-report", str(tapes)]) == 0
    out = capsys.readouterr().out
    assert "6 cassettes, 6 sessions, 0 prefix breaks" in out
    assert "top breakers" not in out
    assert "hazards:" in out
    assert "3x below_minimum" in out and "1x no_cache_marker" in out
    run = load_run(tapes / "test_0.json")
    (step,) = [s for s in run.steps if s.prefix is not None]
    assert step.prefix is not None and step.prefix.breaks == ()
    assert [h.split(":")[0] for h in step.prefix.hazards] == ["below_minimum"]
