"""The shared store contract, run against the in-process and the SQLite tiers and the
cassette (a sequenced store: see ``SequencedStoreContract``). ``test_redis.py`` and
``test_tiered.py`` run it against Redis and the tiered store."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from contract import SequencedStoreContract, StoreContract

from dejacache.cassettes import Cassette
from dejacache.stores import MemoryStore, SQLiteStore


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store(self) -> MemoryStore:
        return MemoryStore()


class TestSQLiteStore(StoreContract):
    persistent = True

    @pytest.fixture
    def store(self, tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
        s = SQLiteStore(tmp_path / "cache.db")
        yield s
        s.close()

    def reopen(self, store: SQLiteStore) -> SQLiteStore:
        return SQLiteStore(store.path)


class TestCassette(SequencedStoreContract):
    @pytest.fixture
    def store(self, tmp_path: pathlib.Path) -> Iterator[Cassette]:
        c = Cassette(tmp_path / "contract.json")
        yield c
        c.close()

    def reopen(self, store: Cassette) -> Cassette:
        """The next block over the file: this one saves and closes."""
        store.save()
        store.close()
        return Cassette(store.path)
