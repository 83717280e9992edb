"""Prompt-cache controls are not part of HTTP keys: a recording replays whatever breakpoints,
lifetimes or routing key the code adds or drops later (the planner's fixes add exactly these),
and the stored request keeps them. Real SDKs against the loopback provider of tests/http."""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache import ReplayMiss
from dejacache.http.providers.anthropic import PROVIDER as ANTHROPIC
from dejacache.http.providers.openai import PROVIDER as OPENAI

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
RULES = "Answer in one sentence and name the rule you used. " * 4
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def an(fake: FakeProvider) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0) as c:
        yield c


@pytest.fixture
def oa(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test", max_retries=0) as c:
        yield c


def claude(**cache: Any) -> dict[str, Any]:
    """An Anthropic request; ``system``/``tool``/``block``: a cache_control on that place,
    ``top``: top-level (automatic caching)."""
    system: dict[str, Any] = {"type": "text", "text": RULES}
    tool: dict[str, Any] = {"name": "lookup", "description": "find a rule",
                            "input_schema": {"type": "object", "properties": {}}}
    question: dict[str, Any] = {"type": "text", "text": "Which rule?"}
    result: dict[str, Any] = {"type": "text", "text": "rule 3"}
    for name, block in (("system", system), ("tool", tool), ("block", question),
                        ("inner", result)):
        if name in cache:
            block["cache_control"] = cache[name]
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6", "max_tokens": 64, "system": [system], "tools": [tool],
        "messages": [
            {"role": "user", "content": "Find rule 3."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                               "name": "lookup", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [result]}, question]}]}
    if "top" in cache:
        body["cache_control"] = cache["top"]
    return body


def gpt(**cache: Any) -> dict[str, Any]:
    """An OpenAI chat request; ``part``: a prompt_cache_breakpoint on the system part, other
    names: top-level members."""
    part: dict[str, Any] = {"type": "text", "text": RULES}
    if "part" in cache:
        part["prompt_cache_breakpoint"] = cache.pop("part")
    return {"model": "gpt-5.6", "messages": [{"role": "system", "content": [part]},
                                             {"role": "user", "content": "Which rule?"}],
            **cache}


def _record_then_replay(path: pathlib.Path, send: Any, recorded: dict[str, Any],
                        replayed: list[dict[str, Any]]) -> None:
    with dejacache.cassette(path, mode="record"):
        live = send(copy.deepcopy(recorded))
    for body in replayed:
        with dejacache.cassette(path, mode="replay"):
            assert send(copy.deepcopy(body)) == live, body


def test_anthropic_breakpoints_added_or_removed_after_recording_replay(
        an: anthropic.Anthropic, tmp_path: pathlib.Path) -> None:
    def send(body: dict[str, Any]) -> Any:
        return an.messages.create(**body).model_dump()

    hour = {"type": "ephemeral", "ttl": "1h"}
    _record_then_replay(tmp_path / "a.json", send, claude(), [
        claude(top=EPHEMERAL), claude(system=EPHEMERAL), claude(system=hour, block=EPHEMERAL),
        claude(tool=EPHEMERAL, inner=EPHEMERAL, top=hour)])
    # And the other way round: recorded with markers, replayed without or with others.
    _record_then_replay(tmp_path / "b.json", send, claude(system=hour, block=EPHEMERAL),
                        [claude(), claude(top=EPHEMERAL)])


def test_openai_routing_lifetime_and_breakpoints_added_after_recording_replay(
        oa: openai.OpenAI, tmp_path: pathlib.Path) -> None:
    def send(body: dict[str, Any]) -> Any:
        return oa.chat.completions.create(**body).model_dump()

    _record_then_replay(tmp_path / "c.json", send, gpt(), [
        gpt(prompt_cache_key="session-7"), gpt(prompt_cache_retention="24h"),
        gpt(part={"mode": "explicit"}, prompt_cache_options={"mode": "explicit", "ttl": "30m"}),
        gpt(prompt_cache_key="another-session", part={"mode": "explicit", "ttl": "12h"})])


def test_responses_input_breakpoint_added_after_recording_replays(
        oa: openai.OpenAI, tmp_path: pathlib.Path) -> None:
    def send(body: dict[str, Any]) -> Any:
        return oa.responses.create(**body).model_dump()

    def resp(**cache: Any) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "input_text", "text": RULES}
        if "part" in cache:
            part["prompt_cache_breakpoint"] = cache.pop("part")
        return {"model": "gpt-5.6", "input": [{"role": "user", "content": [part]}], **cache}

    _record_then_replay(tmp_path / "r.json", send, resp(), [
        resp(part={"mode": "explicit"}, prompt_cache_key="k", prompt_cache_options={
            "mode": "implicit"})])


def test_the_stored_request_keeps_its_cache_controls(
        an: anthropic.Anthropic, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.json"
    with dejacache.cassette(path, mode="record"):
        an.messages.create(**claude(system=EPHEMERAL, top={"type": "ephemeral", "ttl": "1h"}))
    from dejacache.cassettes.view import expanded_entries, load

    (entry,) = expanded_entries(load(path))
    body = entry["request"]["body"]
    assert body["system"][0]["cache_control"] == EPHEMERAL
    assert body["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_what_the_model_reads_stays_keyed(an: anthropic.Anthropic, oa: openai.OpenAI,
                                          tmp_path: pathlib.Path) -> None:
    # A tool parameter that happens to be called cache_control is part of the tool: only the
    # documented places are cache controls.
    def named(prop: str) -> dict[str, Any]:
        body = claude()
        body["tools"][0]["input_schema"]["properties"] = {prop: {"type": "string"}}
        return body

    path = tmp_path / "t.json"
    with dejacache.cassette(path, mode="record"):
        an.messages.create(**named("cache_control"))
        oa.chat.completions.create(**gpt(prompt_cache_key="k"))
    with dejacache.cassette(path, mode="replay"):
        with pytest.raises(ReplayMiss):
            an.messages.create(**named("other"))
        with pytest.raises(ReplayMiss):  # the text is what the model reads
            oa.chat.completions.create(**{**gpt(prompt_cache_key="k"), "model": "gpt-5.5"})


def test_recordings_keyed_with_their_cache_controls_still_replay(
        an: anthropic.Anthropic, oa: openai.OpenAI, fake: FakeProvider,
        tmp_path: pathlib.Path) -> None:
    # Recorded while cache controls were keyed (fixtures/make_cache_field_keys.py): the same
    # requests still find their entries.
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        from make_cache_field_keys import anthropic_request, openai_request
    finally:
        sys.path.remove(str(FIXTURES))
    path = tmp_path / "old.json"
    path.write_bytes((FIXTURES / "cache_field_keys.json").read_bytes())
    before = fake.count()
    with dejacache.cassette(path, mode="replay"):
        m = an.messages.create(**anthropic_request())
        c = oa.chat.completions.create(**openai_request())
    assert m.content[0].type == "text" and m.content[0].text.startswith("Claude-ish reply")
    assert c.choices[0].message.content
    assert fake.count() == before


@pytest.mark.parametrize(("provider", "body", "fields"), [
    (ANTHROPIC, claude(system=EPHEMERAL, tool=EPHEMERAL, block=EPHEMERAL, inner=EPHEMERAL,
                       top=EPHEMERAL),
     ["cache_control", "tools[*].cache_control", "system[*].cache_control",
      "messages[*].content[*].cache_control", "messages[*].content[*].content[*].cache_control"]),
    (OPENAI, gpt(part={"mode": "explicit"}, prompt_cache_key="k", prompt_cache_retention="24h",
                 prompt_cache_options={"mode": "explicit"}),
     ["prompt_cache_key", "prompt_cache_retention", "prompt_cache_options",
      "messages[*].content[*].prompt_cache_breakpoint"]),
])
def test_strip_removes_each_declared_place(provider: Any, body: dict[str, Any],
                                           fields: list[str]) -> None:
    from dejacache._core.cache_fields import fields_in, may_hold, strip

    assert [p for p, _ in fields_in(body, provider.cache_fields)] == fields
    bare = strip(body, provider.cache_fields)
    assert list(fields_in(bare, provider.cache_fields)) == []
    assert b"cache_control" not in orjson.dumps(bare)
    assert b"prompt_cache" not in orjson.dumps(bare)
    assert strip(bare, provider.cache_fields) is bare  # nothing to strip: the same object
    assert may_hold(orjson.dumps(body), provider.cache_fields)
    assert not may_hold(orjson.dumps(claude()), OPENAI.cache_fields)


def test_a_gemini_cached_content_name_stays_keyed(tmp_path: pathlib.Path) -> None:
    # ``cachedContent`` names content the model reads (a CachedContent's system instruction
    # and contents): two caches asked the same question must not share an answer. A cache
    # created inside the recording replays its recorded name, so the calls that use it hit.
    genai = pytest.importorskip("google.genai")
    from fake_gemini import FakeGemini
    from google.genai import types

    server = FakeGemini().start()
    path = tmp_path / "g.json"

    def ask(name: str) -> Any:
        with genai.Client(api_key="gemini-test-key", http_options=types.HttpOptions(
                base_url=server.url)) as client:
            return client.models.generate_content(
                model="gemini-2.5-flash", contents="Which rule?",
                config=types.GenerateContentConfig(cached_content=name)).text

    try:
        with dejacache.cassette(path, mode="record"):
            live = ask("cachedContents/rules-v1")
    finally:
        server.stop()
    with dejacache.cassette(path, mode="replay"):
        assert ask("cachedContents/rules-v1") == live
        with pytest.raises(ReplayMiss):
            ask("cachedContents/rules-v2")
