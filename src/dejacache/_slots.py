"""Small building blocks of the hot paths: slot setters and value methods of frozen
dataclasses, sentinels."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

__all__ = ["Sentinel", "add_slots", "slot_setters", "value_methods"]


def slot_setters(cls: type, *fields: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The slot descriptors' own setters of ``fields`` of a ``dataclass(frozen=True,
    slots=True)``: building an instance through them skips the generated ``__init__``'s
    ``object.__setattr__`` per field (0.8 against 1.3 µs for a ``Record``; ~1 µs of a
    tool-cache hit for a trace) and leaves it exactly as frozen. Taken after the class is
    built: ``dataclass(slots=True)`` replaces the class body's descriptors."""
    return tuple(vars(cls)[f].__set__ for f in fields)


def value_methods(*fields: str) -> tuple[Callable[[Any], str], Callable[[Any, object], Any],
                                         Callable[[Any], int]]:
    """``__repr__``, ``__eq__`` and ``__hash__`` over ``fields`` (two or more), as
    ``dataclass(frozen=True)`` generates them for its compared fields, for a class declared
    ``dataclass(..., repr=False, eq=False)``. The generated ones are compiled from source
    each time the class is built: ~0.3 ms of each of ``Record`` and ``Effective``, which
    every pytest process that opens a cassette defines. ``tests/test_slots.py`` holds them
    to the generated ones. Unlike the generated ``__repr__`` this one has no guard against
    a value that holds its own instance: these hold bytes, text, numbers, stores and codecs.
    Equality compares the values as one tuple, as 3.11's generated ``__eq__`` does."""
    values = operator.attrgetter(*fields)

    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(fields, values(self), strict=True))
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __repr__, __eq__, __hash__


def add_slots(acc: Any, other: Any) -> None:
    """``acc += other`` slot by slot, for slotted counters (``stats.CallStats`` and the
    per-thread buckets behind it). Not on the counting path: only snapshots and retiring
    threads sum."""
    for f in type(acc).__slots__:
        setattr(acc, f, getattr(acc, f) + getattr(other, f))


class Sentinel:
    """A named marker that no stored or returned value can be by accident (``MISS``,
    ``NOT_SHARED``)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name
