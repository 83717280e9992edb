"""The ``Record`` every store holds, what a hit reads of it (``Hit``, ``Features``), and
``BaseStore``, the async twins every tier shares. The ``Store`` protocols live in
``_protocols``: a replay hit never checks a store against them."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Mapping

from .._lazy import served
from .._slots import Sentinel, slot_setters, value_methods

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any
    from typing import NamedTuple as Row  # checked as one: see _slots.Row

    from ._off_loop import off_loop, off_loop_owned, off_loop_whole
    from ._protocols import Store
    from ._store_stats import StoreStats
else:
    from .._slots import Row

__all__ = [
    "NOT_SHARED",
    "BaseStore",
    "Features",
    "Hit",
    "Record",
    "StoreStats",  # defined in _store_stats, served by __getattr__
    "features_of",
    "off_loop",
    "off_loop_owned",
    "off_loop_whole",
]

_RECORD_FIELDS = ("value", "name", "namespace", "kind", "request", "duration", "usage",
                  "created")
_RECORD_VALUES = operator.attrgetter(*_RECORD_FIELDS)

# ``StoreStats`` is imported on first use: only ``stats()`` makes one (see _store_stats); the
# worker-thread hand-offs with the first async call that waits (see _off_loop).
__getattr__ = served(__name__, {
    "StoreStats": "dejacache.stores._store_stats",
    "off_loop": "dejacache.stores._off_loop",
    "off_loop_owned": "dejacache.stores._off_loop",
    "off_loop_whole": "dejacache.stores._off_loop",
})


# Frozen by the two methods below, not by ``frozen=True``: that compiles a ``__setattr__``
# and ``__delattr__`` from source, ~0.19 of the ~0.25 ms that defining the class cost every
# process that opens a cassette block (a replay hit never makes a ``Record``). It stays a
# dataclass (``fields``, ``replace``, ``asdict``), immutable, slotted, pickled by value.
@dataclasses.dataclass(slots=True, init=False, repr=False, eq=False)
class Record:
    """One stored call.

    ``value`` is codec output (bytes bound to the key). ``request`` is the canonical JSON of
    the call, kept for ``explain``/nearest-miss diffs; stores may leave it empty on the hit
    path (``get``) and fill it when iterating. ``duration`` is what the original call took
    (seconds), reported as time saved on hits.
    """

    value: bytes
    name: str = ""
    namespace: str = ""
    kind: str = "call"
    request: bytes = b""
    duration: float = 0.0
    usage: Mapping[str, int] | None = None
    created: float = 0.0

    def __init__(self, value: bytes, name: str = "", namespace: str = "", kind: str = "call",
                 request: bytes = b"", duration: float = 0.0,
                 usage: Mapping[str, int] | None = None, created: float = 0.0) -> None:
        # The generated frozen __init__ calls ``object.__setattr__`` once per field: 1.3 us
        # of a 2 KB SQLite hit. The slots' own setters skip the frozen check's
        # lookups and cost 0.8 us; the instance is exactly as frozen afterwards.
        _SET_VALUE(self, value)
        _SET_NAME(self, name)
        _SET_NAMESPACE(self, namespace)
        _SET_KIND(self, kind)
        _SET_REQUEST(self, request)
        _SET_DURATION(self, duration)
        _SET_USAGE(self, usage)
        _SET_CREATED(self, created)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        # (by the constructor: pickle's default sets each slot with ``setattr``, refused)
        return Record, _RECORD_VALUES(self)

    @property
    def size(self) -> int:
        return len(self.value) + len(self.request)

    # Written once in _slots rather than generated: see value_methods.
    __repr__, __eq__, __hash__ = value_methods(*_RECORD_FIELDS)


(_SET_VALUE, _SET_NAME, _SET_NAMESPACE, _SET_KIND, _SET_REQUEST, _SET_DURATION, _SET_USAGE,
 _SET_CREATED) = slot_setters(Record, *_RECORD_FIELDS)
# Frozen as far as dataclasses and keys ask (``replace`` on a subclass, ``_captures.immutable``
# of a closure's captured record): it is.
Record.__dataclass_params__.frozen = True  # type: ignore[attr-defined]


NOT_SHARED: Any = Sentinel("NOT_SHARED")


# A stored entry as the decorator's short path reads it: a store may offer ``hit(key)`` next
# to ``get`` (None on a miss, else a ``Hit``) and then sets ``short_hits = True`` (back to
# False in subclasses that override ``get``/``put``/``hit``, whose own behaviour a short path
# would skip). Hits may hand out one ``Hit`` to every caller: read it, never change what it
# holds. Its fields, by index:
#   0 ``body``: bytes whose ``orjson.loads`` is the whole value, already checked against the
#     key, or None (tagged values, recorded errors, damaged bytes: the general path decodes
#     and reports those; ``record`` may be given for the codec to decode at once)
#   1 ``duration``: what the original call took (seconds), for statistics
#   2 ``usage``: token counts, shared by hits: read them, never change them
#   3 ``record``: the ``Record``, or None
#   4 ``shared``: the immutable value (``_frozen.node_of``) every ``@cache(frozen=True)`` hit
#     hands out a view of, kept by the store's ``share(key, hit, value)``, or ``NOT_SHARED``
# A plain tuple, not a named one: CPython specialises subscripts of exact tuples only, and a
# warm 2 KB MemoryStore hit reads three fields (52,581 -> 52,272 instructions a hit under
# callgrind; frozen 32,927 -> 32,615).
if TYPE_CHECKING:
    Hit = tuple[memoryview | bytes | None, float, Mapping[str, int] | None, Record | None, Any]
else:
    Hit = tuple


# A named tuple, not a frozen dataclass: ~0.2 against ~1 ms to define on the 2-core box, in
# a module every first cassette block loads.
class Features(Row):
    """What the engine uses of one store beyond :class:`Store`, read once rather than probed
    on every call: flags of ``_protocols.ShortHitStore`` and ``SequencedStore`` (a store that
    says ``keeps_errors`` is called as a ``SequencedStore``, and so on). Flags and text
    only, never the store's own methods, so a store can keep its features without holding
    itself in a cycle."""

    sequenced: bool = False
    blocking: bool = False  #: calls may wait on a file or a lock: async callers go off-loop
    short_hits: bool = False
    checked_on_put: bool = False
    shares: bool = False  #: ``share``
    keeps_errors: bool = False  #: ``record_error``
    notes_misses: bool = False  #: ``note_miss``
    redacts: bool = False  #: ``redact_tree``
    #: ``mode_for(name, kind)``: the mode of each call (a cassette replaying part of a run)
    partial: bool = False
    rerecord_hint: str | None = None
    #: ``note_unstored(name, reason)``: told of each call it ran but could not keep (last:
    #: the fields before it keep their places)
    notes_unstored: bool = False


def features_of(store: Store) -> Features:
    """The :class:`Features` of ``store``. A store that must not be touched to answer (the
    default store before it is opened) offers ``features()`` itself."""
    own = getattr(type(store), "features", None)
    if own is not None:
        return own(store)  # type: ignore[no-any-return]
    # Kept on the store: a scope entered around every call makes a new Effective each time,
    # and reading them again would cost it ~2 µs.
    try:
        return store.__dict__["_dejacache_features"]  # type: ignore[no-any-return]
    except (AttributeError, KeyError):
        pass
    get = getattr
    short = get(store, "short_hits", False) is True
    found = Features(
        sequenced=bool(get(store, "sequenced", False)),
        blocking=bool(get(store, "blocking", False)),
        short_hits=short,
        checked_on_put=bool(get(store, "checked_on_put", False)),
        shares=short and callable(get(store, "share", None)),
        keeps_errors=callable(get(store, "record_error", None)),
        notes_misses=callable(get(store, "note_miss", None)),
        notes_unstored=callable(get(store, "note_unstored", None)),
        redacts=callable(get(store, "redact_tree", None)),
        partial=bool(get(store, "partial", None)),
        rerecord_hint=get(store, "rerecord_hint", None),
    )
    with contextlib.suppress(AttributeError):  # a store with __slots__ reads them each time
        store.__dict__["_dejacache_features"] = found
    return found


class BaseStore:
    """Shared behaviour: async twins that call the sync methods.

    In-memory stores answer in microseconds, so a thread hop (≈45 µs) would cost more than
    the call: their twins call directly. A store whose calls may wait on a file or a lock
    sets ``blocking`` and its twins run them in a worker thread (:func:`off_loop`); network
    stores override the twins with real async I/O.
    """

    url: str = ""
    blocking = False

    def get(self, key: str) -> Record | None:
        raise NotImplementedError

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool | None:
        raise NotImplementedError

    def delete(self, key: str) -> bool:
        raise NotImplementedError

    async def aget(self, key: str) -> Record | None:
        if self.blocking:
            from ._off_loop import off_loop  # (a thread hop follows: ~45 us)

            return await off_loop(self.get, key)
        return self.get(key)

    async def aput(self, key: str, record: Record, *, ttl: float | None = None
                   ) -> bool | None:
        if self.blocking:
            from ._off_loop import off_loop

            return await off_loop(self.put, key, record, ttl=ttl)
        return self.put(key, record, ttl=ttl)

    async def adelete(self, key: str) -> bool:
        if self.blocking:
            from ._off_loop import off_loop

            return await off_loop(self.delete, key)
        return self.delete(key)

    def close(self) -> None:
        return None

    def __bool__(self) -> bool:
        # Stores with __len__ would be falsy when empty, and ``store or default`` would then
        # silently swap in another store (it happened twice while building this).
        return True

    async def aclose(self) -> None:
        # Imported here: asyncio costs ~35 ms, and ``import dejacache`` pulled it in through
        # this module alone. A coroutine running here has loaded it already.
        import asyncio

        await asyncio.sleep(0)
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
