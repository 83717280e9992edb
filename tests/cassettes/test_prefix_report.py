"""``dejacache prefix-report``: recorded agents (real SDKs, caching loopback provider) read back
from their cassettes."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import orjson
import pytest

import dejacache
from dejacache.cli import main
from runtime.cache_provider import CachingProvider
from runtime.prefix_agents import anthropic_agent, anthropic_client, openai_agent, openai_client


@pytest.fixture
def provider() -> Iterator[CachingProvider]:
    server = CachingProvider().start()
    yield server
    server.stop()


@pytest.fixture
def recorded(provider: CachingProvider, tmp_path: pathlib.Path) -> pathlib.Path:
    tapes = tmp_path / "cassettes"
    with dejacache.cassette(tapes / "rebuilt.json", mode="record"), \
            anthropic_client(provider) as client:
        anthropic_agent(client, rebuild=True)
    with dejacache.cassette(tapes / "frozen.json", mode="record"), \
            openai_client(provider) as oclient:
        openai_agent(oclient, rebuild=False, stream=True)
        # A second, unrelated conversation in the same cassette: its own session.
        oclient.chat.completions.create(model="gpt-4.1", messages=[
            {"role": "user", "content": "unrelated"}])
    return tapes


def test_report_names_sessions_hit_ratio_and_top_breakers(
    recorded: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["prefix-report", str(recorded)]) == 0
    out = capsys.readouterr().out
    # the short unrelated call is below the provider minimum: a hazard, not a break
    assert "2 cassettes, 3 sessions, 3 prefix breaks" in out
    assert "rebuilt.json#1: 4 turns, 3 breaks" in out
    assert "frozen.json#1: 4 turns, 0 breaks" in out
    assert "frozen.json#2: 1 turn, 0 breaks ($0.0000), 1 hazard," in out
    assert "hazards:\n" in out and "1x below_minimum" in out
    # each conversation's clock, flagged on its first turn
    assert "1x timestamp     `system[0].text` at offset 7,755: `2026-05-01 12:04:31`" in out
    assert "1x timestamp     `messages[0].content[0].text` at offset 7,755" in out
    assert "3x system        `system[0].text` at offset 7,755" in out  # where the hazard is
    assert "e.g. `2026-05-01 12:04:31` → `2026-05-01 12:05:02`" in out


def test_report_json(recorded: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prefix-report", str(recorded), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    sessions = {s["session"]: s for s in doc["sessions"]}
    assert sessions["rebuilt.json#1"]["hit_ratio"] == 0.0
    frozen = sessions["frozen.json#1"]
    assert frozen["breaks"] == 0 and frozen["hit_ratio"] > 0.7  # streamed usage, read back
    (top,) = doc["breakers"]
    assert (top["reason"], top["path"], top["count"]) == ("system", "system[0].text", 3)
    (small,) = sessions["frozen.json#2"]["hazards"]
    assert (small["kind"], small["segment"]) == ("below_minimum", "prefix")
    assert top["cost"] > 0.018


def test_per_cassette_and_single_file(recorded: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prefix-report", str(recorded / "frozen.json"), "--per-cassette"]) == 0
    out = capsys.readouterr().out
    assert "1 cassette, 1 session, " in out
    # the unrelated call now "modifies" the conversation (and is below the minimum)
    assert "frozen.json#1: 5 turns, 1 break ($0.0031), 2 hazards" in out


def test_unreadable_target_is_one_line(tmp_path: pathlib.Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["prefix-report", str(bad)]) == 2
    assert "prefix-report" in capsys.readouterr().err
