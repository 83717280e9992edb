"""Canonical keys: equal calls agree, different calls differ, and keys never drift."""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import decimal
import enum
import functools
import json
import math
import pathlib
import subprocess
import sys
import uuid
import zoneinfo
from typing import Any, NamedTuple
from unittest.mock import ANY

import orjson
import pydantic
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache import keys
from dejacache.keys import KEY_SCHEMA_VERSION, KeyBuilder, call_key, canonical_json, explain

# ------------------------------------------------------------------------------ fixtures


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.Enum):
    SMALL = 1


class Shade(enum.Enum):
    DARK = 1


class Level(enum.IntEnum):
    ONE = 1


class Tone(enum.StrEnum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: float


@dataclasses.dataclass(frozen=True)
class Line:
    a: Point
    b: Point
    label: str = ""


class Message(pydantic.BaseModel):
    role: str
    content: str | None = None


class Request(pydantic.BaseModel):
    model: str
    messages: list[Message]
    metadata: dict[str, str] = {}


class Dumpable:
    """An SDK-style object that is not pydantic but exposes model_dump()."""

    def __init__(self, **data: Any) -> None:
        self._data = data

    def model_dump(self) -> dict[str, Any]:
        return dict(self._data)


def _k(*args: Any, **kwargs: Any) -> str:
    return call_key("ns", "fn", args, kwargs)


# ------------------------------------------------------------------------------ golden digests

# The canonical form is a stored-data format: these digests must never change by accident.
# A deliberate change bumps KEY_SCHEMA_VERSION (and these values) in the same commit.
GOLDEN_CASES: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "empty": ((), {}),
    "scalars": ((1, "two", 3.5, True, None), {}),
    "nested": (({"b": [1, 2, {"c": "d"}], "a": (3, 4)},), {"k": b"\x00\xff"}),
    "types": (
        (
            Point(1, 2.5),
            Color.RED,
            datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
            datetime.date(2024, 1, 2),
            uuid.UUID(int=42),
            decimal.Decimal("1.50"),
            pathlib.PurePosixPath("/a/b"),
            {3, 1, 2},
        ),
        {},
    ),
    "big": ((2**80, {1: "x", "y": 2}), {}),
    "chat": (
        (),
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.0,
            "extra_headers": {"traceparent": "00-abc-def-01"},
        },
    ),
}

# Schema 2 changed only the seed for these cases, and "scalars" (it holds a None)
# gained the None mark: otherwise their canonical bytes are those of schema 1. "types"
# changed within schema 2: a dataclass, an Enum member and a Decimal are keyed under their
# class (and a Decimal as written) by tags no earlier key held, so no old entry can answer.
GOLDEN = {
    "empty": "5e826d7465a320e3506cd14f679dfd2b",
    "scalars": "522f05436d78dc6027bb1936ff05d663",
    "nested": "b9b839fe83ae99c0e43f0f82e3586706",
    "types": "0fb70c0dc677ccb0a903a482cedbad24",
    "big": "b54b2e85a4ade57e820994b02b05cf36",
    "chat": "b4e2025dbf2670f682ed14b5be8b8280",
}


def golden_keys() -> dict[str, str]:
    return {n: call_key("golden-ns", "pkg.fn", a, kw) for n, (a, kw) in GOLDEN_CASES.items()}


def test_schema_version_is_two() -> None:
    assert KEY_SCHEMA_VERSION == 2


def test_golden_digests_are_pinned() -> None:
    assert golden_keys() == GOLDEN


def test_keys_are_stable_across_processes() -> None:
    # A fresh interpreter with its own hash seed must compute the same keys.
    out = subprocess.run(
        [sys.executable, __file__],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        # (the dejacache this test imported, not whichever one is installed)
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(pathlib.Path(dejacache.__file__).parents[1])},
    )
    assert json.loads(out.stdout) == golden_keys() == GOLDEN


def test_key_is_short_hex() -> None:
    k = _k(1)
    assert len(k) == 32
    int(k, 16)


# ------------------------------------------------------------------------------ hypothesis

# Derandomized: the same examples every run (CI must be deterministic); no deadline, since
# the CI machine is shared and slow.
_BASE = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
_names = st.text(alphabet="abcdefgh", min_size=1, max_size=4)  # never a volatile name
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.integers().filter(lambda i: abs(i) > 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=4),
    max_leaves=20,
)


def _reorder(value: Any, flip: bool) -> Any:
    """The same data spelled differently: dicts reversed, lists turned into tuples."""
    if isinstance(value, dict):
        return {k: _reorder(value[k], not flip) for k in reversed(list(value))}
    if isinstance(value, list):
        items = [_reorder(v, not flip) for v in value]
        return tuple(items) if flip else items
    return value


def _shape(value: Any) -> Any:
    """Structural identity as keys see it: tuples are lists, but 1, 1.0 and True differ."""
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_shape(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _shape(v)) for k, v in value.items())))
    if isinstance(value, float) and value == 0.0:
        return ("float", math.copysign(1.0, value))
    return (type(value).__name__, value)


@settings(_BASE, max_examples=200)
@given(st.dictionaries(_names, _values, max_size=5), st.booleans())
def test_equal_values_give_equal_keys(args: dict[str, Any], flip: bool) -> None:
    assert call_key("ns", "f", (), args) == call_key("ns", "f", (), _reorder(args, flip))


@settings(_BASE, max_examples=300)
@given(_values, _values)
def test_different_values_give_different_keys(a: Any, b: Any) -> None:
    assume(_shape(a) != _shape(b))
    assert canonical_json({"x": a}) != canonical_json({"x": b})
    assert _k(x=a) != _k(x=b)


@_BASE
@given(_values)
def test_the_caller_data_is_never_mutated(value: Any) -> None:
    data = {"v": value, "headers": {"traceparent": "00-1", "X-Request-ID": "r"}}
    before = copy.deepcopy(data)
    _k(data=data)
    assert data == before


@settings(_BASE, max_examples=100)
@given(st.lists(_values, min_size=3, max_size=3), st.integers(0, 3))
def test_positional_and_keyword_spellings_agree(values: list[Any], split: int) -> None:
    def f(a: Any, b: Any, c: Any) -> None: ...

    names = ["a", "b", "c"]
    positional = tuple(values[:split])
    keyword = dict(zip(names[split:], values[split:], strict=True))
    assert call_key("ns", "f", positional, keyword, fn=f) == call_key(
        "ns", "f", (), dict(zip(names, values, strict=True)), fn=f
    )


@settings(_BASE, max_examples=100)
@given(_values)
def test_slow_path_writes_what_the_fast_path_writes(value: Any) -> None:
    # Big integers or non-string dict keys push a call onto the general canonicaliser; it
    # must spell every value exactly as orjson does, or keys would depend on neighbours.
    data = {"v": value, "t": (value, Point(1, 2.0), Color.BLUE, datetime.time(1, 2))}
    try:
        fast = orjson.dumps(data, default=keys._tagged, option=keys._OPTS)
    except TypeError:
        assume(False)
    slow = keys._general(data, None, "f")
    assert fast + (keys._NONE_MARK if _holds_none(value) else b"") == slow


@dataclasses.dataclass
class _BoxA:
    v: Any


@dataclasses.dataclass
class _BoxB:
    v: Any


class _PairA(NamedTuple):
    v: Any


class _PairB(NamedTuple):
    v: Any


class _ModelA(pydantic.BaseModel):
    v: Any


class _ModelB(pydantic.BaseModel):
    v: Any


@settings(_BASE, max_examples=150)
@given(_values, st.sampled_from([(_BoxA, _BoxB), (_PairA, _PairB), (_ModelA, _ModelB),
                                 (_BoxA, _PairA), (_BoxA, _ModelA)]))
def test_objects_of_different_classes_with_equal_fields_never_share_a_key(
        value: Any, classes: tuple[Any, Any]) -> None:
    a, b = (c(v=value) if issubclass(c, pydantic.BaseModel) else c(value) for c in classes)
    assert len({_k(x=a), _k(x=b), _k(x=value), _k(x={"v": value})}) == 4
    assert _k(x=[a]) != _k(x=[b])


_MEMBERS = st.sampled_from([Size.SMALL, Shade.DARK, Level.ONE, Tone.RED, Color.RED])
_with_members = st.recursive(
    _scalars | _MEMBERS,
    lambda inner: (st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3)
                   | st.builds(_BoxA, inner)),
    max_leaves=10,
)


def _values_of(value: Any) -> Any:
    """``value`` with every Enum member replaced by its value (objects kept)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _values_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_values_of(v) for v in value]
    return value


@settings(_BASE, max_examples=150)
@given(_with_members, st.booleans())
def test_enum_members_key_alike_on_every_path_in_any_order(value: Any, plain_first: bool) -> None:
    # The hit path looks up raw bytes remembered from earlier calls, where orjson wrote a
    # member as its value: whatever came first, a call's key is its full form's.
    def f(x: Any) -> None: ...

    kb = KeyBuilder(f, "f")
    seed = keys.key_seed("ns", "f")
    calls = [_values_of(value), value] if plain_first else [value, _values_of(value)]
    for _ in range(3):
        for v in calls:
            full = keys.digest("ns", "f", kb.canonical_bound({"x": v}))
            assert kb.fast_key({"x": v}, seed)[0] == full
            assert kb.bind_key((v,), {}, seed)[1] == full
            found = kb.probe_key((v,), {}, seed)
            assert not isinstance(found, str) or found == full


def _holds_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_holds_none(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_none(v) for v in value)
    return False


# ------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([1, 2], (1, 2)),
        ({1, 2, 3}, frozenset({3, 2, 1})),
        ({"b": 1, "a": 2}, collections.OrderedDict([("a", 2), ("b", 1)])),
        (Point(1, 2.0), Point(1, 2.0)),
        (Message(role="user", content="hi"), Message(content="hi", role="user")),
        (Dumpable(a=1, b=[2]), Dumpable(b=[2], a=1)),
        (decimal.Decimal("1.50"), decimal.Decimal("150E-2")),
        (pathlib.Path("/a/b"), pathlib.PurePosixPath("/a/b")),
        (bytearray(b"xy"), b"xy"),
        ({"c": Color.RED}, {"c": "red"}),  # inside plain data: see the next test
    ],
)
def test_equal_as_data_means_equal_key(a: Any, b: Any) -> None:
    assert _k(v=a) == _k(v=b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Color.RED, "red"),
        (Point(1, 2.0), {"x": 1, "y": 2.0}),
        (Message(role="user", content="hi"), {"role": "user", "content": "hi"}),
        (Dumpable(a=1, b=[2]), {"b": [2], "a": 1}),
        (collections.namedtuple("P", "a b")(1, 2), [1, 2]),
        (decimal.Decimal("1.50"), decimal.Decimal("1.5")),
        (decimal.Decimal("100"), decimal.Decimal("1E+2")),
    ],
)
def test_values_python_tells_apart_by_type_or_spelling_key_apart(a: Any, b: Any) -> None:
    # Python's == says Point(1, 2.0) != {"x": 1, "y": 2.0}, and Decimal("2.50") prints (and
    # multiplies) unlike Decimal("2.5") although they are ==.
    assert _k(v=a) != _k(v=b)


@pytest.mark.parametrize(
    "values",
    [
        [1, 1.0, True, "1", b"1", [1], {"1": 1}, None],
        [0, False, None, "", b"", [], {}, 0.0],
        [datetime.date(2024, 1, 2), datetime.date(2024, 1, 3)],
        [datetime.datetime(2024, 1, 2, 3), datetime.datetime(2024, 1, 2, 3, tzinfo=datetime.UTC)],
        [datetime.time(1, 2), datetime.time(1, 3), datetime.timedelta(1), datetime.timedelta(2)],
        [uuid.UUID(int=1), uuid.UUID(int=2)],
        [decimal.Decimal("1.5"), decimal.Decimal("1.6"), 1.5, "1.5"],
        [pathlib.Path("/a"), pathlib.Path("/b"), "/a"],
        [{1, 2}, {1, 3}, [1, 2], set()],
        [Point(1, 2.0), Point(2, 1.0), Line(Point(0, 0.0), Point(1, 1.0))],
        [Message(role="user"), Message(role="user", content="x"), Message(role="system")],
        [Color.RED, Color.BLUE],
        [2**70, 2**70 + 1, str(2**70), -(2**70)],
        [{1: "a"}, {"1": "a"}, {True: "a"}, {1.5: "a"}],
        [float("nan"), float("inf"), float("-inf"), None, "nan"],
    ],
)
def test_different_values_of_every_type_differ(values: list[Any]) -> None:
    got = [_k(v=v) for v in values]
    assert len(set(got)) == len(got), list(zip(values, got, strict=True))


def test_pydantic_models_nested_and_dataclasses_nested() -> None:
    r1 = Request(model="m", messages=[Message(role="user", content="hi")])
    r2 = Request(model="m", messages=[Message(role="user", content="hi!")])
    assert _k(r=r1) == _k(r=Request.model_validate(r1.model_dump()))
    assert _k(r=r1) != _k(r=r2)
    l1 = Line(Point(1, 2.0), Point(3, 4.0), "x")
    assert _k(line=l1) == _k(line=Line(Point(1, 2.0), Point(3, 4.0), "x"))
    assert _k(line=l1) != _k(line=Line(Point(1, 2.0), Point(3, 4.5), "x"))


def test_sets_sort_members_of_any_kind() -> None:
    assert _k(v={(1, 2), (0, 5)}) == _k(v={(0, 5), (1, 2)})
    assert _k(v={2**70, 1}) == _k(v={1, 2**70})  # members orjson refuses still sort
    assert _k(v={"b", "a"}) == _k(v={"a", "b"})


def test_time_zone_aware_datetimes_keep_their_offset() -> None:
    utc = datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC)
    plus1 = utc.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    assert utc == plus1
    # Same instant, different spelling: a different request to most APIs, so a different key.
    assert _k(v=utc) != _k(v=plus1)


@dataclasses.dataclass
class Read:
    path: str


@dataclasses.dataclass
class Delete:
    path: str


class ReadModel(pydantic.BaseModel):
    path: str


class DeleteModel(pydantic.BaseModel):
    path: str


class ReadTuple(NamedTuple):
    path: str


class DeleteTuple(NamedTuple):
    path: str


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Read("/srv/db"), Delete("/srv/db")),
        (ReadModel(path="/srv/db"), DeleteModel(path="/srv/db")),
        (ReadTuple("/srv/db"), DeleteTuple("/srv/db")),
        (ReadTuple("/srv/db"), ("/srv/db",)),
        (Size.SMALL, Shade.DARK),
        (Size.SMALL, 1),
        (Level.ONE, 1),
        (Tone.RED, "red"),
        (Tone.RED, Color.RED),
        ([Read("/a")], [Delete("/a")]),
        (Read(Size.SMALL), Read(Shade.DARK)),  # type: ignore[arg-type]
        ({Size.SMALL}, {Shade.DARK}),
    ],
)
def test_objects_python_tells_apart_never_share_a_key(a: Any, b: Any) -> None:
    # Delete("/srv/db") was served Read("/srv/db")'s answer: same fields, other class.
    # (Named tuples, an IntEnum and a StrEnum are == to their data: their type still
    # changes what the function does with them, as it does for Read and Delete.)
    assert _k(a) != _k(b)
    assert _k(v=a) != _k(v=b)
    assert canonical_json({"v": a}) != canonical_json({"v": b})


def test_an_enum_argument_is_keyed_by_its_class_on_every_path() -> None:
    # The hit path writes arguments with one orjson.dumps, which writes a member as its
    # value: once the bytes of f(1) were remembered, f(Size.SMALL) was looked up as f(1).
    def f(x: Any) -> None: ...

    kb = KeyBuilder(f, "f")
    seed = keys.key_seed("ns", "f")
    for first, second in ((1, Size.SMALL), (Shade.DARK, Size.SMALL), (Level.ONE, 1)):
        for _ in range(3):  # first sight, then remembered bytes, then the compiled probe
            k1 = kb.fast_key({"x": first}, seed)[0]
            k2 = kb.fast_key({"x": second}, seed)[0]
            assert k1 != k2
            assert kb.probe_key((second,), {}, seed) in (None, k2) or isinstance(
                kb.probe_key((second,), {}, seed), bytes)
            assert k2 == keys.digest("ns", "f", kb.canonical_bound({"x": second}))


def test_an_enum_inside_plain_data_keys_as_its_value_whichever_call_came_first() -> None:
    # Inside plain dicts and lists a member is its value (the hit path cannot tell without a
    # walk of every request): the same key on every path and in either order.
    def f(x: Any) -> None: ...

    seed = keys.key_seed("ns", "f")
    for order in (({"c": [1]}, {"c": [Size.SMALL]}), ({"c": [Size.SMALL]}, {"c": [1]})):
        kb = KeyBuilder(f, f"f{id(order)}")
        got = {kb.fast_key({"x": v}, seed)[0] for _ in range(3) for v in order}
        assert got == {keys.digest("ns", "f", kb.canonical_bound({"x": order[0]}))}


def test_decimals_key_as_written() -> None:
    # Decimal("2.50") == Decimal("2.5"), but f"{d}" puts "2.50" into a prompt and 2.50 * 2 is
    # 5.00: a different request. Schema 2 wrote them normalised under another tag.
    d = decimal.Decimal
    assert _k(d("2.50")) != _k(d("2.5"))
    assert _k(d("2.50")) == _k(d("2.50"))
    assert canonical_json({"v": d("2.50")}) == b'{"v":{"\\u0000dec":"2.50"}}'
    assert len({_k(v) for v in (d("NaN"), d("-0"), d("0"), d("Infinity"))}) == 4


def test_an_aware_time_is_keyed_or_refused_by_name() -> None:
    utc = datetime.time(1, 2, tzinfo=datetime.UTC)
    plus1 = datetime.time(1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    naive = datetime.time(1, 2)
    assert len({_k(v=utc), _k(v=plus1), _k(v=naive)}) == 3
    assert _k(v=[utc]) == _k(v=(utc,)) != _k(v=[plus1])
    assert _k(v={utc}) != _k(v={plus1})
    zoned = datetime.time(1, 2, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    with pytest.raises(dejacache.UnhashableArgument, match="Europe/Paris") as info:
        call_key("ns", "mod.fn", (), {"when": {"at": [zoned]}})
    assert info.value.argument == "when.at[0]"


def test_closures_of_one_factory_key_apart() -> None:
    def make(n: Any) -> Any:
        def f(x: int) -> Any:
            return (n, x)

        return f

    def key(fn: Any, *args: Any) -> str:
        return call_key("ns", "f", args, fn=fn)

    assert key(make(1), 5) != key(make(2), 5)
    assert key(make(1), 5) == key(make(1), 5)
    assert key(make("a"), 5) != key(make(("a",)), 5)
    assert key(make(Size.SMALL), 5) != key(make(Shade.DARK), 5)
    # A mutable or opaque capture (a client, a helper, a list appended to) is not keyed.
    assert key(make([1]), 5) == key(make([2]), 5) == key(make(object()), 5)


def test_a_closure_is_not_keyed_by_what_it_assigns_itself() -> None:
    def make(n: int) -> Any:
        count = 0

        def f(x: int) -> Any:
            nonlocal count
            count += 1
            return (n, x, count)

        return f

    g = make(1)
    before = call_key("ns", "f", (5,), fn=g)
    g(5)
    assert call_key("ns", "f", (5,), fn=g) == before
    assert explain("ns", "f", (5,), fn=g).arguments == {"x": 5, "<captured>": {"n": 1}}


def test_no_call_of_a_closure_spells_its_captured_values() -> None:
    def make(n: int) -> Any:
        def f(**kw: Any) -> Any:
            return (n, kw)

        return f

    g = make(1)
    assert call_key("ns", "f", (), {"<captured>": {"n": 1}}, fn=g) != call_key(
        "ns", "f", (), {}, fn=g)
    assert call_key("ns", "f", (), {"<captured>": {"n": 2}}, fn=g) != call_key(
        "ns", "f", (), {}, fn=make(2))
    assert explain("ns", "f", (), {"<x": 1}, fn=g).arguments == {
        "<<x": 1, "<captured>": {"n": 1}}


def test_dunder_hook_gives_a_type_its_canonical_form() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

        def __dejacache_key__(self) -> Any:
            return {"cents": self.cents}

    assert _k(m=Money(5)) == _k(m=Money(5))
    assert _k(m=Money(5)) != _k(m=Money(6))


def test_dunder_hook_may_name_attributes() -> None:
    class Money:
        __dejacache_key__ = ("cents", "currency")

        def __init__(self, cents: int, currency: str = "EUR", note: str = "") -> None:
            self.cents, self.currency, self.note = cents, currency, note

    assert _k(m=Money(5, note="a")) == _k(m=Money(5, note="b")) == _k(
        m={"cents": 5, "currency": "EUR"})
    assert _k(m=Money(5)) != _k(m=Money(5, "USD"))

    class One:
        __dejacache_key__ = "cents"  # one name

        def __init__(self, cents: int) -> None:
            self.cents = cents

    assert _k(m=One(5)) == _k(m={"cents": 5}) != _k(m=One(6))


def test_a_dataclass_or_model_that_defines_the_hook_is_keyed_by_it() -> None:
    # The class says how to key it: its fields do not (a client or a cache among them made
    # it unkeyable, a timestamp made every call miss).
    @dataclasses.dataclass
    class Agent:
        model: str
        started: float

        def __dejacache_key__(self) -> Any:
            return {"model": self.model}

    class Config(pydantic.BaseModel):
        model: str
        started: float
        __dejacache_key__ = ("model",)

    assert _k(a=Agent("m", 1.0)) == _k(a=Agent("m", 2.0)) == _k(a={"model": "m"})
    assert _k(a=Config(model="m", started=1.0)) == _k(a=Config(model="m", started=2.0))


# A method's receiver: keyed as its class says, else by its data (``_receiver``).


class _Configured:
    def __init__(self, config: Any) -> None:
        self.config = config

    def __dejacache_key__(self) -> Any:
        return {"config": self.config}

    def ask(self, q: Any) -> None: ...


class _Unsaid:
    def __init__(self, config: Any) -> None:
        self.config = config

    def ask(self, q: Any) -> None: ...


_KEYED = KeyBuilder(_Configured.ask, "ask")
_UNSAID = KeyBuilder(_Unsaid.ask, "ask")
_LEFT = KeyBuilder(_Unsaid.ask, "ask", key_self=False)
_SEED = keys.key_seed("ns", "ask")


def _spellings(inst: Any, q: Any) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """The ways a method is called: bound (by position or keyword), through the class."""
    return [((inst, q), {}), ((inst,), {"q": q}), ((), {"self": inst, "q": q})]


@settings(_BASE, max_examples=150)
@given(_values, _values, _values)
def test_a_receiver_is_keyed_by_exactly_its_data(a: Any, b: Any, q: Any) -> None:
    # What its class says (``__dejacache_key__``), or its attributes: equal keys exactly
    # when the data's canonical forms are equal, in every spelling of the call.
    same = canonical_json({"c": a}) == canonical_json({"c": b})
    for kb, cls in ((_KEYED, _Configured), (_UNSAID, _Unsaid)):
        for (args_a, kw_a), (args_b, kw_b) in zip(_spellings(cls(a), q), _spellings(cls(b), q),
                                                  strict=True):
            assert (kb.canonical(args_a, kw_a) == kb.canonical(args_b, kw_b)) == same
            # the decorator's fast key: the same rule (methods never take the shortcuts)
            assert (kb.bind_key(args_a, kw_a, _SEED)[1]
                    == kb.bind_key(args_b, kw_b, _SEED)[1]) == same
        keys_a = {kb.bind_key(args, kw, _SEED)[1] for args, kw in _spellings(cls(a), q)}
        assert len(keys_a) == 1  # every spelling of one call, one key
    for (args_a, kw_a), (args_b, kw_b) in zip(_spellings(_Unsaid(a), q),
                                              _spellings(_Unsaid(b), q), strict=True):
        assert _LEFT.canonical(args_a, kw_a) == _LEFT.canonical(args_b, kw_b)  # key_self=False


# ------------------------------------------------------------------------------ non-finite floats


def test_non_finite_argument_is_not_none() -> None:
    keys_ = {_k(limit=v) for v in (None, math.inf, -math.inf, math.nan)}
    assert len(keys_) == 4
    assert _k(limit=math.nan) == _k(limit=float("nan"))


def test_non_finite_inside_containers_is_not_none() -> None:
    """orjson writes NaN and infinities as ``null``; they used to share
    ``None``'s key inside containers."""
    got = {_k(v=[x]) for x in (math.nan, math.inf, -math.inf, None, 0.0, -0.0)}
    assert len(got) == 6
    assert _k(v={"a": math.nan}) != _k(v={"a": None})
    assert _k(v=[math.nan]) == _k(v=[float("nan")]) == _k(v=(math.nan,))


def test_decorated_call_with_nan_never_gets_the_none_answer(
    memory_store: dejacache.MemoryStore,
) -> None:
    """The reproduction: ``f([nan])`` then ``f([None])`` returned ``[nan]``."""

    @dejacache.cache
    def f(xs: list[Any]) -> list[Any]:
        return list(xs)

    for first, second in (([math.nan], [None]), ([None], [math.inf]), ([0.0], [-0.0])):
        got_first = f(first)
        got_second = f(second)
        assert repr(got_first) == repr(first) and repr(got_second) == repr(second)
        assert repr(f(first)) == repr(first) and repr(f(second)) == repr(second)  # hits


# ------------------------------------------------------------------------------ unsupported types


class Opaque:
    pass


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: call_key("ns", "mod.fn", (Opaque(),)), "arg0"),
        (lambda: call_key("ns", "mod.fn", (), {"client": Opaque()}), "client"),
        (lambda: call_key("ns", "mod.fn", (), {"req": {"a": [1, Opaque()]}}), "req.a[1]"),
        (lambda: call_key("ns", "mod.fn", (), {"req": {1: Opaque()}}), "req[1]"),
        (lambda: call_key("ns", "mod.fn", (), {"cb": lambda: 1}), "cb"),
        (lambda: call_key("ns", "mod.fn", (), {"r": range(3)}), "r"),
    ],
)
def test_unsupported_type_names_argument_and_type(call: Any, argument: str) -> None:
    with pytest.raises(dejacache.UnhashableArgument) as info:
        call()
    err = info.value
    assert isinstance(err, TypeError)
    assert err.argument == argument
    assert f"{argument!r}" in str(err)
    assert "mod.fn" in str(err)
    assert err.value_type.__qualname__ in str(err)
    assert "0x" not in str(err)  # never a repr with a memory address


def test_self_containing_list_is_unhashable_not_recursion_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(dejacache.UnhashableArgument) as info:
        _k(v=loop)
    assert info.value.argument == "v[0]"  # where the cycle closes
    assert "contains itself" in str(info.value)


def test_decorated_call_with_unsupported_argument_raises_before_running() -> None:
    ran: list[int] = []

    @dejacache.cache
    def f(x: Any) -> int:
        ran.append(1)
        return 1

    with pytest.raises(dejacache.UnhashableArgument, match="'x'"):
        f(Opaque())
    assert ran == []


# ------------------------------------------------------------------------------ binding


def test_defaults_passed_or_omitted_agree() -> None:
    def f(a: int, b: int = 2, *, c: str = "x") -> None: ...

    kb = KeyBuilder(f, "f")
    k = kb.key("ns", (1,), {})
    assert kb.key("ns", (1, 2), {}) == k
    assert kb.key("ns", (1,), {"b": 2, "c": "x"}) == k
    assert kb.key("ns", (), {"a": 1, "c": "x"}) == k
    assert kb.key("ns", (1, 3), {}) != k
    assert kb.key("ns", (1,), {"c": "y"}) != k


def _kw_only(a: int, *, b: int = 1, c: int) -> None: ...


def _var_kw(a: int, b: int = 2, **kw: Any) -> None: ...


def _all_kinds(a: int, /, b: int, *args: int, c: int = 3, **kw: Any) -> None: ...


@pytest.mark.parametrize(
    ("fn", "args", "kwargs"),
    [
        (_kw_only, (1,), {"c": 2}),
        (_kw_only, (), {"a": 1, "b": 5, "c": 2}),
        (_var_kw, (1,), {"x": 1, "kw": 2}),
        (_var_kw, (1, 3), {"model": "m"}),
        (_var_kw, (), {"a": 1, "b": 2}),
        (_var_kw, (1,), {"a": 2}),  # invalid call: both paths key on what was given
        (_all_kinds, (1, 2, 3, 4), {"c": 5, "z": 6}),
    ],
)
def test_fast_bind_matches_signature_bind(fn: Any, args: Any, kwargs: Any) -> None:
    fast, slow = KeyBuilder(fn, "f"), KeyBuilder(fn, "f")
    slow._fast = False
    assert fast.bind(args, kwargs) == slow.bind(args, kwargs)


def test_default_of_another_type_is_kept() -> None:
    def f(a: Any = None, b: Any = 1) -> None: ...

    kb = KeyBuilder(f, "f")
    assert kb.key("ns", (), {"b": True}) != kb.key("ns", (), {})  # True == 1 but not the same
    assert kb.key("ns", (), {"b": 1.0}) != kb.key("ns", (), {})


def test_var_positional_and_var_keyword() -> None:
    def f(a: int, *args: int, **kw: Any) -> None: ...

    kb = KeyBuilder(f, "f")
    assert kb.key("ns", (1, 2, 3), {"z": 1}) == kb.key("ns", (1, 2, 3), {"z": 1})
    assert kb.key("ns", (1, 2), {}) != kb.key("ns", (1,), {"args": [2]})
    assert kb.key("ns", (1,), {"x": 1, "y": 2}) == kb.key("ns", (1,), {"y": 2, "x": 1})


def test_kwargs_are_never_dropped() -> None:
    def f(a: int, **kw: Any) -> None: ...

    kb = KeyBuilder(f, "f")
    assert kb.key("ns", (1,), {"temperature": 0}) != kb.key("ns", (1,), {"temperature": 1})


def test_bad_call_still_keys_on_what_was_given() -> None:
    def f(a: int) -> None: ...

    kb = KeyBuilder(f, "f")
    assert kb.key("ns", (1, 2), {}) != kb.key("ns", (1, 3), {})


def test_ignore_drops_the_named_arguments() -> None:
    def f(a: int, client: Any) -> None: ...

    kb = KeyBuilder(f, "f", ignore=["client"])
    assert kb.bind((1, Opaque()), {}) == {"a": 1}
    assert kb.key("ns", (3, Opaque()), {}) == kb.key("ns", (3,), {"client": 9})


def test_self_and_cls_are_arguments_outside_a_method() -> None:
    """Only the instance or class a method is called on is keyed as a receiver (by its
    data): a plain function's ``self`` or ``cls`` parameter, or a ``self=`` keyword, is an
    argument."""

    def plain(self: Any, cls: Any, a: int) -> None: ...

    def kw(**options: Any) -> None: ...

    kb = KeyBuilder(plain, "f")
    assert kb.bind((1, 2, 3), {}) == {"self": 1, "cls": 2, "a": 3}
    assert kb.key("ns", (1, 2, 3), {}) != kb.key("ns", (4, 5, 3), {})
    kb = KeyBuilder(kw, "f")
    assert kb.key("ns", (), {"self": "alice"}) != kb.key("ns", (), {"self": "bob"})
    assert kb.key("ns", (), {"cls": "admin"}) != kb.key("ns", (), {"cls": "guest"})

    class Svc:
        def get(self, x: int) -> None: ...

        def fetch(self, /, **kw: Any) -> None: ...

    kb = KeyBuilder(Svc.get, "g")
    assert kb.bind((Svc(), 1), {}) == {"x": 1, "self": [
        f"{__name__}:{Svc.__qualname__}", {"<captured>": {"Svc.<code>": ANY}}]}
    kb = KeyBuilder(Svc.fetch, "g")  # a keyword named like the receiver stays
    assert kb.key("ns", (Svc(),), {"self": 1}) != kb.key("ns", (Svc(),), {"self": 2})


def test_methods_key_their_instance_by_its_data() -> None:
    class Svc:
        def __init__(self, region: str) -> None:
            self.region = region

        def get(self, x: int) -> int:
            return x

        @classmethod
        def make(cls, x: int) -> int:
            return x

    a, b = Svc("eu"), Svc("us")
    assert call_key("ns", "g", (a, 1), fn=Svc.get) == call_key("ns", "g", (Svc("eu"), 1),
                                                               fn=Svc.get)
    assert call_key("ns", "g", (a, 1), fn=Svc.get) != call_key("ns", "g", (b, 1), fn=Svc.get)
    # a bound method keys the instance it is bound to, as the call through the class does
    assert call_key("ns", "g", (1,), fn=a.get) == call_key("ns", "g", (a, 1), fn=Svc.get)
    assert call_key("ns", "g", (1,), fn=a.get) != call_key("ns", "g", (1,), fn=b.get)
    assert call_key("ns", "m", (1,), fn=Svc.make) == call_key("ns", "m", (), {"x": 1}, fn=Svc.make)


def test_partial_frozen_arguments_are_in_the_key() -> None:
    def f(a: int, b: int, c: int = 0) -> None: ...

    p1 = functools.partial(f, 1)
    p2 = functools.partial(f, 2)
    assert call_key("ns", "p", (5,), fn=p1) != call_key("ns", "p", (5,), fn=p2)
    assert call_key("ns", "p", (5,), fn=p1) == call_key("ns", "p", (1, 5), fn=f)
    pk = functools.partial(f, c=3)
    assert call_key("ns", "p", (1, 2), fn=pk) == call_key("ns", "p", (1, 2, 3), fn=f)


def test_callable_object_binds_through_call() -> None:
    class Tool:
        def __call__(self, query: str, limit: int = 5) -> None: ...

    t = Tool()
    assert call_key("ns", "t", ("q",), fn=t) == call_key("ns", "t", (), {"query": "q"}, fn=t)
    assert call_key("ns", "t", ("q",), fn=t) == call_key("ns", "t", ("q", 5), fn=t)


def test_namespace_and_name_are_part_of_the_key() -> None:
    assert call_key("a", "f", (1,)) != call_key("b", "f", (1,))
    assert call_key("a", "f", (1,)) != call_key("a", "g", (1,))
    # The separator keeps ("a\x00b", "c") apart from ("a", "b\x00c")... and plain joins apart.
    assert call_key("ab", "c", ()) != call_key("a", "bc", ())


# ------------------------------------------------------------------------------ volatile fields


def test_default_volatile_fields_removed_anywhere() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    noisy = {
        **base,
        "extra_headers": {"traceparent": "00-aaa-01", "X-Request-ID": "r1", "tracestate": "t"},
        "metadata": {"trace_id": "abc", "span_id": "def"},
        "messages": [{"role": "user", "content": "x", "trace_id": "z"}],
    }
    noisy2 = copy.deepcopy(noisy)
    noisy2["extra_headers"] = {"Traceparent": "00-bbb-01", "x-request-id": "r2"}
    noisy2["metadata"] = {"traceId": "zzz", "spanId": "yyy"}
    k = _k(**base, extra_headers={}, metadata={})
    assert _k(**noisy) == k
    assert _k(**noisy2) == k


def test_a_trace_id_that_is_the_calls_own_argument_or_field_is_keyed() -> None:
    """``trace_id`` was dropped wherever it appeared: ``fetch_trace(trace_id)`` served the
    first trace's answer for every trace, and a request's own ``trace_id`` field too."""

    def fetch_trace(trace_id: str) -> None: ...

    assert call_key("ns", "f", ("abc",), fn=fetch_trace) != \
        call_key("ns", "f", ("def",), fn=fetch_trace)
    for tid in ("trace_id", "span_id", "parent_span_id", "correlation_id", "otel_trace_id",
                "otel_span_id", "traceId", "spanId"):
        assert _k(**{tid: "a"}) != _k(**{tid: "b"}), tid  # a parameter
        assert _k({tid: "a", "q": 1}) != _k({tid: "b", "q": 1}), tid  # an argument's field
    # an object's own field, and a list of them: records, not messages
    assert _k([{"trace_id": "a"}]) != _k([{"trace_id": "b"}])


def test_trace_ids_where_telemetry_lives_still_leave_the_key() -> None:
    """Where telemetry lives a fresh id per run still hits: ``metadata``/``_meta``/
    ``headers`` at any depth, and a message (a dict with a ``role``) in a list, as
    langwatch-scenario sends every message of every run (``AgentInput.messages``)."""

    def run(tid: str) -> dict[str, Any]:
        msg = {"role": "user", "content": "hi", "trace_id": tid}
        return {"messages": [msg, {**msg, "role": "assistant"}], "new_messages": [msg],
                "metadata": {"trace_id": tid, "langwatch": {"spanId": tid, "run": 1}},
                "params": {"_meta": {"otel_span_id": tid}},
                "headers": {"Trace-Id": tid}, "history": [msg], "thread": [[msg]]}

    assert _k(input=run("a")) == _k(input=run("b"))
    assert _k(run("a")) == _k(run("b"))
    assert _k(metadata={"trace_id": "a"}) == _k(metadata={"trace_id": "b"})
    other = run("a")
    other["metadata"]["langwatch"]["run"] = 2
    assert _k(input=run("a")) != _k(input=other)  # the rest of the metadata still counts

    def chat(messages: list[dict[str, str]]) -> None: ...

    def without_role(tid: str) -> str:  # a path ran first: still a message of ``messages``
        msgs = [{"role": "user", "content": "x", "trace_id": tid}]
        return call_key("ns", "f", (msgs,), fn=chat, volatile=["messages[0].role"])

    assert without_role("a") == without_role("b")


def test_a_declared_or_kept_trace_id_is_dropped_or_keyed_everywhere() -> None:
    def f(trace_id: str, req: Any) -> None: ...

    def key(volatile: list[str], tid: str) -> str:
        req = {"metadata": {"trace_id": tid}}
        return call_key("ns", "f", (tid, req), fn=f, volatile=volatile)

    assert key(["trace_id"], "a") == key(["trace_id"], "b")  # volatile=: dropped everywhere
    assert key([], "a") != key([], "b")
    kept = call_key("ns", "f", ("t", {"metadata": {"trace_id": "a"}}), fn=f,
                    volatile=["!trace_id"])
    assert kept != call_key("ns", "f", ("t", {"metadata": {"trace_id": "b"}}), fn=f,
                            volatile=["!trace_id"])


_KEEPABLE = sorted(keys.DEFAULT_VOLATILE | {"trace_id", "span_id", "request-id", "run_id"})


@given(name=st.sampled_from(_KEEPABLE), other=st.sampled_from(_KEEPABLE), data=st.data())
def test_kept_out_keeps_a_name_in_any_spelling_and_only_it(name: str, other: str,
                                                           data: st.DataObject) -> None:
    """``!name``'s one rule: any spelling of a name keeps it (``!traceId``, ``!Trace-Id``
    keep ``trace_id``), and nothing else."""
    spelled = data.draw(st.sampled_from(sorted(keys._spellings(name))))
    names = frozenset({name, other})
    left = keys.kept_out(names, frozenset({spelled}))
    assert name not in left
    assert (other in left) == (keys._secrets.name_forms(other).isdisjoint(
        keys._secrets.name_forms(name)))
    assert keys.kept_out(names, frozenset()) == names


@pytest.mark.parametrize("kept", ["!x-request-id", "!X-Request-Id", "!request-id",
                                  "!traceparent", "!idempotency_key"])
def test_a_kept_default_name_is_keyed_by_cache_as_by_http(kept: str) -> None:
    """``@cache`` read ``!name`` only for telemetry ids: ``volatile=["!x-request-id"]`` was
    a silent no-op there while HTTP keys honoured it."""
    def f(req: Any) -> None: ...

    name = kept[1:].lower().replace("_", "-")
    a = call_key("ns", "f", ({name: "a", "q": 1},), fn=f, volatile=[kept])
    b = call_key("ns", "f", ({name: "b", "q": 1},), fn=f, volatile=[kept])
    assert a != b
    assert call_key("ns", "f", ({name: "a", "q": 1},), fn=f) == call_key(
        "ns", "f", ({name: "b", "q": 1},), fn=f)


def test_an_inner_keep_keys_what_an_outer_list_drops() -> None:
    calls: list[Any] = []

    @dejacache.cache(volatile=["!sku"])
    def price(req: dict[str, int]) -> int:
        calls.append(req)
        return len(calls)

    with dejacache.scope(store=dejacache.MemoryStore(), mode="auto", cache_key="t",
                         volatile=["sku"]):
        assert (price({"sku": 1}), price({"sku": 2}), price({"sku": 1})) == (1, 2, 1)


@pytest.mark.parametrize("entry", [
    lambda v: dejacache.cache(volatile=v), lambda v: dejacache.scope(volatile=v),
    lambda v: dejacache.cassette("unused.json", volatile=v),
])
@pytest.mark.parametrize(("items", "named"), [(["!password"], "'!password'"),
                                              (["nonce", "!Nonce"], "'nonce'")])
def test_bad_keep_items_are_refused_where_they_are_written(entry: Any, items: list[str],
                                                           named: str) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=named):
        entry(items)


def test_bad_keep_items_in_the_environment_are_refused(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("DEJACACHE_VOLATILE", "run_id, !run_id")
    with pytest.raises(dejacache.ConfigurationError, match="DEJACACHE_VOLATILE"):
        keys.env_volatile()


@pytest.mark.parametrize(
    "header",
    ["traceparent", "Traceparent", "TRACEPARENT", "X-Request-ID", "X-Request-Id", "x-request-id",
     "X-Amzn-Trace-Id", "x-b3-traceid", "request-id", "Request-Id", "Idempotency-Key"],
)
def test_header_spellings_are_volatile(header: str) -> None:
    assert _k(headers={header: "1"}) == _k(headers={header: "2"}) == _k(headers={})


def test_volatile_removal_inside_models_and_dataclasses() -> None:
    @dataclasses.dataclass
    class Meta:
        user: str
        trace_id: str

    # An object's own trace_id is what it asks about; under ``metadata`` it is telemetry.
    assert _k(m=Meta("u", "t1")) != _k(m=Meta("u", "t2"))
    assert _k(d={"metadata": Meta("u", "t1")}) == _k(d={"metadata": Meta("u", "t2")})
    assert _k(d={"metadata": Meta("u", "t1")}) != _k(d={"metadata": Meta("v", "t1")})
    assert _k(m=Dumpable(q=1, traceparent="a")) == _k(m=Dumpable(q=1, traceparent="b"))


def test_ordinary_field_names_are_not_volatile() -> None:
    # "parent_id" is a tree/comment id in ordinary data: removing it would serve wrong answers.
    assert _k(d={"parent_id": 1}) != _k(d={"parent_id": 2})
    assert _k(d={"id": 1}) != _k(d={"id": 2})


def test_user_volatile_names_and_dotted_paths() -> None:
    def f(req: dict[str, Any], run: str) -> None: ...

    kb = KeyBuilder(f, "f", volatile=["session", "req.meta.run_id"])
    a = {"q": 1, "session": "s1", "meta": {"run_id": "r1", "keep": 1}}
    b = {"q": 1, "session": "s2", "meta": {"run_id": "r2", "keep": 1}}
    c = {"q": 1, "session": "s2", "meta": {"run_id": "r2", "keep": 2}}
    before = copy.deepcopy(a)
    assert kb.key("ns", (a, "x"), {}) == kb.key("ns", (b, "x"), {})
    assert kb.key("ns", (a, "x"), {}) != kb.key("ns", (c, "x"), {})
    assert a == before
    # A dotted path walks lists too.
    kb2 = KeyBuilder(f, "f", volatile=["req.items.stamp"])
    x = {"items": [{"v": 1, "stamp": 1}, {"v": 2, "stamp": 2}]}
    y = {"items": [{"v": 1, "stamp": 9}, {"v": 2, "stamp": 8}]}
    assert kb2.key("ns", (x, "r"), {}) == kb2.key("ns", (y, "r"), {})


def test_volatile_top_level_argument() -> None:
    assert _k(q=1, traceparent="a") == _k(q=1, traceparent="b") == _k(q=1)


def test_env_volatile_applies_to_decorated_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_VOLATILE", "run_id, nonce")
    dejacache.configure(store=dejacache.MemoryStore())
    calls: list[Any] = []

    @dejacache.cache
    def f(req: dict[str, Any]) -> int:
        calls.append(req)
        return len(calls)

    assert f({"q": 1, "run_id": "a", "nonce": 1}) == 1
    assert f({"q": 1, "run_id": "b", "nonce": 2}) == 1
    assert f({"q": 2, "run_id": "b"}) == 2


def test_configure_volatile_replaces_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_VOLATILE", "run_id")
    dejacache.configure(store=dejacache.MemoryStore(), volatile=["req.meta.stamp"])
    calls: list[Any] = []

    @dejacache.cache
    def f(req: dict[str, Any]) -> int:
        calls.append(req)
        return len(calls)

    assert f({"meta": {"stamp": 1}, "run_id": "a"}) == 1
    assert f({"meta": {"stamp": 2}, "run_id": "a"}) == 1
    assert f({"meta": {"stamp": 2}, "run_id": "b"}) == 2  # env no longer applies
    dejacache.configure(volatile=None)  # back to the environment
    assert f({"meta": {"stamp": 3}, "run_id": "c"}) == 3
    assert f({"meta": {"stamp": 3}, "run_id": "d"}) == 3


def test_no_default_volatile_when_disabled() -> None:
    kb = KeyBuilder(None, "f", use_default_volatile=False)
    assert kb.key("ns", (), {"traceparent": 1}) != kb.key("ns", (), {"traceparent": 2})


# ------------------------------------------------------------------------------ explain


def test_explain_parts() -> None:
    def f(a: int, headers: dict[str, str], client: Any = None) -> None: ...

    parts = explain(
        "suite-v1", "mod.f", (1, {"traceparent": "x", "h": "v"}), {"client": Opaque()},
        fn=f, ignore=["client"],
    )
    assert isinstance(parts, dejacache.KeyParts)
    assert dejacache.KeyParts is dejacache.keys.KeyParts  # defined on first use, one class
    assert dataclasses.is_dataclass(parts) and not hasattr(parts, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.key = ""  # type: ignore[misc]
    assert parts.version == KEY_SCHEMA_VERSION
    assert parts.namespace == "suite-v1"
    assert parts.name == "mod.f"
    assert parts.arguments == {"a": 1, "headers": {"h": "v"}}
    assert parts.canonical == '{"a":1,"headers":{"h":"v"}}'
    assert parts.key == call_key(
        "suite-v1", "mod.f", (1, {"h": "v"}), fn=f
    )


def test_decorated_function_explain_and_cache_key() -> None:
    @dejacache.cache(name="tools.search", ignore=["client"])
    def search(query: str, client: Any = None) -> str:
        return query

    dejacache.configure(cache_key="suite-v2")
    parts = search.explain("hello", client=Opaque())  # type: ignore[attr-defined]
    assert parts.namespace == "suite-v2"
    assert parts.name == "tools.search"
    assert parts.arguments == {"query": "hello"}
    assert search.cache_key("hello") == parts.key  # type: ignore[attr-defined]
    assert search.cache_name == "tools.search"  # type: ignore[attr-defined]


if __name__ == "__main__":  # used by test_keys_are_stable_across_processes
    # Imported by name: a dataclass or Enum is keyed under its class, test_keys.Point, and
    # run as a script this file's classes are __main__'s.
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import test_keys

    print(json.dumps(test_keys.golden_keys()))


def test_credentials_are_masked_not_dropped() -> None:
    """Secrets never appear in the canonical form (stored requests, diffs), yet a different
    credential is a different key, so a cache can never answer for the wrong password."""
    from dejacache.keys import KeyBuilder

    def login(user: str, password: str, headers: dict | None = None) -> None: ...

    kb = KeyBuilder(login, "login")
    a = kb.canonical(("ann", "hunter2"), {"headers": {"Authorization": "Bearer sk-abc"}})
    b = kb.canonical(("ann", "hunter3"), {"headers": {"Authorization": "Bearer sk-abc"}})
    assert b"hunter2" not in a and b"sk-abc" not in a and b"<secret:" in a
    assert a != b


def test_credentials_never_reach_the_sqlite_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import dejacache

    store = dejacache.SQLiteStore(tmp_path / "c.db")
    dejacache.configure(store=store)

    @dejacache.cache
    def fetch(q: str, api_key: str) -> str:
        return q.upper()

    assert fetch("hi", api_key="sk-live-123456") == "HI"
    assert fetch("hi", api_key="sk-live-123456") == "HI"
    store.close()
    assert b"sk-live-123456" not in (tmp_path / "c.db").read_bytes()


def test_bare_request_id_is_data_not_noise() -> None:
    """A ``request_id`` in user data (an order, a support ticket) stays in the key: stripping
    it served R-1's answer for R-2. Header spellings of request ids are still stripped."""
    from dejacache.keys import KeyBuilder

    def lookup(order: dict) -> None: ...

    kb = KeyBuilder(lookup, "lookup")
    assert kb.canonical(({"request_id": "R-1"},), {}) != kb.canonical(({"request_id": "R-2"},), {})
    hdr = kb.canonical(({"headers": {"X-Request-ID": "a"}},), {})
    assert hdr == kb.canonical(({"headers": {"X-Request-ID": "b"}},), {})


# ------------------------------------------------------- one canonical form, credentials masked

_CRED_NAMES = st.sampled_from([
    "password", "api_key", "authorization", "Authorization", "X-Api-Key", "apiKey", "token",
    "auth_token", "secret", "passwd", "bearer", "aws_secret_access_key", "openai_api_key",
    "aws_access_key_id", "db_password", "cookie",
])
_VOLATILE_NAMES = st.sampled_from(["traceparent", "trace_id", "X-Request-ID", "metadata",
                                   "role"])
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.integers().filter(lambda i: abs(i) > 2**64)
    | st.floats()  # NaN, ±inf and -0.0 included
    | st.text(max_size=8)
)
_rich = st.recursive(
    _json_scalars | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_names | _CRED_NAMES | _VOLATILE_NAMES, inner, max_size=4)
    | st.dictionaries(st.integers(-3, 3), inner, max_size=3),
    max_leaves=20,
)
_FILTER = KeyBuilder(None, "f")._filter


def _both_paths(data: dict[str, Any]) -> tuple[bytes, bytes]:
    """(what the key builder writes, what the general canonicaliser alone writes)."""
    quick = keys._canonical(data, _FILTER, "f", ())
    general = keys._secrets.mask_url_queries(keys._general(data, _FILTER, "f"))
    return quick, general


@settings(_BASE, max_examples=400)
@given(_rich, st.booleans())
def test_fast_and_general_paths_agree_with_credentials_and_non_finite(
    value: Any, push: bool
) -> None:
    """One input, one canonical form, whichever path writes it. ``push``
    adds an argument only the general path can write (an integer >= 2**64)."""
    data = {"v": value, "big": 2**70} if push else {"v": value}
    quick, general = _both_paths(data)
    assert quick == general


@settings(_BASE, max_examples=200)
@given(_rich, _CRED_NAMES, st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=8,
                                     max_size=16), st.booleans())
def test_different_credentials_give_different_keys_on_every_path(
    value: Any, name: str, secret: str, push: bool
) -> None:
    secret = "zq" + secret  # never hex, so never inside a mask's digits
    assume(secret not in repr(value))
    other = secret[::-1] + "x"
    req = {"user": "a", name: secret, "payload": value}
    if push:
        req["n"] = 2**70  # the slow path once dropped the credential instead of masking it
    a = canonical_json({"req": req}, volatile=KeyBuilder(None, "f").volatile)
    b = canonical_json({"req": {**req, name: other}}, volatile=KeyBuilder(None, "f").volatile)
    assert a != b
    assert secret.encode() not in a and b"<secret:" in a


@settings(_BASE, max_examples=200)
@given(_rich)
def test_fast_form_never_answers_for_nan_with_the_none_entry(value: Any) -> None:
    """The lookup form skips the walk, so it must never equal the stored (full) form of
    other data: NaN is written as null by orjson, exactly like None."""

    def nonfinite_to_none(v: Any) -> Any:
        if isinstance(v, float) and v - v != 0.0:
            return None
        if isinstance(v, dict):
            return {k: nonfinite_to_none(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [nonfinite_to_none(x) for x in v]
        return v

    data = {"v": value}
    fast, full = keys.fast_json(data, names=_FILTER)
    canon = keys._canonical(data, _FILTER, "f", ())
    if full or (keys._clean(data, _FILTER) == keys._PLAIN):
        assert fast == canon  # nothing to rewrite: the fast form *is* the stored form
    swapped = {"v": nonfinite_to_none(value)}
    swapped_canon = keys._canonical(swapped, _FILTER, "f", ())
    if swapped_canon != canon:  # different data as keys see it
        assert fast != swapped_canon


def _jshape(value: Any) -> Any:
    """Identity as keys see it, NaN included (NaN != NaN, so it gets a name)."""
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_jshape(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(k), _jshape(v)) for k, v in value.items())))
    return _shape(value)


_json_like = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=4),
    max_leaves=20,
)


@settings(_BASE, max_examples=400)
@given(_json_like, _json_like)
def test_distinct_json_values_with_nan_inf_and_negative_zero_give_distinct_keys(
    a: Any, b: Any
) -> None:
    assume(_jshape(a) != _jshape(b))
    assert _k(x=a) != _k(x=b)


@settings(_BASE, max_examples=200)
@given(_json_like, st.booleans())
def test_equal_json_values_with_nan_give_equal_keys(a: Any, flip: bool) -> None:
    assert _k(x=a) == _k(x=_reorder(copy.deepcopy(a), flip))


def test_login_with_a_wrong_password_never_gets_the_right_session(
    memory_store: dejacache.MemoryStore,
) -> None:
    """A lost credential mask, reproduced: an int >= 2**64 beside the credential pushed the
    call onto the slow path, which dropped ``password`` from the key."""
    calls: list[str] = []

    @dejacache.cache
    def login(form: dict[str, Any]) -> str:
        calls.append(form["password"])
        return "session-ok" if form["password"] == "RIGHT" else "denied"

    assert login({"user": "a", "password": "RIGHT", "n": 2**70}) == "session-ok"
    assert login({"user": "a", "password": "WRONG", "n": 2**70}) == "denied"
    assert login({"user": "a", "password": "WRONG", "n": 2**70}) == "denied"  # a hit
    assert calls == ["RIGHT", "WRONG"]
    ((_, rec), (_, rec2)) = list(memory_store.iterate())
    assert b"RIGHT" not in rec.request + rec2.request
    assert b"WRONG" not in rec.request + rec2.request


@pytest.mark.parametrize("name", ["token", "auth_token", "secret", "passwd", "bearer",
                                  "aws_secret_access_key", "openai_api_key",
                                  "aws_access_key_id", "OPENAI_API_KEY", "githubToken",
                                  "stripe_secret_key", "x-api-key", "Cookie"])
def test_every_credential_name_is_masked_at_any_depth(name: str) -> None:
    for push in ({}, {"n": 2**70}, {1: "non-string key"}):
        canon = canonical_json({"a": {"b": [{name: "CANARY-VALUE-1", **push}]}})
        assert b"CANARY-VALUE-1" not in canon and b"<secret:" in canon


def test_url_query_credentials_inside_strings_are_masked() -> None:
    a = canonical_json({"u": "see https://h.example/x?api_key=CANARY1&page=2 now"})
    b = canonical_json({"u": "see https://h.example/x?api_key=CANARY2&page=2 now"})
    assert b"CANARY1" not in a and b"page=2" in a and a != b


def test_masks_are_keyed_and_full_length(monkeypatch: pytest.MonkeyPatch) -> None:
    a = canonical_json({"password": "hunter2"})
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "another machine")
    b = canonical_json({"password": "hunter2"})
    assert a != b  # a dictionary attack needs the key, which is not in the store
    mask = orjson.loads(b)["password"]
    assert mask.startswith("<secret:") and len(mask) == len("<secret:>") + 128


def test_a_credential_token_under_a_credential_name_keys_alike_on_every_machine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The stand-in of a request's own key in its body (``http.exchange.unquoted``) holds no
    # secret: keyed as it is, so CI (another masking key) finds the recording.
    body = {"api_key": "<credential:x-api-key>", "nested": {"password": "<credential:query:key>"}}
    a = canonical_json(body)
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "another machine")
    assert canonical_json(body) == a and b"<secret:" not in a
    # anything more than the token is masked as ever
    assert b"<secret:" in canonical_json({"api_key": "<credential:x-api-key> KEY"})


def test_a_credential_schema_property_is_data_not_a_secret() -> None:
    tool = {"parameters": {"properties": {"password": {"type": "string"}}}}
    assert b'"password":{"type":"string"}' in canonical_json({"tool": tool})


def test_numbers_and_strings_under_a_credential_name_stay_apart() -> None:
    assert canonical_json({"pin": {"password": 1234}}) != canonical_json(
        {"pin": {"password": "1234"}})


# ------------------------------------------------------------------------------ bad input


def _nested(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


def test_too_deep_argument_names_the_depth_and_the_path() -> None:
    with pytest.raises(dejacache.UnhashableArgument) as info:
        call_key("ns", "mod.fn", (), {"req": _nested(300)})
    err = info.value
    assert "levels deep" in str(err) and err.argument.startswith("req.a.a.a")
    assert err.reason and "mod.fn" in str(err)
    assert call_key("ns", "mod.fn", (), {"req": _nested(200)})  # deep but fine


def test_lone_surrogate_names_invalid_text_and_the_path() -> None:
    for arg in ({"s": "\ud800"}, {"s": {"k": ["ok", "x\udfff"]}}, {"s": {"\ud800": 1}}):
        with pytest.raises(dejacache.UnhashableArgument, match="not valid Unicode"):
            call_key("ns", "mod.fn", (), arg)
    with pytest.raises(dejacache.UnhashableArgument) as info:
        call_key("ns", "mod.fn", (), {"s": {"k": ["ok", "x\udfff"]}})
    assert info.value.argument == "s.k[1]"


def test_huge_integers_are_keyed_not_refused() -> None:
    big = 2**100000
    assert _k(v=big) != _k(v=big + 1) != _k(v=[big])
    assert _k(v={"n": big}) == _k(v={"n": 2**100000})


def test_cycle_inside_a_dict_is_named() -> None:
    d: dict[str, Any] = {"a": [1]}
    d["a"].append(d)
    with pytest.raises(dejacache.UnhashableArgument, match="contains itself") as info:
        _k(v=d)
    assert info.value.argument == "v.a[1]"


@pytest.mark.parametrize("kind", ["cycle", "deep", "surrogate"])
def test_a_result_that_cannot_be_stored_still_reaches_the_caller(
    memory_store: dejacache.MemoryStore, kind: str
) -> None:
    """The caller paid for the result; it gets it (with a warning), and
    nothing is stored."""
    made: list[Any] = []

    def build() -> Any:
        if kind == "cycle":
            out: list[Any] = []
            out.append(out)
        elif kind == "deep":
            out = []
            node = out
            for _ in range(10_000):
                node.append([])
                node = node[0]
        else:
            out = {"text": "bad \ud800 decode"}
        made.append(out)
        return out

    @dejacache.cache(name=f"result-{kind}")
    def f() -> Any:
        return build()

    with pytest.warns(dejacache.DejacacheWarning, match="not stored"):
        first = f()
    assert first is made[0]
    assert list(memory_store.iterate()) == []
    second = f()  # nothing was stored: it runs again
    assert second is made[1]


@settings(_BASE, max_examples=200)
@given(_rich, st.sampled_from(["request", "password", "traceparent", "x"]), st.booleans())
def test_bind_key_is_bind_then_fast_key_and_its_key_is_the_digest(
    value: Any, param: str, push: bool
) -> None:
    """``bind_key`` (the decorator's hot path) skips the names check of a
    plain single parameter and serves the marked key from the ``None`` memo; its key stays
    ``digest(body + tail)`` on the first, second and compiled sights, for credential and
    volatile parameter names too, and a NaN twin never gets the ``None`` key."""
    ns: dict[str, Any] = {}
    exec(f"def fn({param}): pass", ns)
    kb = KeyBuilder(ns["fn"], "f")
    seed = keys.key_seed("n", "f")
    arg = {"v": value, "big": 2**70} if push else {"v": value}
    for _ in range(3):
        bound, key, body, tail, _full = kb.bind_key((arg,), {}, seed)
        assert bound == kb.bind((arg,), {})
        # ``full`` may differ between sights (the first returns the full form it needed)
        k2, b2, t2, _ = kb.fast_key(bound, seed)
        assert (key, body + tail) == (k2, b2 + t2)
        assert key == keys.digest("n", "f", body + tail)
        assert body + tail == kb.fast_form(bound)[0]
    swapped = {k: (math.nan if v is None else v) for k, v in arg.items()}
    if param != "traceparent" and any(v is None for v in arg.values()):  # not dropped
        assert kb.bind_key((swapped,), {}, seed)[1] != key


@settings(_BASE, max_examples=200)
@given(_rich, st.sampled_from(["request", "password", "traceparent", "x"]), st.booleans())
def test_hit_key_is_bind_keys_key_or_nothing(value: Any, param: str, nan: bool) -> None:
    """``hit_key`` (the hit path's key) answers only with the key
    ``bind_key`` gives the same call, on every sight, and never lets a NaN twin of a call
    holding ``None`` take its key."""
    ns: dict[str, Any] = {}
    exec(f"def fn({param}): pass", ns)
    kb = KeyBuilder(ns["fn"], "f")
    seed = keys.key_seed("n", "f")
    arg = {"v": value, "none": None}
    for _ in range(3):
        quick = kb.hit_key((arg,), {}, seed)
        key = kb.bind_key((arg,), {}, seed)[1]
        assert quick is None or quick == key
    twin = {"v": value, "none": math.nan} if nan else {"v": value, "none": None, "x": 1}
    twin_key = kb.hit_key((twin,), {}, seed)
    assert twin_key is None or twin_key == kb.bind_key((twin,), {}, seed)[1] != key
    assert kb.hit_key((arg,), {"extra": 1}, seed) is None
    assert kb.hit_key((arg, 2), {}, seed) is None


def test_hit_key_answers_for_a_plain_request_once_its_bytes_were_seen() -> None:
    kb = KeyBuilder(lambda request: None, "f")
    seed = keys.key_seed("n", "f")
    request = {"messages": [{"role": "assistant", "content": None}], "model": "m"}
    assert kb.hit_key((request,), {}, seed) is None  # never seen: bind_key works it out
    key = kb.bind_key((request,), {}, seed)[1]
    kb.bind_key((request,), {}, seed)  # the second sight probes by a loop: a turn of a
    assert kb.hit_key((request,), {}, seed) is None  # conversation is never seen again
    kb.bind_key((request,), {}, seed)  # the third compiles the None probe
    assert kb.hit_key((request,), {}, seed) == key
    request["messages"][0]["content"] = math.nan  # the same bytes, but not the same call
    assert kb.hit_key((request,), {}, seed) is None


# For import time, keys does not import decimal and pathlib; their types join the leaf sets
# the first time one is met. A process that imports them only after keying other calls must
# key every shape exactly as one whose sets held them from the start (the old frozensets),
# whichever path meets the first Decimal or Path: each case below is a first sight.
_LATE_SCRIPT = """
import json, sys
{first}
import dejacache.keys as keys
BASE = (keys._LEAF, keys._TAG_LEAF)

def first_sight():
    if {late}:
        keys._LEAF, keys._TAG_LEAF = BASE
        keys._LATE_DONE.clear()
        keys._LATE_PENDING = True
    else:
        keys._refresh_late()

first_sight()
from dejacache.keys import KeyBuilder, call_key, canonical_json

def f(request, api_key=None, *rest, **extra):
    pass

kb = KeyBuilder(f, "f")
seed = keys.key_seed("n", "f")
warm = [call_key("n", "f", ({{"messages": [{{"role": "user", "content": "hi"}}]}},), fn=f),
        kb.bind_key(([1, 2.5, None],), {{}}, seed)[1]]
loaded = sorted(m for m in ("decimal", "pathlib") if m in sys.modules)
import decimal, pathlib
D, P = decimal.Decimal, pathlib.PurePosixPath
cases = [
    (D("1.50"),), ({{"a": D("2")}},), ([D("1"), None, D("NaN")],),
    ({{"messages": [{{"role": "user", "amount": D("3.10"), "path": P("/a")}}] * 9}},),
    ({{"messages": [{{"role": "user", "x": [{{"amount": D("4")}}]}}, None]}},),
    ("q", D("5")), ("q", P("/secret")), ({{D("1"), D("2")}},), ((D("1"), P("/b")),),
    (pathlib.Path("/c"), pathlib.PureWindowsPath("c:/d")), ({{"k": None, "p": P("/e")}},),
]
out = [warm]
for args in cases:
    first_sight()
    for _ in range(2):  # the second sight goes through the None memo
        out.append([call_key("n", "f", args, fn=f), kb.bind_key(args, {{}}, seed)[1:4],
                    canonical_json({{"v": args}}).decode()])
print(json.dumps({{"loaded": loaded, "keys": out}}, default=repr))
"""


def _late_run(first: str, late: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _LATE_SCRIPT.format(first=first, late=late)],
                         check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_decimal_and_paths_imported_after_keys_key_as_before() -> None:
    early = _late_run("import decimal, pathlib", late=False)
    late = _late_run("", late=True)
    assert early["loaded"] == ["decimal", "pathlib"]
    assert late["loaded"] == []  # keying plain calls loaded neither
    assert late["keys"] == early["keys"]


def test_late_leaves_join_the_leaf_sets() -> None:
    keys._refresh_late()  # this process has both loaded (the tests import them)
    assert {decimal.Decimal, pathlib.PosixPath, pathlib.PurePosixPath,
            pathlib.PureWindowsPath, pathlib.WindowsPath} <= keys._TAG_LEAF <= keys._LEAF
    assert not keys._LATE_PENDING
    assert not keys._late_leaf(decimal.Context) and not keys._late_leaf(dict)


_SIGNATURES = st.sampled_from([
    "def fn(a, b): pass",
    "def fn(a, b, c): pass",
    "def fn(query, password): pass",  # a credential parameter: never the quick path
    "def fn(a, b=2): pass",  # a default: bound by inspect, never the quick path
    "def fn(a, *rest): pass",
    "def fn(a, *, b): pass",
    "def fn(traceparent, b): pass",  # a volatile parameter name
])


@settings(_BASE, max_examples=200)
@given(_SIGNATURES, st.lists(_rich, min_size=1, max_size=3), st.booleans())
def test_hit_key_by_position_is_bind_keys_key_or_nothing(
    source: str, values: list[Any], keyword: bool
) -> None:
    """Calls by position of several plain parameters take ``hit_key`` too; whatever the
    signature, its answer is ``bind_key``'s key or nothing, on every sight."""
    ns: dict[str, Any] = {}
    exec(source, ns)
    kb = KeyBuilder(ns["fn"], "f")
    seed = keys.key_seed("n", "f")
    args = tuple(values)
    kwargs: dict[str, Any] = {"b": 1} if keyword else {}
    for _ in range(3):
        try:
            key = kb.bind_key(args, kwargs, seed)[1]
        except dejacache.UnhashableArgument:
            return
        quick = kb.hit_key(args, kwargs, seed)
        assert quick is None or quick == key
    if source in ("def fn(a, b): pass", "def fn(a, b, c): pass") and not kwargs \
            and len(args) <= 2 and all(v is None or type(v) is str
                                       or (type(v) is int and abs(v) < 2**63) for v in args):
        assert kb.hit_key(args, kwargs, seed) == key  # seen: the quick path answers


# ------------------------------------------------------------------------------ collisions


def _with_default(default: Any) -> Any:
    def f(x: Any = default) -> None: ...

    return f


@pytest.mark.parametrize(("value", "default"), [
    (-0.0, 0.0), (0.0, -0.0), ((True, 2), (1, 2)), ({"t": 1.0}, {"t": 1}), ([0.0], [-0.0]),
    ({"a": (1, False)}, {"a": (1, 0)}), (frozenset({True}), frozenset({1})),
    ((1.0,), (1,)), ({"k": [True]}, {"k": [1.0]}),
])
def test_a_value_equal_to_the_default_but_another_value_is_kept(value: Any,
                                                                default: Any) -> None:
    assert value == default
    kb = KeyBuilder(_with_default(default), "f")
    assert kb.key("ns", (value,), {}) != kb.key("ns", (), {})
    assert kb.key("ns", (), {"x": value}) != kb.key("ns", (), {})
    assert kb.key("ns", (default,), {}) == kb.key("ns", (), {})  # the default itself: dropped
    assert kb.key("ns", (), {"x": type(default)(default)}) == kb.key("ns", (), {})


def test_negative_zero_is_not_served_the_defaults_answer(
    memory_store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache
    def sign(x: float = 0.0) -> float:
        return math.copysign(1.0, x)

    assert sign() == 1.0
    assert sign(-0.0) == -1.0
    assert sign(x=-0.0) == -1.0


@st.composite
def _twins(draw: st.DrawFn, value: Any) -> Any:
    """A value ``==`` to ``value`` whose parts may be of another type or sign."""
    if isinstance(value, bool):
        return draw(st.sampled_from([value, int(value), float(value)]))
    if isinstance(value, int):
        return draw(st.sampled_from([value, float(value)] + ([bool(value)]
                                                            if value in (0, 1) else [])))
    if isinstance(value, float):
        alts = [value]
        if value == 0.0:
            alts.append(-value)
        if value.is_integer() and abs(value) < 2**53:
            alts.append(int(value))
        return draw(st.sampled_from(alts))
    if isinstance(value, (list, tuple)):
        items = [draw(_twins(v)) for v in value]
        return draw(st.sampled_from([list(items), tuple(items)]))
    if isinstance(value, dict):
        return {k: draw(_twins(v)) for k, v in value.items()}
    return value


_plain_defaults = st.recursive(
    st.booleans() | st.integers(-2, 2) | st.sampled_from([0.0, -0.0, 1.0, 2.5]) | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)


@settings(_BASE, max_examples=500)
@given(st.data(), _plain_defaults)
def test_a_value_keys_like_the_default_only_when_it_is_canonically_the_default(
    data: st.DataObject, default: Any
) -> None:
    """Defaults are compared as the key sees them, never by ``==`` alone (500 examples: 16
    pairs keyed like the default before)."""
    value = data.draw(_twins(default))
    assume(value == default)
    kb = KeyBuilder(_with_default(default), "f")
    same = canonical_json({"x": value}) == canonical_json({"x": default})
    assert (kb.key("ns", (value,), {}) == kb.key("ns", (), {})) == same


_BIND_SIGNATURES = [
    "def fn(*args, **kw): pass",
    "def fn(a, /, **kw): pass",
    "def fn(a=0, /, *args, **kw): pass",
    "def fn(arg0, *, arg1): pass",
    "def fn(x=0, **kw): pass",
    "def fn(a, b=2): pass",
    "def fn(self, cls=None): pass",
    "def fn(**kw): pass",
    "def fn(c, x=0): pass",  # c is ignored: a call without it is refused, not keyed as one
    None,  # no signature: positional arguments are arg0, arg1...
]
_KW_NAMES = st.sampled_from(["a", "b", "c", "x", "kw", "args", "*args", "**args", "*a", "arg0",
                             "arg1", "*arg0", "self", "cls", "*"])


def _identity(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a call means: its arguments bound (defaults filled in; ``c`` is ignored where it
    is a parameter), or what was given."""
    if fn is None:
        return ("given", args, sorted(kwargs.items()))
    import inspect

    sig = inspect.signature(fn)
    try:
        b = sig.bind(*args, **kwargs)
    except TypeError:
        return ("refused", args, sorted(kwargs.items()))
    b.apply_defaults()
    return ("bound", sorted((k, sorted(v.items()) if isinstance(v, dict) else v)
                            for k, v in b.arguments.items()
                            if not (k == "c" and k in sig.parameters)))


@settings(_BASE, max_examples=600)
@given(st.sampled_from(_BIND_SIGNATURES),
       st.lists(st.integers(0, 2), max_size=3), st.dictionaries(_KW_NAMES, st.integers(0, 2),
                                                                 max_size=3),
       st.lists(st.integers(0, 2), max_size=3), st.dictionaries(_KW_NAMES, st.integers(0, 2),
                                                                 max_size=3))
def test_two_calls_share_a_key_only_when_they_bind_alike(
    source: str | None, args1: list[int], kw1: dict[str, int], args2: list[int],
    kw2: dict[str, int],
) -> None:
    """``*args``, keywords spelled like it, positional-only names, ``arg0`` and calls the
    signature refuses: every call has a spelling no other call has."""
    fn = None
    if source is not None:
        ns: dict[str, Any] = {}
        exec(source, ns)
        fn = ns["fn"]
    kb = KeyBuilder(fn, "f", ignore=["c"] if source == "def fn(c, x=0): pass" else [])
    a, b = (tuple(args1), kw1), (tuple(args2), kw2)
    ida, idb = _identity(fn, *a), _identity(fn, *b)
    if ida == idb:
        assert kb.key("ns", *a) == kb.key("ns", *b)
    elif ida[0] != "refused" or idb[0] != "refused":  # two refused calls both raise
        assert kb.key("ns", *a) != kb.key("ns", *b)


def test_reserved_argument_spellings_never_collide() -> None:
    def star(*args: Any, **kw: Any) -> None: ...

    def posonly(a: int = 0, /, **kw: Any) -> None: ...

    def named(arg0: int, *, arg1: int) -> None: ...

    kb = KeyBuilder(star, "f")
    assert kb.key("ns", (1,), {}) != kb.key("ns", (), {"*args": [1]})
    kb = KeyBuilder(posonly, "f")
    assert kb.key("ns", (5,), {}) != kb.key("ns", (), {"a": 5})
    assert kb.key("ns", (1,), {"a": 2}) != kb.key("ns", (2,), {})
    kb = KeyBuilder(named, "f")  # f(1, 2) is refused; f(1, arg1=2) binds
    assert kb.key("ns", (1, 2), {}) != kb.key("ns", (1,), {"arg1": 2})
    assert call_key("ns", "f", (1,)) != call_key("ns", "f", (), {"arg0": 1})


def test_a_password_equal_to_another_passwords_mask_is_not_served_its_answer(
    memory_store: dejacache.MemoryStore,
) -> None:
    calls: list[str] = []

    @dejacache.cache
    def login(form: dict[str, Any]) -> str:
        calls.append(str(form))
        right = form.get("auth", {}).get("password") == "RIGHT"
        return "session-ok" if right or form.get("url", "").endswith("=RIGHT") else "denied"

    forged = keys._secrets.mask("RIGHT")  # what the store holds for the right password
    assert login({"auth": {"password": "RIGHT"}}) == "session-ok"
    for _ in range(2):  # first sight, then the remembered bytes
        assert login({"auth": {"password": forged}}) == "denied"
        assert login({"url": f"https://h.example/?password={forged}"}) == "denied"
    assert login({"url": "https://h.example/?password=RIGHT"}) == "session-ok"
    assert login({"url": f"https://h.example/?password={forged}"}) == "denied"
    assert len(calls) == 4


_TAGGED_VALUES = [b"\x00\xff", bytearray(b"ab"), memoryview(b"cd"), decimal.Decimal("1.5"),
                  pathlib.PurePosixPath("/a"), {1, 2}, frozenset({"x"}),
                  datetime.timedelta(days=1), 2**70, math.nan, math.inf, {1: "x"}]


@pytest.mark.parametrize("tagged", _TAGGED_VALUES,
                         ids=[f"{type(v).__name__}{i}" for i, v in enumerate(_TAGGED_VALUES)])
@pytest.mark.parametrize("first", ["tagged", "forged"])
@pytest.mark.parametrize("nest", ["bare", "in messages"])
def test_a_dict_spelled_like_a_type_tag_keys_apart_on_every_path(
    tagged: Any, first: str, nest: str
) -> None:
    """``{"\\x00set": [1, 2]}`` is data, never the set ``{1, 2}``: the full form escapes a
    leading NUL and the lookup form never takes such bytes as they are, in either order."""
    forged = orjson.loads(canonical_json({"v": tagged}))["v"]
    assert isinstance(forged, dict) and next(iter(forged)).startswith("\x00")

    def wrap(v: Any) -> Any:
        if nest == "bare":
            return {"v": v}
        return {"messages": [{"role": "user", "content": f"m{i}"} for i in range(9)]
                + [{"role": "user", "content": v}]}

    def llm(request: Any) -> None: ...

    kb = KeyBuilder(llm, f"llm-{first}-{nest}-{type(tagged).__name__}")
    seed = keys.key_seed("ns", kb.name)
    order = [tagged, forged] if first == "tagged" else [forged, tagged]
    got: dict[str, set[str]] = {"tagged": set(), "forged": set()}
    for _ in range(3):
        for which, v in zip([first, "forged" if first == "tagged" else "tagged"], order,
                            strict=True):
            key = kb.bind_key((wrap(v),), {}, seed)[1]
            quick = kb.hit_key((wrap(v),), {}, seed)
            assert quick is None or quick == key
            got[which] |= {key, keys.digest("ns", kb.name, kb.canonical((wrap(v),), {}))}
    assert len(got["tagged"]) == 1 and len(got["forged"]) == 1
    assert got["tagged"] != got["forged"]
    assert _k(v=forged) != _k(v=tagged)


_DATE = __import__("re").compile(r"\d{4}-\d{2}-\d{2}")


@pytest.mark.parametrize("shape", [
    lambda pw: ((), {"user": "a", "password": pw}),
    lambda pw: (({"auth": {"password": pw}},), {}),
    lambda pw: (({"auth": {"password": [pw, {"note": pw}]}},), {}),
    lambda pw: (({"url": f"https://h.example/login?password={pw}&day=2024-05-06"},), {}),
    lambda pw: (({"note": f"use sk-proj-{pw}AbCdEfGhIjKlMnOp"},), {}),
    lambda pw: (({"h": f"Authorization: Bearer tok{pw}tok"},), {}),
], ids=["argument", "nested", "list", "url", "shaped key", "bearer"])
def test_volatile_patterns_never_make_two_credentials_key_alike(shape: Any) -> None:
    """Credentials are masked before any volatile pattern looks at the text: a date pattern
    once turned passwords ``pw-2024-01-01`` and ``pw-1999-12-31`` into one key."""

    def login(*args: Any, **kwargs: Any) -> None: ...

    kb = KeyBuilder(login, "login", volatile=[_DATE])
    seed = keys.key_seed("ns", "login")
    a, b = shape("pw-2024-01-01"), shape("pw-1999-12-31")
    for _ in range(2):
        assert kb.key("ns", *a) != kb.key("ns", *b)
        assert kb.bind_key(*a, seed)[1] != kb.bind_key(*b, seed)[1]
    stored = keys._secrets.scrub_request(kb.canonical(*a))
    assert b"pw-2024-01-01" not in stored and b"pw-" + b"2024" not in stored


def test_a_pattern_that_rewrites_a_url_never_unmasks_its_credential() -> None:
    """A pattern that makes hosts volatile no longer leaves ``?password=`` to be found: the
    value was masked before the pattern ran."""
    host = __import__("re").compile(r"https?://[^/]+")
    a = canonical_json({"u": "https://127.0.0.1:5001/x?password=hunter2"},
                       volatile_patterns=(host,))
    b = canonical_json({"u": "http://127.0.0.1:6002/x?password=hunter2"},
                       volatile_patterns=(host,))
    c = canonical_json({"u": "http://127.0.0.1:6002/x?password=hunter3"},
                       volatile_patterns=(host,))
    assert a == b != c
    assert b"hunter" not in a + c


def test_a_mask_in_the_text_is_never_rewritten_by_a_pattern() -> None:
    hexes = __import__("re").compile(r"[0-9a-f]{8,}")
    a = canonical_json({"query": {"code": keys._secrets.mask("one")}}, volatile_patterns=(hexes,))
    b = canonical_json({"query": {"code": keys._secrets.mask("two")}}, volatile_patterns=(hexes,))
    assert a != b


def test_a_literal_placeholder_never_keys_like_a_replaced_match() -> None:
    def vol(text: str) -> bytes:
        return canonical_json({"t": text}, volatile_patterns=(_DATE,))

    assert vol("on 2024-05-06 ok") == vol("on 1999-12-31 ok")
    forms = {vol(t) for t in ("on <volatile> ok", "on 2024-05-06 ok", "on <volatile\\> ok",
                              "on <volatile\\\\> ok")}
    assert len(forms) == 4


def test_volatile_dates_and_passwords_through_the_decorator(
    memory_store: dejacache.MemoryStore,
) -> None:
    @dejacache.cache(volatile=[_DATE])
    def login(user: str, password: str, day: str) -> str:
        return "session-ok" if password == "pw-2024-01-01" else "denied"

    assert login("a", "pw-2024-01-01", "2024-05-06") == "session-ok"
    assert login("a", "pw-1999-12-31", "2024-05-06") == "denied"
    assert login("a", "pw-2024-01-01", "2030-01-01") == "session-ok"  # a hit: day is volatile


# ------------------------------------------------------------------------------ flat dicts

_FLAT_TEXT = st.text(max_size=12)
_FLAT_NAMES = st.sampled_from(["type", "audio", "event_id", "api_key", "\x00t", "ws_session"])


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_FLAT_NAMES, st.one_of(
    _FLAT_TEXT, st.dictionaries(_FLAT_NAMES, st.one_of(_FLAT_TEXT, st.none(), st.integers()),
                                max_size=3)), max_size=3))
def test_a_flat_dict_keys_as_the_general_path_does(data: dict[str, Any]) -> None:
    # A dict of strings and dicts of strings is written at once once its names are known
    # plain; volatile or credential names, None and numbers take the walk (same bytes).
    names = keys._names_for(frozenset({"event_id"}))
    for _ in range(2):  # the second time, its plain names are known
        out = keys._canonical(data, names, "f", ())
        general = keys._secrets.mask_url_queries(keys._general(data, names, "f"))
        assert out == general


def test_only_strings_and_dicts_of_strings_under_plain_names_are_flat() -> None:
    plain = {"type", "audio", "body"}
    assert keys._flat({"type": "a", "body": {"audio": "x"}}, plain)
    assert keys._flat({}, plain)
    assert not keys._flat({"type": "a", "other": "b"}, plain)  # a name not seen yet
    assert not keys._flat({"type": None}, plain)
    assert not keys._flat({"body": {"audio": 1}}, plain)
    assert not keys._flat({"body": {"audio": ["x"]}}, plain)
    assert not keys._flat({"body": {"other": "x"}}, plain)
    assert not keys._flat({"body": {"type": {"audio": "x"}}}, plain)  # two levels deep


@pytest.mark.parametrize("url", [
    "/v1/items?api_key={}&page=2",  # relative: no "://" anywhere in the request
    "see https://app.example/cb#access_token={}&token_type=bearer",  # a fragment
    "postgresql://app:{}@db.internal:5432/x",  # a userinfo password
    "postgresql://app:{}@db.internal/x?sslmode=require&password={}",
], ids=["relative", "fragment", "userinfo", "userinfo and query"])
@pytest.mark.parametrize("where", ["argument", "long conversation"])
def test_url_credentials_enter_keys_only_as_keyed_digests(url: str, where: str) -> None:
    """The bytes a key is hashed from hold a URL's credential only as its keyed mask: a key
    is an unkeyed xxh3, so a plain weak password in them could be guessed offline."""

    def connect(*args: Any, **kwargs: Any) -> None: ...

    def call(secret: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        text = url.format(secret, secret)
        if where == "argument":
            return (text,), {}
        # Long enough to be written by parts, the URL in the newest message only.
        history = [{"role": "user", "content": f"message {i} " + "x" * 100} for i in range(100)]
        return (), {"messages": [*history, {"role": "user", "content": text}]}

    kb = KeyBuilder(connect, "connect")
    seed = keys.key_seed("ns", "connect")
    alice, bob = call("alice-Pw-1"), call("bob-Pw-2")
    for _ in range(2):  # a first sight, then the remembered fast form
        assert kb.key("ns", *alice) != kb.key("ns", *bob)
        _, key, body, tail, _ = kb.bind_key(*alice, seed)
        assert key == keys._hex(body + tail, seed=seed)  # what the key is hashed from
        assert b"alice-Pw-1" not in body + tail and b"<secret:" in body
    assert b"alice-Pw-1" not in kb.canonical(*alice)


def test_keys_of_requests_without_url_credentials_are_unchanged() -> None:
    """Existing cassettes keep matching: URL masking leaves a request holding no URL
    credential as it is, whatever else it holds."""
    chat = {"model": "gpt-4o-mini", "temperature": 0.2, "messages": [
        {"role": "user", "content": "What is 2/3 = ? and #5 @ home, see https://x.example/a"},
        {"role": "user", "content": "/v1/items?page=2#top and ssh://git@github.com/x.git"}]}
    data = orjson.dumps(chat, option=orjson.OPT_SORT_KEYS)
    assert keys._secrets.mask_url_queries(data) == data
    assert canonical_json(chat) == data


# ------------------------------------------------------------------ credential pairs


def _mask_of(name: str, value: Any) -> Any:
    return orjson.loads(canonical_json({name: value}))[name]


@pytest.mark.parametrize("holder", [
    lambda p: {"params": [p, ["q", "x"]]},  # a JSON body's list of pairs
    lambda p: {"headers": [tuple(p)]},  # an argument's tuples
    lambda p: {"messages": [{"role": "user", "headers": [p]}] * 3},  # written by parts
    lambda p: {"pairs": [p] + [["q", str(i)] for i in range(12)]},  # a long list, by parts
])
def test_a_credential_pair_is_masked_as_a_field_of_its_name_is(holder: Any) -> None:
    """``["api_key", "hunter2"]`` reached the key's bytes as it was (a fast unkeyed digest of
    text holding a weak password can be guessed offline); its value now becomes the keyed
    mask the field ``{"api_key": ...}`` gets, so alice and bob still key apart."""
    alice = canonical_json(holder(["api_key", "hunter2"]))
    bob = canonical_json(holder(["api_key", "hunter3"]))
    assert b"hunter2" not in alice and alice != bob
    assert _mask_of("api_key", "hunter2").encode() in alice
    assert canonical_json(holder(["X-Api-Key", 1234])) != canonical_json(
        holder(["X-Api-Key", "1234"]))


def test_the_keys_of_a_credential_pair_argument_are_its_full_form() -> None:
    """The lookup form is a call's raw bytes only once a walk found them to be its full
    form: a pair's never are, so a hit and a miss key it alike, masked."""
    def search(params: Any) -> None: ...

    kb = KeyBuilder(search, "search")
    seed = keys.key_seed("ns", "search")
    call = ([["password", "hunter2"], ["q", "x"]],)
    want = keys.digest("ns", "search", kb.canonical(call, {}))
    for _ in range(2):
        _, key, body, tail, _ = kb.bind_key(call, {}, seed)
        assert key == want and b"hunter2" not in body + tail
        assert kb.hit_key(call, {}, seed) in (None, want)


@pytest.mark.parametrize("plain", [["q", "x"], ["api_key"], ["api_key", "a", "b"], [1, "x"],
                                   ["x", "password"], [["q", ["api_key"]]],
                                   ["a long text, not a name: " * 11 + "password", "v"]])
def test_lists_that_are_not_credential_pairs_key_as_they_are(plain: Any) -> None:
    assert canonical_json({"v": plain}) == orjson.dumps({"v": plain}, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("schema", [
    {"type": "object", "required": ["api_key", "q"]},
    {"properties": {"verdict": {"enum": ["pass", "fail"]}}},
    {"properties": {"mode": {"type": ["token", "null"], "examples": ["password", "x"]}}},
])
def test_a_json_schema_list_is_not_a_credential_pair(schema: Any) -> None:
    """A tool schema's ``required``/``enum`` list naming a credential field is names, not a
    pair: read as one, every request carrying the tool keyed per machine (a CI miss)."""
    request = {"tools": [{"function": {"name": "login", "parameters": schema}}]}
    assert canonical_json(request) == orjson.dumps(request, option=orjson.OPT_SORT_KEYS)
    # (the same list under any other name is a pair still)
    assert b"fail" not in canonical_json({"params": ["pass", "fail"]})


# ------------------------------------------------------------- containers under credential names


@pytest.mark.parametrize("value", [
    {"key": "hunter2"}, ["hunter2"], ("alice", "hunter2"), {"a": {"b": [{"c": "hunter2"}]}},
    {"hunter2"}, collections.OrderedDict(key="hunter2"), Point(x=7, y=0.5),
    {1: "hunter2"}, [Color.RED, "hunter2"],
])
def test_every_leaf_under_a_credential_name_is_keyed_as_a_mask(value: Any) -> None:
    """A dict, list, tuple, set or object held under a credential's name is the credential
    at every depth: each leaf keyed as a mask, so the key bytes never hold it, a different
    credential is a different key, and the same one the same key."""
    canon = canonical_json({"credentials": value, "q": "hi"})
    assert b"hunter2" not in canon and b"<secret:" in canon
    assert canon == canonical_json({"credentials": copy.deepcopy(value), "q": "hi"})
    other = canonical_json({"credentials": json.loads(
        json.dumps(value, default=repr).replace("hunter2", "hunter3")), "q": "hi"})
    assert other != canon


def test_a_dict_under_a_credential_name_keys_as_its_leaves_masked() -> None:
    from dejacache import _secrets

    form = orjson.loads(canonical_json({"credentials": {"user": "alice", "pin": 1234,
                                                        "on": True, "none": None}}))
    assert form == {"credentials": {"user": _secrets.mask("alice"), "pin": _secrets.mask(1234),
                                    "on": True, "none": None}}


def test_credential_containers_nest_to_the_depth_limit_and_refuse_cycles() -> None:
    deep: Any = "hunter2"
    for _ in range(keys.MAX_DEPTH - 2):
        deep = [deep]
    assert b"hunter2" not in canonical_json({"password": deep})  # orjson's limit: fragments
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(dejacache.UnhashableArgument, match="contains itself"):
        call_key("ns", "f", kwargs={"credentials": loop})


def test_a_schema_under_a_credential_name_keys_as_sent_but_for_its_values() -> None:
    from dejacache import _secrets

    plain = {"type": "string", "description": "the key", "minLength": 8}
    assert orjson.loads(canonical_json({"api_key": plain})) == {"api_key": plain}
    given = orjson.loads(canonical_json({"api_key": {**plain, "default": "hunter2"}}))
    assert given == {"api_key": {**plain, "default": _secrets.mask("hunter2")}}
    # a schema keyword declared volatile is left out there too
    left = canonical_json({"api_key": plain}, volatile=frozenset({"description"}))
    assert orjson.loads(left) == {"api_key": {"type": "string", "minLength": 8}}


def test_pydantic_secrets_key_by_their_value_never_plain() -> None:
    # A SecretStr dumps as "**********" whatever it holds: two accounts' keys keyed alike,
    # so one account was served the other's answers.
    class Cfg(pydantic.BaseModel):
        model: str
        api_key: pydantic.SecretStr

    class Account(pydantic.BaseModel):
        owner: pydantic.SecretStr
        configs: list[Cfg] = []

    class Client:
        def __init__(self, key: str) -> None:
            self.key = pydantic.SecretStr(key)

        @dejacache.cache
        def ask(self, q: str) -> str:
            return q

    @dejacache.cache
    def ask(x: Any) -> int:
        return 1

    def apart(a: Any, b: Any) -> bool:
        return bool(ask.cache_key(a) != ask.cache_key(b))  # type: ignore[attr-defined]

    assert apart(Cfg(model="m", api_key="alice-key"), Cfg(model="m", api_key="bob-key"))
    assert not apart(Cfg(model="m", api_key="alice-key"), Cfg(model="m", api_key="alice-key"))
    assert apart(Account(owner="alice"), Account(owner="bob"))
    assert apart(Account(owner="a", configs=[Cfg(model="m", api_key="alice-key")]),
                 Account(owner="a", configs=[Cfg(model="m", api_key="bob-key")]))
    assert apart(pydantic.SecretStr("alice-key"), pydantic.SecretStr("bob-key"))
    assert apart(pydantic.SecretBytes(b"alice-key"), pydantic.SecretBytes(b"bob-key"))
    key = Client.ask.cache_key  # type: ignore[attr-defined]
    assert key(Client("alice-key"), "q") != key(Client("bob-key"), "q")
    assert Client.ask.explain(Client("alice-key"), "q").left_out == ()  # type: ignore[attr-defined]
    shown = repr(ask.explain(Account(owner="alice-key", configs=[  # type: ignore[attr-defined]
        Cfg(model="m", api_key="bob-key")])).arguments)
    assert "alice-key" not in shown and "bob-key" not in shown and "<secret:" in shown


def test_a_stored_model_holds_its_secret_masked(tmp_path: Any) -> None:
    class Cfg(pydantic.BaseModel):
        api_key: pydantic.SecretStr

    path = tmp_path / "c.db"
    with dejacache.scope(store=dejacache.SQLiteStore(path)):

        @dejacache.cache
        def ask(cfg: Cfg) -> str:
            return "answer"

        assert ask(Cfg(api_key="alice-key")) == "answer"
    for f in tmp_path.iterdir():  # the file and its journal
        assert b"alice-key" not in f.read_bytes(), f


# --------------------------------------------------- basic credentials under ``auth``-like names


def _basic_auth(login: str, password: str) -> Any:
    """aiohttp's ``BasicAuth`` (a named tuple), without aiohttp 3.14's deprecation warning."""
    import warnings

    import aiohttp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return aiohttp.BasicAuth(login, password)


@pytest.mark.parametrize("holder", [
    lambda pw: {"auth": ("alice", pw)},  # requests/httpx
    lambda pw: {"basic_auth": ["alice", pw]},  # elasticsearch
    lambda pw: {"body": {"httpAuth": ["alice", pw, "utf-8"]}},  # nested, with an encoding
    lambda pw: {"proxy_auth": "alice:" + pw},  # "user:password"
    lambda pw: {"auth": _basic_auth("alice", pw)},  # aiohttp, a named tuple
    lambda pw: {"messages": [{"role": "user", "auth": ["alice", pw]}] * 3},  # by parts
])
def test_basic_credentials_key_their_password_as_a_mask(holder: Any) -> None:
    """A password under ``auth=`` reached the key's bytes as it was: it is now the keyed
    mask a ``password`` field gets, so alice's two passwords still key apart; the user
    name stays as data."""
    alice = canonical_json(holder("hunter2"))
    assert b"hunter2" not in alice and b"alice" in alice
    assert keys._secrets.mask("hunter2").encode() in alice
    assert alice != canonical_json(holder("hunter3"))


def test_the_key_of_a_basic_credentials_argument_is_its_full_form() -> None:
    """``tool(auth)`` by position of its one parameter skips the names check on a hit:
    never for an ``auth``-like one, whose value decides."""
    def fetch(auth: Any) -> None: ...

    kb = KeyBuilder(fetch, "fetch")
    seed = keys.key_seed("ns", "fetch")
    for call in [(("alice", "hunter2"),), ("alice:hunter2",), (_basic_auth("alice", "hunter2"),)]:
        want = keys.digest("ns", "fetch", kb.canonical(call, {}))
        for _ in range(2):
            _, key, body, tail, _ = kb.bind_key(call, {}, seed)
            assert key == want and b"hunter2" not in body + tail
            assert kb.probe_key(call, {}, seed) in (None, want)


@pytest.mark.parametrize("value", [
    "bearer", {"type": "oauth2", "flows": {"clientCredentials": {}}}, True, False,
    ["a", "b", "c", "d"], ["alice"], [1, "x"], "https://auth.example/token", "see docs: x",
    "alice:", ":x", {"auth": "basic"},
])
def test_other_values_under_auth_names_key_byte_for_byte_as_before(value: Any) -> None:
    """Settings under ``auth`` (a tool definition's, an MCP config's) are no credential:
    their keys are today's, on every machine."""
    for request in ({"auth": value}, {"tools": [{"name": "t", "auth": value}]},
                    {"proxy_auth": value, "q": "x"}):
        assert canonical_json(request) == orjson.dumps(request, option=orjson.OPT_SORT_KEYS)

    def tool(auth: Any) -> None: ...

    kb = KeyBuilder(tool, "tool")
    seed = keys.key_seed("ns", "tool")
    want = keys.digest("ns", "tool", orjson.dumps({"auth": value}, option=orjson.OPT_SORT_KEYS))
    assert kb.bind_key((value,), {}, seed)[1] == want


@pytest.mark.parametrize("holder", [
    lambda pw: {"auth": (b"alice", pw.encode())},  # requests takes bytes
    lambda pw: {"auth": ("alice", pw.encode())},  # mixed
    lambda pw: {"proxy_auth": [bytearray(b"alice"), pw.encode(), "latin1"]},
    lambda pw: {"headers": [["auth", ("alice", pw)]]},  # a pair
    lambda pw: {"headers": [("Proxy-Auth", "alice:" + pw)]},
    lambda pw: {"q": [["basic_auth", [b"alice", pw.encode()]]]},
    lambda pw: {"messages": [{"role": "user", "headers": [["auth", ["alice", pw]]]}] * 3},
])
def test_bytes_and_paired_basic_credentials_key_their_password_as_a_mask(holder: Any) -> None:
    """``auth=(b"alice", b"hunter2")`` reached the key as base64 of the password; a pair
    named ``auth`` as the password itself. Both key the mask now, the user as data."""
    alice = canonical_json(holder("hunter2"))
    assert b"hunter2" not in alice and b"aHVudGVyMg" not in alice
    assert b"alice" in alice or b"YWxpY2U=" in alice
    assert alice != canonical_json(holder("hunter3"))

    def fetch(**kw: Any) -> None: ...

    kb = KeyBuilder(fetch, "fetch")
    seed = keys.key_seed("ns", "fetch")
    want = keys.digest("ns", "fetch", kb.canonical((), holder("hunter2")))
    for _ in range(2):  # the first sight of the bytes, then a hit
        _, key, body, tail, _ = kb.bind_key((), holder("hunter2"), seed)
        assert key == want and b"hunter2" not in body + tail


def test_a_pair_named_auth_is_read_by_its_value_each_time() -> None:
    """``["auth", "bearer"]`` is data; a later ``["auth", ["alice", pw]]`` is still read as
    basic credentials (first strings found plain are remembered; ``auth``-like ones never)."""
    def fetch(headers: Any) -> None: ...

    kb = KeyBuilder(fetch, "fetch")
    seed = keys.key_seed("ns", "fetch")
    setting = [["auth", "bearer"]]
    assert kb.canonical((setting,), {}) == orjson.dumps({"headers": setting})
    kb.bind_key((setting,), {}, seed)
    _, key, body, tail, _ = kb.bind_key(([["auth", ["alice", "hunter2"]]],), {}, seed)
    assert b"hunter2" not in body + tail
    assert key != kb.bind_key(([["auth", ["alice", "hunter3"]]],), {}, seed)[1]


@pytest.mark.parametrize("value", [[["auth", "bearer"]], [["auth", {"type": "oauth2"}]],
                                   [["auth", True]], [["auth", ["a", "b", "c", "d"]]],
                                   [["auth", b"x"]], [["proxy_auth", "alice"]]])
def test_other_pairs_under_auth_names_key_byte_for_byte_as_before(value: Any) -> None:
    request = {"headers": value, "q": "x"}
    want = orjson.dumps(request, option=orjson.OPT_SORT_KEYS, default=keys._tagged)
    assert canonical_json(request) == want
