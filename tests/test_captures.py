"""What a function or a class made inside another one captured, as keys hold it
(``_captures``: one rule for closures and for the classes a factory makes)."""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import Any
from unittest.mock import ANY

from dejacache import _captures


class _Top:  # written at the module's top level: nothing of it is captured
    def f(self) -> int:
        return 1


class Mode(enum.Enum):
    A = 1


def _factory(tag: Any, log: list[Any]) -> type:
    count = 0

    @dataclasses.dataclass
    class Made(_Top):
        x: int = 1

        def label(self) -> Any:
            return tag

        @property
        def logged(self) -> Any:
            return log

        @staticmethod
        def again() -> Any:
            return tag

        def bump(self) -> int:
            nonlocal count  # its own state, not what it was made with
            count += 1
            return count

        def f(self) -> int:
            return super().f()  # __class__: super()'s

    return Made


def test_a_class_made_in_a_function_captures_what_its_body_wrote() -> None:
    made = _factory("one", [])
    cells = _captures.class_cells(made)
    # not the dataclass's own closures; the code of the methods its body wrote
    assert [name for name, _ in cells] == ["Made.<code>", "log", "tag"]
    keyed, other = _captures.values(cells)
    assert keyed == {"Made.<code>": ANY, "tag": "one"}
    assert other == [("log", [])]
    assert _captures.class_cells(_Top) == ()
    assert _captures.class_cells(int) == ()


def test_a_name_captured_by_two_classes_of_the_mro_keeps_both() -> None:
    base = _factory("base", [])

    def derived(tag: str) -> type:
        class Derived(base):  # type: ignore[valid-type,misc]
            def mine(self) -> str:
                return tag

        return Derived

    cells = dict(_captures.class_cells(derived("mine")))
    assert _captures.values(tuple(cells.items()))[0] == {
        "tag": "mine", "tag#1": "base", "Derived.<code>": ANY, "Made.<code>": ANY}


def test_only_immutable_values_are_keyed_and_members_under_their_class() -> None:
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: int

    for v in (1, "s", None, (1, "a"), frozenset({1}), Frozen(1), Mode.A, b"x"):
        assert _captures.immutable(v)
    for v in ([1], {"a": 1}, {1}, object(), len, (1, [2])):
        assert not _captures.immutable(v)
    assert _captures.form(Mode.A) == {"\x00enum": [f"{__name__}:Mode", 1]}
    assert _captures.form((Mode.A, 2)) == [{"\x00enum": [f"{__name__}:Mode", 1]}, 2]


def test_methods_under_decorators_and_odd_class_attributes() -> None:
    import functools
    from unittest import mock

    def deco(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*a: Any) -> Any:
            return f(*a)

        return wrapper

    def made(tag: str) -> type:
        class Cfg:
            odd = mock.MagicMock()  # every attribute, __wrapped__ too: no function of it

            @deco
            def label(self) -> str:
                return tag

            @functools.cached_property
            def cached(self) -> str:
                return tag * 2

        return Cfg

    assert _captures.values(_captures.class_cells(made("a")))[0] == {
        "tag": "a", "Cfg.<code>": ANY}


def test_a_class_made_at_run_time_is_one_its_module_does_not_name() -> None:
    assert not _captures.made_at_run_time(_Top)
    assert not _captures.made_at_run_time(int)
    assert _captures.made_at_run_time(_factory("one", []))
    built = type("_Top", (), {})  # (its module names another class by its name)
    assert _captures.made_at_run_time(built)
    assert _captures.made_at_run_time(type("Nowhere", (), {}))


def test_a_run_time_class_holds_its_own_data_attributes_read_at_each_call() -> None:
    def label(self: Any) -> Any:
        return self.LABEL

    built = type("Built", (abc.ABC,), {
        "LABEL": "one", "tags": ["x"], "label": label, "kind": int, "mod": enum,
        "size": property(lambda self: 1), "__slots__": ()})
    cells = _captures.class_cells(built)
    # no _abc_impl
    assert [name for name, _ in cells] == ["Built.<code>", "Built.LABEL", "Built.tags"]
    code = {"Built.<code>": ANY}
    assert _captures.values(cells) == ({**code, "Built.LABEL": "one"}, [("Built.tags", ["x"])])
    built.LABEL = "two"  # type: ignore[attr-defined]
    del built.tags  # type: ignore[attr-defined]
    assert _captures.values(cells) == ({**code, "Built.LABEL": "two"}, [])
    assert _captures.class_cells(type("Empty", (), {})) == ()


def test_with_values_escapes_what_could_spell_the_captures() -> None:
    held = (("tag", _captures.class_cells(_factory("one", []))[-1][1]),)
    assert _captures.with_values({"<captured>": 1, "x": 2}, held)[0] == {
        "<<captured>": 1, "x": 2, "<captured>": {"tag": "one"}}
    assert _captures.with_values([1], held)[0] == {"<": [1], "<captured>": {"tag": "one"}}
