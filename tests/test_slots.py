"""The public frozen dataclasses whose ``__init__`` is written out through
``_slots.slot_setters`` (a faster construction than the generated one) and whose
``__repr__``, ``__eq__`` and ``__hash__`` come from ``_slots.value_methods`` (cheaper to
define than the generated ones): each is a second spelling of the fields, checked here
against the fields and against what ``dataclass`` generates, so they cannot drift."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from dejacache.config import Effective
from dejacache.stores import Record


@pytest.mark.parametrize("cls", [Effective, Record])
def test_the_written_out_init_takes_every_field_with_its_declared_default(cls: type) -> None:
    params = inspect.signature(cls.__init__).parameters
    for f in dataclasses.fields(cls):
        if not f.init:
            assert f.name not in params
            continue
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        assert params[f.name].default == default, f.name
    assert [p for p in params if p != "self"] == [f.name for f in dataclasses.fields(cls)
                                                  if f.init]


# Two values of every field the methods cover (``A`` and ``B`` differ in each).
_STORE, _CODEC = object(), object()
_VALUES: dict[type, tuple[dict[str, object], dict[str, object]]] = {
    Record: ({"value": b"v", "name": "llm", "namespace": "ns", "kind": "call",
              "request": b"{}", "duration": 1.5, "usage": None, "created": 2.0},
             {"value": b"w", "name": "tool", "namespace": "other", "kind": "llm",
              "request": b"[]", "duration": 0.0, "usage": {"in": 3}, "created": 0.0}),
    Effective: ({"namespace": "ns", "mode": "auto", "store": _STORE, "codec": _CODEC,
                 "volatile": (), "source": "a.json", "tenant": None, "session": None,
                 "test_facing": False, "ambiguous": 0, "key_substitute": (),
                 "realtime": False, "rerecord_hint": None},
                {"namespace": None, "mode": "replay", "store": object(), "codec": object(),
                 "volatile": ("ts",), "source": "b.json", "tenant": "t", "session": "s",
                 "test_facing": True, "ambiguous": 2, "key_substitute": ((b"a", b"b"),),
                 "realtime": True, "rerecord_hint": "run it again"}),
}


def _generated_twin(cls: type) -> type:
    """The dataclass ``cls`` would be with its ``__repr__``, ``__eq__`` and ``__hash__``
    generated: the same fields, flags and defaults."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, init=f.init, repr=f.repr,
                                                 compare=f.compare))
              for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True)


def _hash(value: object) -> object:
    try:
        return hash(value)
    except TypeError:  # a Record holding a dict of usage, in both spellings
        return TypeError


@pytest.mark.parametrize("cls", [Effective, Record])
def test_the_written_value_methods_agree_with_the_generated_ones(cls: type) -> None:
    twin = _generated_twin(cls)
    a, b = _VALUES[cls]
    assert set(a) == {f.name for f in dataclasses.fields(cls) if f.init}
    # one field of B at a time: a field the methods leave out makes two of these look equal
    variants = [a, b, *({**a, name: b[name]} for name in a)]
    ours = [cls(**v) for v in variants]
    theirs = [twin(**v) for v in variants]
    for x, tx, v in zip(ours, theirs, variants, strict=True):
        assert repr(x) == repr(tx)
        assert _hash(x) == _hash(tx) == _hash(cls(**v))
        for y, ty in zip(ours, theirs, strict=True):
            assert (x == y) == (tx == ty)
            assert (x != y) == (tx != ty)
        assert x.__eq__(tx) is NotImplemented  # another class is never equal
        assert x != object()
