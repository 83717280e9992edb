"""Invalidation while a Redis Cluster slot moves: the slot holding a resource's counters is
``MIGRATING`` (a reshard in progress, or one stopped half way) with some of its keys moved.

A writer's script over its counters then meets ``TRYAGAIN`` (some of its keys moved, some
not) or ``ASK`` (all moved), while a reader whose counters all stayed still reads them from
the old node. The write must not return until its increments are where readers read them:
every read after it must see the new version, in another process as in this one.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import orjson
import pytest

from dejacache._core.scopes import global_prefix, tenant_prefix
from dejacache.runtime._layout import read_counters, write_counters
from dejacache.runtime.generations import SharedGenerations
from support_redis_topologies import ClusterTopology

pytest.importorskip("redis")
from dejacache.stores.redis import RedisStore

pytestmark = [pytest.mark.redis, pytest.mark.slow]

READER = pathlib.Path(__file__).with_name("redis_migration_reader.py")
TENANT = tenant_prefix("acme")


def _names() -> tuple[list[str], list[str]]:
    """(what a read of cart 1 depends on, what a write to cart 1 bumps)."""
    return (read_counters([TENANT, global_prefix()], "cart", "cart:1"),
            write_counters([TENANT], "cart", "cart:1"))


def _reader(url: str, db: pathlib.Path, reads: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-W", "error", str(READER), url, str(db),
                             str(reads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def _ask(proc: subprocess.Popen[bytes], line: str) -> Any:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()
    out = proc.stdout.readline()
    if not out:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise AssertionError(f"reader died: {err}")
    return orjson.loads(out)


@pytest.mark.parametrize("moved", ["some", "all"])
def test_a_write_during_a_slot_migration_is_seen_by_every_reader(
        redis_cluster: ClusterTopology, tmp_path: pathlib.Path, moved: str) -> None:
    reads, writes = _names()
    url = redis_cluster.store_url
    writer = RedisStore(url, key_prefix="mg", timeout=0.2)
    gens = SharedGenerations(writer)
    # Every counter exists (earlier writes made them), so the reader's MGET is served by
    # the old node while it holds them all.
    assert gens.bump(sorted({*reads, *writes}), land=True)
    db = tmp_path / "version"
    db.write_text("0")
    reader = _reader(url, db, 15)
    try:
        assert _ask(reader, "warm") == {"version": 0, "hit": False}
        assert _ask(reader, "warm") == {"version": 0, "hit": True}
        migration = redis_cluster.begin_migration("{cart}")
        try:
            # "some": the writer's "any entity written" counter moved, the entity counter
            # (which the reader reads too) did not: the writer's script gets TRYAGAIN.
            # "all": both moved: ASK, and the reader's MGET gets TRYAGAIN.
            moving = writes[1:] if moved == "some" else writes
            redis_cluster.move_keys(migration, [writer.key("g", "cart", n) for n in moving])
            db.write_text("1")
            landed = gens.bump(writes, land=True)  # the write returns
            got = _ask(reader, "read")
            print(f"\nduring the migration ({moved} of the write's counters moved): "
                  f"write landed={landed}, reader: {got}")
            assert got["stale"] == 0, got
            assert landed
        finally:
            redis_cluster.finish_migration(migration)
        got = _ask(reader, "read")
        assert got["stale"] == 0, got
    finally:
        _ask(reader, "stop")
        reader.wait(timeout=10)
        for f in (reader.stdin, reader.stdout, reader.stderr):
            if f is not None:
                f.close()
        writer.close()
