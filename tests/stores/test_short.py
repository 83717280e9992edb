"""Which subclasses of a store keep its short hit path."""

from __future__ import annotations

from typing import Any

from dejacache.stores import MemoryStore, Record, SQLiteStore
from dejacache.stores._short import keeps_short_path


def test_a_subclass_that_reads_and_writes_the_same_way_keeps_it() -> None:
    class Named(MemoryStore):
        label = "mine"

    assert keeps_short_path(Named, MemoryStore) and Named.short_hits is True


def test_a_subclass_with_its_own_get_put_or_hit_loses_it() -> None:
    class OwnGet(SQLiteStore):
        def get(self, key: str) -> Record | None:
            return super().get(key)

    class OwnPut(MemoryStore):
        def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
            super().put(key, record, ttl=ttl)

    class OwnHit(MemoryStore):
        def hit(self, key: str) -> Any:
            return None

    assert not keeps_short_path(OwnGet, SQLiteStore) and OwnGet.short_hits is False
    for cls in (OwnPut, OwnHit):
        assert not keeps_short_path(cls, MemoryStore)
        assert cls.short_hits is False and cls.checked_on_put is False
