"""Entity templates: the piece-by-piece formatting of bare-name templates gives exactly what
formatting the bound arguments gives, for every way a call can pass them."""

from __future__ import annotations

import enum
import itertools
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

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
