"""The run's order alone: calls compared with a recording held in memory (no files)."""

from __future__ import annotations

import contextvars
import pathlib
from typing import Any

import pytest

from dejacache._core.strict import ROOT
from dejacache.cassettes.order import RunOrder
from dejacache.cassettes.render import render
from dejacache.cassettes.tape import Tape
from dejacache.errors import ReplayDivergence, ReplayMiss

PATH = pathlib.Path("in-memory.json")


def entry(key: str, follows: int | None, *, name: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"key": key, "name": name or key, "kind": "tool", "namespace": "ns",
                         "request": {"q": key}, "response": f"answer {key}", "duration": 0.1}
    if follows is not None:
        d["follows"] = follows
    return d


def run_over(*entries: dict[str, Any], strict: bool = False) -> RunOrder:
    tape = Tape(PATH, "auto")
    run = RunOrder(tape, strict=strict, rerecord_hint="re-record me")
    tape.on_index = run.indexed
    tape.read(render(list(entries), {}) if entries else None)
    return run


def replay(run: RunOrder, key: str) -> ReplayDivergence | None:
    """What the cassette does on a hit: take the entry, then note it."""
    found = run.tape.take(key, run.step)
    assert found is not None, f"no recording of {key}"
    e, view = found
    doc = (view if view is not None else run.tape.hit_view(e))[0]
    return run.note_hit(e, doc)


def miss(run: RunOrder, key: str) -> ReplayDivergence | None:
    m = ReplayMiss(f"no recording of {key}", name=key, key=key)
    m.request = {"q": key}
    return run.note_miss(m, replaying=True)


CHAIN = (entry("a", ROOT), entry("b", 0), entry("c", 1))  # one task: a, then b, then c


def test_an_in_order_replay_has_no_divergence() -> None:
    run = run_over(*CHAIN)
    for k in "abc":
        assert replay(run, k) is None
        assert run.step() == "abc".index(k)
    assert [(c.name, c.outcome, c.recorded_step) for c in run.calls] == [
        ("a", "replayed", 0), ("b", "replayed", 1), ("c", "replayed", 2)]
    run.finish(replayed=True, shared=False)
    assert run.settled() == []


def test_out_of_order_is_named_when_read() -> None:
    run = run_over(*CHAIN)
    assert replay(run, "a") is None
    assert replay(run, "c") is None  # not strict: found now, named when asked for
    [d] = run.settled()
    assert (d.reason, d.step, d.recorded_step) == ("order", 1, 1)
    assert "is out of order" in d.message and "re-record me" in d.message


def test_a_strict_run_names_it_at_once() -> None:
    run = run_over(*CHAIN, strict=True)
    assert replay(run, "a") is None
    exc = replay(run, "c")
    assert isinstance(exc, ReplayDivergence)
    assert exc.reason == "order" and exc.recorded_step == 1
    assert "strict replay divergence" in str(exc)


def test_tasks_are_compared_each_on_its_own() -> None:
    """Two tasks started at the same place (``asyncio.gather``): each follows its own
    recorded chain, however the run interleaves them."""
    run = run_over(entry("x", ROOT), entry("y", ROOT), entry("x2", 0), entry("y2", 1))
    one, two = contextvars.copy_context(), contextvars.copy_context()
    assert two.run(replay, run, "y") is None
    assert one.run(replay, run, "x") is None
    assert two.run(replay, run, "y2") is None
    assert one.run(replay, run, "x2") is None
    assert run.settled() == []


def test_a_call_the_recording_does_not_have_here() -> None:
    run = run_over(entry("a", ROOT), entry("b", 0, name="tool"))
    assert replay(run, "a") is None
    exc = miss(run, "other")  # another name than the step expected here: an extra call
    assert exc is not None and exc.reason == "extra" and exc.recorded_step == 1
    [d] = run.settled()
    assert d.reason == "extra" and d.expected is not None and d.expected.name == "tool"


def test_a_changed_call_takes_the_place_of_the_recorded_one() -> None:
    run = run_over(entry("a", ROOT), entry("b", 0, name="tool"))
    replay(run, "a")
    m = ReplayMiss("no recording", name="tool", key="other")
    m.request = {"q": "other"}
    exc = run.note_miss(m, replaying=True)
    assert exc is not None and exc.reason == "changed" and exc.recorded_step == 1
    assert exc.diff == ["q: 'b' -> 'other'"]
    run.finish(replayed=True, shared=False)
    assert [d.reason for d in run.settled()] == ["changed"]  # its step counts as made


def test_a_call_past_the_end_of_the_recording() -> None:
    run = run_over(*CHAIN)
    for k in "abc":
        replay(run, k)
    exc = miss(run, "d")
    assert exc is not None and exc.reason == "exhausted"
    assert "exhausted" in str(exc)


def test_recorded_calls_never_made_are_reported_at_the_end() -> None:
    run = run_over(*CHAIN, strict=True)
    replay(run, "a")
    run.finish(replayed=True, shared=False)
    unmade = [d for d in run.settled() if d.reason == "unmade"]
    assert [d.recorded_step for d in unmade] == [1, 2]
    err = run.unmade_error()
    assert err is not None and "2 of the 3 recorded calls" in str(err)
    assert "re-record me" in str(err)


def test_a_shared_file_reports_no_unmade_calls() -> None:
    run = run_over(*CHAIN)
    replay(run, "a")
    run.finish(replayed=True, shared=True)
    assert run.unmade_error() is None


def test_nothing_is_compared_when_recording() -> None:
    run = run_over(*CHAIN)
    assert run.checking(replaying=False) is False
    doc = {"name": "new", "key": "n"}
    run.note_new(doc, "new", "tool", "n", {"q": "n"}, replaying=False)
    assert run.settled() == [] and run.pred[id(doc)] is None
    assert [c.outcome for c in run.calls] == ["recorded"]


def test_new_calls_remember_what_their_task_did_before() -> None:
    """What the writer links each new entry's ``follows`` to."""
    run = run_over(*CHAIN)
    replay(run, "a")
    doc = {"name": "n", "key": "n"}
    run.note_new(doc, "n", "tool", "n", {"q": "n"}, replaying=True)
    a = run.tape.entry(0)
    assert run.pred[id(doc)] is a
    assert run.observed[0] is None  # "a" was its task's first call


def test_the_kind_of_a_missed_call() -> None:
    run = run_over()
    assert run.kind_of("openai.chat.completions") == "http"
    assert run.kind_of("my_tool") == "call"
    small = run_over(entry("t", ROOT))  # parsed whole: the book knows the recorded kinds
    assert small.kind_of("t") == "tool"


def test_a_calls_request_is_read_when_asked_for() -> None:
    run = run_over(*CHAIN)
    replay(run, "b")
    [call] = run.calls
    assert call._loader is not None  # not read yet
    assert call.request == {"q": "b"} and call.args == {"q": "b"}


@pytest.mark.parametrize("strict", [False, True])
def test_messages_name_the_cassette_and_the_hint(strict: bool) -> None:
    run = run_over(*CHAIN, strict=strict)
    replay(run, "a")
    exc = miss(run, "z")
    assert exc is not None
    assert str(PATH) in str(exc) and "re-record me" in str(exc)


def _chain(n: int) -> list[dict[str, Any]]:
    return [entry(f"k{i}", i - 1 if i else ROOT, name="step") for i in range(n)]


def test_a_long_auto_block_indexes_its_recording_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # auto mode over a recording, each replayed step followed by a call it does not have:
    # the book's index was dropped by every replayed step and rebuilt by every new call.
    from dejacache._core.strict import OrderBook

    built: list[int] = []
    real = OrderBook._index_all

    def counting(self: OrderBook) -> None:
        built.append(len(self))
        real(self)

    monkeypatch.setattr(OrderBook, "_index_all", counting)
    n = 300
    run = run_over(*_chain(n))
    for i in range(n):
        assert replay(run, f"k{i}") is None
        doc = {"name": "new", "key": f"new{i}"}
        run.note_new(doc, "new", "tool", f"new{i}", {"q": i}, replaying=True)
    assert built == [n]
    assert len(run.calls) == 2 * n


def test_the_kinds_are_read_once_for_many_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.cassettes.reader import DocIndex

    reads = [0]
    real = DocIndex.kinds

    def counting(self: DocIndex) -> list[str]:
        reads[0] += 1
        return real(self)

    monkeypatch.setattr(DocIndex, "kinds", counting)
    run = run_over(*_chain(20))
    for i in range(200):  # the recorded call with other arguments, again and again
        m = ReplayMiss("no recording", name="step", key=f"missing{i}")
        m.request = {"q": i}
        run.note_miss(m, replaying=True)
    assert reads[0] == 1
    assert {c.raw_kind for c in run.calls} == {"tool"}  # the kind recorded for "step"
