"""A separate process for tests/runtime/test_redis_failover.py: an app under load whose tool
cache lives in Redis (one server, Sentinel or Cluster), while the test breaks Redis.

Run as ``python redis_failover_worker.py STORE_URL DATA_DB PROC SEED [HOLD]``. The "database" the
tools read and write is a SQLite file (DATA_DB) that Redis outages do not touch, so it is the
ground truth: ``carts`` holds each cart's version, ``published`` the highest version whose
write (with its invalidation) has returned, written by the writer *after* its write
returned. A read that starts after that and answers an older version is a stale read.

Prints ``{"ready": true}`` once warm, then loops (10% invalidating writes, 90% reads of 4
shared carts). A ``count`` line on stdin is answered with the running counts (one JSON line);
any other line stops the loop, and the worker prints its counts as one JSON line:
(with HOLD, in seconds, the tools are async and an event loop runs the loop, held HOLD
seconds every 200 ms, as a saturated async worker is)
calls that raised (``failed``), answers for the wrong cart (``wrong``), stale reads, hits,
and the hit timeline (wall-clock 50 ms buckets with at least one hit) for recovery times.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import sys
import threading
import time
from typing import Any

import orjson

import dejacache
from dejacache.stores.redis import RedisStore

CARTS = (1, 2, 3, 4)
BUCKET = 0.05


def open_data(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)


def init_data(path: str) -> None:
    """Made once, by the test before it starts the workers (``--init``): two workers
    switching one new file to WAL at once failed one of them with "database is locked"
    (SQLite refuses the change at once, without waiting, while another connection holds the
    file; seen once, on a loaded box). WAL stays set in the file."""
    db = open_data(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE IF NOT EXISTS carts (uid INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS published (uid INTEGER PRIMARY KEY, "
               "v INTEGER NOT NULL)")
    for uid in CARTS:
        db.execute("INSERT OR IGNORE INTO carts VALUES (?, 0)", (uid,))
        db.execute("INSERT OR IGNORE INTO published VALUES (?, 0)", (uid,))
    db.close()


class Worker:
    """The loop's state and its verdicts, shared by the sync and the async drivers."""

    def __init__(self, db: sqlite3.Connection, proc: int, seed: int) -> None:
        self.db = db
        self.runs = 0
        self.rnd = random.Random(seed)
        self.stop = threading.Event()
        self.out: dict[str, Any] = {"proc": proc, "calls": 0, "reads": 0, "writes": 0,
                                    "hits": 0, "failed": 0, "wrong": 0, "stale": 0,
                                    "errors": [], "hit_buckets": []}
        self.buckets: set[int] = set()

    def version(self, uid: int) -> list[int]:
        self.runs += 1
        return [uid, int(self.db.execute("SELECT v FROM carts WHERE uid=?",
                                         (uid,)).fetchone()[0])]

    def write(self, uid: int) -> int:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE carts SET v = v + 1 WHERE uid=?", (uid,))
        v = int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])
        db.execute("COMMIT")
        return v

    def next_call(self) -> tuple[int, bool]:
        """(cart, whether this call is a write)."""
        self.out["calls"] += 1
        return self.rnd.choice(CARTS), self.rnd.random() < 0.1

    def published(self, uid: int, v: int) -> None:
        """A write returned: its version is now the floor every later read must reach."""
        self.db.execute("UPDATE published SET v = max(v, ?) WHERE uid=?", (v, uid))
        self.out["writes"] += 1

    def floor(self, uid: int) -> tuple[int, int]:
        return int(self.db.execute("SELECT v FROM published WHERE uid=?",
                                   (uid,)).fetchone()[0]), self.runs

    def check(self, uid: int, floor: tuple[int, int], got: Any) -> None:
        out = self.out
        out["reads"] += 1
        if self.runs == floor[1]:
            out["hits"] += 1
            self.buckets.add(int(time.time() / BUCKET))
        if not (isinstance(got, list) and len(got) == 2 and got[0] == uid):
            out["wrong"] += 1
        elif got[1] < floor[0]:
            out["stale"] += 1
            self.error(f"stale: cart {uid} v{got[1]} after v{floor[0]} at {time.time():.3f}")

    def error(self, text: str) -> None:
        if len(self.out["errors"]) < 5:
            self.out["errors"].append(text)

    def failed(self, exc: BaseException) -> None:
        """A failed call: the one thing that must never happen."""
        self.out["failed"] += 1
        self.error(repr(exc))

    def counts(self) -> dict[str, int]:
        """The running totals, for a test waiting until the load has been enough."""
        return {k: int(self.out[k]) for k in ("calls", "writes", "hits")}

    def result(self) -> dict[str, Any]:
        self.out["hit_buckets"] = sorted(self.buckets)
        return self.out


def run_sync(w: Worker, store: RedisStore) -> None:
    @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store, ttl=None)
    def get_cart(uid: int) -> list[int]:
        return w.version(uid)

    @dejacache.invalidates("cart", key="cart:{uid}", store=store)
    def add_item(uid: int) -> int:
        return w.write(uid)

    with dejacache.agent_session(tenant="acme"):
        for uid in CARTS:  # warm: every cart cached once
            get_cart(uid)
        print(orjson.dumps({"ready": True}).decode(), flush=True)
        while not w.stop.is_set():
            uid, write = w.next_call()
            try:
                if write:
                    w.published(uid, add_item(uid))
                else:
                    floor = w.floor(uid)
                    w.check(uid, floor, get_cart(uid))
            except Exception as exc:
                w.failed(exc)
            # Two workers and the Redis processes share two cores: leave them room.
            time.sleep(0.001)


async def run_async(w: Worker, store: RedisStore, hold: float) -> None:
    @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store, ttl=None)
    async def get_cart(uid: int) -> list[int]:
        return w.version(uid)

    @dejacache.invalidates("cart", key="cart:{uid}", store=store)
    async def add_item(uid: int) -> int:
        return w.write(uid)

    async def held() -> None:  # the rest of a saturated worker: the loop held now and then
        while not w.stop.is_set():
            await asyncio.sleep(0.2)
            time.sleep(hold)

    async with dejacache.agent_session(tenant="acme"):
        for uid in CARTS:
            await get_cart(uid)
        print(orjson.dumps({"ready": True}).decode(), flush=True)
        holder = asyncio.ensure_future(held())
        while not w.stop.is_set():
            uid, write = w.next_call()
            try:
                if write:
                    w.published(uid, await add_item(uid))
                else:
                    floor = w.floor(uid)
                    w.check(uid, floor, await get_cart(uid))
            except Exception as exc:
                w.failed(exc)
            await asyncio.sleep(0.001)
        await holder
    await store.aclose()


def commands(w: Worker) -> None:
    """Answers ``count`` lines until another line (or the end of stdin) stops the loop."""
    for line in sys.stdin:
        if line.strip() != "count":
            break
        print(orjson.dumps(w.counts()).decode(), flush=True)
    w.stop.set()


def main() -> None:
    if sys.argv[1] == "--init":
        init_data(sys.argv[2])
        return
    url, data_path, proc, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    hold = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    w = Worker(open_data(data_path), proc, seed)
    store = RedisStore(url, key_prefix="fo")
    threading.Thread(target=commands, args=(w,), daemon=True).start()
    if hold:
        asyncio.run(run_async(w, store, hold))
    else:
        run_sync(w, store)
    store.close()
    print(orjson.dumps(w.result()).decode(), flush=True)


if __name__ == "__main__":
    main()
