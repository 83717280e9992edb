"""The ``Record`` every store holds, what a hit reads of it (``Hit``, ``Features``), and
``BaseStore``, the async twins every tier shares. The ``Store`` protocols live in
``_protocols``: a replay hit never checks a store against them."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Mapping

from .._lazy import served
from .._slots import Sentinel, slot_setters, value_methods

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar
    from typing import NamedTuple as Row  # checked as one: see _slots.Row

    from ._protocols import Store
    from ._store_stats import StoreStats
else:
    from .._hints import Generic, TypeVar
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

T = TypeVar("T")


# ``StoreStats`` is imported on first use: only ``stats()`` makes one (see _store_stats).
__getattr__ = served(__name__, {"StoreStats": "dejacache.stores._store_stats"})


@dataclasses.dataclass(frozen=True, slots=True, init=False, repr=False, eq=False)
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

    @property
    def size(self) -> int:
        return len(self.value) + len(self.request)

    # Written once in _slots rather than generated: see value_methods.
    __repr__, __eq__, __hash__ = value_methods("value", "name", "namespace", "kind", "request",
                                               "duration", "usage", "created")


(_SET_VALUE, _SET_NAME, _SET_NAMESPACE, _SET_KIND, _SET_REQUEST, _SET_DURATION, _SET_USAGE,
 _SET_CREATED) = slot_setters(Record, "value", "name", "namespace", "kind", "request",
                              "duration", "usage", "created")


NOT_SHARED: Any = Sentinel("NOT_SHARED")


class Hit(Row):
    """A stored entry as the decorator's short path reads it: a store may offer ``hit(key)``
    next to ``get`` (None on a miss, else a ``Hit``) and then sets ``short_hits = True``
    (back to False in subclasses that override ``get``/``put``/``hit``, whose own behaviour
    a short path would skip). Hits may hand out one ``Hit`` to every caller: read it, never
    change what it holds. Fields read by index cost ~9 ns more each than on a plain tuple
    (CPython specialises subscripts of exact tuples only), by name ~10 ns more."""

    #: bytes whose ``orjson.loads`` is the whole value, already checked against the key, or
    #: None (tagged values, recorded errors, damaged bytes: the general path decodes and
    #: reports those; ``record`` may be given for the codec to decode at once)
    body: memoryview | bytes | None
    duration: float  #: what the original call took (seconds), for statistics
    usage: Mapping[str, int] | None  #: shared by hits: read it, never change it
    record: Record | None
    #: the immutable value (``_frozen.node_of``) every ``@cache(frozen=True)`` hit hands out
    #: a view of, kept by the store's ``share(key, hit, value)``, or ``NOT_SHARED``
    shared: Any


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


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread under asyncio, so whatever it waits on (a
    file, a lock another process holds) never stalls the event loop; inline under any other
    loop (trio), which asyncio's threads cannot serve."""
    import asyncio  # a coroutine runs here: under asyncio, already loaded

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


async def off_loop_owned(fn: Callable[[], T], release: Callable[[T], object]) -> T:
    """:func:`off_loop` for a result that holds something until it is released (a cassette's
    tape: a large file's memory map). A caller cancelled meanwhile hears of it at once; the
    result, once made, is released rather than left to the garbage collector: by the worker
    when it finishes, or here when it had finished already."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    handoff = _Handoff(release)
    try:
        return await asyncio.to_thread(handoff.run, fn)
    except BaseException:
        handoff.leave()
        raise


class _Handoff(Generic[T]):
    """A worker's result and a caller that may leave before it comes: whichever of the two
    is second (the lock decides) releases it."""

    __slots__ = ("_gone", "_lock", "_release", "_result")

    def __init__(self, release: Callable[[T], object]) -> None:
        self._lock = threading.Lock()
        self._release = release
        self._gone = False
        self._result: list[T] = []  # the result, given and not yet released

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``, in the worker: kept for the caller, or released if it has left."""
        result = fn()
        with self._lock:
            if not self._gone:
                self._result.append(result)
                return result
        self._release(result)
        return result

    def leave(self) -> None:
        """The caller will not take the result: release it if the worker gave it already."""
        with self._lock:
            self._gone = True
            given, self._result = self._result, []
        for result in given:
            self._release(result)


async def off_loop_whole(fn: Callable[..., T], /, *args: Any) -> T:
    """:func:`off_loop` for work that must finish once begun (a cassette's save: the
    recordings the caller paid for). A caller cancelled meanwhile waits for the worker, then
    hears of the cancellation, or of the work's own error, which would otherwise be lost."""
    import asyncio
    import contextvars
    import functools

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    # A future, not a task: asyncio.run cancels the tasks left when its coroutine ends, and
    # would cancel the wait for the worker with them.
    work = loop.run_in_executor(None, functools.partial(contextvars.copy_context().run, fn,
                                                        *args))
    cancelled: asyncio.CancelledError | None = None
    while not work.done():
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError as exc:  # (again after each further cancellation)
            cancelled = exc
    result = work.result()  # the work's error first
    if cancelled is not None:
        raise cancelled
    return result


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
            return await off_loop(self.get, key)
        return self.get(key)

    async def aput(self, key: str, record: Record, *, ttl: float | None = None
                   ) -> bool | None:
        if self.blocking:
            return await off_loop(self.put, key, record, ttl=ttl)
        return self.put(key, record, ttl=ttl)

    async def adelete(self, key: str) -> bool:
        if self.blocking:
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
