"""Partial replay: ``live=`` kinds or names go live, ``replay_until=N`` goes live after N."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

import dejacache
from dejacache import ConfigurationError, ReplayDivergence, ReplayMiss
from dejacache.cassettes.partial import Partial, parse_live
from loopback_provider import fake_provider_module

LIVE: list[str] = []
VERSION = {"n": 1}


@dejacache.cache(name="llm", kind="llm")
def llm(prompt: str) -> str:
    LIVE.append(f"llm {prompt}")
    return f"{prompt} v{VERSION['n']}"


@dejacache.cache(name="tools.search_web", kind="tool")
def search_web(q: str) -> str:
    LIVE.append(f"search {q}")
    return f"found {q}"


@dejacache.cache(name="tools.fetch", kind="tool")
def fetch(url: str) -> str:
    LIVE.append(f"fetch {url}")
    return f"page {url}"


def agent() -> str:
    plan = llm("plan")
    hits = search_web("paris")
    page = fetch("paris.example")
    return llm(f"answer {plan} {hits} {page}")


@pytest.fixture
def recorded(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    path = tmp_path / "agent.json"
    VERSION["n"] = 1
    with dejacache.cassette(path):
        agent()
    LIVE.clear()
    VERSION["n"] = 2  # the model "changed": a live answer is told from a replayed one
    yield path
    LIVE.clear()


def names(path: pathlib.Path) -> list[str]:
    return [e["name"] for e in orjson.loads(path.read_bytes())["entries"]]


@pytest.mark.parametrize(("item", "name", "kind", "live"), [
    ("model", "openai.chat.completions", "http", True),
    ("model", "llm", "llm", True),
    ("model", "http.example.com", "http", False),  # no provider module names it
    ("http", "http.example.com", "http", True),
    ("tool", "tools.search_web", "tool", True),
    ("tool", "mcp.tools/call", "mcp", True),
    ("tool:search_web", "tools.search_web", "tool", True),  # the last dotted part
    ("tool:search_web", "tools.fetch", "tool", False),
    ("model:openai.*", "openai.responses", "http", True),
    ("model:openai.*", "anthropic.messages", "http", False),
    ("fetch", "tools.fetch", "tool", True),
    ("function", "helpers.parse", "call", True),
])
def test_the_live_vocabulary(item: str, name: str, kind: str, live: bool) -> None:
    assert Partial(parse_live([item]), None).mode_for(name, kind) == (
        "record" if live else "replay")


def test_bad_partial_settings_are_errors_where_written(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with pytest.raises(ConfigurationError, match="unknown kind 'agent'"):
        dejacache.cassette(path, live=["agent:x"])
    with pytest.raises(ConfigurationError, match="replay_until must be a number"):
        dejacache.cassette(path, replay_until=-1)
    with pytest.raises(ConfigurationError, match="mode='record' contradicts"):
        dejacache.cassette(path, "record", live=["model"])
    with pytest.raises(ConfigurationError, match="is the cassette itself"):
        dejacache.cassette(path, live=["model"], live_path=path)


def test_live_models_against_recorded_tools(recorded: pathlib.Path) -> None:
    before = recorded.read_bytes()
    with dejacache.cassette(recorded, live=["model"]) as tape:
        out = agent()
    assert LIVE == ["llm plan", "llm answer plan v2 found paris page paris.example"]
    assert out.endswith("v2")
    assert tape.counters.replayed == 2 and tape.counters.recorded == 2
    assert recorded.read_bytes() == before  # never written over
    derived = recorded.with_name("agent.live.json")
    assert names(derived) == ["llm", "llm"]


def test_one_tool_live_by_name(recorded: pathlib.Path, tmp_path: pathlib.Path) -> None:
    elsewhere = tmp_path / "runs" / "search.json"
    with dejacache.cassette(recorded, live=["tool:search_web"], live_path=elsewhere):
        assert agent() == "answer plan v1 found paris page paris.example v1"
    assert LIVE == ["search paris"]
    assert names(elsewhere) == ["tools.search_web"]


def test_a_replayed_call_without_recording_is_a_miss(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayMiss) as caught, dejacache.cassette(recorded, live=["model"]):
        llm("plan")
        search_web("rome")  # not live, and never recorded: nothing is run
    assert "search_web" in str(caught.value) and "paris" in str(caught.value)  # the nearest
    assert LIVE == ["llm plan"]


def test_replay_until_replays_the_first_steps_then_goes_live(recorded: pathlib.Path) -> None:
    before = recorded.read_bytes()
    with dejacache.cassette(recorded, replay_until=2) as tape:
        out = agent()
    assert recorded.read_bytes() == before  # the live part never reaches the original
    assert tape.divergences == []  # the recorded steps after the first 2 went live
    assert LIVE == ["fetch paris.example", "llm answer plan v1 found paris page paris.example"]
    assert out.endswith("v2") and tape.counters.replayed == 2
    assert names(recorded.with_name("agent.live.json")) == ["tools.fetch", "llm"]
    assert [c.outcome for c in tape.calls] == ["replayed", "replayed"]


def test_replay_until_names_the_step_it_expected(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(recorded, replay_until=3):
        llm("plan")
        search_web("rome")
    msg = str(caught.value)
    assert "differs from the recorded call at step 1" in msg
    assert "q: 'paris' -> 'rome'" in msg
    assert LIVE == []  # refused before anything ran
    assert not recorded.with_name("agent.live.json").exists()


def test_replay_until_an_out_of_order_call_names_both_steps(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(recorded, replay_until=3):
        llm("plan")
        fetch("paris.example")
    err = caught.value
    assert (err.reason, err.step, err.recorded_step) == ("order", 1, 1)
    assert err.expected is not None and err.expected.name == "tools.search_web"
    assert "call #1 (tool tools.fetch) is out of order: it was recorded as step 2" in str(err)


def test_replay_until_a_run_that_stops_before_n_fails_at_exit(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence, match="3 of the 4 recorded calls") as caught, \
            dejacache.cassette(recorded, replay_until=3):
        llm("plan")  # the agent stopped: nothing went live, the rest were never made
    assert caught.value.reason == "unmade"
    assert not recorded.with_name("agent.live.json").exists()


def test_strict_live_checks_the_replayed_calls_in_recorded_order(
        recorded: pathlib.Path) -> None:
    with dejacache.cassette(recorded, live=["model"], strict=True) as tape:
        out = agent()  # the recorded llm steps went live: skipped, not missing steps
    assert out.endswith("v2") and tape.divergences == []
    assert LIVE == ["llm plan", "llm answer plan v2 found paris page paris.example"]
    LIVE.clear()
    with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(
            recorded, live=["model"], strict=True):
        llm("plan")
        fetch("paris.example")  # recorded after search_web, in the same task
    err = caught.value
    assert err.reason == "order" and err.recorded_step == 1  # the step it expected
    assert err.expected is not None and err.expected.name == "tools.search_web"
    assert "tools.search_web" in str(err) and "tools.fetch" in str(err)
    assert "previous replayed call in this run is none" in str(err)
    assert LIVE == ["llm plan"]  # the out-of-order tool never ran


def test_strict_live_a_changed_replayed_call_names_its_step(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(
            recorded, live=["model"], strict=True):
        llm("plan")
        llm("plan again")  # the live part may make more calls than it recorded
        search_web("rome")
    assert "differs from the recorded call at step 1" in str(caught.value)
    assert "q: 'paris' -> 'rome'" in str(caught.value)


def test_strict_live_a_replayed_step_never_made_fails_at_exit(
        recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence, match="1 of the 4 recorded calls") as caught, \
            dejacache.cassette(recorded, live=["model"], strict=True):
        llm("plan")
        search_web("paris")
        llm("answer")  # fetch was skipped: a replayed step, so a missing one
    assert "tools.fetch" in str(caught.value)


def test_live_without_strict_lists_divergences_of_the_replayed_part_only(
        recorded: pathlib.Path) -> None:
    with dejacache.cassette(recorded, live=["model"]) as tape:
        llm("plan")
        fetch("paris.example")
        search_web("paris")
    got = [(d.reason, d.expected.name if d.expected else None) for d in tape.divergences]
    assert got[0] == ("order", "tools.search_web")  # the swap, as without live=
    assert all(r != "unmade" for r, _ in got)  # the recorded llm steps went live


@dejacache.cache(name="tools.lookup", kind="tool")
async def alookup(q: str) -> str:
    LIVE.append(f"lookup {q}")
    return f"{q} #{len(LIVE)}"


async def test_concurrent_identical_calls_get_their_own_tasks_answers_after_live_steps(
        tmp_path: pathlib.Path) -> None:
    import asyncio

    path = tmp_path / "gather.json"

    async def worker(who: str) -> str:
        await alookup(who)  # distinguishes the tasks (replayed)
        await allm(who)  # goes live on replay
        return await alookup("shared")  # identical in both tasks

    async def run() -> list[str]:
        a = asyncio.create_task(worker("a"))
        await asyncio.sleep(0)
        return [await a, await asyncio.create_task(worker("b"))]

    with dejacache.cassette(path):
        recorded_answers = await run()
    assert recorded_answers[0] != recorded_answers[1]
    for strict in (False, True):
        LIVE.clear()
        with dejacache.cassette(path, live=["model"], strict=strict) as tape:
            b = asyncio.create_task(worker("b"))  # b first now: it must not take a's answer
            await b
            a = await worker("a")
        assert [a, b.result()] == recorded_answers
        assert LIVE == ["allm b", "allm a"] and tape.divergences == []


@pytest.fixture
def fake() -> Iterator[Any]:
    server = fake_provider_module().FakeProvider().start()
    try:
        yield server
    finally:
        server.stop()


TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "search_web", "description": "search",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def sdk_agent(client: openai.OpenAI) -> list[str]:
    """Model asks for a tool, the tool (recorded) answers, the model answers."""
    msgs: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    first = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": search_web("paris")}]
    second = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS)
    return [first.id, str(second.choices[0].message.content)]


def test_live_model_through_the_openai_sdk(fake: Any, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sdk.json"
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                       max_retries=0) as client:
        with dejacache.cassette(path):
            recorded = sdk_agent(client)
        LIVE.clear()
        with dejacache.cassette(path, live=["model"]) as tape:
            again = sdk_agent(client)
        assert LIVE == []  # the tool replayed
        assert again[0] != recorded[0] and again[1] != recorded[1]  # fresh answers
        assert tape.counters.replayed == 1 and tape.counters.recorded == 2
        assert names(path.with_name("sdk.live.json")) == ["openai.chat.completions"] * 2
        with dejacache.cassette(path, replay_until=1):
            until = sdk_agent(client)
        assert until[0] == recorded[0] and until[1] != recorded[1]
        assert LIVE == ["search paris"]


def test_strict_live_model_through_the_openai_sdk(fake: Any, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sdk.json"
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                       max_retries=0) as client:
        with dejacache.cassette(path):
            sdk_agent(client)
            search_web("rome")
        LIVE.clear()
        with dejacache.cassette(path, live=["model"], strict=True) as tape:
            sdk_agent(client)
            search_web("rome")
        assert LIVE == [] and tape.divergences == []  # both tools replayed in order
        assert tape.counters.replayed == 2 and tape.counters.recorded == 2
        with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(
                path, live=["model"], strict=True):
            search_web("rome")  # recorded after the paris search (the model went live)
            sdk_agent(client)
        err = caught.value
        assert err.reason == "order" and err.expected is not None
        assert err.expected.name == "tools.search_web" and "paris" in str(err)
        assert LIVE == []  # refused before the tool ran
    assert b"sk-test-SECRET" not in path.with_name("sdk.live.json").read_bytes()


@dejacache.cache(name="allm", kind="llm")
async def allm(prompt: str) -> str:
    LIVE.append(f"allm {prompt}")
    return f"{prompt} v{VERSION['n']}"


@dejacache.cache(name="tools.asearch", kind="tool")
async def asearch(q: str) -> str:
    LIVE.append(f"asearch {q}")
    return f"found {q}"


async def test_async_calls_go_live_by_kind_too(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.json"
    VERSION["n"] = 1
    with dejacache.cassette(path):
        await allm(await asearch("paris"))
    LIVE.clear()
    VERSION["n"] = 2
    with dejacache.cassette(path, live=["model"]):
        assert await allm(await asearch("paris")) == "found paris v2"
    assert LIVE == ["allm found paris"]
    LIVE.clear()
    with pytest.raises(ReplayDivergence) as caught, dejacache.cassette(
            path, live=["model"], strict=True):
        await asearch("rome")
    assert caught.value.recorded_step == 0 and "q: 'paris' -> 'rome'" in str(caught.value)
    with dejacache.cassette(path, live=["model"], strict=True) as tape:
        assert await allm(await asearch("paris")) == "found paris v2"
    assert tape.divergences == []
    LIVE.clear()
