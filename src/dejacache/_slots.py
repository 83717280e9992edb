"""Small building blocks of the hot paths: slot setters and value methods of frozen
dataclasses, named tuples that are cheap to define, sentinels."""

from __future__ import annotations

import operator
from collections.abc import Callable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, ClassVar

__all__ = ["Row", "Sentinel", "add_slots", "slot_setters", "value_methods"]

try:  # the field accessor ``collections.namedtuple`` uses, where CPython has it
    from _collections import _tuplegetter  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover (other interpreters)
    def _tuplegetter(index: int, doc: str | None) -> Any:
        return property(operator.itemgetter(index), doc=doc)

_tuple_new = tuple.__new__


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


class _RowType(type):
    """Makes each class written ``class Point(Row): x: int`` a tuple of those fields."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        if bases == (tuple,):  # Row itself
            return super().__new__(mcs, name, bases, ns)
        fields = tuple(ns.get("__annotations__", ()))
        defaults = {f: ns.pop(f) for f in fields if f in ns}
        if list(defaults) != list(fields[len(fields) - len(defaults):]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        ns["__slots__"] = ()
        ns["_fields"] = ns["__match_args__"] = fields
        ns["_field_defaults"] = defaults
        for i, f in enumerate(fields):
            ns[f] = _tuplegetter(i, f"Alias for field number {i}")
        return super().__new__(mcs, name, bases, ns)


class Row(tuple, metaclass=_RowType):  # type: ignore[type-arg]
    """A named tuple as ``typing.NamedTuple`` makes one (fields by name and index, defaults,
    keywords, ``_replace``, ``_asdict``, ``_fields``, equal to plain tuples), defined without
    compiling anything. ``NamedTuple`` compiles a ``__new__`` from source for every class:
    ~0.75M instructions each (pytest loaded) against ~0.3M here, for the 14 such classes a
    first cassette block loads. Modules declare their rows ``NamedTuple`` to the type checker
    (``if TYPE_CHECKING: from typing import NamedTuple as Row``), which checks them as one.
    A row call such as ``Point(...)`` costs ~0.8K instructions more than the compiled one
    (~0.2 µs: the ``**kwargs`` dict and the length check); hot paths make their rows with
    ``tuple.__new__`` and call no constructor at all."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(cls._fields):
            args = _bound(cls, args, kwargs)
        return _tuple_new(cls, args)

    def __getnewargs__(self) -> tuple[Any, ...]:  # (pickle and copy: as namedtuple's)
        return tuple(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({shown})"

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def _replace(self, **changes: Any) -> Any:
        return type(self)(**{**self._asdict(), **changes})


def _bound(cls: type[Row], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``args`` and ``kwargs`` as the fields of ``cls`` in order, defaults filled in, or the
    ``TypeError`` a named tuple's ``__new__`` raises."""
    fields = cls._fields
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments, {len(args)} given")
    out = list(args)
    for f in fields[len(args):]:
        if f in kwargs:
            out.append(kwargs.pop(f))
        elif f in cls._field_defaults:
            out.append(cls._field_defaults[f])
        else:
            raise TypeError(f"{cls.__name__}() missing required argument: {f!r}")
    if kwargs:
        extra = next(iter(kwargs))
        how = "multiple values for" if extra in fields else "an unexpected keyword"
        raise TypeError(f"{cls.__name__}() got {how} argument {extra!r}")
    return tuple(out)
