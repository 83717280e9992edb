"""OpenAI Responses API chains and background responses, with the real openai SDK against the
loopback provider: ids the provider makes anew on every run (``resp_...``) are fed back in
``previous_response_id`` and in the URL of ``GET /v1/responses/{id}``, and replay aliases
both, so re-recording one turn keeps the turns after it hitting."""

from __future__ import annotations

import asyncio
import pathlib
import re
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.cassettes.document import load_document
from dejacache.cassettes.render import render

TOOLS: list[Any] = [{
    "type": "function", "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}]


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET", max_retries=0) as c:
        yield c


def chain(client: openai.OpenAI) -> list[Any]:
    """Three turns, each continuing the one before through ``previous_response_id``."""
    first = client.responses.create(model="gpt-test", input="weather?", tools=TOOLS)
    call = first.output[0]
    assert call.type == "function_call"
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, tools=TOOLS,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}])
    third = client.responses.create(model="gpt-test", previous_response_id=second.id,
                                    input="and tomorrow?")
    return [first.model_dump(), second.model_dump(), third.model_dump()]


def background(client: openai.OpenAI) -> list[Any]:
    """A background response polled until it completes; every state seen, in order."""
    resp = client.responses.create(model="gpt-test", input="long job", background=True)
    seen = [resp.model_dump()]
    while resp.status in ("queued", "in_progress"):
        resp = client.responses.retrieve(resp.id)
        seen.append(resp.model_dump())
    return seen


def drop_first_entry(path: pathlib.Path) -> None:
    """The cassette without its first recorded call: the next run makes that one live."""
    doc = load_document(path.read_bytes(), path)
    path.write_bytes(render(doc["entries"][1:], doc["values"]))


def test_a_chain_replays_with_the_server_gone(fake: FakeProvider, client: openai.OpenAI,
                                              tmp_path: pathlib.Path) -> None:
    path = tmp_path / "chain.json"
    with dejacache.cassette(path, mode="record"):
        live = chain(client)
    assert fake.count() == 3
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        assert chain(client) == live
    assert live[2]["previous_response_id"] == live[1]["id"]


def test_a_rerecorded_first_turn_keeps_the_later_turns_hitting(
        fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "chain.json"
    with dejacache.cassette(path, mode="record"):
        one = chain(client)
    drop_first_entry(path)
    with dejacache.cassette(path, mode="auto") as tape:
        two = chain(client)
    assert fake.count() == 4  # only the first turn went live again...
    assert two[0]["id"] != one[0]["id"]  # ...and the provider gave it a new id,
    assert two[1:] == one[1:]  # which the later turns sent back, and still hit
    assert tape.counters.replayed == 2 and tape.counters.recorded == 1


def test_background_polling_replays_each_state_in_order(
        fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bg.json"
    with dejacache.cassette(path, mode="record"):
        live = background(client)
    assert [s["status"] for s in live] == ["queued", "in_progress", "completed"]
    assert fake.count() == 3
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        assert background(client) == live


def test_a_rerecorded_background_request_keeps_its_polls_hitting(
        fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bg.json"
    with dejacache.cassette(path, mode="record"):
        one = background(client)
    drop_first_entry(path)
    with dejacache.cassette(path, mode="auto") as tape:
        two = background(client)
    # The new id went into the polls' URL; they were served the recorded states.
    assert fake.count() == 4
    assert two[0]["id"] != one[0]["id"]
    assert two[1:] == one[1:]
    assert tape.counters.replayed == 2
    polls = [r["path"] for r in fake.requests if r["body"] is None]
    assert polls == [f"/v1/responses/{one[0]['id']}"] * 2  # the first run's: none since


def test_the_cassette_keys_poll_urls_by_alias(fake: FakeProvider, client: openai.OpenAI,
                                              tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bg.json"
    with dejacache.cassette(path, mode="record"):
        live = background(client)
    entries = orjson.loads(path.read_bytes())["entries"]
    first, *polls = [e["request"]["path"] for e in entries]
    # The id is keyed by the call that created it: its tag is stored with that answer.
    tag = entries[0]["response"]["alias"]
    assert (first, polls) == ("/v1/responses", [f"/v1/responses/<id:{tag}.1>"] * 2)
    assert re.fullmatch(r"[0-9a-f]{12}\.1", tag)
    assert [e["name"] for e in entries] == ["openai.responses"] * 3
    assert live[0]["id"] in entries[1]["response"]["json"]["id"]  # the answer keeps it


def test_async_background_polling_replays_in_order(fake: FakeProvider,
                                                   tmp_path: pathlib.Path) -> None:
    async def poll() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                                      max_retries=0) as client:
            resp = await client.responses.create(model="gpt-test", input="job",
                                                 background=True)
            seen = [resp.status]
            while resp.status in ("queued", "in_progress"):
                resp = await client.responses.retrieve(resp.id)
                seen.append(resp.status)
            return [*seen, resp.output_text]

    path = tmp_path / "bg.json"
    with dejacache.cassette(path, mode="record"):
        live = asyncio.run(poll())
    assert live[:3] == ["queued", "in_progress", "completed"]
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(poll()) == live


def test_polls_recorded_before_urls_were_aliased_still_replay(
        fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.http import exchange, keying

    def unaliased(*args: Any, **kw: Any) -> tuple[bytes, bool]:
        # URLs not aliased, request headers not keyed: how earlier versions keyed a call
        return exchange.canonical_request(*args, **{**kw, "alias_path": False,
                                                    "legacy": True})

    path = tmp_path / "bg.json"
    with monkeypatch.context() as m:  # how earlier versions keyed a URL
        m.setattr(keying, "canonical_request", unaliased)
        with dejacache.cassette(path, mode="record"):
            live = background(client)
    entries = orjson.loads(path.read_bytes())["entries"]
    assert entries[1]["request"]["path"] == f"/v1/responses/{live[0]['id']}"
    fake.stop()
    with dejacache.cassette(path, mode="replay"):
        assert background(client) == live
