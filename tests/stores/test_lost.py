"""``LostWrites``: the keys whose write did not land, read as misses until their entries
are removed (pure bookkeeping: the stores' tests drive it against Redis and SQLite)."""

from __future__ import annotations

import pytest

from dejacache.stores import _lost
from dejacache.stores._lost import LostWrites


def lost(*keys: str) -> LostWrites:
    out = LostWrites()
    for k in keys:
        out.lost(k)
    return out


def test_a_lost_key_is_unsure_until_settled_or_written_again() -> None:
    w = lost("a", "b")
    assert w.unsure("a") and w.unsure("b") and not w.unsure("c")
    w.landed("b")  # a later write of b landed
    assert not w.unsure("b")
    assert w.batch() == ["a"]
    assert w.unsure("a")  # until its entry is gone
    w.settled(["a"])
    assert not w.unsure("a") and w.keys == {} and w.batch() is None


def test_batches_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lost, "BATCH", 2)
    w = lost("a", "b", "c")
    w.lost("a")  # lost again: keeps its place
    assert w.batch() == ["a", "b"]
    w.settled(["a", "b"])
    assert w.batch() == ["c"]


def test_past_the_bound_no_entry_is_trusted_until_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lost, "MAX_KEYS", 2)
    w = lost("a", "b")
    assert w.lost("a") is False  # known already: still within the bound
    assert w.lost("c") is True  # one too many: said once
    assert w.lost("d") is False
    assert w.every and w.unsure("zzz")  # which entries are stale is no longer known
    assert w.batch() is None  # and cannot be settled
    w.landed("a")
    w.landed("b")
    w.settled(["a", "b"])
    assert w.unsure("a") and w.keys  # nor forgotten key by key
    w.cleared()
    assert not w.unsure("a") and not w.every and w.keys == {}
