"""Helpers shared by the HTTP tests: a sequenced store and the record-stop-replay routine."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from fake_provider import FakeProvider

import dejacache
from dejacache import MemoryStore, Record

__all__ = ["SeqStore", "record_then_replay"]


class SeqStore(MemoryStore):
    """What a cassette looks like to the engine: the n-th get of a key gets the n-th put."""

    sequenced = True

    def __init__(self) -> None:
        super().__init__()
        self.tape: dict[str, list[Record]] = collections.defaultdict(list)
        self.pos: collections.Counter[str] = collections.Counter()

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        self.tape[key].append(record)
        super().put(key, record, ttl=ttl)

    def get(self, key: str) -> Record | None:
        tape = self.tape.get(key, [])
        i = self.pos[key]
        if i >= len(tape):
            return None
        self.pos[key] += 1
        return tape[i]

    def rewind(self) -> None:
        self.pos.clear()

    def entries(self) -> int:
        return sum(len(t) for t in self.tape.values())


def record_then_replay(fake: FakeProvider, run: Callable[[], Any]) -> tuple[Any, Any]:
    """Run live under record, stop the server, run again under replay; return both results."""
    store = dejacache.MemoryStore()
    with dejacache.scope(mode="record", store=store):
        live = run()
    seen = fake.count()
    assert seen > 0
    fake.stop()
    with dejacache.scope(mode="replay", store=store):
        again = run()
    assert fake.count() == seen  # nothing reached the (stopped) server
    return live, again
