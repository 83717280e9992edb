"""In-process LRU store bounded by entry count and total bytes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator

from ._base import BaseStore, Record, StoreStats

__all__ = ["MemoryStore"]


class MemoryStore(BaseStore):
    """LRU over ``Record`` objects. TTLs use the monotonic clock (immune to wall-clock jumps).

    ``maxsize`` bounds the number of entries and ``max_bytes`` their total size; the least
    recently used entries are evicted first. Thread-safe.
    """

    def __init__(self, maxsize: int = 10_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.url = "memory://"
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self._data: OrderedDict[str, tuple[Record, float | None]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.evictions = 0

    def get(self, key: str) -> Record | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            record, expires = item
            if expires is not None and time.monotonic() >= expires:
                self._remove(key)
                return None
            self._data.move_to_end(key)
            return record

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        size = record.size
        expires = time.monotonic() + ttl if ttl is not None else None
        with self._lock:
            if key in self._data:
                self._remove(key)  # even when the new value is not kept: never serve the old
            if size > self.max_bytes:
                return  # larger than the whole budget: never cached, never evicts everything
            self._data[key] = (record, expires)
            self._bytes += size
            while len(self._data) > self.maxsize or self._bytes > self.max_bytes:
                _, (old, _exp) = self._data.popitem(last=False)
                self._bytes -= old.size
                self.evictions += 1

    def _remove(self, key: str) -> None:
        record, _ = self._data.pop(key)
        self._bytes -= record.size

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
        for key, (record, expires) in items:
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
            doomed = [k for k, (r, _) in self._data.items() if r.namespace == namespace]
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
