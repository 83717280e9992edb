"""Requests sharing their parts in the SQLite store: size, exact read-back,
reference counts under every delete path and two processes, damage, migration, secrets."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import pathlib
import random
import re
import sqlite3
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dejacache
from dejacache import DejacacheWarning
from dejacache.cassettes._workload import agent_steps
from dejacache.stores import Record, SQLiteStore
from dejacache.stores import _sqlite_blobs as blobs
from dejacache.stores.sqlite import SCHEMA_VERSION

DATA = pathlib.Path(__file__).parent / "data"
SORT = orjson.OPT_SORT_KEYS
_MARKER = re.compile(rb'"@ref:([0-9a-f]{24})"')


def canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=SORT)


def conversation(n: int, seed: int = 7) -> list[tuple[str, bytes]]:
    """``(key, request)`` of an n-step agent run: each request resends the ones before."""
    out = []
    for i, (req, _) in enumerate(agent_steps(n, seed=seed)):
        out.append((f"s{seed}-{i}", canonical({"request": req})))
    return out


def rec(request: bytes, value: bytes = b'{"v":1}', **kw: Any) -> Record:
    return Record(value=value, name="llm", namespace=kw.pop("namespace", "ns"), kind="call",
                  request=request, **kw)


def blob_table(path: pathlib.Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return dict(db.execute("SELECT h, n FROM blobs").fetchall())


def expected_counts(path: pathlib.Path) -> dict[str, int]:
    """Reference counts recomputed from the skeletons, independently of the store's code."""
    counts: collections.Counter[str] = collections.Counter()
    with contextlib.closing(sqlite3.connect(path)) as db:
        for z, skeleton in db.execute("SELECT z, request FROM entries WHERE z >= 2"):
            assert z == 2  # skeletons of these requests are small: never compressed
            orjson.loads(skeleton)  # a skeleton is itself JSON
            counts.update({h.decode() for h in _MARKER.findall(skeleton)})
    return dict(counts)


def assert_counts_exact(path: pathlib.Path) -> None:
    """Every blob is referenced exactly ``n`` times, and nothing unreferenced is left."""
    assert blob_table(path) == expected_counts(path)


# ---------------------------------------------------------------- the pure packing


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=400),
    lambda inner: st.lists(inner, max_size=12)
    | st.dictionaries(st.text(max_size=12), inner, max_size=8),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(tree=json_values, pad=st.integers(0, 5000))
def test_pack_reads_back_the_very_bytes(tree: Any, pad: int) -> None:
    request = canonical({"messages": [tree, {"content": "x" * pad, "role": "user"}]})
    packed = blobs.pack(request)
    if packed is None:
        assert len(request) < blobs.PACK_OVER or b"@ref:" in request
        return
    assert blobs.splice(packed.skeleton, lambda h: packed.blobs[h.decode()]) == request
    assert blobs.refs(packed.skeleton) == set(packed.blobs)
    for h, data in packed.blobs.items():
        assert blobs.blob_hash(data) == h
        orjson.loads(data)  # each blob is one whole JSON value


@pytest.mark.parametrize("request_bytes", [
    b'{"b": 1, "a": "' + b"x" * 5000 + b'"}',  # spaces: not the canonical form
    b'{"b":1,"a":"' + b"x" * 5000 + b'"}',  # keys out of order
    b'{"a":"\\u0078' + b"x" * 5000 + b'"}',  # an escape orjson would not write
    b'{"a":"@ref:' + b"0" * 24 + b'","b":"' + b"x" * 5000 + b'"}',  # the marker itself
    b'{"a":1e5,"b":"' + b"x" * 5000 + b'"}',  # a number orjson writes otherwise
    b"not json " * 1000,
])
def test_requests_not_in_canonical_form_are_kept_whole(request_bytes: bytes) -> None:
    assert blobs.pack(request_bytes) is None


def test_messages_are_shared_whole_and_short_requests_not_at_all() -> None:
    steps = conversation(3)
    a, b = (blobs.pack(r) for _, r in steps[1:])
    assert a is not None and b is not None
    assert len(set(a.blobs) & set(b.blobs)) >= len(a.blobs) - 2  # all but the window's edge
    assert b.skeleton.count(b"@ref:") == len(orjson.loads(steps[2][1])["request"]["messages"]) + 4
    assert blobs.pack(canonical({"q": "x" * 3000})) is None  # under PACK_OVER: one page


# ---------------------------------------------------------------- the store


def test_growing_conversation_is_stored_several_times_smaller(tmp_path: pathlib.Path) -> None:
    steps = conversation(300)
    store = SQLiteStore(tmp_path / "cache.db")
    for key, request in steps:
        store.put(key, rec(request, value=b"%d" % len(request)))
    store.close()
    raw = sum(len(r) for _, r in steps)
    size = (tmp_path / "cache.db").stat().st_size
    assert size < 0.3 * raw, (size, raw)  # stored whole: ~1.03x
    store = SQLiteStore(tmp_path / "cache.db")
    got = {k: r.request for k, r in store.iterate()}
    assert got == dict(steps)  # byte for byte
    stats = store.stats()
    assert stats.extra["blobs"] > 0 and stats.bytes < size
    store.close()
    assert_counts_exact(tmp_path / "cache.db")


def test_the_hit_path_never_reads_blobs(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    steps = conversation(20)
    for key, request in steps:
        store.put(key, rec(request, value=key.encode()))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DELETE FROM blobs")
    for key, _ in steps:
        got = store.get(key)
        assert got is not None and got.value == key.encode()
    store.close()


def test_every_delete_path_removes_exactly_the_orphans(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    rng = random.Random(3)
    steps = conversation(60, seed=1) + conversation(60, seed=2)
    live: dict[str, bytes] = {}
    for key, request in steps:
        ns = "a" if key.startswith("s1") else "b"
        store.put(key, rec(request, namespace=ns), ttl=0.0 if rng.random() < 0.1 else None)
        live[key] = request
    assert_counts_exact(path)
    # overwrite: with the same request (counts unchanged), with another one, with a short one
    k0, k1, k2 = list(live)[:3]
    store.put(k0, rec(live[k0], namespace="a"))
    store.put(k1, rec(live[k2], namespace="a"))
    store.put(k2, rec(b'{"short":1}', namespace="a"))
    assert_counts_exact(path)
    for key in rng.sample(list(live), 20):
        store.delete(key)
    assert_counts_exact(path)
    assert store.purge_expired() > 0
    assert_counts_exact(path)
    assert store.clear(namespace="a") > 0
    assert_counts_exact(path)
    assert blob_table(path)  # namespace b still holds its messages
    assert store.prune_blobs() == 0  # the counts were right all along
    store.clear()
    assert blob_table(path) == {}
    store.close()


def test_prune_blobs_repairs_counts_edited_by_other_means(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    for key, request in conversation(10):
        store.put(key, rec(request))
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE blobs SET n = n + 5 WHERE id % 2 = 0")
        db.execute("INSERT INTO blobs (h, n, z, data) VALUES ('0123456789abcdef01234567', 1, 0,"
                   " X'227822')")
    assert store.prune_blobs() == 1
    assert_counts_exact(path)
    store.close()


def _corrupt_blob(path: pathlib.Path, how: str) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        h, data = db.execute("SELECT h, data FROM blobs WHERE LENGTH(data) > 400 "
                             "ORDER BY id DESC LIMIT 1").fetchone()
        if how == "flipped":
            i = len(data) // 2  # one letter changed in the middle: still valid JSON
            flipped = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
            assert flipped != data and orjson.loads(flipped)
            db.execute("UPDATE blobs SET data=? WHERE h=?", (flipped, h))
        else:
            db.execute("DELETE FROM blobs WHERE h=?", (h,))
    return str(h)


@pytest.mark.parametrize("how", ["flipped", "missing"])
def test_a_damaged_blob_is_left_out_of_reports_never_served(
    tmp_path: pathlib.Path, how: str
) -> None:
    path = tmp_path / "cache.db"
    store = SQLiteStore(path)
    steps = conversation(5)
    for key, request in steps:
        store.put(key, rec(request, value=key.encode()))
    h = _corrupt_blob(path, how)
    problem = "damaged" if how == "flipped" else how
    with pytest.warns(DejacacheWarning, match=f"@ref:{h} is {problem}"):
        got = dict(store.iterate())
    damaged = [k for k, r in got.items() if h.encode() in r.request]
    assert damaged  # the requests that used it show a placeholder there...
    for key, request in steps:
        if key not in damaged:
            assert got[key].request == request  # ...the others are intact
        else:
            tree = orjson.loads(got[key].request)  # still one JSON document
            assert any(f"shared part {h} is" in str(m) for m in tree["request"]["messages"])
        hit = store.get(key)
        assert hit is not None and hit.value == key.encode()  # responses never touch blobs
    store.close()


def test_a_miss_report_over_a_damaged_blob_still_explains(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    history = [{"role": "user", "content": f"turn {i} " + "words " * 200} for i in range(8)]

    @dejacache.cache(name="blob.llm")
    def llm(messages: list[dict[str, str]], temperature: float) -> str:
        return "answer"

    store = SQLiteStore(path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        llm(history, 0.0)
    _corrupt_blob(path, "flipped")
    with dejacache.scope(store=store, mode="replay", cache_key="t"), \
            pytest.warns(DejacacheWarning, match="is damaged"), \
            pytest.raises(dejacache.ReplayMiss) as info:
        llm(history, 0.5)
    text = str(info.value)
    assert "nearest recorded call" in text and "temperature" in text
    store.close()


def test_secrets_never_reach_blobs(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    secret = "sk-proj-BLOBCANARY" + "Q" * 30
    history = [{"role": "user", "content": f"turn {i} " + "words " * 200} for i in range(6)]
    history.append({"role": "user", "content": f"my key is {secret} " + "words " * 100})

    @dejacache.cache(name="blob.secret")
    def llm(messages: list[dict[str, str]]) -> str:
        return "answer"

    store = SQLiteStore(path)
    with dejacache.scope(store=store, mode="auto", cache_key="t"):
        llm(history)
    assert blob_table(path)  # the request was shared out
    store.close()
    data = b"".join(pathlib.Path(str(path) + s).read_bytes()
                    for s in ("", "-wal") if pathlib.Path(str(path) + s).exists())
    assert secret.encode() not in data
    assert b"BLOBCANARY" not in data


# ---------------------------------------------------------------- schema 3 -> 4


def test_a_version_3_file_is_upgraded_in_place(tmp_path: pathlib.Path) -> None:
    """``data/sqlite_v3.sql`` was written by the version 3 code (SQLiteStore.put, then
    ``iterdump``): its rows stay readable as they are, its counters are kept."""
    path = tmp_path / "cache.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript((DATA / "sqlite_v3.sql").read_text())
        before = {k: (z, bytes(r)) for k, z, r in db.execute("SELECT key, z, request FROM entries")}
    assert {z for z, _ in before.values()} == {0, 1}
    store = SQLiteStore(path)
    assert store.stats().extra["schema_version"] == SCHEMA_VERSION == 4
    got = dict(store.iterate())
    assert set(got) == {"call-small", "call-messages", "call-big"}
    assert got["call-small"].request == b'{"args":{"q":1}}'
    assert orjson.loads(got["call-messages"].request)["args"]["model"] == "m"
    assert got["call-big"].request.startswith(b'{"args":{"doc":"the same agent turn again')
    hit = store.get("call-messages")
    assert hit is not None and hit.value == b'{"answer":2}' and hit.duration == 1.5
    assert store.get_counters(["gen:acme"]) == [1]
    # old rows take part in every write path; new rows share
    steps = conversation(4)
    for key, request in steps:
        store.put(key, rec(request))
    store.put("call-messages", rec(steps[0][1]))  # a whole row replaced by a packed one
    assert store.delete("call-small") and store.delete("call-messages")
    assert store.purge_expired() == 0
    store.close()
    assert_counts_exact(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT v FROM dejacache_meta WHERE k='schema_version'").fetchone() \
            == ("4",)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# ---------------------------------------------------------------- two processes


def _writer(path: str, proc: int, out: Any) -> None:
    """Write, overwrite and delete entries of two conversations sharing their messages."""
    store = SQLiteStore(path)
    rng = random.Random(proc)
    kept: dict[str, bytes] = {}
    try:
        steps = conversation(80, seed=11)  # the same conversation in both processes
        for i, (key, request) in enumerate(steps):
            mine = f"p{proc}-{key}"
            store.put(mine, rec(request, value=mine.encode()))
            kept[mine] = request
            if i % 7 == 3:  # overwrite an earlier one with a later request
                victim = rng.choice(list(kept))
                store.put(victim, rec(request, value=victim.encode()))
                kept[victim] = request
            if i % 5 == 4:
                victim = rng.choice(list(kept))
                assert store.delete(victim)
                del kept[victim]
        out.put((kept, None))
    except BaseException as exc:
        out.put((kept, repr(exc)))
    finally:
        store.close()


@pytest.mark.slow
def test_two_processes_share_blobs_and_counts_stay_exact(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cache.db"
    SQLiteStore(path).close()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), i, out)) for i in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert [err for _, err in results] == [None, None]
    kept: dict[str, bytes] = {}
    for k, _ in results:
        kept.update(k)
    store = SQLiteStore(path)
    got = {k: r.request for k, r in store.iterate()}
    assert got == kept
    for k in kept:
        hit = store.get(k)
        assert hit is not None and hit.value == k.encode()
    store.close()
    assert_counts_exact(path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
