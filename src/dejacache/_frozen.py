"""Read-only results: what ``@cache(frozen=True)`` hands every caller of a hit.

A fresh copy per hit costs one ``orjson.loads`` of the stored body, 1.3x the whole key +
dict-lookup floor of a 2 KB hit: with it a hit cannot get under ~2.3x that floor, nor 50x
faster than ``@scenario.cache``. So a frozen result is decoded once, kept next to the stored
bytes and shared by every later hit, and nothing any caller does may change it.

A ``dict`` or ``list`` subclass cannot promise that: C functions take any subclass and write
its storage directly (``heapq.heappush``, ``list.sort(x)``, ``dict.__setitem__(d, k, v)``,
``list.__init__(x, ...)``), and ``__class__`` can be set to any sibling class of the same
layout. What is shared is therefore a *node* tree built only of objects CPython gives no way
to change: exact tuples, the ``str``, ``int``, ``float``, ``bool`` and ``None`` leaves JSON
decodes to, and the ``bytes`` of that JSON (:func:`shared_node`). A dict is
``(FrozenDict, keys, values)``, a list ``(FrozenList, items)``, a tuple (in a live result)
``(tuple, items)``; any exact tuple in a tree is a node, as JSON never decodes to one and
:func:`node_of` turns a live result's tuples into nodes.

Callers never hold a node. Each hit, and each read of a nested container, gets a new view
(:class:`FrozenDict`, a ``Mapping``; :class:`FrozenList`, a ``Sequence``) that holds only
its node: whatever a caller does to its view (class or slot assignment included) changes
that view alone. Views compare equal to the plain values they read as and refuse changes
with :class:`~dejacache.ReadOnlyResult`; not being ``dict``/``list`` instances, they are
not JSON-serialisable as they are (``default=dejacache.thaw`` gives the plain copy).
"""

from __future__ import annotations

from collections.abc import (
    ItemsView,
    Iterator,
    Mapping,
    Sequence,
    ValuesView,
)
from typing import Any, NoReturn

import orjson

from .errors import ReadOnlyResult

__all__ = ["FrozenDict", "FrozenList", "freeze", "node_of", "shared_node", "shared_size", "thaw",
           "view_of"]

_SCAN = 8  # dict keys searched in order; more get an index (see FrozenDict)
_LEAVES = frozenset((str, int, float, bool, type(None)))


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise ReadOnlyResult(type(self).__name__)


class _PydanticSerializer:
    """pydantic dumps a type it does not know through the type's ``__pydantic_serializer__``
    (as its own URL and secret types do): a frozen value kept in a model's ``Any`` or
    ``dict[str, Any]`` field then dumps, to Python or JSON, as the plain value. Made on
    first use, so importing dejacache never imports pydantic."""

    made: Any = None

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if _PydanticSerializer.made is None:
            try:
                from pydantic_core import SchemaSerializer, core_schema
            except ImportError:
                raise AttributeError("__pydantic_serializer__") from None
            _PydanticSerializer.made = SchemaSerializer(core_schema.any_schema(
                serialization=core_schema.plain_serializer_function_ser_schema(thaw)))
        return _PydanticSerializer.made


class FrozenDict(Mapping[Any, Any]):
    """A read-only view of a shared dict: reads, compares, copies and keys as the plain
    ``dict`` it stands for; changing it raises :class:`~dejacache.ReadOnlyResult`."""

    # _node: the shared (FrozenDict, keys, values) node. _map: this view's own key -> value
    # index for a large dict, built on its first lookup (a shared dict could be changed:
    # ``dict.__setitem__`` takes any dict). A small one is searched: ``tuple.index`` over
    # up to _SCAN keys costs less than building that index, which a view made for one or
    # two reads would pay every time.
    __slots__ = ("_map", "_node")
    _node: tuple[Any, ...]
    _map: dict[Any, Any]

    # No __init__ of its own: ``FrozenDict()`` is then all C, the cheapest way to make the
    # view every hit hands out; called again (``view.__init__(...)``) it takes no arguments.
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __pydantic_serializer__ = _PydanticSerializer()

    def __getitem__(self, key: Any) -> Any:
        node = self._node
        keys = node[1]
        if len(keys) <= _SCAN:
            try:
                v = node[2][keys.index(key)]
            except ValueError:
                raise KeyError(key) from None
        else:
            v = self._index()[key]
        return view_of(v) if type(v) is tuple else v

    def __contains__(self, key: object) -> bool:
        keys = self._node[1]
        return key in keys if len(keys) <= _SCAN else key in self._index()

    def _index(self) -> dict[Any, Any]:
        try:
            return self._map
        except AttributeError:
            node = self._node
            index = self._map = dict(zip(node[1], node[2]))  # noqa: B905 (see _same)
            return index

    def __iter__(self) -> Iterator[Any]:
        return iter(self._node[1])

    def __reversed__(self) -> Iterator[Any]:
        return iter(self._node[1][::-1])

    def __len__(self) -> int:
        return len(self._node[1])

    def values(self) -> ValuesView[Any]:
        return _Values(self)

    def items(self) -> ItemsView[Any, Any]:
        return _Items(self)

    def copy(self) -> dict[Any, Any]:
        """A plain ``dict`` of this level (nested containers stay read-only views)."""
        node = self._node
        return dict(zip(node[1], _views(node[2])))  # noqa: B905 (see _same)

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return _thaw_node(self._node)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (_thaw_node(self._node),))

    def __eq__(self, other: Any) -> bool:
        return _same(self._node, other)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a dict

    def __or__(self, other: Any) -> dict[Any, Any]:
        if not isinstance(other, Mapping):
            return NotImplemented
        mine = self.copy()
        mine.update(other)
        return mine

    def __ror__(self, other: Any) -> dict[Any, Any]:
        if not isinstance(other, Mapping):
            return NotImplemented
        mine = dict(other)
        mine.update(self.copy())
        return mine

    def __repr__(self) -> str:
        return repr(self.copy())

    # What a key is computed from when a frozen result is passed to another cached call.
    def __dejacache_key__(self) -> Any:
        return _thaw_node(self._node)


class FrozenList(Sequence[Any]):
    """A read-only view of a shared list: reads, compares, copies and keys as the plain
    ``list`` it stands for; changing it raises :class:`~dejacache.ReadOnlyResult`."""

    __slots__ = ("_node",)
    _node: tuple[Any, ...]

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # no __init__: see FrozenDict
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __pydantic_serializer__ = _PydanticSerializer()

    def __getitem__(self, i: Any) -> Any:
        try:
            v = self._node[1][i]
        except IndexError:
            raise IndexError("list index out of range") from None
        if type(v) is not tuple:
            return v
        return _views(v) if type(i) is slice else view_of(v)  # a slice: a plain list

    def __iter__(self) -> Iterator[Any]:
        return iter(_views(self._node[1]))

    def __reversed__(self) -> Iterator[Any]:
        return iter(_views(self._node[1][::-1]))

    def __len__(self) -> int:
        return len(self._node[1])

    def __contains__(self, x: object) -> bool:
        items = self._node[1]
        if type(x) in _LEAVES:  # no node equals a leaf: the tuple's own search is exact
            return x in items
        return any(v is x or v == x for v in _views(items))

    def copy(self) -> list[Any]:
        """A plain ``list`` of this level (nested containers stay read-only views)."""
        return _views(self._node[1])

    __copy__ = copy

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return _thaw_node(self._node)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (_thaw_node(self._node),))

    def __eq__(self, other: Any) -> bool:
        return _same(self._node, other)

    def __lt__(self, other: Any) -> bool:
        return self.copy() < other  # type: ignore[no-any-return]

    def __le__(self, other: Any) -> bool:
        return self.copy() <= other  # type: ignore[no-any-return]

    def __gt__(self, other: Any) -> bool:
        return self.copy() > other  # type: ignore[no-any-return]

    def __ge__(self, other: Any) -> bool:
        return self.copy() >= other  # type: ignore[no-any-return]

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list

    def __add__(self, other: Any) -> list[Any]:
        if isinstance(other, FrozenList):
            other = other.copy()
        if not isinstance(other, list):
            return NotImplemented
        return self.copy() + other

    def __radd__(self, other: Any) -> list[Any]:
        if not isinstance(other, list):
            return NotImplemented
        return other + self.copy()

    def __mul__(self, n: Any) -> list[Any]:
        return self.copy() * n  # type: ignore[no-any-return]

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return repr(self.copy())

    def __dejacache_key__(self) -> Any:
        return _thaw_node(self._node)


class _Values(ValuesView[Any]):
    __slots__ = ()
    _mapping: FrozenDict

    def __iter__(self) -> Iterator[Any]:
        return iter(_views(self._mapping._node[2]))


class _Items(ItemsView[Any, Any]):
    __slots__ = ()
    _mapping: FrozenDict

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        node = self._mapping._node
        return zip(node[1], _views(node[2]))  # noqa: B905 (see _same)


def _views(items: tuple[Any, ...]) -> list[Any]:
    return [view_of(v) if type(v) is tuple else v for v in items]


def view_of(node: Any) -> Any:
    """What a caller is handed for ``node``: a new view of a container, the leaf itself."""
    if type(node) is not tuple:
        return node
    kind = node[0]
    if kind is tuple:
        return tuple(_views(node[1]))
    v = kind()
    v._node = node
    return v


def node_of(value: Any) -> Any:
    """The immutable node tree of ``value``: exact ``dict``, ``list`` and ``tuple`` become
    nodes, a view its node; anything else is kept as it is (a live result of another type
    stays the caller's own: only values decoded from plain JSON are ever shared)."""
    t = type(value)
    if t is dict:
        return (FrozenDict, tuple(value), tuple([
            node_of(v) if type(v) in _NESTED else v for v in value.values()]))
    if t is list or t is tuple:
        return (FrozenList if t is list else tuple,
                tuple([node_of(v) if type(v) in _NESTED else v for v in value]))
    if t is FrozenDict or t is FrozenList:
        return value._node
    return value


_NESTED = frozenset((dict, list, tuple, FrozenDict, FrozenList))


def shared_node(value: Any, text: bytes) -> Any:
    """:func:`node_of` the ``value`` just decoded from the JSON ``text``, for every hit to
    share. A container's node also keeps the text (an immutable copy), so :func:`thaw`
    decodes it in C rather than walking the tree: about 3x faster for a 1.2 KB chat
    completion, the cost of one default hit's copy."""
    node = node_of(value)
    return (*node, bytes(text)) if type(node) is tuple else node


def freeze(value: Any) -> Any:
    """``value`` as a caller of a frozen result gets it: every exact ``dict`` and ``list``
    in it (inside tuples too) read through a read-only view."""
    return view_of(node_of(value))


def _same(node: Any, other: Any) -> bool:
    """``node``'s value ``== other``, as the plain values compare, walking both at once
    rather than copying either: a copy per level made a 1.2 KB comparison 30x slower than
    the plain one."""
    t = type(other)
    if t is FrozenDict or t is FrozenList:
        if other._node is node:
            return True
        other = _thaw_node(other._node)
        t = type(other)
    if type(node[-1]) is bytes:  # decoding the text and comparing in C is 2.6x faster
        same: bool = orjson.loads(node[-1]) == other
        return same
    kind = node[0]
    if kind is FrozenDict and t is dict:
        keys = node[1]
        if len(keys) != len(other):
            return False
        get = other.get
        # zip without ``strict=``: its keyword doubles zip's cost, and the tuples of a node
        # are the same length by construction.
        for k, v in zip(keys, node[2]):  # noqa: B905
            o = get(k, _ABSENT)
            if v is not o and (o is _ABSENT or not (
                    _same(v, o) if type(v) is tuple else v == o)):
                return False
        return True
    if kind is FrozenList and t is list:
        items = node[1]
        if len(items) != len(other):
            return False
        for v, o in zip(items, other):  # noqa: B905
            if v is not o and not (_same(v, o) if type(v) is tuple else v == o):
                return False
        return True
    view = view_of(node)
    same = (view if kind is tuple else view.copy()) == other
    return same


_ABSENT: Any = object()


def _thaw_node(node: Any) -> Any:
    if type(node[-1]) is bytes:  # the JSON text it was decoded from (shared_node)
        return orjson.loads(node[-1])
    kind = node[0]
    if kind is FrozenDict:
        return {k: _thaw_node(v) if type(v) is tuple else v
                for k, v in zip(node[1], node[2])}  # noqa: B905 (see _same)
    items = [_thaw_node(v) if type(v) is tuple else v for v in node[1]]
    return items if kind is FrozenList else tuple(items)


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a frozen (or plain JSON-shaped) value. Also the
    ``default=`` that lets ``json.dumps`` and ``orjson.dumps`` write frozen values."""
    t = type(value)
    if t is FrozenDict or t is FrozenList:
        return _thaw_node(value._node)
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    if t is tuple:
        return tuple(thaw(v) for v in value)
    return value


def shared_size(value: Any, body_len: int) -> int:
    """What keeping ``value`` (:func:`shared_node` of a ``body_len``-byte JSON body) costs
    in memory, for a store's byte budget: a node tree takes about four times its text
    (measured with ``sys.getsizeof`` over chat-completion trees and requests: 2.5-3.9x, as
    the plain dicts and lists), and keeps one copy of the text."""
    return 5 * body_len + 64
