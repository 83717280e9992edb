"""State that lives as long as one test-facing block: a table per active ``Effective``.

Id aliases (``aliases.py``) and request identities (``identities.py``) both number or map
what one block has seen, so a recording block and the replay block after it agree; outside
blocks (runtime caching) there is no table, and a process-wide one would only grow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ..config import Effective
from ..scope import active_blocks

__all__ = ["PerBlock"]

T = TypeVar("T")


class PerBlock(Generic[T]):
    """``get(eff)``: the ``T`` of the block ``eff`` is, made by ``factory`` on first use;
    None outside test-facing blocks (and in a thread that could belong to several)."""

    __slots__ = ("_factory", "_lock", "_tables")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        # id(eff) -> (eff, table). Holding eff keeps its id from being reused while the entry
        # lives; entries of blocks no longer active are dropped whenever a table is made.
        self._tables: dict[int, tuple[Effective, T]] = {}

    def get(self, eff: Effective) -> T | None:
        if not eff.test_facing or eff.ambiguous:
            return None
        entry = self._tables.get(id(eff))
        if entry is not None and entry[0] is eff:
            return entry[1]
        with self._lock:
            entry = self._tables.get(id(eff))
            if entry is not None and entry[0] is eff:
                return entry[1]
            live = {id(e) for e in active_blocks()}
            for k in [k for k in self._tables if k not in live]:
                del self._tables[k]
            table = self._factory()
            self._tables[id(eff)] = (eff, table)
            return table
