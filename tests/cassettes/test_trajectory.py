"""``load_cassette`` / ``diff_cassettes``: recordings as data."""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

import openai
import pytest

import dejacache
from dejacache.cassettes.prices import estimate_dollars
from dejacache.cassettes.trajectory import usage_tokens

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "http"))
from fake_provider import FakeProvider

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@dejacache.cache(name="get_weather", kind="tool")
def get_weather(city: str) -> str:
    return f"sunny in {city}"


@dejacache.cache(name="fmt")
def fmt_answer(text: str) -> str:
    return text.upper()


def agent(client: openai.OpenAI, city: str, stream_last: bool = False) -> str:
    msgs: list[Any] = [{"role": "user", "content": f"weather in {city}?"}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=msgs, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    out = get_weather(city=city)
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": out}]
    if stream_last:
        text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="gpt-4o-mini", messages=msgs, stream=True) if ch.choices)
    else:
        text = client.chat.completions.create(model="gpt-4o-mini", messages=msgs
                                              ).choices[0].message.content or ""
    return fmt_answer(text)


@pytest.fixture
def fake() -> Any:
    server = FakeProvider().start()
    yield server
    server.stop()


def record(fake: FakeProvider, path: pathlib.Path, city: str, **kw: Any) -> None:
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                       max_retries=0) as client, dejacache.cassette(path, mode="record"):
        agent(client, city, **kw)


def test_steps_in_order_with_kinds_tokens_cost_and_redacted_requests(fake, tmp_path) -> None:
    p = tmp_path / "a.json"
    record(fake, p, "Paris")
    view = dejacache.load_cassette(p)
    assert [(s.kind, s.name) for s in view.steps] == [
        ("model", "openai.chat.completions"), ("tool", "get_weather"),
        ("model", "openai.chat.completions"), ("function", "fmt")]
    assert [s.name for s in view.steps if s.kind == "tool"] == ["get_weather"]
    assert view.steps[1].args == {"city": "Paris"}
    assert view.steps[1].response == "sunny in Paris"
    assert [tc.name for tc in view.steps[0].tool_calls] == ["get_weather"]
    assert view.steps[0].tool_calls[0].arguments == {"city": "Paris"}
    assert view.steps[2].args["messages"][-1]["content"] == "sunny in Paris"
    assert "sk-test-SECRET" not in repr([s.request for s in view.steps])
    assert view.num_steps == 4 and view.tokens_exact
    usage = view.steps[0].usage
    assert usage is not None and (view.steps[0].input_tokens, view.steps[0].output_tokens
                                  ) == usage_tokens(usage)
    assert view.total_tokens == view.total_input_tokens + view.total_output_tokens > 0
    # a tool without usage: what its result adds to the conversation, estimated and not
    # counted in the totals (the next model call reads it as input); the totals stay exact
    tool = view.steps[1]
    assert (tool.input_tokens, tool.output_tokens) == (0, -(-len('"sunny in Paris"') // 4))
    assert not tool.tokens_exact and not tool.counted and view.tokens_exact
    assert view.total_tokens == sum(s.total_tokens for s in view.steps if s.kind == "model")
    assert view.cost == pytest.approx(2 * estimate_dollars(usage, "gpt-4o-mini"))
    assert view.duration == pytest.approx(sum(s.duration for s in view.steps))
    assert [s.follows for s in view.steps] == [-1, 0, 1, 2]
    assert view.steps[0].error is None and view.steps[0].outcome is None


def test_a_stream_without_usage_is_estimated(fake, tmp_path) -> None:
    p = tmp_path / "s.json"
    record(fake, p, "Oslo", stream_last=True)
    step = dejacache.load_cassette(p).steps[2]
    if step.usage is None:
        assert not step.tokens_exact and step.input_tokens > 0
    else:  # the fake provider reported usage in its stream
        assert step.tokens_exact


def test_a_stream_without_usage_is_estimated_from_its_text_not_its_events(
        fake, tmp_path, capsys) -> None:
    # Sizing the SSE events made a 62-character answer 948 output tokens: every OpenAI chunk
    # repeats its id, model and choice scaffolding around a word or two.
    p = tmp_path / "s.json"
    fake.script.append({"no_usage": True})
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test", max_retries=0) as client, \
            dejacache.cassette(p, mode="record"):
        text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True)
            if ch.choices)
    step = dejacache.load_cassette(p).steps[0]
    assert step.usage is None and not step.tokens_exact
    assert step.output_tokens == -(-len(text) // 4)
    from dejacache.cli import main

    assert main(["show", str(p), "--plain"]) == 0
    out = capsys.readouterr().out
    assert f"{step.total_tokens:,} tokens (estimated)" in out


def test_stream_text_is_read_from_every_provider_event_shape() -> None:
    from dejacache.cassettes.trajectory import _stream_text_size

    def ev(data: Any) -> list[Any]:
        return [0.0, "data: " + json.dumps(data) + "\n\n"]

    events = [
        ev({"choices": [{"delta": {"role": "assistant", "content": "Hello"}}]}),  # chat: 5
        ev({"choices": [{"delta": {"tool_calls": [{"function": {
            "name": "f", "arguments": "{}"}}]}}]}),  # 1 + 2
        ev({"type": "response.output_text.delta", "delta": "abc"}),  # responses: 3
        ev({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "wxyz"}}),
        ev({"type": "content_block_delta", "delta": {"partial_json": "{\"a\":1}"}}),  # 7
        [0.0, "data: [DONE]\n\n"], [0.0, ": keep-alive\n\n"],
    ]
    assert _stream_text_size(events) == 5 + 3 + 3 + 4 + 7
    assert _stream_text_size(None) == 0


def test_re_recording_the_same_run_diffs_identical_despite_fresh_provider_ids(
        fake, tmp_path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    record(fake, a, "Paris")
    record(fake, b, "Paris")
    va, vb = dejacache.load_cassette(a), dejacache.load_cassette(b)
    assert va.steps[0].response["ids"] != vb.steps[0].response["ids"]  # the provider's ids
    d = dejacache.diff_cassettes(a, b)
    # the fake provider words each answer differently; ids, headers, timestamps are ignored
    assert not d.new_calls and not d.dropped_calls and not d.reordered_calls
    for c in d.changed_calls:  # only the wording (and what the agent made of it)
        assert not any(word in line for line in c.changes for word in (
            "ids", "id:", "created", "fingerprint", "headers")), c.changes
    assert d.step_delta == 0 and d.token_delta == 0 and d.cost_delta == pytest.approx(0)
    assert dejacache.diff_cassettes(a, a).identical
    kept = dejacache.diff_cassettes(a, b, ignore_ids=False)
    assert any("response.ids" in line for c in kept.changed_calls for line in c.changes)


def test_re_recorded_streams_differ_only_in_what_their_events_say(fake, tmp_path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    record(fake, a, "Paris", stream_last=True)
    record(fake, b, "Paris", stream_last=True)
    d = dejacache.diff_cassettes(a, b)
    assert not d.new_calls and not d.dropped_calls and not d.reordered_calls
    lines = [line for c in d.changed_calls for line in c.changes]
    stream_lines = [line for line in lines if "events" in line]
    assert stream_lines  # the fake provider words each answer afresh
    for line in stream_lines:  # never the timing, ids or timestamps of the events
        assert ".content" in line and "created" not in line and "][0]" not in line, line
        assert "chatcmpl" not in line, line


def test_diff_names_new_dropped_and_changed_calls(fake, tmp_path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    record(fake, a, "Paris")
    record(fake, b, "Rome")
    d = dejacache.diff_cassettes(a, b)
    assert not d.identical and not d.new_calls and not d.dropped_calls
    tool = [c for c in d.changed_calls if c.after.kind == "tool"]
    assert len(tool) == 1 and tool[0].request_changed
    assert "request.city: 'Paris' -> 'Rome'" in tool[0].changes
    c = tmp_path / "c.json"
    with dejacache.cassette(c, mode="record"):
        get_weather(city="Paris")
    d2 = dejacache.diff_cassettes(a, c)
    assert [s.name for s in d2.dropped_calls] == ["openai.chat.completions",
                                                  "openai.chat.completions", "fmt"]
    assert d2.unchanged == 1 and d2.step_delta == -3
    assert d2.token_delta == -dejacache.load_cassette(a).total_tokens


def test_calls_of_a_block_are_readable_after_it_exits(fake, tmp_path) -> None:
    p = tmp_path / "a.json"
    record(fake, p, "Paris")
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                       max_retries=0) as client, dejacache.cassette(p, mode="replay") as tape:
        agent(client, "Paris")
    assert [c.name for c in tape.calls if c.kind == "tool"] == ["get_weather"]
    assert [c.args for c in tape.calls if c.kind == "tool"] == [{"city": "Paris"}]
    assert tape.calls[0].args["messages"][0]["content"] == "weather in Paris?"


def test_a_damaged_file_is_refused_unless_asked_to_show_it(tmp_path) -> None:
    p = tmp_path / "a.json"
    with dejacache.cassette(p, mode="record"):
        get_weather(city="Paris")
    p.write_bytes(p.read_bytes().replace(b"sunny in Paris", b"rainy in Paris"))
    with pytest.raises(dejacache.CassetteError, match="does not match its checksum"):
        dejacache.load_cassette(p)
    view = dejacache.load_cassette(p, verify=False)
    assert view.steps[0].response == "rainy in Paris" and "checksum" in (view.problem or "")


def test_a_tool_steps_tokens_estimate_its_result(tmp_path) -> None:
    """A 432-character result was "0 estimated output tokens"."""
    p = tmp_path / "t.json"

    @dejacache.cache(name="tools.search", kind="tool")
    def search(q: str) -> str:
        return "r" * 432

    with dejacache.cassette(p, mode="record"):
        search("x")
    step = dejacache.load_cassette(p).steps[0]
    assert step.output_tokens == 109 and not step.tokens_exact  # (434 JSON characters) / 4
    assert step.input_tokens == 0 and dejacache.load_cassette(p).total_tokens == 0


def test_cached_prompt_tokens_are_priced_at_the_cache_rates_in_steps_and_savings(
        tmp_path: pathlib.Path) -> None:
    """Anthropic through its SDK, against a loopback provider that caches prompts and
    reports it: the second turn reads the 1-hour prefix the first wrote. Each step and what
    a replay saved cost the reads at 0.1x and the writes at 1.25x (5 min) or 2x (1 h)."""
    import anthropic

    from runtime.cache_provider import CachingProvider

    model = "claude-sonnet-4-5-20250929"  # $3 / $15 a million tokens
    system = [{"type": "text", "text": "You answer questions about the weather. " * 200,
               "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    path = tmp_path / "cached.json"
    provider = CachingProvider().start()
    seen: list[Any] = []

    def ask() -> None:
        with anthropic.Anthropic(base_url=provider.url, api_key="sk-ant-test", max_retries=0,
                                 http_client=dejacache.http_client()) as client:
            for q in ("Rain in Paris?", "Rain in Lisbon? " * 60):
                msg = client.messages.create(model=model, max_tokens=16, system=system,
                                             messages=[{"role": "user", "content": [{
                                                 "type": "text", "text": q, "cache_control": {
                                                     "type": "ephemeral"}}]}])
                seen.append(msg.usage)

    try:
        with dejacache.cassette(path, mode="record"):
            ask()
    finally:
        provider.stop()
    first, second = seen
    assert first.cache_creation.ephemeral_1h_input_tokens > 0  # the system prompt, 1 h
    assert second.cache_read_input_tokens > 0 and second.cache_creation_input_tokens > 0

    def dollars(u: Any) -> float:
        long = u.cache_creation.ephemeral_1h_input_tokens
        return (u.input_tokens * 3 + u.cache_read_input_tokens * 0.3
                + (u.cache_creation_input_tokens - long) * 3.75 + long * 6
                + u.output_tokens * 15) / 1e6

    view = dejacache.load_cassette(path)
    steps = [s for s in view.steps if s.kind == "model"]
    assert [s.cost for s in steps] == [pytest.approx(dollars(u)) for u in seen]
    assert [s.input_tokens for s in steps] == [  # the whole prompt, as before
        u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens for u in seen]
    seen.clear()
    with dejacache.cassette(path, mode="replay") as tape:
        ask()
    assert tape.counters.replayed == 2
    assert tape.counters.dollars_saved == pytest.approx(sum(dollars(u) for u in seen))
