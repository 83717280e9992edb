"""Volatile names, paths and patterns for intercepted HTTP requests (the real openai SDK)."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from fake_provider import FakeProvider
from fake_tool_api import ToolAPI

import dejacache

TRACES = re.compile(r"(?s)<opentelemetry_traces>.*</opentelemetry_traces>")


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test", max_retries=0) as c:
        yield c


def judge(client: openai.OpenAI, stamp: str, question: str = "Did the agent book it?") -> str:
    prompt = (f"You are a judge.\n<opentelemetry_traces>\nspan a1b2 start {stamp} "
              f"duration 0.41s\n</opentelemetry_traces>\n{question}")
    r = client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": prompt}, {"role": "user", "content": "verdict?"}])
    return r.choices[0].message.content or ""


def test_a_pattern_on_the_cassette_replays_a_prompt_with_fresh_timestamps(
    fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "judge.json"
    with dejacache.cassette(path, "record", volatile=[TRACES]):
        live = judge(client, "12:04:31.120")
    seen = fake.count()
    with dejacache.cassette(path, "replay", volatile=[TRACES]):
        assert judge(client, "12:05:02.877") == live
        with pytest.raises(dejacache.ReplayMiss):  # the rest of the prompt still counts
            judge(client, "12:05:02.877", "Did the agent cancel it?")
    assert fake.count() == seen
    text = path.read_text()
    assert "You are a judge.\\n<volatile>\\nDid the agent book it?" in text
    assert "12:04:31" not in text


def test_dotted_paths_from_the_environment_apply_to_http_bodies(
    fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # DEJACACHE_VOLATILE=body.messages used to be ignored for intercepted calls.
    path = tmp_path / "c.json"
    for spec in ("body.messages[0].content", "messages[0].content"):
        monkeypatch.setenv("DEJACACHE_VOLATILE", spec)
        dejacache.configure(volatile=None)
        with dejacache.cassette(path, "record"):
            live = judge(client, "12:04")
        with dejacache.cassette(path, "replay"):
            assert judge(client, "23:59", "Anything else entirely?") == live
        entries = orjson.loads(path.read_bytes())["entries"]
        assert "judge" not in orjson.dumps(entries).decode()


def test_patterns_from_the_environment_and_on_intercept(
    fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = dejacache.MemoryStore()
    monkeypatch.setenv("DEJACACHE_VOLATILE", "re:start [0-9:.]+")
    with dejacache.scope(mode="record", store=store):
        live = judge(client, "12:04")
    monkeypatch.delenv("DEJACACHE_VOLATILE")
    dejacache.configure(volatile=None)  # settings read the environment once: read it again
    with dejacache.scope(mode="replay", store=store), dejacache.intercept(
            volatile=[re.compile(r"start [0-9:.]+")]):
        assert judge(client, "23:59") == live
    with dejacache.scope(mode="replay", store=store), pytest.raises(dejacache.ReplayMiss):
        judge(client, "23:59")  # without the pattern the timestamp counts again


def test_a_volatile_path_that_never_matches_a_request_warns_naming_it(
    fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
) -> None:
    typo = r"volatile path 'body\.nonexistent_root\.x' from {}.* had 'body'"
    with pytest.warns(dejacache.DejacacheWarning, match=typo.format("cassette")), \
            dejacache.cassette(tmp_path / "a.json", "record",
                               volatile=["body.nonexistent_root.x"]):
        judge(client, "12:04")
    with pytest.warns(dejacache.DejacacheWarning, match=typo.format(r"intercept\(")), \
            dejacache.cassette(tmp_path / "b.json", "record"), \
            dejacache.intercept(volatile=["body.nonexistent_root.x"]):
        judge(client, "12:04")
    # paths that matched, as written for the body or relative to it: quiet (-W error)
    with dejacache.cassette(tmp_path / "c.json", "record",
                            volatile=["body.messages[0].content", "messages[1].role"]):
        judge(client, "12:04")


def test_a_miss_in_volatile_text_prints_the_rule_that_makes_it_a_hit(
    fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "judge.json"
    with dejacache.cassette(path, "record"):
        live = judge(client, "2026-01-01T12:04:31.120Z")
    with pytest.raises(dejacache.ReplayMiss) as info, dejacache.cassette(path, "replay"):
        judge(client, "2026-01-01T12:05:02.877Z")
    rules = list(info.value.suggestion)
    assert rules and all(r in str(info.value) for r in rules)
    from dejacache._learn.masking import Rules
    from dejacache._learn.rekey import rekey_file

    rekey_file(path, Rules(rules))
    seen = fake.count()
    with dejacache.cassette(path, "replay", volatile=rules):
        assert judge(client, "2026-01-01T12:05:02.877Z") == live
    assert fake.count() == seen


# ------------------------------------------------------------------ trace ids: data or telemetry


@pytest.fixture
def tool() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


def test_a_trace_id_asked_for_in_the_query_or_the_body_keys_apart(
    tool: ToolAPI, tmp_path: pathlib.Path,
) -> None:
    """``trace_id`` was dropped wherever it appeared: ``GET /traces?trace_id=def`` replayed
    abc's answer, and so did a JSON body whose own field it was."""
    path = tmp_path / "traces.json"

    def calls(c: httpx.Client, order: tuple[str, ...]) -> dict[str, object]:
        return {t: (c.get("/traces", params={"trace_id": t}).json(),
                    c.post("/echo", json={"trace_id": t, "q": 1}).json()) for t in order}

    with httpx.Client(base_url=tool.url) as c:
        with dejacache.cassette(path, "record"):
            live = calls(c, ("abc", "def"))
        with dejacache.cassette(path, "replay"):
            assert calls(c, ("def", "abc")) == live  # each its own answer, in any order
            with pytest.raises(dejacache.ReplayMiss):
                c.get("/traces", params={"trace_id": "ghi"})


def test_trace_ids_in_metadata_messages_and_headers_still_replay(
    tool: ToolAPI, fake: FakeProvider, client: openai.OpenAI, tmp_path: pathlib.Path,
) -> None:
    """Telemetry a run makes afresh: a ``metadata`` object's, a ``Trace-Id`` header, and
    the ``trace_id`` langwatch-scenario puts on every message, which an agent hands to the
    SDK as they are."""
    path = tmp_path / "telemetry.json"

    def run(tid: str) -> list[object]:
        with httpx.Client(base_url=tool.url) as c:
            echoed = c.post("/echo", headers={"Trace-Id": tid}, json={
                "q": 1, "metadata": {"trace_id": tid, "run": {"span_id": tid}}}).json()
        msgs: Any = [{"role": "user", "content": "hi", "trace_id": tid}]
        r = client.chat.completions.create(model="m", messages=msgs)
        return [echoed["nonce"], r.choices[0].message.content]

    with dejacache.cassette(path, "record"):
        live = run("trace-1")
    with dejacache.cassette(path, "replay"):
        assert run("trace-2") == live
