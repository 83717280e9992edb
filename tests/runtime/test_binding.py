"""Entity templates: the piece-by-piece formatting of bare-name templates gives exactly what
formatting the bound arguments gives, for every way a call can pass them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from dejacache.runtime._binding import Template


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
