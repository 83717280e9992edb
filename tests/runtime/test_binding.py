"""Entity templates: the piece-by-piece formatting of bare-name templates gives exactly what
formatting the bound arguments gives, for every way a call can pass them; values equal to
each other name one entity, whatever their types."""

from __future__ import annotations

import array
import dataclasses
import datetime as dt
import enum
import itertools
import os
import pathlib
import subprocess
import sys
import time
import types
from collections import (
    ChainMap,
    Counter,
    OrderedDict,
    UserDict,
    UserList,
    UserString,
    defaultdict,
    deque,
    namedtuple,
)
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import attrs
import pydantic
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache.runtime._binding import Template, entity_value


def _fn(a: Any, b: Any = 2, c: Any = "x") -> None:
    return None


TEXTS = ["cart:{a}", "{a}", "x{{y}}{a}-{b}}}", "static", "{a}{b}{c}", "k:{a}:{c}:",
         "{{{a}}}", "{a!r}", "{a:>4}", "{a.real}", "{a[0]}"]
VALUES = [1, 1.0, True, None, "s", (1, 2), [1, 2], {"k": 1}, b"x", 10**30]
KWARGS: list[dict[str, Any]] = [{}, {"c": "z"}, {"a": 5}, {"zz": 1}, {"b": None}]


class _BadFormat:
    def __format__(self, spec: str) -> str:
        raise TypeError("no")


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_format_as_the_bound_arguments_do(text: str) -> None:
    fast = Template(_fn, text, "t")
    slow = Template(_fn, text, "t")
    object.__setattr__(slow, "_pieces", None)  # the general path
    calls = itertools.chain([()], ((v,) for v in VALUES),
                            ((v, w) for v in VALUES for w in VALUES[:3]),
                            [(1, 2, 3, 4), (_BadFormat(),)])
    for args in calls:
        for kwargs in KWARGS:
            assert fast.format(args, kwargs) == slow.format(args, kwargs), (args, kwargs)


def test_only_bare_names_take_the_piece_path() -> None:
    assert Template(_fn, "cart:{a}-{b}", "t")._pieces is not None
    for text in ("{a!r}", "{a:>4}", "{a.real}", "{a[0]}"):
        assert Template(_fn, text, "t")._pieces is None


@pytest.mark.parametrize("text", TEXTS)
def test_value_of_names_only_values_the_entity_is_a_function_of(text: str) -> None:
    """``value_of`` (the tool cache remembers entities by it) answers only for one-field
    templates of exact ints and strs passed alone by position: equal such values format
    alike, and nothing else (``True == 1``, ``1.0 == 1``) is ever answered for."""
    t = Template(_fn, text, "test")
    seen: dict[Any, str | None] = {}
    for v, kwargs in itertools.product([*VALUES, 2, "2", 2**70], KWARGS):
        for args in ((v,), (v, 3), (v, 3, "q"), (v, 3, "q", "extra")):
            got = t.value_of(args, kwargs)
            if got is None:
                continue
            assert got is v and type(v) in (int, str) and not kwargs and len(args) <= 3
            entity = t.format(args, kwargs)
            assert seen.setdefault((type(v), v), entity) == entity
            assert entity == text.format_map({"a": v, "b": 3 if len(args) > 1 else 2,
                                              "c": args[2] if len(args) > 2 else "x"})
    one = Template(_fn, "cart:{b}", "test")
    assert one.value_of((1, 2), {}) == 2 and one.value_of((1,), {}) is None  # a default
    assert Template(_fn, "k:{a}:{b}", "test").value_of((1, 2), {}) is None


class _Level(enum.IntEnum):
    ONE = 1


# Numbers of every kind, some equal to each other across kinds (1 == 1.0 == True ==
# Decimal("1.000") == Fraction(2, 2) == 1+0j == _Level.ONE), some near misses (2**53 + 1 and
# float(2**53 + 1), 10**30 and 1e30, Decimal("0.1") and 0.1).
NUMBERS: list[Any] = [
    0, 0.0, -0.0, False, Decimal("0"), Decimal("-0.00"),
    1, 1.0, True, Decimal("1"), Decimal("1.000"), Fraction(2, 2), complex(1, 0), _Level.ONE,
    -3, -3.0, Decimal("-3"), 1.5, Decimal("1.5"), Fraction(3, 2), complex(1.5, 0),
    0.1, Decimal("0.1"), Fraction(1, 10), 2**53, float(2**53), 2**53 + 1, Decimal(2**53 + 1),
    10**30, 1e30, int(1e30), Decimal("1e30"), float("inf"), Decimal("Infinity"),
    float("-inf"), complex(1, 2), Decimal("1e5000"),
]
ENTITY_TEXTS = ["o:{a}", "{a}-{b}", "{a!s}", "{a!r}", "{a:>6}", "{a.real}", "k:{b}:{a}"]


@pytest.mark.parametrize("text", ENTITY_TEXTS)
def test_equal_numbers_name_one_entity(text: str) -> None:
    """A dict user's rule: values equal to each other are one key. A read of
    ``order_id=1`` and a write of ``order_id=1.0`` (or ``True``, ``Decimal("1")``) must
    name one entity, or the write leaves the read's entry cached (a stale read). Unequal
    values may share one (a write then invalidates both: a miss)."""
    t = Template(_fn, text, "t")
    for x, y in itertools.product(NUMBERS, repeat=2):
        if x == y:
            for args, kwargs in (((x,), {}), ((), {"a": x}), ((x, 1.0), {}),
                                 ((x,), {"b": True})):
                other_args = tuple(y if v is x else v for v in args)
                other_kwargs = {k: y if v is x else v for k, v in kwargs.items()}
                assert t.format(args, kwargs) == t.format(other_args, other_kwargs), (x, y)


def test_entity_values_keep_text_and_tell_unequal_numbers_apart() -> None:
    t = Template(_fn, "o:{a}", "t")
    # A str is kept as given: "1" names the entity 1 names (the same text), "1.0" does not.
    assert t.format(("1",), {}) == t.format((1,), {}) == t.format((1.0,), {}) == "o:1"
    assert t.format(("1.0",), {}) == "o:1.0"
    assert t.format((1.5,), {}) == "o:1.5" and t.format((2**53 + 1,), {}) != t.format(
        (float(2**53 + 1),), {})
    assert entity_value(True) == 1 and type(entity_value(True)) is int
    assert type(entity_value(Decimal("1.5"))) is float


def test_a_field_no_value_can_fill_names_no_entity() -> None:
    """A spec the value refuses, or an int too long to print, names no entity (None: the
    reader runs uncached, the writer invalidates the whole resource) instead of raising out
    of the tool call."""
    assert Template(_fn, "{a:d}", "t").format(("x",), {}) is None
    assert Template(_fn, "{a:d}", "t").format((1.0,), {}) == "1"
    assert Template(_fn, "o:{a}", "t").format((10**5000,), {}) is None


def test_containers_hold_their_items_by_the_same_rule_in_one_order() -> None:
    """Equal tuples, lists, dicts and sets name one entity: their numbers by value, a
    dict's items and a set's in one order (a set of strs iterates in an order each process
    draws at random, so two processes formatted one set two ways)."""
    t = Template(_fn, "k:{a}", "t")
    assert t.format(((1, 2),), {}) == t.format(((1.0, True + 1),), {}) == "k:(1, 2)"
    assert t.format(([1.5, [0.0]],), {}) == t.format(([Decimal("1.5"), [False]],), {})
    assert t.format(({"a": 1, "b": 2.0},), {}) == t.format(({"b": 2, "a": 1.0},), {})
    assert t.format(({1: "x"},), {}) == t.format(({1.0: "x"},), {})
    words = ["kiwi", "fig", "plum", "pear", "lime", "date", "sloe", "yuzu"]
    assert t.format((set(words),), {}) == t.format((frozenset(reversed(words)),), {})
    assert t.format((frozenset({1, 2.5}),), {}) == t.format(({2.5, 1.0},), {})
    loop: list[Any] = []
    loop.append(loop)
    assert t.format((loop,), {}) is None  # no entity: the whole resource, never a raise


def test_the_set_order_is_the_same_in_every_process() -> None:
    """A reader and a writer in two processes (each its own string hash seed) name one set
    alike. Before, each formatted it in its own iteration order."""
    code = ("from dejacache.runtime._binding import Template\n"
            "def f(a): pass\n"
            "print(Template(f, 'k:{a}', 't').format(({'kiwi', 'fig', 'plum', 'pear'},), {}))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in range(4)}
    assert len(seen) == 1


def test_records_holding_sets_name_one_entity_in_every_process() -> None:
    """A dataclass or a named tuple holding a set formats its items as a set does, in one
    order. Before, each was its own repr: the set in the order of the process's hash seed."""
    code = ("import dataclasses, collections\n"
            "from dejacache.runtime._binding import Template\n"
            "@dataclasses.dataclass(frozen=True)\n"
            "class Sku:\n"
            "    tags: frozenset\n"
            "P = collections.namedtuple('P', 'tags n')\n"
            "def f(a): pass\n"
            "words = frozenset({'kiwi', 'fig', 'plum', 'pear', 'lime', 'sloe'})\n"
            "t = Template(f, 'k:{a}', 't')\n"
            "print(t.format((Sku(words),), {}), t.format((P(set(words), 1),), {}))")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in range(6)}
    assert len(seen) == 1, seen


def test_entity_values_load_neither_decimal_nor_numbers() -> None:
    """``decimal`` is ~3 ms to import: a tool cache reads a number's kind from the modules
    already loaded (a Decimal cannot exist before its module is)."""
    code = ("import sys, enum, dejacache\n"
            "class L(enum.IntEnum):\n"
            "    ONE = 1\n"
            "@dejacache.tool_cache(resource='r', scope='global', key='{a}')\n"
            "def f(a): return 1\n"
            "@dejacache.invalidates('r', key='{a}')\n"
            "def w(a): pass\n"
            "f(1.0); w(L.ONE); f((1.5, {'x'}))\n"
            "print(sorted({'decimal', 'numbers', 'fractions'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


class _Point(NamedTuple):
    x: Any
    y: Any


_Pair = namedtuple("_Pair", "x y")


@dataclasses.dataclass(frozen=True)
class _Sku:
    id: Any
    token: str = dataclasses.field(default="s3cret", repr=False)  # compared, never shown
    note: str = dataclasses.field(default="", compare=False)  # shown, never compared


class _SubSku(_Sku):
    pass


@dataclasses.dataclass
class _Labelled:
    id: Any

    def __str__(self) -> str:
        return f"sku-{self.id}"


@attrs.frozen
class _Item:
    id: Any
    name: str = attrs.field(default="x", eq=str.lower)


class _Order(pydantic.BaseModel, extra="allow"):
    id: Any
    qty: int | float = 0


class _Colour(str, enum.Enum):  # noqa: UP042 (the common spelling before StrEnum)
    RED = "red"


class _Word(enum.StrEnum):
    A = "a"


_UTC = dt.UTC


def _tz(**delta: float) -> dt.timezone:
    return dt.timezone(dt.timedelta(**delta))


_NY = ZoneInfo("America/New_York")
# Values equal to others of other types or spellings (each row's values equal to its first),
# one row per kind of stdlib (and dataclass, attrs, pydantic) value that named two
# entities for one ``==`` class before.
EQUAL_ROWS: list[list[Any]] = [
    [_Point(1, 2), _Point(1.0, 2), _Pair(True, 2), (1, 2)],
    [time.struct_time((2024, 1, 2, 3, 4, 5, 6, 7, 0)), (2024, 1, 2, 3, 4, 5, 6, 7, 0.0)],
    [_Sku(1), _Sku(1.0, note="n"), _Sku(Decimal("1"))],
    [_SubSku(2), _SubSku(2.0)],
    [_Item(1, "Bob"), _Item(1.0, "bob")],
    [_Order(id=1, qty=2.0), _Order(id=1.0, qty=2), _Order.model_construct(qty=2, id=True)],
    [_Order(id=1, z=1.0, w="a"), _Order(w="a", id=1, z=1)],
    [_Colour.RED, "red", UserString("red")],
    [_Word.A, "a"],
    [dt.datetime(2024, 1, 1, 12, tzinfo=_UTC), dt.datetime(2024, 1, 1, 13, tzinfo=_tz(hours=1)),
     dt.datetime(2024, 1, 1, 7, tzinfo=_NY),
     dt.datetime(2024, 1, 1, 17, 30, tzinfo=_tz(hours=5.5))],
    [dt.datetime(2024, 11, 3, 1, 30, tzinfo=_NY),  # (an hour New York's clocks repeat)
     dt.datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=_NY)],
    [dt.datetime(1, 1, 1, 0, 30, tzinfo=_tz(hours=1)),  # (an instant before year 1)
     dt.datetime(1, 1, 1, 1, 30, tzinfo=_tz(hours=2))],
    [dt.time(12, tzinfo=_UTC), dt.time(13, tzinfo=_tz(hours=1)),
     dt.time(7, 30, tzinfo=_tz(hours=-4.5))],
    [dt.time(0, 0, 0, 5, tzinfo=_tz(hours=1)),  # (before midnight UTC: no wrapping)
     dt.time(1, 0, 0, 5, tzinfo=_tz(hours=2))],
    [dt.time(23, 30, tzinfo=_tz(hours=-1)), dt.time(22, 30, tzinfo=_tz(hours=-2))],
    [_tz(hours=0), _UTC, dt.timezone(dt.timedelta(0), "Z")],
    [{"a": 1, "b": 2}, OrderedDict(a=1, b=2), OrderedDict(b=2.0, a=1), defaultdict(int, b=2, a=1),
     Counter(b=2, a=1), ChainMap({"b": 2}, {"a": 1}), UserDict(b=2, a=1),
     types.MappingProxyType({"b": 2.0, "a": True})],
    [[1, 2], UserList([1.0, 2])],
    [deque([1, 2]), deque([1.0, 2], maxlen=5)],
    [{1, 2}, frozenset({2.0, 1}), {1: "x", 2: "y"}.keys(), {2: "y", 1: "x"}.keys()],
    [{(1, "x")}, {1.0: "x"}.items()],
    [b"x", bytearray(b"x"), memoryview(b"x"), memoryview(array.array("b", [120]))],
    [array.array("i", [1, 2]), array.array("d", [1.0, 2.0])],
    [range(0), range(2, 2), range(5, 1)],
    [range(0, 3, 2), range(0, 4, 2)],
    [slice(1, 2), slice(1.0, 2, None)],
    [types.SimpleNamespace(a=1, b=2), types.SimpleNamespace(b=2.0, a=1)],
    [pathlib.PureWindowsPath("C:/Users/A"), pathlib.PureWindowsPath("c:\\users\\a")],
]
OWN_TEXT_FIELDS = ["o:{a}", "{a!r}", "{a}-{b}", "k:{b}:{a}"]


def _forms(v: Any) -> list[Any]:
    """``v`` itself and inside the containers a template formats item by item."""
    return [v, [v], (v, "t"), {"k": v}]


@pytest.mark.parametrize("text", OWN_TEXT_FIELDS)
def test_equal_stdlib_and_record_values_name_one_entity(text: str) -> None:
    """``==`` is the rule, whatever the type: a named tuple and its tuple, a dataclass or a
    pydantic model with ``1`` and with ``1.0``, one instant in two time zones, an
    OrderedDict and its dict, a ``(str, Enum)`` member and its str. Each of these named two
    entities before (its own text), so a write naming one left the read of the other
    cached: a stale read."""
    t = Template(_fn, text, "t")
    for row in EQUAL_ROWS:
        assert all(x == row[0] for x in row), row  # (the table's own premise)
        for x, y in itertools.combinations(row, 2):
            if x != y:
                continue  # (two OrderedDicts in two orders: each equal to the dict)
            for fx, fy in zip(_forms(x), _forms(y), strict=True):
                got = {t.format((fx,), {}), t.format((), {"a": fy})}
                assert len(got) == 1 and None not in got, (x, y, got)


def test_entities_of_records_show_their_values_and_keep_their_secrets_out() -> None:
    """The text an entity is known by (in ``explain``, in counter names in Redis): a
    dataclass as its repr with numbers by value, a ``repr=False`` field never shown, a
    class with its own ``__str__`` by that (what it prints is what it means), a named tuple
    as its tuple, an aware datetime as its instant in UTC."""
    t = Template(_fn, "k:{a}", "t")
    assert t.format((_Sku(1.0, note="n"),), {}) == "k:_Sku(id=1)"
    assert t.format(([_SubSku(2.0)],), {}) == "k:[_SubSku(id=2)]"
    assert "s3cret" not in t.format((_Sku(1, token="s3cret"),), {})
    assert t.format((_Labelled(1),), {}) == "k:sku-1"  # its own text, as before
    assert t.format((_Item(1.0, "Bob"),), {}) == "k:_Item(id=1, name='bob')"
    assert t.format((_Order(id=1.0, qty=2),),  {}) == "k:id=1 qty=2"
    assert t.format((_Point(1.0, 2),), {}) == "k:(1, 2)"
    assert t.format((_Colour.RED,), {}) == "k:red"
    assert t.format((dt.datetime(2024, 1, 1, 13, tzinfo=_tz(hours=1)),), {}) == (
        "k:2024-01-01 12:00:00+00:00")
    assert Template(_fn, "k:{a:%Y-%m-%d %H}", "t").format(
        (dt.datetime(2024, 1, 1, 1, tzinfo=_tz(hours=2)),), {}) == "k:2023-12-31 23"
    # Unequal values stay apart: another class, a compared field, a naive datetime.
    assert t.format((_SubSku(1),), {}) != t.format((_Sku(1),), {})
    assert t.format((_Sku(1, token="other"),), {}) == t.format((_Sku(1),), {})  # (merged)
    assert t.format((dt.datetime(2024, 1, 1, 12),), {}) != t.format(
        (dt.datetime(2024, 1, 1, 12, tzinfo=_UTC),), {})


# Leaves of equal values in several spellings, and containers whose kinds are equal to each
# other, for the property below: a tree drawn once, spelt twice.
_LEAVES: list[list[Any]] = [
    [0, 0.0, -0.0, False, Decimal("-0.00"), Fraction(0)],
    [1, 1.0, True, Decimal("1.000"), Fraction(2, 2), complex(1, 0)],
    [10, 10.0, Decimal("1E+1"), Fraction(20, 2)],
    [1.5, Decimal("1.5"), Fraction(3, 2)],
    ["red", _Colour.RED, UserString("red")],
    [b"ab", bytearray(b"ab")],
    [dt.datetime(2024, 6, 1, 12, tzinfo=_UTC), dt.datetime(2024, 6, 1, 8, tzinfo=_NY),
     dt.datetime(2024, 6, 1, 21, 45, tzinfo=_tz(hours=9, minutes=45))],
    [dt.time(12, tzinfo=_UTC), dt.time(14, tzinfo=_tz(hours=2))],
    [range(0, 3, 2), range(0, 4, 2)],
]
_SEQUENCES: list[list[Callable[[list[Any]], Any]]] = [
    [tuple, lambda kids: _Pair(*kids) if len(kids) == 2 else tuple(kids)],
    [list, UserList],
    [deque, lambda kids: deque(kids, maxlen=9)],
    [lambda kids: _Sku(tuple(kids)), lambda kids: _Sku(list(kids) and tuple(kids), note="x")],
    [lambda kids: _Item(tuple(kids)), lambda kids: _Item(tuple(kids), "X")],
    [lambda kids: _Order(id=tuple(kids)), lambda kids: _Order.model_construct(id=tuple(kids))],
    [lambda kids: types.SimpleNamespace(**{f"k{i}": k for i, k in enumerate(kids)}),
     lambda kids: types.SimpleNamespace(**dict(reversed([(f"k{i}", k)
                                                        for i, k in enumerate(kids)])))],
]
_MAPPINGS: list[Callable[[dict[str, Any]], Any]] = [
    dict, OrderedDict, lambda d: OrderedDict(reversed(d.items())), UserDict,
    lambda d: defaultdict(list, d), ChainMap, types.MappingProxyType,
]


@st.composite
def _equal_pair(draw: st.DrawFn) -> tuple[Any, Any]:
    tree = draw(st.recursive(
        st.sampled_from(range(len(_LEAVES))).map(lambda i: ("leaf", i)),
        lambda kids: st.tuples(st.sampled_from(["seq", "map"]),
                               st.integers(0, len(_SEQUENCES) - 1), st.lists(kids, max_size=3)),
        max_leaves=8))

    def spell(node: Any) -> Any:
        if node[0] == "leaf":
            return draw(st.sampled_from(_LEAVES[node[1]]))
        kind, which, kids = node
        items = [spell(k) for k in kids]
        if kind == "map":
            return draw(st.sampled_from(_MAPPINGS))({f"k{i}": x for i, x in enumerate(items)})
        return draw(st.sampled_from(_SEQUENCES[which]))(items)

    return spell(tree), spell(tree)


@settings(max_examples=300, deadline=None)
@given(_equal_pair())
def test_property_values_equal_name_one_entity(pair: tuple[Any, Any]) -> None:
    """Any two spellings of one value (numbers of every kind, strs and ``(str, Enum)``
    members, one instant in several zones; in tuples and named tuples, lists, deques,
    dicts of every mapping kind, dataclasses, attrs classes, pydantic models, namespaces)
    that are equal name one entity."""
    x, y = pair
    assume(x == y)  # (two OrderedDicts in two orders are not: each is equal to the dict)
    t = Template(_fn, "k:{a}", "t")
    assert t.format((x,), {}) == t.format((y,), {}) is not None


def _spot(resource: str) -> tuple[Callable[[Any], str], Callable[[Any, str], None]]:
    """A reader and a writer of one value, the entity named by their argument ``p``."""
    db = {"value": "old"}

    @dejacache.tool_cache(resource=resource, scope="global", key="p:{p}")
    def read(p: Any) -> str:
        return db["value"]

    @dejacache.invalidates(resource, key="p:{p}")
    def write(p: Any, value: str) -> None:
        db["value"] = value

    return read, write


def test_a_write_through_an_equal_value_invalidates_the_read() -> None:
    """End to end: a read of ``Point(1, 2)``, a write of ``Point(1.0, 2)`` (or of the tuple,
    ``Sku(1.0)`` after ``Sku(1)``, ``"red"`` after ``Colour.RED``, one instant in another
    zone), and the read again gets the new value: the write named the read's entity."""
    pairs = [(_Point(1, 2), _Point(1.0, 2)), (_Point(1, 2), (1, 2)), (_Sku(1), _Sku(1.0)),
             (_Colour.RED, "red"), (dt.datetime(2024, 1, 1, 12, tzinfo=_UTC),
                                    dt.datetime(2024, 1, 1, 7, tzinfo=_NY))]
    for i, (reader, writer) in enumerate(pairs):
        read, write = _spot(f"spot{i}")
        assert read(reader) == "old"
        write(writer, "new")
        assert read(reader) == "new", (reader, writer)
