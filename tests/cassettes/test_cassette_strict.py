"""Strict replay: calls follow the recorded order per asyncio task / thread."""

from __future__ import annotations

import asyncio
import pathlib
import sys
from typing import Any

import openai
import orjson
import pytest

import dejacache
from dejacache import ReplayDivergence, ReplayMiss

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "http"))
from fake_provider import FakeProvider

RAN: list[str] = []


@dejacache.cache(name="search", kind="tool")
def search(q: str) -> str:
    RAN.append(q)
    return f"found {q}"


@dejacache.cache(name="asearch", kind="tool")
async def asearch(q: str) -> str:
    await asyncio.sleep(0)
    return f"found {q}"


def agent(qs: list[str]) -> list[str]:
    return [search(q) for q in qs]


@pytest.fixture
def recorded(tmp_path: pathlib.Path) -> pathlib.Path:
    p = tmp_path / "c.json"
    with dejacache.cassette(p, mode="record"):
        agent(["a", "b", "c"])
    return p


def test_entries_keep_the_recorded_order(recorded: pathlib.Path) -> None:
    entries = orjson.loads(recorded.read_bytes())["entries"]
    assert [e["request"]["q"] for e in entries] == ["a", "b", "c"]
    assert [e["follows"] for e in entries] == [-1, 0, 1]


def test_the_same_run_replays_strictly_and_lists_its_calls(recorded: pathlib.Path) -> None:
    RAN.clear()
    with dejacache.cassette(recorded, strict=True) as tape:
        assert agent(["a", "b", "c"]) == ["found a", "found b", "found c"]
    assert RAN == []
    assert [c.name for c in tape.calls if c.kind == "tool"] == ["search"] * 3
    assert [c.args for c in tape.calls] == [{"q": "a"}, {"q": "b"}, {"q": "c"}]
    assert [c.outcome for c in tape.calls] == ["replayed"] * 3
    assert [c.recorded_step for c in tape.calls] == [0, 1, 2]
    assert tape.divergences == []


def test_changed_arguments_raise_naming_step_expected_actual_and_diff(
        recorded: pathlib.Path) -> None:
    RAN.clear()
    with pytest.raises(ReplayDivergence) as info, dejacache.cassette(recorded, strict=True):
        agent(["a", "x", "c"])
    err = info.value
    assert isinstance(err, AssertionError) and isinstance(err, ReplayMiss)
    assert err.reason == "changed" and err.step == 1 and err.recorded_step == 1
    assert err.expected.request == {"q": "b"} and err.actual.request == {"q": "x"}
    assert err.diff == ["q: 'b' -> 'x'"]
    assert "call #1 (tool search) differs from the recorded call at step 1" in str(err)
    assert RAN == []  # nothing ran live: a strict recording is a contract


def test_a_reordered_call_raises(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as info, dejacache.cassette(recorded, strict=True):
        agent(["a", "c", "b"])
    assert info.value.reason == "order"
    assert info.value.expected.request == {"q": "b"}
    assert "out of order: it was recorded as step 2, after step 1" in str(info.value)


def test_a_call_past_the_end_says_the_recording_is_exhausted(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as info, dejacache.cassette(recorded, strict=True):
        agent(["a", "b", "c", "d"])
    assert info.value.reason == "exhausted"
    assert "exhausted: the cassette holds 3 calls" in str(info.value)


def test_recorded_calls_never_made_fail_at_block_exit(recorded: pathlib.Path) -> None:
    with pytest.raises(ReplayDivergence) as info, dejacache.cassette(recorded, strict=True):
        agent(["a", "b"])
    assert info.value.reason == "unmade"
    assert "1 of the 3 recorded calls" in str(info.value) and '{"q":"c"}' in str(info.value)


def test_without_strict_divergences_are_listed_and_nothing_fails(
        recorded: pathlib.Path) -> None:
    before = recorded.read_bytes()
    with dejacache.cassette(recorded) as tape:
        agent(["a", "c", "b", "x"])
    divs = tape.divergences
    assert [(d.reason, d.step, d.recorded_step) for d in divs] == [
        ("order", 1, 1), ("order", 2, None), ("exhausted", 3, None)]
    assert divs[0].expected is not None and divs[0].expected.request == {"q": "b"}
    assert divs[0].actual is not None and divs[0].actual.request == {"q": "c"}
    assert [c.outcome for c in tape.calls] == ["replayed"] * 3 + ["recorded"]
    # the new call was recorded where it was made, after the replayed ones
    entries = orjson.loads(recorded.read_bytes())["entries"]
    assert recorded.read_bytes() != before
    assert [e["request"]["q"] for e in entries] == ["a", "c", "b", "x"]
    assert [e["follows"] for e in entries] == [-1, 0, 1, 2]


def test_a_changed_call_is_one_divergence_not_a_cascade(recorded: pathlib.Path) -> None:
    with dejacache.cassette(recorded, mode="replay") as tape, pytest.raises(ReplayMiss):
        agent(["a", "x"])
    assert [(d.reason, d.recorded_step) for d in tape.divergences] == [("changed", 1),
                                                                      ("unmade", 2)]


async def _gathered(first: str, swap_b: bool = False) -> None:
    await asearch("start")
    done = {"A": asyncio.Event(), "B": asyncio.Event()}

    async def child(name: str, other: str) -> None:
        if name != first:
            await done[other].wait()  # deterministic interleaving, no sleeps
        for step in (["2", "1"] if swap_b and name == "B" else ["1", "2"]):
            await asearch(name + step)
        done[name].set()

    await asyncio.gather(child("A", "B"), child("B", "A"))
    await asearch("end")


def test_gather_may_interleave_differently_but_not_reorder_a_task(tmp_path) -> None:
    p = tmp_path / "g.json"

    async def main() -> None:
        async with dejacache.cassette(p, mode="record"):
            await _gathered(first="A")
        async with dejacache.cassette(p, strict=True) as tape:
            await _gathered(first="B")  # B's calls now come first: still in order
        assert [c.args["q"] for c in tape.calls] == ["start", "B1", "B2", "A1", "A2", "end"]
        assert tape.divergences == []
        with pytest.raises(ReplayDivergence) as info:
            async with dejacache.cassette(p, strict=True):
                await _gathered(first="A", swap_b=True)
        assert info.value.reason == "order" and info.value.actual.request == {"q": "B2"}
        # re-recording with the other interleaving is no change to the file
        before = p.read_bytes()
        async with dejacache.cassette(p, mode="record"):
            await _gathered(first="B")
        assert p.read_bytes() == before

    asyncio.run(main())


def test_strict_replay_through_the_real_openai_sdk(tmp_path) -> None:
    fake = FakeProvider().start()
    p = tmp_path / "chat.json"

    def run(client: openai.OpenAI, questions: list[str]) -> list[Any]:
        return [client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": q}]).model_dump()
            for q in questions]

    try:
        with openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-SECRET",
                           max_retries=0) as client:
            with dejacache.cassette(p, mode="record"):
                live = run(client, ["one", "two"])
            sent = fake.count()
            with dejacache.cassette(p, strict=True) as tape:
                assert run(client, ["one", "two"]) == live
            assert [c.kind for c in tape.calls] == ["model", "model"]
            assert tape.calls[1].args["messages"][0]["content"] == "two"
            with pytest.raises(ReplayDivergence) as info, dejacache.cassette(p, strict=True):
                run(client, ["two", "one"])
            assert info.value.reason == "order" and info.value.recorded_step == 0
            assert info.value.actual.recorded_step == 1
            assert fake.count() == sent
    finally:
        fake.stop()


_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:randomly")


def test_pytest_option_and_marker_make_cassettes_strict(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_agent='''
import os
import pytest
import dejacache

@dejacache.cache(name="search", kind="tool")
def search(q):
    return q

ORDER = os.environ.get("ORDER", "ab")

def test_plain(dejacache_cassette):
    for q in ORDER:
        search(q)

@pytest.mark.dejacache(strict=True)
def test_marked():
    for q in ORDER:
        search(q)
''')
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    pytester.runpytest(*_QUIET, "--dejacache-mode=record").assert_outcomes(passed=2)
    monkeypatch.setenv("ORDER", "ba")
    res = pytester.runpytest(*_QUIET)
    res.assert_outcomes(passed=1, failed=1)  # only the marked test is strict
    res.stdout.fnmatch_lines(["*ReplayDivergence*out of order*"])
    pytester.runpytest(*_QUIET, "--dejacache-strict").assert_outcomes(failed=2)
