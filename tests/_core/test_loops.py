"""The pure loop detector: each pattern, its threshold, and what resets it."""

from __future__ import annotations

import pytest

from dejacache._core.loops import LoopDetector

PUT = frozenset({"put"})


def run(
    d: LoopDetector, calls: list[str], *, write: frozenset[str] = frozenset()
) -> list[str | None]:
    out = []
    for c in calls:
        tool, _, args = c.partition("(")
        loop = d.before(tool, args, write=tool in write)
        out.append(loop.pattern if loop else None)
    return out


def test_repeat_trips_after_max_repeats() -> None:
    d = LoopDetector(max_repeats=3)
    assert run(d, ["a(1"] * 4) == [None, None, None, "repeat"]


def test_different_arguments_are_not_repeats() -> None:
    d = LoopDetector(max_repeats=2)
    assert run(d, ["a(1", "a(2", "a(3", "a(4"]) == [None] * 4


def test_write_resets_repeat_counts_of_reads() -> None:
    d = LoopDetector(max_repeats=2, cycle_repeats=5)
    calls = ["get(1", "get(1", "put(1", "get(1", "get(1"]
    assert run(d, calls, write=PUT) == [None] * 5
    assert run(d, ["get(1"]) == ["repeat"]


def test_repeated_identical_writes_still_trip() -> None:
    d = LoopDetector(max_repeats=2, cycle_repeats=10)
    assert run(d, ["put(1", "put(1", "put(1"], write=PUT) == [None, None, "repeat"]


def test_depth_budget() -> None:
    d = LoopDetector(max_depth=3)
    assert run(d, ["a(1", "b(1", "c(1", "d(1"]) == [None, None, None, "depth"]
    assert d.before("e", "1").pattern == "depth"  # type: ignore[union-attr]


def test_two_tool_cycle() -> None:
    d = LoopDetector(max_repeats=10)
    assert run(d, ["a(1", "b(1", "a(1", "b(1"]) == [None, None, None, "cycle"]


def test_cycle_with_writes_is_caught() -> None:
    d = LoopDetector(max_repeats=10)
    res = run(d, ["get(1", "put(1", "get(1", "put(1"], write=PUT)
    assert res == [None, None, None, "cycle"]


def test_longer_cycle_and_limit() -> None:
    calls = ["a(1", "b(1", "c(1"] * 2
    assert run(LoopDetector(max_cycle=3), calls)[-1] == "cycle"
    assert run(LoopDetector(max_cycle=2), calls) == [None] * 6


def test_cycle_needs_identical_arguments() -> None:
    d = LoopDetector()
    assert run(d, ["a(1", "b(1", "a(2", "b(2", "a(3", "b(3"]) == [None] * 6


def test_cycle_repeats_setting() -> None:
    d = LoopDetector(cycle_repeats=3, max_repeats=10)
    assert run(d, ["a(1", "b(1"] * 3) == [None] * 5 + ["cycle"]


def test_same_call_repeated_is_a_repeat_not_a_cycle() -> None:
    d = LoopDetector(max_repeats=5)
    assert run(d, ["a(1"] * 5) == [None] * 5


def test_cycle_describes_its_tools() -> None:
    d = LoopDetector()
    run(d, ["a(1", "b(1", "a(1"])
    loop = d.before("b", "1")
    assert loop is not None
    assert loop.cycle == ("a", "b")
    assert "a → b" in loop.describe()
    assert loop.key == "cycle:a→b"


def test_no_progress_same_result_across_writes() -> None:
    d = LoopDetector(max_repeats=2)
    results = []
    for _ in range(3):
        d.before("put", "x", write=True)
        d.before("get", "1")
        loop = d.after("get", "1", "same")
        results.append(loop.pattern if loop else None)
    assert results == [None, None, "no_progress"]


def test_changing_results_are_progress() -> None:
    d = LoopDetector(max_repeats=2)
    out = [d.after("get", "1", r) for r in ["a", "a", "b", "b", "c"]]
    assert out == [None] * 5


def test_unknown_result_resets_streak() -> None:
    d = LoopDetector(max_repeats=2)
    assert [d.after("g", "1", r) for r in ["a", "a", None, "a", "a"]] == [None] * 5


def test_loop_keys_identify_instances() -> None:
    d = LoopDetector(max_repeats=1)
    d.before("a", "1")
    loop = d.before("a", "1")
    assert loop is not None and loop.key == "repeat:a:1"
    assert "called 2 times" in loop.describe()


@pytest.mark.parametrize("kw", [{"max_repeats": 0}, {"max_depth": 0}, {"cycle_repeats": 1}])
def test_invalid_limits(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        LoopDetector(**kw)


def test_a_long_session_of_distinct_calls_keeps_bounded_state() -> None:
    """A session with a generous depth budget (a long-lived chat, on_loop="warn") makes
    calls with ever new arguments: the per-signature state stays bounded (before: one
    entry per distinct call, forever), and a loop among recent calls is still caught."""
    d = LoopDetector(max_depth=10**9, max_repeats=3)
    for i in range(20_000):
        assert d.before("search", str(i)) is None
        assert d.after("search", str(i), f"r{i}") is None
    assert len(d._counts) <= 4096 and len(d._streaks) <= 4096
    assert run(d, ["search(19999", "search(19999", "search(19999"]) == [
        None, None, "repeat"]
