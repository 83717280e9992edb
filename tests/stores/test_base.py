"""``Record``: the hand-written constructor keeps the dataclass's API and its immutability."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from dejacache.stores import Record


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
