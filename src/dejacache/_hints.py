"""The few pieces of ``typing`` the package's modules use at run time, as stand-ins, so that a
replay hit does not load ``typing`` (~12M instructions, ~2 ms of a fresh process).

A module imports these in the ``else`` branch of ``if TYPE_CHECKING:`` and the real ones in
the other, which is all the type checker reads::

    TYPE_CHECKING = False  # mypy reads this as True
    if TYPE_CHECKING:
        from typing import Generic, TypeVar
    else:
        from ._hints import Generic, TypeVar

Classes written ``class Flights(Generic[R])`` stay subscriptable at run time
(``Flights[int]`` is ``Flights``); nothing in the package inspects type parameters.
"""

from __future__ import annotations

__all__ = ["Any", "Generic", "ParamSpec", "Protocol", "TypeVar", "cast", "overload"]

#: ``typing.Any`` where a run-time alias names it (``Step = tuple[Run | None, Any]``).
Any = object


class Generic:
    """``typing.Generic`` at run time: ``Generic[T]`` (and a subclass's ``C[int]``) is the
    class itself."""

    __slots__ = ()

    def __class_getitem__(cls, params: object) -> type[Generic]:
        return cls


def TypeVar(name: str, *constraints: object, **options: object) -> str:
    """``typing.TypeVar`` at run time: its name (only annotations, never evaluated, use it)."""
    return name


ParamSpec = TypeVar


class Protocol:
    """``typing.Protocol`` at run time, for protocols only the type checker reads (one that
    ``isinstance`` checks, such as ``codec.Codec``, is a real one, in a module of its own)."""

    __slots__ = ()


def cast(typ: object, value: object) -> object:
    """``typing.cast`` at run time: ``value``."""
    return value


def overload(func: object) -> object:
    """``typing.overload`` at run time: the stub, replaced by the definition that follows."""
    return func
