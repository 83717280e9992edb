"""A separate process for tests/runtime/test_redis_failover.py: an app under load whose tool
cache lives in Redis (one server, Sentinel or Cluster), while the test breaks Redis.

Run as ``python redis_failover_worker.py STORE_URL DATA_DB PROC SEED``. The "database" the
tools read and write is a SQLite file (DATA_DB) that Redis outages do not touch, so it is the
ground truth: ``carts`` holds each cart's version, ``published`` the highest version whose
write (with its invalidation) has returned, written by the writer *after* its write
returned. A read that starts after that and answers an older version is a stale read.

Prints ``{"ready": true}`` once warm, then loops (10% invalidating writes, 90% reads of 4
shared carts) until a line arrives on stdin, then prints its counts as one JSON line:
calls that raised (``failed``), answers for the wrong cart (``wrong``), stale reads, hits,
and the hit timeline (wall-clock 50 ms buckets with at least one hit) for recovery times.
"""

from __future__ import annotations

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
    db = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    return db


def init_data(path: str) -> None:
    db = open_data(path)
    db.execute("CREATE TABLE IF NOT EXISTS carts (uid INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
    db.execute("CREATE TABLE IF NOT EXISTS published (uid INTEGER PRIMARY KEY, "
               "v INTEGER NOT NULL)")
    for uid in CARTS:
        db.execute("INSERT OR IGNORE INTO carts VALUES (?, 0)", (uid,))
        db.execute("INSERT OR IGNORE INTO published VALUES (?, 0)", (uid,))
    db.close()


def main() -> None:
    url, data_path, proc, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    init_data(data_path)
    db = open_data(data_path)
    store = RedisStore(url, key_prefix="fo")
    runs = [0]

    @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store, ttl=None)
    def get_cart(uid: int) -> list[int]:
        runs[0] += 1
        return [uid, int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])]

    @dejacache.invalidates("cart", key="cart:{uid}", store=store)
    def add_item(uid: int) -> int:
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE carts SET v = v + 1 WHERE uid=?", (uid,))
        v = int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])
        db.execute("COMMIT")
        return v

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    out: dict[str, Any] = {"proc": proc, "calls": 0, "reads": 0, "writes": 0, "hits": 0,
                           "failed": 0, "wrong": 0, "stale": 0, "errors": [],
                           "hit_buckets": []}
    buckets: set[int] = set()
    rnd = random.Random(seed)
    with dejacache.agent_session(tenant="acme"):
        for uid in CARTS:  # warm: every cart cached once
            get_cart(uid)
        print(orjson.dumps({"ready": True}).decode(), flush=True)
        while not stop.is_set():
            uid = rnd.choice(CARTS)
            out["calls"] += 1
            try:
                if rnd.random() < 0.1:
                    v = add_item(uid)
                    db.execute("UPDATE published SET v = max(v, ?) WHERE uid=?", (v, uid))
                    out["writes"] += 1
                    continue
                floor = int(db.execute("SELECT v FROM published WHERE uid=?",
                                       (uid,)).fetchone()[0])
                before = runs[0]
                got = get_cart(uid)
                out["reads"] += 1
                if runs[0] == before:
                    out["hits"] += 1
                    buckets.add(int(time.time() / BUCKET))
                if not (isinstance(got, list) and len(got) == 2 and got[0] == uid):
                    out["wrong"] += 1
                elif got[1] < floor:
                    out["stale"] += 1
                    if len(out["errors"]) < 5:
                        out["errors"].append(f"stale: cart {uid} v{got[1]} after v{floor} "
                                             f"at {time.time():.3f}")
            except Exception as exc:  # a failed call: the one thing that must never happen
                out["failed"] += 1
                if len(out["errors"]) < 5:
                    out["errors"].append(repr(exc))
            # Two workers and the Redis processes share two cores: leave them room.
            time.sleep(0.001)
    out["hit_buckets"] = sorted(buckets)
    store.close()
    print(orjson.dumps(out).decode(), flush=True)


if __name__ == "__main__":
    main()
