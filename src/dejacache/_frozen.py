"""Read-only results: what ``@cache(frozen=True)`` hands every caller of a hit.

A fresh copy per hit costs one ``orjson.loads`` of the stored body, 1.3x the whole
key + dict-lookup floor of a 2 KB hit (issue 12 item 4): with it a hit cannot get under
~2.3x that floor, nor 50x faster than ``@scenario.cache``. A frozen result is decoded once,
kept next to the stored bytes and shared by every later hit, so no caller may change it:
``FrozenDict`` and ``FrozenList`` are ``dict`` and ``list`` subclasses whose mutating
methods raise :class:`~dejacache.ReadOnlyResult`. They still compare, iterate, index and
serialise (``json``, ``orjson``, pydantic) as the plain types do; ``copy.deepcopy`` (or
``dict(...)``/``list(...)`` one level at a time) gives a mutable copy.

Only exact ``dict`` and ``list`` are converted; anything else (tuples aside, whose items
are frozen) is returned as it is, so only values decoded from plain JSON are ever shared.
The C-level methods called on the base class (``dict.__setitem__(d, k, v)``) bypass the
guard: this stops mistakes, not intent.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import ReadOnlyResult

__all__ = ["FrozenDict", "FrozenList", "freeze", "shared_size", "thaw"]

_new_dict = dict.__new__
_dict_update = dict.update
_new_list = list.__new__
_list_extend = list.extend


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise ReadOnlyResult(type(self).__name__)


class FrozenDict(dict[Any, Any]):
    """A ``dict`` whose mutating methods raise :class:`~dejacache.ReadOnlyResult`."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Built by ``freeze`` only: ``dict.__init__`` on an existing dict updates it.
        if args or kwargs:
            _refuse(self)

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (thaw(self),))


class FrozenList(list[Any]):
    """A ``list`` whose mutating methods raise :class:`~dejacache.ReadOnlyResult`."""

    __slots__ = ()

    def __init__(self, *args: Any) -> None:
        if args:
            _refuse(self)

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (thaw(self),))


def freeze(value: Any) -> Any:
    """``value`` with every exact ``dict`` and ``list`` in it (inside tuples too) replaced
    by a read-only copy. Containers already frozen are kept; other objects are returned as
    they are (a live result of another type stays the caller's own)."""
    t = type(value)
    if t is dict:
        d = _new_dict(FrozenDict)
        # A comprehension, then one C-level update: a generator fed to the update cost 20%
        # more (~0.25 µs a container; freezing is paid once per stored value, on its first hit).
        _dict_update(d, {k: freeze(v) if type(v) in _NESTED else v for k, v in value.items()})
        return d
    if t is list:
        out = _new_list(FrozenList)
        _list_extend(out, [freeze(v) if type(v) in _NESTED else v for v in value])
        return out
    if t is tuple:
        return tuple([freeze(v) if type(v) in _NESTED else v for v in value])
    return value


_NESTED = frozenset((dict, list, tuple))


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a frozen (or plain JSON-shaped) value."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    if type(value) is tuple:
        return tuple(thaw(v) for v in value)
    return value


def shared_size(value: Any, body_len: int) -> int:
    """What keeping ``value`` (decoded from a ``body_len``-byte JSON body) costs in memory,
    for a store's byte budget: Python objects of a JSON tree take about four times its text
    (measured with ``sys.getsizeof`` over chat-completion trees: 3.2-4.1x)."""
    return 4 * body_len + 64
