"""A fast local tier in front of a shared one: read through, write to both.

Semantics (the front is a per-process copy, so say exactly how stale it may be):

- ``get``: a hit in ``front`` is returned without touching ``back``. A miss asks ``back``
  and, on a hit, fills ``front`` with the entry's remaining TTL when the back tier reports
  it (``RedisStore.get_with_ttl``: GET + PTTL in one round trip), capped at ``front_ttl``.
- ``put``/``delete``/``clear`` go to both tiers, so this process sees its own writes at once.
- Another process's write, delete or clear reaches this process's front within
  ``front_ttl`` seconds at most (default 60 s), and never later than the entry's own TTL.
  Runtime caches that must see other replicas' writes sooner do not rely on this bound:
  their keys embed generation counters read from the shared tier, so an invalidation
  elsewhere changes the key and the stale front entry is simply never asked for again.
- Counters (``incr``/``get_counters``) are not forwarded: they live on the tier behind
  (``tiered.back``: Redis, or SQLite, whose file outlives the process), and the runtime reads
  them there, so a front copy is only ever asked for under the durable counters' current
  values; a store without them says so by not having them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._core.durations import Duration, seconds
from ._base import BaseStore, Record, StoreStats
from ._protocols import Store, checked_store

__all__ = ["TieredStore"]


def _min_ttl(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


class TieredStore(BaseStore):
    """``TieredStore(MemoryStore(), RedisStore(url))``: local hits at memory speed, a miss
    falls through to the shared tier and is copied to the front. See the module docstring
    for the staleness bound (``front_ttl``, a duration: seconds, a ``timedelta`` or text such
    as ``"1m"``; ``None`` lets front copies live as long as the entry's TTL)."""

    def __init__(self, front: Store, back: Store, *,
                 front_ttl: Duration | None = 60.0) -> None:
        self.front = checked_store(front, "TieredStore front")
        self.back = checked_store(back, "TieredStore back")
        self.front_ttl = (None if front_ttl is None
                          else seconds(front_ttl, "TieredStore front_ttl", zero=True))
        self.url = back.url  # the shared tier is the source of truth named in messages
        # As slow as its slowest tier (see BaseStore.blocking).
        self.blocking = bool(getattr(front, "blocking", False) or getattr(back, "blocking", False))

    def _fill(self, key: str, record: Record, remaining: float | None) -> None:
        ttl = _min_ttl(remaining, self.front_ttl)
        if ttl is None or ttl > 0:
            self.front.put(key, record, ttl=ttl)

    async def _afill(self, key: str, record: Record, remaining: float | None) -> None:
        ttl = _min_ttl(remaining, self.front_ttl)
        if ttl is None or ttl > 0:
            await self.front.aput(key, record, ttl=ttl)

    def get(self, key: str) -> Record | None:
        rec = self.front.get(key)
        if rec is not None:
            return rec
        with_ttl = getattr(self.back, "get_with_ttl", None)
        if with_ttl is not None:
            rec, remaining = with_ttl(key)
        else:
            rec, remaining = self.back.get(key), None
        if rec is not None:
            self._fill(key, rec, remaining)
        return rec

    async def aget(self, key: str) -> Record | None:
        rec = await self.front.aget(key)
        if rec is not None:
            return rec
        with_ttl = getattr(self.back, "aget_with_ttl", None)
        if with_ttl is not None:
            rec, remaining = await with_ttl(key)
        else:
            rec, remaining = await self.back.aget(key), None
        if rec is not None:
            await self._afill(key, rec, remaining)
        return rec

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> bool | None:
        # Back first: if it raises, the front does not claim a write that never happened.
        stored = self.back.put(key, record, ttl=ttl)
        self._fill(key, record, ttl)
        return stored  # what was kept is what the shared tier kept

    async def aput(self, key: str, record: Record, *, ttl: float | None = None
                   ) -> bool | None:
        stored = await self.back.aput(key, record, ttl=ttl)
        await self._afill(key, record, ttl)
        return stored

    def delete(self, key: str) -> bool:
        in_front = self.front.delete(key)
        return self.back.delete(key) or in_front

    async def adelete(self, key: str) -> bool:
        in_front = await self.front.adelete(key)
        return await self.back.adelete(key) or in_front

    def iterate(
        self, name: str | None = None, namespace: str | None = None
    ) -> Iterator[tuple[str, Record]]:
        seen: set[str] = set()
        for key, rec in self.back.iterate(name, namespace):
            seen.add(key)
            yield key, rec
        for key, rec in self.front.iterate(name, namespace):  # e.g. the back is unreachable
            if key not in seen:
                yield key, rec

    def clear(self, namespace: str | None = None) -> int:
        return max(self.front.clear(namespace), self.back.clear(namespace))

    def stats(self) -> StoreStats:
        front, back = self.front.stats(), self.back.stats()
        return StoreStats(backend=f"tiered({front.backend} -> {back.backend})",
                          entries=back.entries, bytes=back.bytes,
                          extra={"front": front, "back": back, "front_ttl": self.front_ttl})

    def close(self) -> None:
        self.front.close()
        self.back.close()

    async def aclose(self) -> None:
        for tier in (self.front, self.back):
            closer: Any = getattr(tier, "aclose", None)
            if closer is not None:
                await closer()
            else:
                tier.close()

    def __repr__(self) -> str:
        return f"TieredStore({self.front!r}, {self.back!r}, front_ttl={self.front_ttl})"
