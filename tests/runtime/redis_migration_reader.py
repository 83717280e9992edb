"""Another process for tests/runtime/test_redis_migration.py: a ``tool_cache`` reader of cart
1 over a Redis Cluster, whose "database" is a file holding the cart's version.

``python redis_migration_reader.py STORE_URL VERSION_FILE READS``, then one command a line
on stdin, one JSON answer a line: ``warm`` reads once (``{"version", "hit"}``); ``read``
makes READS reads 0.2 s apart, each checked against the version the file held when it
started (``{"reads", "stale", "hits", "bypassed", "seen"}``); ``stop`` ends.
"""

from __future__ import annotations

import pathlib
import sys
import time

import orjson

import dejacache
from dejacache.stores.redis import RedisStore


def main() -> None:
    url, path, reads = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
    store = RedisStore(url, key_prefix="mg", timeout=0.2)
    runs = [0]

    @dejacache.tool_cache(resource="cart", key="cart:{uid}", store=store, ttl=None)
    def get_cart(uid: int) -> int:
        runs[0] += 1
        return int(path.read_text())

    def one() -> tuple[int, int, bool]:
        floor = int(path.read_text())
        before = runs[0]
        return floor, get_cart(1), runs[0] == before

    with dejacache.agent_session(tenant="acme"):
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "stop":
                print("{}", flush=True)
                break
            if cmd == "warm":
                _, got, hit = one()
                out: dict[str, object] = {"version": got, "hit": hit}
            else:
                dejacache.reset_runtime_stats()
                stale, seen = 0, []
                for _ in range(reads):
                    floor, got, _hit = one()
                    stale += got < floor
                    seen.append(got)
                    time.sleep(0.2)
                t = dejacache.runtime_stats().total
                out = {"reads": reads, "stale": stale, "hits": t.hits,
                       "bypassed": t.bypassed, "seen": seen}
            print(orjson.dumps(out).decode(), flush=True)
    store.close()


if __name__ == "__main__":
    main()
