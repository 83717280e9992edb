"""In-process LRU store bounded by entry count and total bytes."""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .._frozen import shared_size
from ..codec import blob_ok, plain_body
from ..errors import ConfigurationError, DejacacheWarning
from ._base import NOT_SHARED, BaseStore, Hit, Record, StoreStats
from ._short import keeps_short_path

# (the ``Hit`` that ``MemoryStore.hit`` hands out, its monotonic expiry or None, the bytes it
# counts against ``max_bytes``). A plain tuple around the ``Hit``: hits hand out the stored
# ``Hit`` itself (a ``Hit`` built per hit cost 0.14-0.26 µs of a 3.6 µs frozen 2 KB hit).
_Entry = tuple[Hit, float | None, int]

__all__ = ["MemoryStore", "bound"]


def bound(value: object, what: str) -> int:
    """A size bound (entries, bytes): an int >= 1, checked where it is given."""
    # Checked here: a str bound made every put warn a TypeError and never evicted (unbounded
    # growth), and 0 or less stored nothing, each write failing with an internal KeyError.
    if type(value) is not int or value < 1:
        raise ConfigurationError(f"{what} must be an int >= 1, not {value!r}")
    return value


class MemoryStore(BaseStore):
    """LRU over ``Record`` objects. TTLs use the monotonic clock (immune to wall-clock jumps).

    ``maxsize`` bounds the number of entries and ``max_bytes`` their total size; the least
    recently used entries are evicted first. Thread-safe.

    JSON-codec values are checked against their key when put, and a damaged one is not kept;
    the bytes then never leave this process's memory, so hits skip the per-read checksum
    (``checked_on_put``: the engine decodes with ``JsonCodec.decode_checked``). A plain JSON
    value's body is sliced once when put, so a hit is one ``orjson.loads`` of it (:meth:`hit`),
    and a ``@cache(frozen=True)`` hit hands out a view of the immutable value kept by
    :meth:`share`.
    """

    checked_on_put = True
    short_hits = True
    # The hit path's two bound calls in slots (instances keep their ``__dict__`` too): read
    # from the instance dict they cost ~550 instructions more per 2 KB hit.
    __slots__ = ("_get", "_touch")

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that reads or writes its own way (a test double, a wrapper that fails
        # on purpose) has not promised the check: its hits take the general, checked path.
        if not keeps_short_path(cls, MemoryStore):
            cls.checked_on_put = False
            cls.short_hits = False

    def __init__(self, maxsize: int = 10_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.url = "memory://"
        self.maxsize = bound(maxsize, "MemoryStore maxsize")
        self.max_bytes = bound(max_bytes, "MemoryStore max_bytes")
        self._data: OrderedDict[str, _Entry] = OrderedDict()
        # The hit path's two calls, bound once (``_data`` is never replaced, only cleared):
        # ``self._data.get`` and ``.move_to_end`` looked up on the OrderedDict per hit, which
        # CPython 3.11 does not specialise, were ~1,050 of a 2 KB hit's 53,450 instructions
        # (frozen: ~890 of 33,790).
        self._get = self._data.get
        self._touch = self._data.move_to_end
        self._bytes = 0
        self._lock = threading.Lock()
        self.evictions = 0

    def get(self, key: str) -> Record | None:
        item = self.hit(key)
        return None if item is None else item[3]

    def hit(self, key: str) -> Hit | None:
        """The stored entry's ``Hit`` (see ``stores._base``), for the decorator's short path:
        ``body`` is the JSON body of a plain ``JsonCodec`` value (checked when put), None for
        anything else (tagged values, errors, other codecs), which the codec decodes from
        ``record`` (always set)."""
        # No lock on the hit path: each OrderedDict call is atomic under the GIL, and a
        # concurrent put or delete only decides whether this read sees the old or new entry.
        get = self._get  # (a local: ``self._get(...)`` compiles to an unspecialisable LOAD_METHOD)
        item = get(key)
        if item is None:
            return None
        expires = item[1]
        if expires is not None and time.monotonic() >= expires:
            with self._lock:
                if self._data.get(key) is item:
                    self._remove(key)
            return None
        touch = self._touch
        try:  # noqa: SIM105 (contextlib.suppress costs a context manager per hit)
            touch(key)
        except KeyError:  # deleted meanwhile: the read still saw a live entry
            pass
        return item[0]

    def share(self, key: str, item: Hit, value: Any) -> None:
        """Keep ``value``, the immutable form of the entry ``item`` that :meth:`hit` just
        returned, for later ``frozen`` hits; nothing when the entry has been replaced or
        removed since (the value belongs to those bytes only). Its estimated size counts
        against ``max_bytes`` like the bytes do."""
        body = item[0]
        if body is None:
            return
        extra = shared_size(value, len(body))
        with self._lock:
            old = self._data.get(key)
            if old is None or old[0] is not item:
                return
            # same place in the LRU order
            self._data[key] = ((*item[:4], value), old[1], old[2] + extra)
            self._bytes += extra
            self._evict()

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        if blob_ok(record.value, key) is False:  # damaged, or another key's value
            self.delete(key)  # never serve the old value either
            warnings.warn(f"dejacache: MemoryStore refused a damaged value for key {key} "
                          "(its checksum does not match); the key now misses",
                          DejacacheWarning, stacklevel=2)
            return
        size = record.size
        expires = time.monotonic() + ttl if ttl is not None else None
        body = plain_body(record.value) if record.kind != "error" else None
        hit: Hit = (body, record.duration, record.usage, record, NOT_SHARED)
        entry = (hit, expires, size)
        with self._lock:
            if key in self._data:
                self._remove(key)  # even when the new value is not kept: never serve the old
            if size > self.max_bytes:
                return  # larger than the whole budget: never cached, never evicts everything
            self._data[key] = entry
            self._bytes += size
            self._evict()

    def _evict(self) -> None:
        while len(self._data) > self.maxsize or self._bytes > self.max_bytes:
            self._bytes -= self._data.popitem(last=False)[1][2]
            self.evictions += 1

    def _remove(self, key: str) -> None:
        self._bytes -= self._data.pop(key)[2]

    def delete(self, key: str) -> bool:
        with self._lock:
            if key in self._data:
                self._remove(key)
                return True
            return False

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        with self._lock:
            items = list(self._data.items())
        now = time.monotonic()
        for key, (hit, expires, _) in items:
            record = hit[3]
            assert record is not None  # kept with every entry (see put)
            if expires is not None and now >= expires:
                continue
            if name is not None and record.name != name:
                continue
            if namespace is not None and record.namespace != namespace:
                continue
            yield key, record

    def clear(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                n = len(self._data)
                self._data.clear()
                self._bytes = 0
                return n
            doomed = [k for k, (hit, _, _) in self._data.items()
                      if hit[3] is not None and hit[3].namespace == namespace]
            for k in doomed:
                self._remove(k)
            return len(doomed)

    def stats(self) -> StoreStats:
        with self._lock:
            return StoreStats(
                backend=self.url,
                entries=len(self._data),
                bytes=self._bytes,
                extra={"evictions": self.evictions, "maxsize": self.maxsize,
                       "max_bytes": self.max_bytes},
            )

    def __len__(self) -> int:
        return len(self._data)
