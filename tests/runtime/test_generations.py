"""Generation counters live where the entries live.

Real processes (``gen_worker.py``, started with ``subprocess``) on a real SQLite file, with a
second SQLite file as the data the tools read and write. Before the fix the counters lived in
each process's memory: another process's write never reached a reader, and a restarted
process computed the keys of entries cached before a write.
"""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import orjson
import pytest

import dejacache
from dejacache.runtime import generations
from dejacache.stores import Record

WORKER = pathlib.Path(__file__).with_name("gen_worker.py")
KINDS = ["sqlite", "tiered"]  # tiered: a MemoryStore in front of the SQLite file


class Worker:
    """One app process; ``ask`` sends a command line and returns its JSON answer."""

    def __init__(self, kind: str, tmp: pathlib.Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "error", str(WORKER), kind, str(tmp / "cache.db"),
             str(tmp / "data.db")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.answer() == {"ready": True}

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> Any:
        assert self.proc.stdout is not None
        out = self.proc.stdout.readline()
        if not out:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"worker died: {err}")
        return orjson.loads(out)

    def ask(self, line: str) -> Any:
        self.send(line)
        return self.answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            _, err = self.proc.communicate(timeout=30)
            assert self.proc.returncode == 0, err
            assert err == "", err  # no warning, no traceback


@pytest.fixture
def workers(tmp_path: pathlib.Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.communicate(timeout=30)


def start(workers: list[Worker], kind: str, tmp: pathlib.Path) -> Worker:
    w = Worker(kind, tmp)
    workers.append(w)
    return w


def truth(tmp: pathlib.Path, uid: int) -> int:
    with sqlite3.connect(tmp / "data.db") as db:
        return int(db.execute("SELECT v FROM carts WHERE uid=?", (uid,)).fetchone()[0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prefix", ["", "a"], ids=["sync", "async"])
def test_a_write_in_another_process_invalidates_at_once(
    kind: str, prefix: str, tmp_path: pathlib.Path, workers: list[Worker]
) -> None:
    a, b = start(workers, kind, tmp_path), start(workers, kind, tmp_path)
    read, write = f"{prefix}read 1", f"{prefix}write 1"
    assert a.ask(read) == 0
    assert a.ask(read) == 0 and a.ask("calls") == 1  # cached in A
    assert b.ask(read) == 0 and b.ask("calls") == 0  # and shared with B through the file
    assert b.ask(write) == 1  # B's write has returned...
    assert a.ask(read) == 1  # ...so A's next read sees it (before: 0, forever)
    assert a.ask(write) == 2
    assert b.ask(read) == 2
    assert a.ask(read) == 2 and a.ask("calls") == 2  # B stored version 2: A hits it
    a.close()
    b.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("read_as", "write_as"), [("1", "1.0"), ("1.0", "1")])
def test_a_write_naming_the_cart_by_an_equal_number_in_another_process_invalidates_it(
    kind: str, read_as: str, write_as: str, tmp_path: pathlib.Path, workers: list[Worker]
) -> None:
    """The reader's counter names and the writer's agree across processes on one file when
    they spell one entity differently (``1`` and ``1.0``). Before: the write bumped the
    counter of entity "1.0" and the other process kept serving cart 1's old version."""
    a, b = start(workers, kind, tmp_path), start(workers, kind, tmp_path)
    assert a.ask(f"read {read_as}") == 0
    assert a.ask(f"read {read_as}") == 0 and a.ask("calls") == 1
    assert b.ask(f"write {write_as}") == 1
    assert a.ask(f"read {read_as}") == 1
    assert a.ask(f"aread {read_as}") == 1  # the async tools: their own resource
    assert b.ask(f"awrite {write_as}") == 2
    assert a.ask(f"aread {read_as}") == 2
    a.close()
    b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_restarted_process_does_not_reach_entries_from_before_a_write(
    kind: str, tmp_path: pathlib.Path, workers: list[Worker]
) -> None:
    first = start(workers, kind, tmp_path)
    assert first.ask("read 1") == 0  # cached under the counters of that moment
    assert first.ask("write 1") == 1
    first.close()
    again = start(workers, kind, tmp_path)  # counters used to restart at 0 here
    assert again.ask("read 1") == 1
    again.close()


@pytest.mark.parametrize("kind", KINDS)
def test_entries_survive_a_restart_when_nothing_was_written(
    kind: str, tmp_path: pathlib.Path, workers: list[Worker]
) -> None:
    first = start(workers, kind, tmp_path)
    assert first.ask("write 2") == 1
    assert first.ask("read 2") == 1
    first.close()
    again = start(workers, kind, tmp_path)
    assert again.ask("read 2") == 1 and again.ask("calls") == 0  # served from the file
    again.close()


@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_reading_and_writing_never_serve_a_stale_cart(
    kind: str, tmp_path: pathlib.Path, workers: list[Worker]
) -> None:
    """Bounded stress: two processes, 1,500 mixed operations each on three shared carts.
    Every read checks that it sees every write that returned before it started."""
    procs = [start(workers, kind, tmp_path) for _ in range(2)]
    for i, w in enumerate(procs):
        w.send(f"stress {i} 1500 {i + 7}")
    results = [w.answer() for w in procs]
    for r in results:
        assert r["stale"] == 0, r
        assert r["private_misses"] == 0, r  # and the cache does serve hits
        assert r["reads"] > 500 and r["writes"] > 100 and r["private_pairs"] > 50, r
    for w in procs:
        w.close()
    fresh = start(workers, kind, tmp_path)
    for uid in (1, 2, 3):
        assert fresh.ask(f"read {uid}") == truth(tmp_path, uid)
    fresh.close()


# ---------------------------------------------------------------- which stores are accepted


class PersistentNoCounters(dejacache.MemoryStore):
    """Stands for a user's store whose entries outlive the process (a file, a service)."""

    process_local = False


class DeclaredLocal(dejacache.stores.BaseStore):
    process_local = True

    def __init__(self) -> None:
        self.data: dict[str, Record] = {}

    def get(self, key: str) -> Record | None:
        return self.data.get(key)

    def put(self, key: str, record: Record, *, ttl: float | None = None) -> None:
        self.data[key] = record

    def delete(self, key: str) -> bool:
        return self.data.pop(key, None) is not None


def test_a_store_without_counters_whose_entries_outlive_the_process_is_refused() -> None:
    store = PersistentNoCounters()
    with pytest.raises(dejacache.ConfigurationError, match="generation counters"):
        dejacache.tool_cache(store=store)(lambda: 1)
    with pytest.raises(dejacache.ConfigurationError, match="generation counters"):
        dejacache.invalidates("r", store=store)(lambda: 1)
    with pytest.raises(dejacache.ConfigurationError, match="generation counters"):
        dejacache.tool_cache(store=dejacache.TieredStore(dejacache.MemoryStore(), store))(
            lambda: 1)


def test_a_configured_store_without_counters_is_refused_on_the_first_call() -> None:
    dejacache.configure(store=PersistentNoCounters())

    @dejacache.tool_cache(scope="global")
    def tool() -> int:
        return 1

    @dejacache.invalidates("tool", scope="global")
    def write() -> None:
        return None

    write()  # a writer skips a store no reader can use
    with pytest.raises(dejacache.ConfigurationError, match="generation counters"):
        tool()


def test_stores_whose_entries_live_in_this_process_keep_counters_in_memory() -> None:
    for store in (dejacache.MemoryStore(), DeclaredLocal(),
                  dejacache.TieredStore(dejacache.MemoryStore(), DeclaredLocal())):
        assert generations.generations_for(store) is generations.local_generations()


def test_sqlite_and_tiered_sqlite_keep_counters_in_the_file(tmp_path: pathlib.Path) -> None:
    sq = dejacache.SQLiteStore(tmp_path / "c.db")
    tiered = dejacache.TieredStore(dejacache.MemoryStore(), sq)
    gens = generations.generations_for(sq)
    assert isinstance(gens, generations.SharedGenerations) and gens.backend is sq
    assert generations.generations_for(tiered).backend is sq  # type: ignore[union-attr]
    assert gens.bump(["x", "y"]) and gens.read(["x", "y", "z"]) == [1, 1, 0]
    assert dejacache.SQLiteStore(tmp_path / "c.db").get_counters(["x", "y"]) == [1, 1]
    sq.close()


def test_counters_that_cannot_be_read_mean_no_cache_not_a_stale_one(
    tmp_path: pathlib.Path,
) -> None:
    """A damaged counters table must not read as zeros (which could revive old entries):
    the tool runs uncached (``bypassed``) until the counters are readable again."""
    store = dejacache.SQLiteStore(tmp_path / "c.db")
    calls: list[int] = []

    @dejacache.tool_cache(store=store, scope="global", resource="doc")
    def doc() -> int:
        calls.append(1)
        return len(calls)

    assert doc() == 1 and doc() == 1
    with sqlite3.connect(tmp_path / "c.db") as raw:
        raw.execute("DROP TABLE counters")
    store.close()  # new connections: no cached statement hides the change
    assert doc() == 2 and doc() == 3
    assert dejacache.runtime_stats().by_tool["doc"].bypassed == 2
    store.close()


def test_a_write_that_cannot_reach_the_file_keeps_readers_off_the_cache(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "c.db"
    dejacache.SQLiteStore(path).close()
    store = dejacache.SQLiteStore(path, readonly=True)
    truth = [0]

    @dejacache.tool_cache(store=store, scope="global", resource="doc")
    def doc() -> int:
        return truth[0]

    @dejacache.invalidates("doc", store=store, scope="global")
    def write() -> None:
        truth[0] += 1

    assert doc() == 0
    t0 = time.monotonic()
    write()  # the counters cannot be bumped: remembered as pending
    assert time.monotonic() - t0 < 5  # a read-only file never takes it: no waiting for it
    assert doc() == 1
    store.close()


class FlakyCounters(dejacache.MemoryStore):
    """Keeps counters (in a dict shared by every instance: "the server") and refuses the
    first ``fail`` increments."""

    server: ClassVar[dict[str, int]] = {}

    def __init__(self, fail: int = 0) -> None:
        super().__init__()
        self.fail = fail

    def get_counters(self, names: list[str]) -> list[int]:
        return [self.server.get(n, 0) for n in names]

    def incr(self, name: str) -> int:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("the counters' server is away")
        self.server[name] = self.server.get(name, 0) + 1
        return self.server[name]


def test_a_store_made_per_request_goes_with_its_counters(tmp_path: pathlib.Path) -> None:
    import gc
    import weakref

    gone = []
    for i in range(20):
        store = dejacache.SQLiteStore(tmp_path / f"t{i}.db")
        assert generations.generations_for(store).bump(["x"])  # type: ignore[union-attr]
        gone.append(weakref.ref(store))
        store.close()
        del store
    gc.collect()
    assert [r() for r in gone] == [None] * 20


def test_a_store_dropped_with_queued_increments_still_lands_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import time

    monkeypatch.setattr(FlakyCounters, "server", {})
    monkeypatch.setattr(generations, "FLUSH_INTERVAL", 0.01)
    store = FlakyCounters(fail=1)
    gens = generations.generations_for(store)
    assert gens.bump(["cart"]) is False  # queued: the background flush retries it
    del store, gens
    gc.collect()
    deadline = time.monotonic() + 5
    while FlakyCounters.server.get("cart") != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert FlakyCounters.server == {"cart": 1}
    assert generations.generations_for(FlakyCounters()).read(["cart"]) == [1]


def test_reset_gives_a_store_used_again_fresh_counters(tmp_path: pathlib.Path) -> None:
    store = dejacache.SQLiteStore(tmp_path / "c.db")
    first = generations.generations_for(store)
    assert generations.generations_for(store) is first
    generations.reset()
    assert generations.generations_for(store) is not first
    store.close()


_TENANT_WRITER = """
import pathlib, sys
import dejacache
store = dejacache.SQLiteStore(sys.argv[1])
data = pathlib.Path(sys.argv[2])

@dejacache.invalidates("price", key="price:{sku}", store=store)
def set_price(sku: str, value: int) -> None:
    data.write_text(str(value))

with dejacache.agent_session(tenant="a"):
    set_price("x", 2)
store.close()
"""


def test_a_tenant_write_in_a_process_without_global_readers_reaches_them_elsewhere(
        tmp_path: pathlib.Path) -> None:
    """The process that writes need not declare the global reader: one in another process
    over the same file is invalidated all the same (before: only when the writer's own
    process had registered a global reader of the resource, so this served 1)."""
    store = dejacache.SQLiteStore(tmp_path / "cache.db")
    data = tmp_path / "price.txt"
    data.write_text("1")

    @dejacache.tool_cache(resource="price", scope="global", store=store)
    def price(sku: str) -> int:
        return int(data.read_text())

    assert price("x") == 1 and price("x") == 1
    subprocess.run([sys.executable, "-W", "error", "-c", _TENANT_WRITER,
                    str(tmp_path / "cache.db"), str(data)], check=True, timeout=60)
    assert price("x") == 2
    store.close()


async def test_a_custom_store_with_sync_counters_serves_async_tools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store offering only ``incr``/``get_counters`` (what the refusal asks a custom store
    for): async tools and writers use them too, in a worker thread (before: every async call
    found no ``aget_counters``, ran uncached as "bypassed", and each async write waited for
    the background flush)."""
    monkeypatch.setattr(FlakyCounters, "server", {})
    store = FlakyCounters()
    truth = [1]

    @dejacache.tool_cache(resource="c", scope="global", store=store)
    async def get() -> int:
        return truth[0]

    @dejacache.invalidates("c", scope="global", store=store)
    async def put(v: int) -> None:
        truth[0] = v

    assert await get() == 1 and await get() == 1
    await put(2)
    assert await get() == 2 and await get() == 2
    stats = dejacache.runtime_stats().by_tool["get"]
    assert (stats.hits, stats.misses, stats.bypassed) == (2, 2, 0)
    assert FlakyCounters.server == {"gen/c/rt1/g/R": 2}
