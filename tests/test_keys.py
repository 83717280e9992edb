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
from typing import Any

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

GOLDEN = {
    "empty": "4201b97f1fe6a4c84db9dca0038dd2b1",
    "scalars": "c84b83fc4238d522260699f1b9bedfec",
    "nested": "b2d02e00cc018cb265a96a61333438b6",
    "types": "a4cf8d6d22e77468436fb136c8aeb665",
    "big": "2ea9744525bdcf92626918237ad1f492",
    "chat": "b4d93482a24e372df25443cff68312af",
}


def golden_keys() -> dict[str, str]:
    return {n: call_key("golden-ns", "pkg.fn", a, kw) for n, (a, kw) in GOLDEN_CASES.items()}


def test_schema_version_is_one() -> None:
    assert KEY_SCHEMA_VERSION == 1


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
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
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
    # Big integers or non-string dict keys push a call onto the slow canonicaliser; it must
    # spell every value exactly as the fast path does, or keys would depend on neighbours.
    data = {"v": value, "t": (value, Point(1, 2.0), Color.BLUE, datetime.time(1, 2))}
    try:
        fast = orjson.dumps(data, default=lambda v: keys._tagged(v, None), option=keys._OPTS)
    except TypeError:
        assume(False)
    slow = orjson.dumps(keys._normalize(data, None, "v"), option=orjson.OPT_SORT_KEYS)
    assert fast == slow


# ------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([1, 2], (1, 2)),
        ({1, 2, 3}, frozenset({3, 2, 1})),
        ({"b": 1, "a": 2}, collections.OrderedDict([("a", 2), ("b", 1)])),
        (Color.RED, "red"),
        (Point(1, 2.0), {"x": 1, "y": 2.0}),
        (Message(role="user", content="hi"), {"role": "user", "content": "hi"}),
        (Dumpable(a=1, b=[2]), {"b": [2], "a": 1}),
        (decimal.Decimal("1.50"), decimal.Decimal("1.5")),
        (pathlib.Path("/a/b"), pathlib.PurePosixPath("/a/b")),
        (bytearray(b"xy"), b"xy"),
        (collections.namedtuple("P", "a b")(1, 2), [1, 2]),
    ],
)
def test_equal_as_data_means_equal_key(a: Any, b: Any) -> None:
    assert _k(v=a) == _k(v=b)


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


def test_dunder_hook_gives_a_type_its_canonical_form() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

        def __dejacache_key__(self) -> Any:
            return {"cents": self.cents}

    assert _k(m=Money(5)) == _k(m=Money(5))
    assert _k(m=Money(5)) != _k(m=Money(6))


# ------------------------------------------------------------------------------ non-finite floats


def test_non_finite_argument_is_not_none() -> None:
    keys_ = {_k(limit=v) for v in (None, math.inf, -math.inf, math.nan)}
    assert len(keys_) == 4
    assert _k(limit=math.nan) == _k(limit=float("nan"))


def test_non_finite_inside_containers_is_written_as_json_null() -> None:
    # Documented trade-off (keys.py docstring): scanning every container for NaN would double
    # the cost of keying a 200 KB request, so nested NaN/inf are spelled like JSON spells them.
    assert _k(v=[math.nan]) == _k(v=[None]) == _k(v=[math.inf])
    assert _k(v={"a": math.nan}) == _k(v={"a": None})


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
    assert info.value.argument == "v"


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


def test_ignore_and_self_cls() -> None:
    def f(self: Any, cls: Any, a: int, client: Any) -> None: ...

    kb = KeyBuilder(f, "f", ignore=["client"])
    assert kb.bind((object(), object(), 1, Opaque()), {}) == {"a": 1}
    assert kb.key("ns", (1, 2, 3, Opaque()), {}) == kb.key("ns", (4, 5, 3), {"client": 9})


def test_methods_key_on_arguments_not_instance() -> None:
    class Svc:
        def get(self, x: int) -> int:
            return x

        @classmethod
        def make(cls, x: int) -> int:
            return x

    a, b = Svc(), Svc()
    assert call_key("ns", "g", (a, 1), fn=Svc.get) == call_key("ns", "g", (b, 1), fn=Svc.get)
    assert call_key("ns", "g", (1,), fn=a.get) == call_key("ns", "g", (a, 1), fn=Svc.get)
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

    assert _k(m=Meta("u", "t1")) == _k(m=Meta("u", "t2"))
    assert _k(m=Meta("u", "t1")) != _k(m=Meta("v", "t1"))
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
    print(json.dumps(golden_keys()))


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
