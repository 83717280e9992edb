"""The shared store contract, run against the in-process and the SQLite tiers."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from contract import StoreContract

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
