"""Cassettes are interchangeable: one recorded through the proxy by openai-node replays
in-process for the Python openai SDK making the same requests, and one recorded in-process
by the Python SDK replays through the proxy for openai-node; ``dejacache show``, ``report``,
``diff``, ``verify`` and ``load_cassette`` read a proxy's cassette as any other."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import openai
import pytest
from fake_provider import FakeProvider
from proxy_support import clients

import dejacache
from dejacache.cli import main
from dejacache.proxying.handle import ProxySession

Open = Callable[..., ProxySession]


def python_side(base_url: str) -> dict[str, Any]:
    """What clients.mjs's openai-chat, openai-stream and openai-tools do, with the Python
    SDK (the same requests, so the same keys)."""
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    with openai.OpenAI(base_url=base_url, api_key="sk-python-side", max_retries=0) as c:
        r = c.chat.completions.create(model="gpt-test",
                                      messages=[{"role": "user", "content": "Say hello"}])
        chat = {"id": r.id, "text": r.choices[0].message.content}
        pieces = [ch.choices[0].delta.content or "" if ch.choices else "" for ch in
                  c.chat.completions.create(model="gpt-test", stream=True, messages=[
                      {"role": "user", "content": "Stream a hello"}])]
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        first = c.chat.completions.create(model="gpt-test", messages=messages, tools=[weather])
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.to_dict(),  # as sent back: as it came
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        second = c.chat.completions.create(model="gpt-test", messages=messages, tools=[weather])
    return {"openai-chat": chat, "openai-stream": {"pieces": pieces},
            "openai-tools": {"call": call.id, "text": second.choices[0].message.content}}


SCENARIOS = ("openai-chat", "openai-stream", "openai-tools")


def test_node_recorded_replays_in_process_for_python(session_for: Open,
                                                     fake: FakeProvider) -> None:
    s = session_for("node-made", fake)
    node = clients(s.url, *SCENARIOS)
    assert s.close(ok=True)["recorded"] == 4
    with dejacache.cassette(s.cassette, "replay") as tape:
        py = python_side(fake.openai_url)
    assert py == node
    assert tape.counters.replayed == 4 and not tape.misses
    assert fake.count() == 4


def test_python_recorded_replays_through_the_proxy_for_node(
        session_for: Open, fake: FakeProvider, proxy_dir: pathlib.Path,
        request: pytest.FixtureRequest) -> None:
    path = proxy_dir / request.node.name / "python-made.json"
    with dejacache.cassette(path, "record"):
        py = python_side(fake.openai_url)
    s = session_for("python-made", fake, mode="replay")
    node = clients(s.url, *SCENARIOS)
    summary = s.close(ok=True)
    assert node == py
    assert (summary["replayed"], summary["missed"]) == (4, 0)
    assert fake.count() == 4


def test_the_cassette_commands_read_a_proxy_cassette(
        session_for: Open, fake: FakeProvider, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    s = session_for("commands", fake)
    clients(s.url, *SCENARIOS)
    s.close(ok=True)
    other = session_for("commands-again", fake)
    clients(other.url, "openai-chat", suffix=" (changed)")
    other.close(ok=True)

    run = dejacache.load_cassette(s.cassette)
    assert [step.name for step in run.steps] == ["openai.chat.completions"] * 4
    assert main(["show", str(s.cassette)]) == 0
    assert "openai.chat.completions" in capsys.readouterr().out
    assert main(["verify", "-v", str(s.cassette)]) == 0
    report = tmp_path / "report.html"
    assert main(["report", str(s.cassette), "-o", str(report)]) == 0
    assert "Say hello" in report.read_text()
    capsys.readouterr()
    main(["diff", str(s.cassette), str(other.cassette)])
    assert "(changed)" in capsys.readouterr().out
