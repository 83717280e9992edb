"""Read-only results (``@cache(frozen=True)``): what callers can and cannot do with them."""

from __future__ import annotations

import bisect
import contextlib
import copy
import gc
import heapq
import json
import operator
import pathlib
import pickle
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import dejacache
from dejacache._frozen import FrozenDict, FrozenList, freeze, shared_node, thaw, view_of
from dejacache.codec import JsonCodec
from dejacache.stores import SQLiteStore

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=20,
)


def _containers(v: Any) -> list[Any]:
    """``v`` and every container in it, as a caller reaches them (iteration, values)."""
    out: list[Any] = []
    if isinstance(v, Mapping):
        out.append(v)
        for x in v.values():
            out += _containers(x)
    elif isinstance(v, Sequence) and not isinstance(v, str):
        out.append(v)
        for x in v:
            out += _containers(x)
    return out


def _reads_as(f: Any, p: Any) -> None:
    """Every read a caller makes of the frozen ``f`` answers as on the plain ``p``."""
    assert f == p and p == f and not operator.ne(f, p) and not operator.ne(p, f)
    assert repr(f) == repr(p)
    if isinstance(p, dict):
        assert type(f) is FrozenDict and isinstance(f, Mapping) and not isinstance(f, dict)
        assert len(f) == len(p) and list(f) == list(p) and list(f.keys()) == list(p.keys())
        assert list(reversed(f)) == list(reversed(p)) and bool(f) == bool(p)
        assert type(f.copy()) is dict and f.copy() == p and dict(f) == p and {**f} == p
        for k in p:
            assert k in f and k in f.keys()  # noqa: SIM118 (the keys view is under test)
            _reads_as(f[k], p[k])
            _reads_as(f.get(k), p[k])
        for (fk, fv), (pk, pv) in zip(f.items(), p.items(), strict=True):
            assert fk == pk
            _reads_as(fv, pv)
        for fv, pv in zip(f.values(), p.values(), strict=True):
            _reads_as(fv, pv)
        assert "\x00absent" not in f and f.get("\x00absent", 7) == 7
        with pytest.raises(KeyError):
            f["\x00absent"]
        assert type(f | {"x": 1}) is dict and f | {"x": 1} == p | {"x": 1}
        assert {"x": 1} | f == {"x": 1} | p
    elif isinstance(p, list):
        assert type(f) is FrozenList and isinstance(f, Sequence) and not isinstance(f, list)
        assert len(f) == len(p) and bool(f) == bool(p)
        for i in range(-len(p), len(p)):
            _reads_as(f[i], p[i])
        for fv, pv in zip(f, p, strict=True):
            _reads_as(fv, pv)
        for pv in p:
            assert pv in f and f.index(pv) == p.index(pv) and f.count(pv) == p.count(pv)
        assert "\x00absent" not in f and [["\x00absent"]] not in f
        assert type(f[1:]) is list and f[1:] == p[1:] and f[::-1] == p[::-1]
        assert list(reversed(f)) == list(reversed(p)) and f.copy() == p == list(f)
        assert operator.add(f, [0]) == operator.add(p, [0])
        assert operator.add([0], f) == operator.add([0], p)
        assert f + f == p + p and f * 2 == p * 2 == 2 * f
        with pytest.raises(IndexError, match="list index out of range"):
            f[len(p)]
    else:
        assert type(f) is type(p)  # a leaf is handed out as it is
        return
    with pytest.raises(TypeError, match="unhashable"):
        hash(f)


def _handed_out(value: Any) -> list[Any]:
    """What a miss (``freeze``) and a hit (a view of the node the store shares, which keeps
    its JSON text) hand a caller for ``value``."""
    text = orjson.dumps(value)
    return [freeze(value), view_of(shared_node(orjson.loads(text), text))]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_json, st.integers(0, 1))
def test_a_frozen_value_reads_compares_and_copies_as_the_plain_one(value: Any, hit: int) -> None:
    frozen = _handed_out(value)[hit]
    _reads_as(frozen, value)
    for c in _containers(frozen):  # every level, not just the top
        assert type(c) in (FrozenDict, FrozenList)
    plain = thaw(frozen)
    assert plain == value
    assert all(type(c) in (dict, list) for c in _containers(plain))
    assert copy.deepcopy(frozen) == value
    assert all(type(c) in (dict, list) for c in _containers(copy.deepcopy(frozen)))
    assert pickle.loads(pickle.dumps(frozen)) == value
    assert type(pickle.loads(pickle.dumps(frozen))) is type(value)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json, st.integers(0, 1))
def test_frozen_values_serialise_with_thaw_and_fail_clearly_without(value: Any, hit: int) -> None:
    """Views are not ``dict``/``list`` instances, so the JSON encoders need
    ``default=dejacache.thaw``; without it they refuse, naming the type (never a wrong
    document)."""
    frozen = _handed_out(value)[hit]
    assert orjson.dumps(frozen, default=dejacache.thaw) == orjson.dumps(value)
    assert json.dumps(frozen, default=dejacache.thaw) == json.dumps(value)
    if isinstance(value, (dict, list)):
        name = type(frozen).__name__
        with pytest.raises(TypeError, match=f"{name} is not JSON serializable"):
            json.dumps(frozen)
        with pytest.raises(TypeError, match=f"not JSON serializable: {name}"):
            orjson.dumps(frozen)


def test_pydantic_validates_frozen_values_as_plain_ones() -> None:
    """Lax validation (pydantic's default) takes any mapping and sequence; strict mode
    asks for real dicts and lists (then pass ``dejacache.thaw(value)``)."""
    import pydantic

    class Call(pydantic.BaseModel):
        name: str
        args: dict[str, int]

    class Reply(pydantic.BaseModel):
        calls: list[Call]
        tags: list[str]
        usage: dict[str, Any]
        raw: Any = None

    data = {"calls": [{"name": "f", "args": {"x": 1}}], "tags": ["a", "b"],
            "usage": {"tokens": [1, 2]}, "raw": {"k": [3]}}
    frozen = freeze(data)
    got = Reply.model_validate(frozen)
    assert got == Reply.model_validate(data)
    assert got.raw == {"k": [3]}  # Any keeps the read-only value itself
    assert pydantic.TypeAdapter(list[dict[str, Any]]).validate_python(
        freeze([{"a": [1]}])) == [{"a": [1]}]
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter(dict[str, Any]).validate_python(frozen, strict=True)
    assert Reply.model_validate(thaw(frozen), strict=True) == got
    # Values a model keeps as they are (Any, dict[str, Any]) dump as the plain ones.
    assert got.model_dump() == data and orjson.loads(got.model_dump_json()) == data
    assert got.model_dump(mode="json") == data
    assert dejacache.call_key("ns", "f", (got,)) == dejacache.call_key(
        "ns", "f", (Reply.model_validate(data),))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_json)
def test_frozen_values_key_and_encode_exactly_as_plain_ones(value: Any) -> None:
    """A frozen result passed on to another cached call, or returned by one, is the data it
    reads as: the same key, the same stored bytes."""
    codec = JsonCodec()
    for frozen in _handed_out(value):
        assert dejacache.call_key("ns", "f", (frozen,)) == dejacache.call_key("ns", "f",
                                                                              (value,))
        assert dejacache.call_key("ns", "f", ({"in": [frozen]},)) == dejacache.call_key(
            "ns", "f", ({"in": [value]},))
        assert codec.encode(frozen, key="k") == codec.encode(value, key="k")


_DICT_CHANGES: list[Callable[[Any], Any]] = [
    lambda d: d.__setitem__("x", 1),
    lambda d: d.__delitem__("a"),
    lambda d: d.update(x=1),
    lambda d: d.setdefault("x", 1),
    lambda d: d.pop("a"),
    lambda d: d.popitem(),
    lambda d: d.clear(),
    lambda d: d.__ior__({"x": 1}),
]
_LIST_CHANGES: list[Callable[[Any], Any]] = [
    lambda s: s.__setitem__(0, 1),
    lambda s: s.__delitem__(0),
    lambda s: s.append(1),
    lambda s: s.extend([1]),
    lambda s: s.insert(0, 1),
    lambda s: s.pop(),
    lambda s: s.remove(1),
    lambda s: s.clear(),
    lambda s: s.sort(),
    lambda s: s.reverse(),
    lambda s: s.__iadd__([1]),
    lambda s: s.__imul__(2),
]


@pytest.mark.parametrize("change", _DICT_CHANGES + _LIST_CHANGES)
def test_every_change_in_place_is_refused_and_changes_nothing(
    change: Callable[[Any], Any],
) -> None:
    value = freeze({"a": [1, 2, {"b": 3}]})
    target = value if change in _DICT_CHANGES else value["a"]
    with pytest.raises(dejacache.ReadOnlyResult, match=r"frozen=True.*copy\.deepcopy"):
        change(target)
    assert value == {"a": [1, 2, {"b": 3}]}


@pytest.mark.parametrize("args", [((9,),), ((), {"x": 1})])
def test_a_view_is_made_once_and_never_again(args: tuple[Any, ...]) -> None:
    value = freeze({"a": [1]})
    for view in (value, value["a"]):
        with pytest.raises(TypeError):
            view.__init__(*args[0], **(args[1] if len(args) > 1 else {}))
        with pytest.raises(TypeError):
            type(view)(*args[0], **(args[1] if len(args) > 1 else {}))
    assert value == {"a": [1]}


def test_read_only_result_is_a_type_error_in_the_one_tree() -> None:
    assert issubclass(dejacache.ReadOnlyResult, TypeError)
    assert issubclass(dejacache.ReadOnlyResult, dejacache.DejacacheError)


def test_copies_are_the_callers_own() -> None:
    value = freeze({"a": [1], "t": ([2], 3)})
    shallow = copy.copy(value)
    assert type(shallow) is dict and shallow == value
    shallow["new"] = 1  # the top level is the caller's own
    deep = copy.deepcopy(value)
    deep["a"].append(2)
    assert value == {"a": [1], "t": ([2], 3)}
    assert type(value["t"]) is tuple and type(value["t"][0]) is FrozenList
    merged = value | {"b": 2}
    assert type(merged) is dict and merged["b"] == 2
    assert type(value["a"] + [5]) is list and type(value["a"][:]) is list


def test_other_objects_are_left_as_they_are() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    box = Box()
    assert freeze(box) is box
    assert freeze("text") == "text"
    already = freeze({"a": 1})
    assert freeze(already) == already and freeze(already)._node is already._node


# ------------------------------------------------------------ no route changes a shared value
#
# A frozen hit is shared by every later hit of its entry. Each route below is one a caller
# (or a library it hands the value to) could take to change a value in place: C-level
# functions that accept any list or dict (heapq, ``list.sort(x)``, ``dict.__setitem__(d,..)``),
# ``super()`` from the class, ``__class__`` and slot assignment, the operator module, random,
# bisect, and the objects ``gc`` says a value holds. Each may raise; none may change what
# the next hit hands out. (ctypes and array are out of scope: they write raw memory.)


def _first(x: Any) -> Any:
    return next(iter(x))


def _on(func: Callable[..., Any], *args: Any) -> Callable[[Any], Any]:
    return lambda x: func(x, *args)


def _on_first(func: Callable[..., Any]) -> Callable[[Any], Any]:
    return lambda x: func(x, _first(x))


_LIST_METHOD_ARGS: dict[str, tuple[Any, ...]] = {
    "append": (-1,), "extend": ([-1],), "insert": (0, -1), "pop": (), "clear": (),
    "sort": (), "reverse": (), "__setitem__": (0, -1), "__delitem__": (0,),
    "__iadd__": ([-1],), "__imul__": (0,), "__init__": ([9],),
}
_DICT_METHOD_ARGS: dict[str, tuple[Any, ...]] = {
    "__setitem__": ("new", -1), "update": ({"new": -1},), "setdefault": ("new", -1),
    "popitem": (), "clear": (), "__ior__": ({"new": -1},), "__init__": ({"new": -1},),
}


def _bound(name: str, args: tuple[Any, ...]) -> Callable[[Any], Any]:
    return lambda x: getattr(x, name)(*args)


def _through_super(name: str, args: tuple[Any, ...]) -> Callable[[Any], Any]:
    """``name`` through ``super()`` from every class of ``x``: a subclass's route to the
    base's own method."""

    def call(x: Any) -> None:
        for cls in type(x).__mro__:
            with contextlib.suppress(Exception):
                getattr(super(cls, x), name)(*args)

    return call


def _siblings(x: Any) -> list[type]:
    """Every class ``x.__class__`` might be set to: plain types, and subclasses of each
    class of ``x`` with no slots, with its slots, or with a ``__dict__``."""
    out: list[type] = [dict, list, tuple, object]
    slots = [getattr(c, "__slots__", ()) for c in type(x).__mro__]
    for base in type(x).__mro__:
        for body in ({"__slots__": ()}, {"__slots__": tuple(s for s in slots
                                                             if isinstance(s, str))}, {}):
            try:
                out.append(type("Sibling", (base,), dict(body)))
            except TypeError:
                continue
    return out


def _swap_class(x: Any) -> None:
    for cls in _siblings(x):
        with contextlib.suppress(Exception):
            x.__class__ = cls
        with contextlib.suppress(Exception):
            object.__setattr__(x, "__class__", cls)


def _write_slots(x: Any) -> None:
    for cls in type(x).__mro__:
        names = getattr(cls, "__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            for value in (None, (), {}, []):
                with contextlib.suppress(Exception):
                    object.__setattr__(x, name, value)


def _through_gc(x: Any) -> None:
    """Change the lists and dicts a value holds (looking through tuples), found by gc."""
    todo, seen = list(gc.get_referents(x)), 0
    while todo and seen < 1000:
        seen += 1
        r = todo.pop()
        if type(r) is tuple:
            todo += gc.get_referents(r)
        elif isinstance(r, list):
            with contextlib.suppress(Exception):
                list.append(r, -1)
        elif isinstance(r, dict) and not isinstance(r, type):
            with contextlib.suppress(Exception):
                dict.__setitem__(r, "new", -1)


MUTATORS: dict[str, Callable[[Any], Any]] = {
    "heapq.heappush": _on(heapq.heappush, -1),
    "heapq.heappop": heapq.heappop,
    "heapq.heapify": heapq.heapify,
    "heapq.heapreplace": _on(heapq.heapreplace, 99),
    "heapq.heappushpop": _on(heapq.heappushpop, 99),
    "list.sort": list.sort,
    "list.sort(key, reverse)": lambda x: list.sort(x, key=repr, reverse=True),
    "list.remove": _on_first(list.remove),
    **{f"list.{n}": _on(getattr(list, n), *a) for n, a in _LIST_METHOD_ARGS.items()},
    "list.__setitem__(slice)": _on(list.__setitem__, slice(None), []),
    "dict.__delitem__": _on_first(dict.__delitem__),
    "dict.pop": _on_first(dict.pop),
    **{f"dict.{n}": _on(getattr(dict, n), *a) for n, a in _DICT_METHOD_ARGS.items()},
    **{f"x.{n}": _bound(n, a) for n, a in {**_LIST_METHOD_ARGS, **_DICT_METHOD_ARGS}.items()},
    **{f"super().{n}": _through_super(n, a)
       for n, a in {**_LIST_METHOD_ARGS, **_DICT_METHOD_ARGS}.items()},
    "operator.setitem": lambda x: operator.setitem(x, 0 if isinstance(x, Sequence) else "new",
                                                   -1),
    "operator.delitem": lambda x: operator.delitem(x, 0 if isinstance(x, Sequence)
                                                   else _first(x)),
    "operator.iadd": _on(operator.iadd, [-1]),
    "operator.iconcat": _on(operator.iconcat, [-1]),
    "operator.imul": _on(operator.imul, 0),
    "operator.ior": _on(operator.ior, {"new": -1}),
    "bisect.insort": _on(bisect.insort, 0),
    "bisect.insort_left": _on(bisect.insort_left, 0),
    "random.shuffle": random.Random(7).shuffle,
    "__class__ assignment": _swap_class,
    "slot assignment": _write_slots,
    "gc referents": _through_gc,
}


def _apply(mutator: Callable[[Any], Any], target: Any) -> None:
    with contextlib.suppress(Exception):
        mutator(target)


def _assert_as_recorded(got: Any, recorded: Any) -> None:
    """``got`` reads as ``recorded`` and every container in it is still read-only."""
    assert got == recorded
    assert thaw(got) == recorded
    for c in _containers(got):
        assert type(c) in (FrozenDict, FrozenList), type(c)


_RECORDED: dict[str, Any] = {"items": [3, 1, 2], "nested": {"k": 1, "deep": [[5, 4]]}}
_TARGETS: dict[str, Callable[[Any], Any]] = {
    "top": lambda v: v, "list": lambda v: v["items"], "dict": lambda v: v["nested"],
    "inner list": lambda v: v["nested"]["deep"][0],
}


@contextlib.contextmanager
def _store(kind: str, tmp: pathlib.Path) -> Iterator[Any]:
    store: Any = dejacache.MemoryStore() if kind == "memory" else SQLiteStore(tmp / "c.db")
    try:
        yield store
    finally:
        store.close()


def _recorded_fn(name: str) -> Callable[[], Any]:
    @dejacache.cache(name=name, frozen=True)
    def answer() -> Any:
        return copy.deepcopy(_RECORDED)

    return answer


@pytest.mark.parametrize("target", list(_TARGETS))
@pytest.mark.parametrize("route", list(MUTATORS))
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_no_route_changes_what_the_next_hit_sees(
    kind: str, route: str, target: str, tmp_path: pathlib.Path,
) -> None:
    answer = _recorded_fn("answer")
    with _store(kind, tmp_path) as store, dejacache.scope(store=store):
        answer()  # the miss
        hit = answer()
        _apply(MUTATORS[route], _TARGETS[target](hit))
        _assert_as_recorded(answer(), _RECORDED)
        if kind == "sqlite":  # the row rewritten with the same bytes: nothing kept survives
            store.clear()
            answer()
            _assert_as_recorded(answer(), _RECORDED)


class FrozenHits(RuleBasedStateMachine):
    """Any sequence of changes, clears, deletions and re-recordings of one entry, in memory
    or SQLite: every hit still reads as what was recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        self.store: Any = None
        self.answer = _recorded_fn("machine")

    @initialize(kind=st.sampled_from(["memory", "sqlite"]))
    def open_store(self, kind: str) -> None:
        self.store = (dejacache.MemoryStore() if kind == "memory"
                      else SQLiteStore(self.tmp / "c.db"))
        self.call()

    def call(self, mode: str = "auto") -> Any:
        with dejacache.scope(store=self.store, mode=mode):
            return self.answer()

    @rule(route=st.sampled_from(sorted(MUTATORS)), pick=st.integers(0, 10))
    def change(self, route: str, pick: int) -> None:
        targets = _containers(self.call())
        _apply(MUTATORS[route], targets[pick % len(targets)])

    @rule()
    def clear(self) -> None:
        self.store.clear()

    @rule()
    def delete(self) -> None:
        with dejacache.scope(store=self.store):
            self.store.delete(self.answer.cache_key())  # type: ignore[attr-defined]

    @rule()
    def record_again(self) -> None:
        self.call("record")

    @invariant()
    def hits_read_as_recorded(self) -> None:
        if self.store is not None:
            for _ in range(2):  # a miss (after a clear) then a hit
                _assert_as_recorded(self.call(), _RECORDED)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


FrozenHits.TestCase.settings = settings(max_examples=150, stateful_step_count=12,
                                        deadline=None, derandomize=True)
test_frozen_hits_under_any_sequence_of_changes = FrozenHits.TestCase
