"""Two processes x two threads hammering one SQLite file: nothing lost, nothing locked."""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import pathlib
import random
import sqlite3
import threading
import time
from typing import Any

import pytest

from dejacache.stores import Record, SQLiteStore

HAMMER_SECONDS = 2.0
PREFILLED = 200


def _value(key: str, version: int) -> bytes:
    # sizes from ~100 B to ~24 KB so pages split, overflow and get reused
    size = 100 + (hashlib.sha256(key.encode()).digest()[0] * 97 * (version + 1)) % 24_000
    return (f"{key}#{version}|".encode() * (size // 8 + 1))[:size]


def _hammer(store: SQLiteStore | None, path: str, proc: int, deadline: float,
            out: Any) -> None:
    """One process: two threads of mixed reads, inserts and overwrites until ``deadline``."""
    if store is None:
        store = SQLiteStore(path)  # like a second pytest-xdist worker
    written: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def thread(t: int) -> None:
        rnd = random.Random(proc * 10 + t)
        mine: dict[str, int] = {}
        n = 0
        try:
            while time.time() < deadline:
                op = rnd.random()
                if op < 0.6:
                    k = f"pre-{rnd.randrange(PREFILLED)}"
                    got = store.get(k)
                    if got is None or got.value != _value(k, 0):
                        errors.append(f"wrong read of {k}")
                elif op < 0.9 or not mine:
                    k = f"p{proc}-t{t}-{n}"
                    n += 1
                    store.put(k, Record(value=_value(k, 0), name="hammer",
                                        request=b'{"k":"%s"}' % k.encode()))
                    mine[k] = 0
                else:  # overwrite one of ours: the newest version must win
                    k = rnd.choice(list(mine))
                    mine[k] += 1
                    store.put(k, Record(value=_value(k, mine[k]), name="hammer"))
                    got = store.get(k)
                    if got is None or got.value != _value(k, mine[k]):
                        errors.append(f"read-your-write failed for {k}")
        except BaseException as exc:  # any 'database is locked' lands here
            errors.append(repr(exc))
        with lock:
            written.update(mine)

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    out.put((written, errors))


@pytest.mark.slow
def test_two_processes_two_threads_lose_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    for i in range(PREFILLED):
        store.put(f"pre-{i}", Record(value=_value(f"pre-{i}", 0), name="hammer"))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    deadline = time.time() + 0.5 + HAMMER_SECONDS
    # one child keeps using the parent's store object (reconnects after fork), the other
    # opens the file itself
    procs = [ctx.Process(target=_hammer, args=(s, str(path), i, deadline, out))
             for i, s in enumerate([store, None])]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0

    errors = [e for _, errs in results for e in errs]
    assert errors == []
    written: dict[str, int] = {}
    for w, _ in results:
        written.update(w)
    assert len(written) > 100, "the hammer barely ran"

    fresh = SQLiteStore(path)
    lost = [k for k, v in written.items()
            if (got := fresh.get(k)) is None or got.value != _value(k, v)]
    assert lost == []
    assert fresh.stats().entries == PREFILLED + len(written)
    fresh.close()
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
