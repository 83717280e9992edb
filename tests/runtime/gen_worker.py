"""A separate process for tests/runtime/test_generations.py: a tool-using app on a shared store.

Run as ``python gen_worker.py KIND CACHE_DB DATA_DB``; KIND is ``sqlite`` (a ``SQLiteStore``)
or ``tiered`` (a ``MemoryStore`` in front of it). The "database" the tools read and write is
another SQLite file (DATA_DB), so every process sees the same truth. Commands, one per line
on stdin, each answered by one JSON line on stdout:

    read UID / aread UID     get_cart(uid) through tool_cache (sync / async); UID ``1.0``
                             is passed as a float (the same cart as ``1``)
    write UID / awrite UID   add_item(uid) through invalidates: the cart's new version
    calls                    how many times get_cart actually ran in this process
    stress PROC OPS SEED     a mixed read/write loop; returns its own staleness counts
    quit
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import sys
from typing import Any

import orjson

import dejacache

PRIVATE = 1000  # PRIVATE + proc: an entity only that process writes (never, in fact)
SHARED = (1, 2, 3)


def open_data(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def init_data(path: str) -> None:
    db = open_data(path)
    db.execute("CREATE TABLE IF NOT EXISTS carts (uid INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    # The highest version whose write (with its invalidation) has returned, per cart.
    db.execute("CREATE TABLE IF NOT EXISTS published (uid INTEGER PRIMARY KEY, "
               "v INTEGER NOT NULL)")
    for uid in (*SHARED, PRIVATE, PRIVATE + 1):
        db.execute("INSERT OR IGNORE INTO carts VALUES (?, 0)", (uid,))
        db.execute("INSERT OR IGNORE INTO published VALUES (?, 0)", (uid,))
    db.close()


class App:
    def __init__(self, kind: str, cache_path: str, data_path: str) -> None:
        sqlite_store = dejacache.SQLiteStore(cache_path)
        store: dejacache.Store = (
            sqlite_store if kind == "sqlite"
            else dejacache.TieredStore(dejacache.MemoryStore(), sqlite_store)
        )
        self.db = open_data(data_path)
        self.calls = 0
        db = self.db

        def load(uid: int) -> int:
            self.calls += 1
            return int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])

        def bump(uid: int) -> int:
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE carts SET v = v + 1 WHERE uid=?", (uid,))
            v = int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])
            db.execute("COMMIT")
            return v

        @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store, ttl=None)
        def get_cart(uid: int) -> int:
            return load(uid)

        @dejacache.tool_cache(resource="acart", key="cart:{uid}", store=store, ttl=None)
        async def aget_cart(uid: int) -> int:
            return load(uid)

        @dejacache.invalidates("cart", key="cart:{uid}", store=store)
        def add_item(uid: int) -> int:
            return bump(uid)

        @dejacache.invalidates("acart", key="cart:{uid}", store=store)
        async def aadd_item(uid: int) -> int:
            return bump(uid)

        self.get_cart, self.aget_cart = get_cart, aget_cart
        self.add_item, self.aadd_item = add_item, aadd_item

    def published(self, uid: int) -> int:
        return int(self.db.execute("SELECT v FROM published WHERE uid=?", (uid,)).fetchone()[0])

    def publish(self, uid: int, v: int) -> None:
        self.db.execute("UPDATE published SET v = max(v, ?) WHERE uid=?", (v, uid))

    def stress(self, proc: int, ops: int, seed: int) -> dict[str, Any]:
        """Reads check the invariant: a read that starts after a write has returned sees that
        write (``published`` is read before the call). Reads of this process's private cart
        twice in a row: the second must be served from the cache (nobody writes it)."""
        rnd = random.Random(seed)
        out = {"reads": 0, "stale": 0, "writes": 0, "private_pairs": 0, "private_misses": 0,
               "worst_lag": 0}
        private = PRIVATE + proc
        for _ in range(ops):
            r = rnd.random()
            if r < 0.2:
                uid = rnd.choice(SHARED)
                self.publish(uid, self.add_item(uid))
                out["writes"] += 1
            elif r < 0.3:
                self.get_cart(private)
                before = self.calls
                if self.get_cart(private) != 0:
                    out["stale"] += 1
                out["private_pairs"] += 1
                out["private_misses"] += self.calls - before
            else:
                uid = rnd.choice(SHARED)
                floor = self.published(uid)
                v = self.get_cart(uid)
                out["reads"] += 1
                if v < floor:
                    out["stale"] += 1
                    out["worst_lag"] = max(out["worst_lag"], floor - v)
        return out


def uid(text: str) -> int | float:
    """A cart id as the command spells it: ``1`` an int, ``1.0`` a float (the same cart)."""
    return float(text) if "." in text else int(text)


def main() -> None:
    kind, cache_path, data_path = sys.argv[1:4]
    init_data(data_path)
    app = App(kind, cache_path, data_path)
    loop = asyncio.new_event_loop()
    with dejacache.agent_session(tenant="acme"):
        print(orjson.dumps({"ready": True}).decode(), flush=True)
        for line in sys.stdin:
            cmd, *args = line.split()
            result: Any
            if cmd == "quit":
                break
            if cmd == "read":
                result = app.get_cart(uid(args[0]))
            elif cmd == "aread":
                result = loop.run_until_complete(app.aget_cart(uid(args[0])))
            elif cmd == "write":
                result = app.add_item(uid(args[0]))
            elif cmd == "awrite":
                result = loop.run_until_complete(app.aadd_item(uid(args[0])))
            elif cmd == "calls":
                result = app.calls
            elif cmd == "stress":
                result = app.stress(*map(int, args))
            else:
                result = {"error": f"unknown command {cmd!r}"}
            print(orjson.dumps(result).decode(), flush=True)
    loop.close()


if __name__ == "__main__":
    main()
