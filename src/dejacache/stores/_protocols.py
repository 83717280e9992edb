"""The ``Store`` protocol every tier implements, and the richer protocols the engine calls a
store through when its :class:`~dejacache.stores._base.Features` say so.

Apart from ``_base`` because a replay hit never checks a store against them: only
``configure(store=)``, ``scope(store=)``, the runtime's ``store=`` and type checkers do.
The three protocols (``Store`` checkable at run time) cost ~0.4 ms to define, in a process
whose first cassette block needs none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._base import Hit, Record
    from ._store_stats import StoreStats

__all__ = ["SequencedStore", "ShortHitStore", "Store", "checked_store"]


@runtime_checkable
class Store(Protocol):
    """Key → Record storage. ``ttl`` is a duration in seconds; each store applies it with
    its own clock (monotonic in memory, server time in Redis, wall time in SQLite files).

    Optional, for the runtime tool cache: a store whose entries outlive the process or are
    shared offers generation counters next to them (``incr(name) -> int | None``,
    ``get_counters(names) -> list[int] | None``, optionally ``incr_many`` and ``a``-prefixed
    async twins, else async callers run the sync ones in a worker thread; None means
    unavailable, never zero), as ``RedisStore`` and ``SQLiteStore``
    do; a store whose entries live only in this process's memory may say
    ``process_local = True``. ``tool_cache`` refuses any other store (runtime/generations.py).
    """

    url: str

    def get(self, key: str) -> Record | None: ...

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool | None:
        """Store ``record``; ``False`` when the store knowingly kept nothing (read-only,
        unreachable, expired on arrival), so the caller's stats do not count it as stored.
        ``None`` (what a store that cannot tell returns) counts as stored."""

    def delete(self, key: str) -> bool: ...

    def iterate(self, name: str | None = None, namespace: str | None = None) -> Iterator[
        tuple[str, Record]
    ]: ...

    def clear(self, namespace: str | None = None) -> int: ...

    def stats(self) -> StoreStats: ...

    def close(self) -> None: ...

    async def aget(self, key: str) -> Record | None: ...

    async def aput(self, key: str, record: Record, *, ttl: float | None = None
                   ) -> bool | None: ...

    async def adelete(self, key: str) -> bool: ...


class ShortHitStore(Store, Protocol):
    """A store whose hits the decorator may read on its short path (``MemoryStore``,
    ``SQLiteStore``): ``hit`` next to ``get``, ``short_hits = True``, and optionally
    ``share`` to keep the immutable value frozen hits hand out views of. A store that
    checked the bytes on ``put`` and keeps them in this process says ``checked_on_put``."""

    short_hits: bool

    def hit(self, key: str) -> Hit | None: ...

    def share(self, key: str, item: Hit, value: Any) -> None: ...


class SequencedStore(Store, Protocol):
    """A store that answers the n-th identical call with the n-th recording (a cassette):
    it may keep failures, explains and redacts replay misses, and says how to re-record."""

    sequenced: bool
    rerecord_hint: str | None

    def record_error(self, key: str, name: str, namespace: str, kind: str, canonical: bytes,
                     exc: BaseException, duration: float) -> None: ...

    def recorded_error(self, record: Record) -> BaseException:
        """The exception a record of ``kind == "error"`` stands for, to raise."""

    def note_miss(self, miss: Any) -> Any: ...

    def redact_tree(self, tree: Any) -> Any: ...


def checked_store(value: object, what: str, *, url_ok: bool = False) -> Store:
    """``value`` where a store is given (``what``: the argument, e.g. ``"store"``; ``url_ok``:
    a URL was also accepted there), or a ConfigurationError naming it: a wrong value
    otherwise failed later as an attribute missing deep inside a call. A store of the user's
    own (a ``BaseStore`` subclass, or any object with ``get`` and ``put``) is taken as it is:
    the protocol's optional members are looked up where they are used."""
    if not (isinstance(value, Store)
            or (callable(getattr(value, "get", None)) and callable(getattr(value, "put", None)))):
        from ..errors import ConfigurationError

        raise ConfigurationError(
            f"{what} must be a Store instance (MemoryStore(), SQLiteStore(...), "
            f"RedisStore(...)){' or a URL' if url_ok else ''}, not "
            f"{type(value).__name__} {value!r}")
    return value  # type: ignore[return-value]  # (a duck-typed store of the user's own)
