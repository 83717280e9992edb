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


def test_effective_init_takes_every_slot_but_its_features_cache_and_is_frozen() -> None:
    params = list(inspect.signature(Effective.__init__).parameters)[1:]
    assert sorted([*params, "_features"]) == sorted(Effective.__slots__)
    eff = Effective(**_VALUES[Effective][0])  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.mode = "record"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del eff.mode
    assert not hasattr(eff, "__dict__")
    other = eff.derive({"mode": "record"})
    assert (other.mode, eff.mode, other.source) == ("record", "auto", eff.source)


@pytest.mark.parametrize("cls", [Record])
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
    generated: the fields its ``__init__`` takes, with their defaults (what it keeps beyond
    them, ``Effective``'s features cache, is neither shown nor compared)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = [(p.name, object, dataclasses.field(
        default=dataclasses.MISSING if p.default is p.empty else p.default)) for p in params]
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
    assert set(a) == set(list(inspect.signature(cls.__init__).parameters)[1:])
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


# ``_slots.Row`` against ``typing.NamedTuple``: the rows the engine defines are declared
# NamedTuples to the type checker, so they must behave as one wherever the code uses them.
from typing import NamedTuple  # noqa: E402

from dejacache._slots import Row  # noqa: E402


class _Named(NamedTuple):
    key: str
    size: int = 0
    note: str | None = None


class _Row(Row):
    key: str
    size: int = 0
    note: str | None = None


@pytest.mark.parametrize(("args", "kwargs"), [
    (("k",), {}), (("k", 2), {}), (("k", 2, "n"), {}), ((), {"key": "k"}),
    (("k",), {"note": "n"}), ((), {"note": "n", "key": "k", "size": 3}),
])
def test_a_row_is_built_as_a_named_tuple_is(args: tuple[object, ...],
                                            kwargs: dict[str, object]) -> None:
    row, named = _Row(*args, **kwargs), _Named(*args, **kwargs)  # type: ignore[arg-type]
    assert row == named and tuple(row) == tuple(named) and hash(row) == hash(named)
    assert (row.key, row.size, row.note) == (named.key, named.size, named.note)
    assert row._asdict() == named._asdict()
    assert row._replace(size=9) == named._replace(size=9)
    assert type(row._replace(size=9)) is _Row
    assert repr(row) == repr(named).replace("_Named", "_Row")


@pytest.mark.parametrize(("args", "kwargs"), [
    ((), {}), (("k", 1, "n", "extra"), {}), (("k",), {"key": "again"}),
    (("k",), {"unknown": 1}),
])
def test_a_row_refuses_what_a_named_tuple_refuses(args: tuple[object, ...],
                                                  kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        _Named(*args, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="_Row"):
        _Row(*args, **kwargs)  # type: ignore[arg-type]


def test_a_row_is_a_slotted_tuple_that_pickles_copies_and_matches() -> None:
    import copy
    import pickle

    row = _Row("k", 2)
    assert _Row._fields == ("key", "size", "note") == _Row.__match_args__
    assert not hasattr(row, "__dict__")
    with pytest.raises(AttributeError):
        row.key = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(row)) == row
    assert type(copy.copy(row)) is _Row and copy.deepcopy(row) == row
    match row:
        case _Row(key, size):
            assert (key, size) == ("k", 2)


def test_a_field_without_a_default_after_one_with_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="Bad"):
        type("Bad", (Row,), {"__annotations__": {"a": int, "b": int}, "a": 1})
