"""``Record``: the hand-written constructor keeps the dataclass's API and its immutability.
``Features`` (a named tuple) and ``StoreStats`` (defined on first use) keep theirs."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from dejacache.stores import Record, StoreStats, _base
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
    assert "name='fn'" in repr(r)


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
