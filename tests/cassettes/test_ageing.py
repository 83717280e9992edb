"""Cassettes that age: what a new entry is stamped with, and expired entries on replay."""

from __future__ import annotations

import pathlib
import time
import warnings
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import dejacache
from dejacache import ConfigurationError, DejacacheWarning
from dejacache._core.ageing import recorded_at, stamp
from dejacache.cassettes import ageing, expiry
from dejacache.cassettes.document import load_document
from dejacache.cassettes.render import render
from loopback_provider import fake_provider_module

DAY = 86400.0
RAN: list[str] = []


@dejacache.cache(name="ask", kind="llm")
def ask(q: str, model: str = "gpt-test") -> dict[str, Any]:
    RAN.append(q)
    return {"answer": f"{q}#{len(RAN)}", "model": model + "-2026-01-01"}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def entries(path: pathlib.Path) -> list[dict[str, Any]]:
    return list(load_document(path.read_bytes(), path)["entries"])


def age(path: pathlib.Path, days: float | None) -> None:
    """Make every entry of ``path`` ``days`` old (None: as recorded before dejacache kept
    the time)."""
    doc = load_document(path.read_bytes(), path)
    for e in doc["entries"]:
        e.pop("recorded_at", None)
        if days is not None:
            e["recorded_at"] = stamp(ageing.clock() - days * DAY)
    path.write_bytes(render(doc["entries"], doc["values"]))


@pytest.fixture
def recorded(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        ask("hello")
        ask("bye")
    RAN.clear()
    return path


def test_new_entries_say_when_and_with_what_they_were_recorded(recorded: pathlib.Path) -> None:
    first = entries(recorded)[0]
    assert abs(recorded_at(first) - time.time()) < 60  # type: ignore[operator]
    assert first["recorded_at"].endswith("Z")
    # the model the request asked for is known only when the call names it
    assert first["recorded_with"] == {"answered_by": "gpt-test-2026-01-01"}
    with dejacache.cassette(recorded):
        ask("again", model="gpt-other")  # (a default's value is not part of the call)
    assert entries(recorded)[-1]["recorded_with"] == {
        "model": "gpt-other", "answered_by": "gpt-other-2026-01-01"}


def test_expired_entry_replays_with_a_warning_naming_it(recorded: pathlib.Path) -> None:
    age(recorded, 45)
    with (pytest.warns(DejacacheWarning) as caught,
          dejacache.cassette(recorded, mode="replay", max_age="30d")):
        assert ask("hello")["answer"] == "hello#1"
    msg = str(caught[0].message)
    assert str(recorded) in msg and "entry 0 (ask, occurrence 0)" in msg
    assert "recorded 45d ago" in msg and "older than max_age 30d" in msg
    assert RAN == []


def test_fresh_and_unknown_ages_replay_silently(recorded: pathlib.Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, mode="replay", max_age="30d"):
            ask("hello")
        age(recorded, None)  # an old cassette: age unknown, never expired
        with dejacache.cassette(recorded, mode="replay", max_age="1s"):
            ask("hello")
    assert RAN == []


def test_rerecord_in_auto_mode_replaces_the_expired_entry(recorded: pathlib.Path) -> None:
    age(recorded, 45)
    before = entries(recorded)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, max_age="30d", on_expiry="rerecord") as tape:
            assert ask("hello")["answer"] == "hello#1"  # live again
            assert ask("bye")["answer"] == "bye#2"
    assert RAN == ["hello", "bye"] and tape.counters.recorded == 2
    after = entries(recorded)
    assert [e["key"] for e in after] == [e["key"] for e in before]  # replaced, not added
    assert all(time.time() - recorded_at(e) < 60 for e in after)  # type: ignore[operator]
    RAN.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, mode="replay", max_age="30d"):
            assert ask("hello")["answer"] == "hello#1"
    assert RAN == []


def test_rerecord_keeps_fresh_entries_and_replaces_only_the_expired(
        recorded: pathlib.Path) -> None:
    doc = load_document(recorded.read_bytes(), recorded)
    doc["entries"][0]["recorded_at"] = stamp(ageing.clock() - 45 * DAY)
    recorded.write_bytes(render(doc["entries"], doc["values"]))
    with dejacache.cassette(recorded, max_age="30d", on_expiry="rerecord"):
        ask("hello")
        ask("bye")
    assert RAN == ["hello"]
    assert len(entries(recorded)) == 2


def test_rerecord_in_replay_mode_serves_with_the_warning(recorded: pathlib.Path) -> None:
    age(recorded, 45)
    with (pytest.warns(DejacacheWarning, match="replay never makes a live call"),
          dejacache.cassette(recorded, mode="replay", max_age="30d", on_expiry="rerecord")):
        assert ask("hello")["answer"] == "hello#1"
    assert RAN == []


def test_configure_then_env_give_the_default(recorded: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    age(recorded, 3)
    monkeypatch.setenv("DEJACACHE_MAX_AGE", "2d")
    with (pytest.warns(DejacacheWarning, match="older than max_age 2d"),
          dejacache.cassette(recorded, mode="replay")):
        ask("hello")
    dejacache.configure(max_age="1d")
    with (pytest.warns(DejacacheWarning, match="older than max_age 1d"),
          dejacache.cassette(recorded, mode="replay")):
        ask("hello")
    with warnings.catch_warnings():  # the cassette's own wins
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, mode="replay", max_age="5d"):
            ask("hello")


def test_bad_settings_are_errors_where_written(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigurationError, match="max_age must be a duration"):
        dejacache.cassette(tmp_path / "c.json", max_age="a month")
    with pytest.raises(ConfigurationError, match="unknown on_expiry"):
        dejacache.configure(on_expiry="retry")
    monkeypatch.setenv("DEJACACHE_MAX_AGE", "soon")
    with pytest.raises(ConfigurationError, match="DEJACACHE_MAX_AGE"):
        dejacache.cassette(tmp_path / "c.json")


@pytest.fixture
def fake() -> Iterator[Any]:
    server = fake_provider_module().FakeProvider().start()
    try:
        yield server
    finally:
        server.stop()


def test_the_openai_sdk_and_model_are_recorded(fake: Any, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sdk.json"
    with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                       max_retries=0) as client, dejacache.cassette(path):
        client.chat.completions.create(model="gpt-test",
                                       messages=[{"role": "user", "content": "hi"}])
    made_with = entries(path)[0]["recorded_with"]
    assert made_with["sdk"] == f"openai {openai.__version__}"
    assert made_with["model"] == "gpt-test"


FAIL = {"on": False}


@dejacache.cache(name="flaky", kind="llm")
def flaky(q: str) -> str:
    if FAIL["on"]:
        raise ConnectionError("provider down")
    return f"ok {q}"


def test_a_failed_rerecord_keeps_the_expired_entry(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        flaky("hello")
    age(path, 45)
    before = path.read_bytes()
    FAIL["on"] = True
    try:
        with (dejacache.cassette(path, max_age="30d", on_expiry="rerecord"),
              pytest.raises(ConnectionError)):  # handled inside: the block ends well
            flaky("hello")
    finally:
        FAIL["on"] = False
    assert path.read_bytes() == before  # never a lost recording


def test_rerecording_unchanged_keeps_the_age_unless_expired(recorded: pathlib.Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    age(recorded, 3)
    before = recorded.read_bytes()
    later = ageing.clock() + 60
    monkeypatch.setattr(ageing, "clock", lambda: later)
    with dejacache.cassette(recorded, mode="record"):
        ask("hello")
        ask("bye")
    assert recorded.read_bytes() == before  # unchanged answers: no diff, ages kept
    RAN.clear()
    with dejacache.cassette(recorded, mode="record", max_age="2d"):
        ask("hello")
        ask("bye")
    after = entries(recorded)
    assert all(abs(recorded_at(e) - later) < 2 for e in after)  # type: ignore[operator]


# ---------------------------------------------------------------- dates in the future


def test_an_entry_dated_in_the_future_replays_with_a_warning_naming_it(
        recorded: pathlib.Path) -> None:
    age(recorded, -400.5)  # a clock a year ahead where it was recorded, or a hand edit
    with (pytest.warns(DejacacheWarning) as caught,
          dejacache.cassette(recorded, mode="replay", max_age="30d")):
        assert ask("hello")["answer"] == "hello#1"
    msg = str(caught[0].message)
    assert str(recorded) in msg and "entry 0 (ask, occurrence 0) is dated 400d in the future" in msg
    assert "more than the 5m allowed for skew" in msg and "treated as expired" in msg
    assert RAN == []


def test_rerecord_replaces_an_entry_dated_in_the_future(recorded: pathlib.Path) -> None:
    age(recorded, -400.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, max_age="30d", on_expiry="rerecord") as tape:
            assert ask("hello")["answer"] == "hello#1"  # live again
            assert ask("bye")["answer"] == "bye#2"
    assert RAN == ["hello", "bye"] and tape.counters.recorded == 2
    after = entries(recorded)
    assert len(after) == 2
    assert all(abs(time.time() - recorded_at(e)) < 60 for e in after)  # type: ignore[operator]


def test_a_clock_a_minute_ahead_is_skew_not_the_future(recorded: pathlib.Path) -> None:
    doc = load_document(recorded.read_bytes(), recorded)
    for e in doc["entries"]:
        e["recorded_at"] = stamp(ageing.clock() + 60)
    recorded.write_bytes(render(doc["entries"], doc["values"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dejacache.cassette(recorded, mode="replay", max_age="30d"):
            ask("hello")
    assert RAN == []


def test_show_says_a_date_is_in_the_future(recorded: pathlib.Path) -> None:
    entry = {"recorded_at": stamp(ageing.clock() + 400.5 * DAY)}
    line = expiry.age_line(entry, ageing.clock(), 30 * DAY)
    assert line.startswith("dated 400d in the future (")
    assert line.endswith("), a wrong clock or a hand edit; treated as expired under max_age 30d")
