"""``PrefixMonitor(apply=...)`` and ``AgentPool(apply=...)``: the planner's cache-control fixes
spliced into the requests the real SDKs send (openai 3.x, anthropic 2.x over httpx2), every
other byte as the SDK wrote it; recordings still replay; nothing applied without opting in."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

import dejacache
from dejacache._core.cache_fields import FIELDS, strip
from dejacache._core.cache_fixes import breakpoint_edits, key_edits, routing_key
from dejacache._core.cache_rules import rules_for
from dejacache._core.json_edit import insert
from dejacache.errors import ConfigurationError
from runtime.cache_provider import CachingProvider

RULES = "Answer with the cheapest train first and name the rule you used. " * 40


@pytest.fixture
def provider() -> Iterator[CachingProvider]:
    server = CachingProvider().start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _observe_only() -> None:
    dejacache.configure(mode="off")  # every request reaches the provider


def claude(client: anthropic.Anthropic) -> Any:
    return client.messages.create(
        model="claude-sonnet-4-6", max_tokens=32,
        system=[{"type": "text", "text": RULES}],
        messages=[{"role": "user", "content": "Paris to Lyon?"},
                  {"role": "assistant", "content": "Which day?"},
                  {"role": "user", "content": [{"type": "text", "text": "Tomorrow."}]}])


def chat(model: str) -> Callable[[openai.OpenAI], Any]:
    def send(client: openai.OpenAI) -> Any:
        return client.chat.completions.create(model=model, messages=[
            {"role": "system", "content": [{"type": "text", "text": RULES}]},
            {"role": "user", "content": "Paris to Lyon tomorrow?"}])
    return send


def responses(client: openai.OpenAI) -> Any:
    return client.responses.create(model="gpt-5.6", instructions="Be brief.", input=[
        {"role": "developer", "content": [{"type": "input_text", "text": RULES}]},
        {"role": "user", "content": "Paris to Lyon tomorrow?"}])


CLOCK = "Current time: 2026-05-01 09:00:00"
EPH = {"type": "ephemeral"}


def claude_misplaced(client: anthropic.Anthropic) -> Any:
    # A marker after the clock (its entry is never read again) and one on an old question.
    return client.messages.create(
        model="claude-sonnet-4-6", max_tokens=32,
        system=[{"type": "text", "text": RULES},
                {"type": "text", "text": CLOCK, "cache_control": EPH}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Paris to Lyon?",
                                                "cache_control": EPH}]},
                  {"role": "assistant", "content": "Which day?"},
                  {"role": "user", "content": "Tomorrow."}])


def chat_misplaced(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(model="gpt-5.6", messages=[
        {"role": "system", "content": [
            {"type": "text", "text": RULES},
            {"type": "text", "text": CLOCK, "prompt_cache_breakpoint": {"mode": "explicit"}}]},
        {"role": "user", "content": "Paris to Lyon tomorrow?"}])


CASES = {
    "anthropic": ("anthropic", "messages", claude),
    "anthropic-moved": ("anthropic", "messages", claude_misplaced),
    "openai-chat-gpt-5.6-moved": ("openai", "chat", chat_misplaced),
    "openai-chat-gpt-4.1": ("openai", "chat", chat("gpt-4.1")),
    "openai-chat-gpt-5.6": ("openai", "chat", chat("gpt-5.6")),
    "openai-responses-gpt-5.6": ("openai", "responses", responses),
}


def client_for(provider: CachingProvider, name: str) -> Any:
    if name.startswith("anthropic"):
        return anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0,
                                   http_client=dejacache.http_client())
    return openai.OpenAI(base_url=provider.url + "/v1", api_key="sk-test", max_retries=0,
                         http_client=dejacache.http_client())


def expected_edits(name: str, api: str, raw: bytes, session: str) -> list[Any]:
    body = orjson.loads(raw)
    rules = rules_for(name, body["model"])
    return [*key_edits(api, body, session), *breakpoint_edits(api, body, rules)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_cache_fields_are_added_every_other_byte_as_sent(
        provider: CachingProvider, case: str) -> None:
    name, api, send = CASES[case]
    with client_for(provider, name) as client:
        send(client)  # as the SDK sends it
        with dejacache.PrefixMonitor(apply=True), dejacache.agent_session(session_id="chat-7"):
            send(client)
    plain, applied = provider.raw
    edits = expected_edits(name, api, plain, "chat-7")
    assert edits, "every case has something to add"
    # Byte for byte: the SDK's bytes with the members spliced in, and nothing else.
    assert applied == insert(plain, edits)
    assert len(applied) > len(plain)
    # What the model reads (everything but the cache controls) is the same value.
    fields = FIELDS[name]
    assert strip(orjson.loads(applied), fields) == strip(orjson.loads(plain), fields)
    if name == "openai":
        assert orjson.loads(applied)["prompt_cache_key"] == routing_key("chat-7")
    if case.endswith("-moved"):  # taken off the block after the clock, put on the one before
        before, after = (orjson.loads(b)[("system" if name == "anthropic" else "messages")]
                         for b in (plain, applied))
        blocks = (before, after) if name == "anthropic" else (
            before[0]["content"], after[0]["content"])
        mark = "cache_control" if name == "anthropic" else "prompt_cache_breakpoint"
        assert [mark in b for b in blocks[0]] == [False, True]
        assert [mark in b for b in blocks[1]] == [True, False]


def test_the_pool_applies_per_lease_and_threads_carry_it(provider: CachingProvider) -> None:
    class Agent:
        def __init__(self, model: str) -> None:
            self.model = model

    pool: dejacache.AgentPool[Agent] = dejacache.AgentPool(Agent, signature=("model",),
                                                           apply=["prompt_cache_key"])
    sessions = []
    with client_for(provider, "openai") as client:
        for who in ("alice", "bob"):
            with pool.lease(who, model="gpt-4.1"):
                current = dejacache.runtime.current_session()
                assert current is not None
                sessions.append(current.session_id)
                # hermes-agent sends from a bare thread it starts: the lease reaches it.
                t = threading.Thread(target=chat("gpt-4.1"), args=(client,))
                t.start()
                t.join()
        chat("gpt-4.1")(client)  # outside a lease: untouched
    pool.close()
    keys = [orjson.loads(raw).get("prompt_cache_key") for raw in provider.raw]
    assert keys == [routing_key(sessions[0]), routing_key(sessions[1]), None]
    assert keys[0] != keys[1]


def test_no_routing_key_without_a_conversation_and_the_monitors_threads(
        provider: CachingProvider) -> None:
    with client_for(provider, "openai") as client:
        with dejacache.PrefixMonitor(apply=["prompt_cache_key"]):
            chat("gpt-4.1")(client)  # no session names the conversation: no key
        with dejacache.PrefixMonitor(apply=["prompt_cache_key"]), \
                dejacache.agent_session(session_id="chat-9"):
            t = threading.Thread(target=chat("gpt-4.1"), args=(client,))
            t.start()  # a monitor tells its threads the conversation's name
            t.join()
    first, second = (orjson.loads(r) for r in provider.raw)
    assert "prompt_cache_key" not in first
    assert second["prompt_cache_key"] == routing_key("chat-9")


def test_replayed_recordings_stay_hits_with_or_without_the_fixes(
        provider: CachingProvider, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "agent.json"
    with client_for(provider, "anthropic") as client:
        with dejacache.cassette(path, mode="record"):
            live = claude(client).model_dump()
        provider.stop()  # nothing may reach it now
        with dejacache.PrefixMonitor(apply=True), dejacache.agent_session(session_id="s"), \
                dejacache.cassette(path, mode="replay"):
            assert claude(client).model_dump() == live
    applied = tmp_path / "applied.json"
    provider.start()
    with client_for(provider, "openai") as client:
        with dejacache.PrefixMonitor(apply=True), dejacache.agent_session(session_id="s"), \
                dejacache.cassette(applied, mode="record"):
            live = chat("gpt-5.6")(client).model_dump()
        provider.stop()
        with dejacache.cassette(applied, mode="replay"):
            assert chat("gpt-5.6")(client).model_dump() == live


def test_the_fixes_make_the_provider_cache(provider: CachingProvider) -> None:
    def bare(client: anthropic.Anthropic, turn: int) -> Any:
        msgs: list[Any] = []
        for i in range(turn):
            msgs += [{"role": "user", "content": f"question {i}"}]
            if i < turn - 1:
                msgs += [{"role": "assistant", "content": f"answer {i}"}]
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=8,
                                      system=RULES * 2, messages=msgs).usage

    with client_for(provider, "anthropic") as client:
        before = [bare(client, t).cache_read_input_tokens for t in (1, 2, 3)]
        provider.clear()
        with dejacache.PrefixMonitor(apply=["breakpoints"]) as monitor:
            after = [bare(client, t).cache_read_input_tokens for t in (1, 2, 3)]
    assert before == [0, 0, 0]  # a string system prompt, no marker: nothing cached
    assert after[0] == 0 and after[1] > 1024 and after[2] > after[1]
    (report,) = monitor.report().values()
    assert report.reported_cached == sum(after) == report.expected_cached


def test_apply_names_what_it_accepts() -> None:
    with pytest.raises(ConfigurationError, match=r"PrefixMonitor: apply=\['ttl'\].*'breakpoints'"):
        dejacache.PrefixMonitor(apply=["ttl"])
    with pytest.raises(ConfigurationError, match="AgentPool: apply="):
        dejacache.AgentPool(dict, apply="everything")
    assert dejacache.PrefixMonitor(apply=False)._fixer is None


def test_markers_past_the_limit_are_dropped_so_the_request_is_accepted(
        provider: CachingProvider) -> None:
    # Five markers: Anthropic refuses the request; the fix drops the earliest one.
    def five(client: anthropic.Anthropic) -> Any:
        return client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[
            {"role": "user" if i % 2 == 0 else "assistant",
             "content": [{"type": "text", "text": f"m{i}", "cache_control": EPH}]}
            for i in range(5)])

    with client_for(provider, "anthropic") as client:
        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
            five(client)
        with dejacache.PrefixMonitor(apply=["breakpoints"]):
            five(client)
    sent = orjson.loads(provider.raw[-1])
    assert [("cache_control" in m["content"][0]) for m in sent["messages"]] == [
        False, True, True, True, True]
