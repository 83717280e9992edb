"""``Record``: the hand-written constructor keeps the dataclass's API and its immutability.
``Features`` (a named tuple) and ``StoreStats`` (defined on first use) keep theirs. Work
handed to a worker thread by a caller that may be cancelled: released, or finished."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
import threading
from collections.abc import Callable

import pytest

from dejacache.stores import Record, StoreStats, _base, _off_loop
from dejacache.stores._base import Features


def test_constructor_takes_positional_keyword_and_default_arguments() -> None:
    a = Record(b"v", "fn", "ns", "tool", b"{}", 1.5, {"total_tokens": 3}, 2.0)
    b = Record(value=b"v", name="fn", namespace="ns", kind="tool", request=b"{}",
               duration=1.5, usage={"total_tokens": 3}, created=2.0)
    assert a == b
    d = Record(b"x")
    assert (d.name, d.namespace, d.kind, d.request, d.duration, d.usage, d.created) == (
        "", "", "call", b"", 0.0, None, 0.0)
    assert d.size == 1 and a.size == 3
    with pytest.raises(TypeError):
        Record()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Record(b"x", bogus=1)  # type: ignore[call-arg]


def test_record_stays_a_frozen_slotted_dataclass() -> None:
    r = Record(b"v", name="fn", usage={"prompt_tokens": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = b"w"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.name  # type: ignore[misc]
    assert not hasattr(r, "__dict__")
    assert [f.name for f in dataclasses.fields(Record)] == [
        "value", "name", "namespace", "kind", "request", "duration", "usage", "created"]
    assert dataclasses.replace(r, kind="http") == Record(b"v", name="fn", kind="http",
                                                         usage={"prompt_tokens": 1})
    assert pickle.loads(pickle.dumps(r)) == r
    assert copy.copy(r) == r == copy.deepcopy(r)
    assert "name='fn'" in repr(r)
    # frozen as dataclasses see it too: a subclass must be frozen, as of a frozen dataclass
    assert Record.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        dataclasses.dataclass(type("Loose", (Record,), {"__annotations__": {"x": int}}))


def test_features_keep_what_the_frozen_dataclass_offered() -> None:
    f = Features(sequenced=True, rerecord_hint="rerun")
    assert f == Features(True, False, False, False, False, False, False, False, False, "rerun")
    assert f != Features() and hash(f) == hash(Features(sequenced=True, rerecord_hint="rerun"))
    assert (f.sequenced, f.blocking, f.partial, f.rerecord_hint) == (True, False, False, "rerun")
    assert repr(Features(partial=True)) == (
        "Features(sequenced=False, blocking=False, short_hits=False, checked_on_put=False, "
        "shares=False, keeps_errors=False, notes_misses=False, redacts=False, partial=True, "
        "rerecord_hint=None, notes_unstored=False)")
    with pytest.raises(AttributeError):
        f.sequenced = False  # type: ignore[misc]
    with pytest.raises(AttributeError):
        f.other = 1  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(f)) == f
    with pytest.raises(TypeError):
        Features(bogus=True)  # type: ignore[call-arg]


def test_store_stats_is_served_by_base_and_the_package() -> None:
    assert _base.StoreStats is StoreStats
    s = StoreStats("memory://", 1, 2)
    assert dataclasses.is_dataclass(s) and s.extra == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.entries = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _base.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


# ---------------------------------------------------------------- work in a worker thread


def test_a_result_given_after_its_caller_left_is_released_by_the_worker() -> None:
    released: list[object] = []
    late = _off_loop._Handoff(released.append)
    late.leave()
    assert late.run(lambda: "tape") == "tape" and released == ["tape"]
    early = _off_loop._Handoff(released.append)
    early.run(lambda: "kept")
    assert released == ["tape"]  # the caller takes it
    early.leave()  # (the caller cancelled after the worker gave it, before it arrived)
    early.leave()
    assert released == ["tape", "kept"]


@pytest.mark.parametrize("worker_first", [False, True])
def test_a_cancelled_caller_of_owned_work_leaves_at_once_and_the_result_is_released(
        monkeypatch: pytest.MonkeyPatch, worker_first: bool) -> None:
    """Either side may be second: the worker still opening when the caller is cancelled, or
    done, its result on its way to a caller cancelled before it arrived."""
    go, given = threading.Event(), threading.Event()
    released: list[tuple[object, bool]] = []
    run = _off_loop._Handoff.run

    def handed(self: _off_loop._Handoff[object], fn: Callable[[], object]) -> object:
        out = run(self, fn)
        given.set()
        return out

    monkeypatch.setattr(_off_loop._Handoff, "run", handed)

    def release(result: object) -> None:
        released.append((result, threading.current_thread() is threading.main_thread()))

    def opening() -> object:
        if not worker_first:
            go.wait(30)
        return "tape"

    async def main() -> None:
        task = asyncio.ensure_future(_off_loop.off_loop_owned(opening, release))
        await asyncio.sleep(0)  # (the task starts the worker)
        if worker_first:
            given.wait(30)  # the loop is held: the result cannot reach the task yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        go.set()

    asyncio.run(main())  # (joins the worker)
    assert released == [("tape", worker_first)]  # on the loop when the worker was first


def test_whole_work_finishes_before_its_cancelled_caller_hears_of_it() -> None:
    go, started = threading.Event(), threading.Event()
    done: list[str] = []

    def save(what: str) -> None:
        started.set()
        go.wait(30)
        done.append(what)

    async def main() -> None:
        task = asyncio.ensure_future(_off_loop.off_loop_whole(save, "file"))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert done == ["file"]

    asyncio.run(main())
