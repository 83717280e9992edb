"""The order book alone: verdicts, and the work a verdict costs in a long block."""

from __future__ import annotations

from typing import Any

import pytest

from dejacache._core import strict
from dejacache._core.strict import ROOT, OrderBook


def chain(n: int, name: str = "t") -> OrderBook:
    """One task's ``n`` recorded steps: 0 first, each following the one before."""
    book = OrderBook()
    for i in range(n):
        book.add(name, i - 1 if i else ROOT)
    return book


def fan(n: int, name: str = "t") -> OrderBook:
    """``n`` steps started together (``asyncio.gather``): each follows the block's start."""
    book = OrderBook()
    for _ in range(n):
        book.add(name, ROOT)
    return book


class Counted(list[bool]):
    """The book's ``used`` column, counting each read: the steps a verdict looks at."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        Counted.reads += 1
        return super().__getitem__(i)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a book indexed every step (a walk over the whole recording)."""
    seen: list[int] = []
    real = OrderBook._index_all

    def counting(self: OrderBook) -> None:
        seen.append(len(self))
        real(self)

    monkeypatch.setattr(OrderBook, "_index_all", counting)
    return seen


def test_verdicts() -> None:
    book = chain(3, "a")
    book.learn(1, "b", 0)
    book.learn(2, "c", 1)
    assert book.hit(0, ROOT).ok
    assert book.hit(2, 0) == strict.Verdict(strict.ORDER, 1, 2)  # 1 was expected there
    assert book.new("b", 0) == strict.Verdict(strict.CHANGED, 1, 1)  # b with new arguments
    assert book.new("x", 2) == strict.Verdict(strict.EXHAUSTED, None, 2)
    assert book.unmade() == []


def test_a_new_call_is_compared_with_the_next_unspent_step() -> None:
    book = fan(4)
    book.learn(2, "u", ROOT)
    assert book.new("u", ROOT) == strict.Verdict(strict.CHANGED, 2, 2)
    assert book.new("u", ROOT) == strict.Verdict(strict.EXTRA, 0, ROOT)  # no other "u"
    book.hit(0, ROOT)
    book.hit(1, ROOT)
    assert book.successors(ROOT) == [3]
    assert book.new("v", ROOT) == strict.Verdict(strict.EXTRA, 3, ROOT)
    book.hit(3, ROOT)
    assert book.new("v", ROOT).reason == strict.EXHAUSTED
    assert book.following(ROOT) == [0, 1, 2, 3]


def test_learning_a_step_moves_it_in_the_index() -> None:
    book = chain(3)
    assert book.next_after(0) == 1
    book.learn(1, "x", 1)  # read again: it follows step 1 after all (and is named x)
    assert book.next_after(0) is None
    assert book.next_after(1, "x") == 1
    assert book.next_after(1, "t") == 2
    book.learn(5, "y", 0)  # past the end: the book grows
    assert len(book) == 6 and book.next_after(0) == 5


def _auto_block(n: int) -> OrderBook:
    """A block in ``auto`` mode over a recording of ``n`` steps: each step is replayed (the
    book learns it) and followed by a new call the recording does not have."""
    book = chain(n)
    for i in range(n):
        book.learn(i, "t", i - 1 if i else ROOT)  # what a replayed step's fields say
        assert book.hit(i, i - 1 if i else ROOT).ok
        book.new("new", i)
    return book


def test_a_long_auto_block_indexes_the_recording_once(builds: list[int]) -> None:
    # Each replayed step used to drop the index, and each new call rebuilt it from every
    # step: O(n) per call.
    _auto_block(400)
    assert builds == [400]


@pytest.mark.parametrize("n", [200])
def test_a_verdict_looks_at_each_step_a_bounded_number_of_times(n: int) -> None:
    # A fan-out (gather) of identical steps: every verdict asks for the first unspent step
    # after the start. Looking past the spent ones each time cost O(n) per call.
    def reads(k: int) -> int:
        book = fan(k)
        book.used = Counted(book.used)
        Counted.reads = 0
        for i in range(k):
            assert book.new("other", ROOT).expected == i
            book.hit(i, ROOT)
        return Counted.reads

    small, large = reads(n), reads(4 * n)
    assert large <= 4 * small + 8
    assert large <= 3 * 4 * n


def test_skipped_steps_are_neither_expected_nor_unmade() -> None:
    # 0 tool, 1 model, 2 tool (after 1), 3 model (after 2), 4 tool (after 3); the models go live
    book = chain(5)
    book.fill(["tool", "model", "tool", "model", "tool"], [ROOT, 0, 1, 2, 3])
    book.skip([False, True, False, True, False])
    assert [book.follows[i] for i in (0, 2, 4)] == [ROOT, 0, 2]  # the live steps skipped
    assert book.hit(0, ROOT).ok
    assert book.next_after(0) == 2  # not the live step 1
    assert book.hit(4, 0) == strict.Verdict(strict.ORDER, 2, 4)  # 2 was expected there
    assert book.unmade() == [2]  # the live steps went live: not missing


def test_skip_lifts_past_consecutive_live_steps_and_forks() -> None:
    book = OrderBook()
    # 0 plan (live), 1 model (live, after 0), then two gathered tools both after 1
    for name, f in [("m", ROOT), ("m", 0), ("t", 1), ("t", 1)]:
        book.add(name, f)
    book.skip([True, True, False, False])
    assert book.follows[2:] == [ROOT, ROOT]
    assert book.hit(3, ROOT).ok and book.hit(2, ROOT).ok
    assert book.unmade() == []


def test_a_block_that_diverges_at_a_few_places_never_indexes_the_whole_recording(
        builds: list[int]) -> None:
    book = chain(10_000)
    for i in range(0, 10_000, 10_000 // strict.SCANS):  # SCANS new calls, each elsewhere
        assert book.new("new", i) == strict.Verdict(strict.EXTRA, i + 1, i)
    assert builds == []
    book.new("new", 5)  # one place more: the rest of the recording is indexed, once
    book.new("new", 6)
    assert builds == [10_000]


def _random_ops(seed: int) -> list[tuple[Any, ...]]:
    import random

    rng = random.Random(seed)
    n = rng.randint(1, 40)
    ops: list[tuple[Any, ...]] = [("add", rng.choice("ab"), rng.choice([None, ROOT, *range(i)]))
                                  for i in range(n)]
    for _ in range(rng.randint(1, 80)):
        pos = rng.choice([ROOT, *range(n)])
        ops.append(rng.choice([
            ("new", rng.choice("abc"), pos),
            ("hit", rng.randrange(n), pos),
            ("learn", rng.randrange(n + 2), rng.choice("ab"), rng.choice([None, ROOT, pos])),
            ("successors", pos), ("following", pos), ("next_after", pos, rng.choice("ab")),
        ]))
    return ops


def _play(ops: list[tuple[Any, ...]], eager: bool, unread: bool = False) -> list[Any]:
    book, out = OrderBook(), []
    if unread:  # the recording filled in at once, its names read only when needed
        recorded = [args for op, *args in ops if op == "add"]
        names = [n for n, _ in recorded]
        book.grow(len(recorded))  # (sized when the index is read, as the store does)
        book.fill(None, [f for _, f in recorded], name_of=names.__getitem__,
                  all_names=lambda: list(names))
        ops = [o for o in ops if o[0] != "add"]
    for op, *args in ops:
        if op != "add" and eager and not book._all:
            book._index_all()
        out.append(getattr(book, op)(*args))
        if op == "learn":
            out.append(len(book))
    return out


@pytest.mark.parametrize("seed", range(300))
def test_indexing_positions_one_at_a_time_answers_as_indexing_all(seed: int) -> None:
    ops = _random_ops(seed)
    assert _play(ops, eager=False) == _play(ops, eager=True)


@pytest.mark.parametrize("seed", range(100))
def test_names_read_when_needed_answer_as_names_filled_in(seed: int) -> None:
    ops = _random_ops(seed)
    eager = _play(ops, eager=True)
    for index_all in (False, True):
        unread = _play(ops, eager=index_all, unread=True)
        assert unread == eager[len(eager) - len(unread):]  # (no result for the adds)


def test_a_verdict_reads_the_names_of_the_steps_it_looks_at_only() -> None:
    book, read = OrderBook(), []
    names = ["tool"] * 10_000

    def name_of(i: int) -> str:
        read.append(i)
        return names[i]

    book.grow(10_000)
    book.fill(None, [ROOT, *range(9_999)], name_of=name_of, all_names=lambda: list(names))
    assert book.new("tool", 4_000) == strict.Verdict(strict.CHANGED, 4_001, 4_001)
    assert book.hit(4_002, 4_001).ok
    assert book.new("model", 7_000) == strict.Verdict(strict.EXTRA, 7_001, 7_000)
    assert read == [4_001, 7_001]
