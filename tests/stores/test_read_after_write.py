"""Once a write returned in one process, no other process reads what it replaced: a put, an
overwrite, a delete, an expiry, through the sync and the async twins, on one SQLite file
and one Redis. The other process reads through ``get``, the short path's ``hit`` and
``aget`` after each write, with what it read before still remembered (the stores keep the
bytes they checked last: a memo that must never answer for a replaced entry)."""

from __future__ import annotations

import asyncio
import pathlib
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis_shared import flushed, module_server

from dejacache.codec import JsonCodec
from dejacache.stores import MemoryStore, Record, SQLiteStore, TieredStore
from dejacache.stores.redis import RedisStore
from support_redis import RedisServer

KEY = "k"
TTL = 0.3

_READER = textwrap.dedent("""
    import asyncio, sys
    import orjson
    from dejacache.codec import JsonCodec
    from dejacache.stores import SQLiteStore
    from dejacache.stores.redis import RedisStore

    kind, where = sys.argv[1], sys.argv[2]
    store = (SQLiteStore(where) if kind == "sqlite"
             else RedisStore(where, timeout=5.0, connect_timeout=5.0))
    codec = JsonCodec()
    loop = asyncio.new_event_loop()  # one for the process: the async client is bound to it

    def of(rec, key):
        return "-" if rec is None else str(codec.decode(rec.value, key=key))

    for line in sys.stdin:
        key = line.strip()
        hit = store.hit(key)
        seen = ["-" if hit is None else "?" if hit[0] is None else str(orjson.loads(hit[0])),
                of(store.get(key), key), of(loop.run_until_complete(store.aget(key)), key)]
        print(" ".join(seen), flush=True)
    loop.run_until_complete(store.aclose())
    loop.close()
""")


class Reader:
    """Another process reading one store, on demand."""

    def __init__(self, kind: str, where: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _READER, kind, where],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self, key: str = KEY) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(key + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().split()

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        self.proc.stdout.close()


def put(store: Any, version: int, ttl: float | None = None) -> None:
    store.put(KEY, Record(JsonCodec().encode(version, key=KEY)), ttl=ttl)


def sees(reader: Reader, expected: str) -> None:
    """Every way of reading answers ``expected`` (or leaves the short path to ``get``)."""
    hit, got, agot = reader.read()
    assert hit in (expected, "?") and got == expected and agot == expected


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from module_server(tmp_path_factory)


# (the writer, and the reader's kind and address)
Setup = tuple[Any, str, str]


@pytest.fixture(params=["sqlite", "redis", "tiered sqlite", "tiered redis"])
def setup(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Setup]:
    kind = request.param.split()[-1]
    if kind == "sqlite":
        back: Any = SQLiteStore(tmp_path / "cache.db")
        where = str(back.path)
    else:
        server = flushed(request.getfixturevalue("shared_server"))
        back = RedisStore(server.url, timeout=5.0, connect_timeout=5.0)
        where = server.url
    writer = TieredStore(MemoryStore(), back) if request.param.startswith("tiered") else back
    yield writer, kind, where
    writer.close()


def test_no_process_reads_what_a_returned_write_replaced(setup: Setup) -> None:
    writer, kind, where = setup
    reader = Reader(kind, where)
    try:
        sees(reader, "-")
        put(writer, 1)
        sees(reader, "1")
        put(writer, 2)  # the reader remembers the bytes of 1
        sees(reader, "2")
        writer.delete(KEY)
        sees(reader, "-")
        put(writer, 3, ttl=TTL)
        sees(reader, "3")
        time.sleep(TTL * 1.5)
        sees(reader, "-")  # expired, though the reader read it before
        put(writer, 4)
        sees(reader, "4")  # and the TTL went with the old entry
        rnd = random.Random(7)
        for version in range(6, 40):
            if rnd.random() < 0.25:
                writer.delete(KEY)
                sees(reader, "-")
            else:
                put(writer, version)
                sees(reader, str(version))
        loop = asyncio.new_event_loop()  # last: closing the async client closes the store
        try:
            loop.run_until_complete(writer.aput(KEY, Record(JsonCodec().encode(50, key=KEY))))
            sees(reader, "50")
            loop.run_until_complete(writer.adelete(KEY))
            sees(reader, "-")
        finally:
            loop.run_until_complete(writer.aclose())
            loop.close()
    finally:
        reader.close()
