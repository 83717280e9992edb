"""Appends in place: a save killed at any step leaves the file as it was before the save
(or after it, once durable), and readers never see half an append."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from dejacache.cassettes import append
from dejacache.cassettes import format as fmt
from dejacache.cassettes.document import load_document
from dejacache.cassettes.reader import FileIndex
from dejacache.cli import main

CHILD = textwrap.dedent("""
    import sys, dejacache
    from dejacache.cassettes import format as fmt
    from dejacache.cassettes.document import load_document
    fmt.EAGER_CHECK_UNDER = 0

    @dejacache.cache(name="llm")
    def llm(messages):
        return {"role": "assistant", "content": "live " + messages[-1]["content"][:20]}

    first, count = int(sys.argv[2]), int(sys.argv[3])
    for block in range(int(sys.argv[4]) if len(sys.argv) > 4 else 1):
        with dejacache.cassette(sys.argv[1], mode="auto"):
            for i in range(count):
                llm([{"role": "user", "content": f"question {first} {block} {i} " * 60}])
        print(block, flush=True)
""")


def save(path: pathlib.Path, first: int, count: int = 3, blocks: int = 1,
         crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != append.CRASH_ENV}
    if crash_at is not None:
        env[append.CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, "-c", CHILD, str(path), str(first), str(count),
                           str(blocks)], env=env, capture_output=True, text=True, check=False)


def keys(path: pathlib.Path) -> list[str]:
    """The file's keys, read as every reader reads it (rolling back a killed append)."""
    doc = load_document(fmt.read_file(path) or b"", path)
    return [e["key"] for e in doc["entries"]]


def verified(path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> bool:
    status = main(["verify", str(path)])
    capsys.readouterr()
    return status == 0


@pytest.fixture
def cassette(tmp_path: pathlib.Path) -> pathlib.Path:
    p = tmp_path / "c.json"
    assert save(p, 0, count=5).returncode == 0  # written whole
    assert save(p, 1).returncode == 0  # one append: a file of two segments
    assert FileIndex.open(p.read_bytes()).segments == 2  # type: ignore[union-attr]
    return p


@pytest.mark.parametrize("step", append.STEPS)
def test_a_save_killed_at_any_step_is_rolled_back_by_the_next_reader(
        cassette: pathlib.Path, step: str, capsys: pytest.CaptureFixture[str]) -> None:
    before, data = keys(cassette), cassette.read_bytes()
    done = save(cassette, 2, crash_at=step)
    assert done.returncode == 75, done.stderr
    assert fmt.undo_path(cassette).exists()
    assert keys(cassette) == before  # the reader rolled it back
    assert cassette.read_bytes() == data and not fmt.undo_path(cassette).exists()
    assert verified(cassette, capsys)


@pytest.mark.parametrize("step", append.STEPS)
def test_a_save_killed_at_any_step_is_rolled_back_by_the_next_writer(
        cassette: pathlib.Path, step: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = keys(cassette)
    assert save(cassette, 2, crash_at=step).returncode == 75
    assert save(cassette, 3).returncode == 0  # reads (and rolls back), then appends
    after = keys(cassette)
    assert after[: len(before)] == before and len(after) == len(before) + 3
    assert verified(cassette, capsys)


def test_a_torn_undo_record_is_dropped_and_the_file_kept(cassette: pathlib.Path) -> None:
    """Killed while writing the record: nothing was overwritten yet."""
    data = cassette.read_bytes()
    fmt.undo_path(cassette).write_bytes(b"dejacache undo 1\n[123, 45, \"0")
    assert fmt.read_file(cassette) == data
    assert not fmt.undo_path(cassette).exists()


def test_a_completed_save_leaves_no_undo_record(cassette: pathlib.Path) -> None:
    n = len(keys(cassette))
    assert save(cassette, 2, count=2, blocks=3).returncode == 0
    assert len(keys(cassette)) == n + 6 and not fmt.undo_path(cassette).exists()
    assert FileIndex.open(cassette.read_bytes()).segments == 5  # type: ignore[union-attr]


def test_a_reader_that_mapped_the_file_keeps_reading_it(
        cassette: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends after a reader mapped the file change none of the bytes it reads: its lazy
    reads and a whole parse give the file as it was when mapped."""
    monkeypatch.setattr(fmt, "_MMAP_FROM", 0)
    before = keys(cassette)
    raw = fmt.read_file(cassette)
    assert isinstance(raw, fmt.Mapped)
    ix = FileIndex.open(raw)
    assert ix is not None
    assert save(cassette, 2, count=2, blocks=3).returncode == 0  # three appends
    doc = load_document(raw, cassette)
    assert [e["key"] for e in doc["entries"]] == before
    assert [ix.entry(i, k)["key"] for i, k in enumerate(ix.keys())] == before
    assert FileIndex.open(raw).n == len(before)  # type: ignore[union-attr]
    raw.close()
    assert len(keys(cassette)) == len(before) + 6


@pytest.mark.parametrize("when", ["during", "killed during"])
def test_a_read_that_overlaps_an_append_is_read_again_under_the_lock(
        cassette: pathlib.Path, monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """Readers take no lock: one whose read overlapped an append (the file grew, or an
    undo record appeared) reads again under the cassette's lock, which no append holds,
    rolling back one that was killed."""
    before = keys(cassette)
    real = fmt._read_open
    calls = []

    def read_open(*a: object) -> object:
        data = real(*a)  # type: ignore[arg-type]
        if not calls:  # the first read: another process appends meanwhile
            crash = "written" if when == "killed during" else None
            assert save(cassette, 2, crash_at=crash).returncode == (75 if crash else 0)
        calls.append(data)
        return data

    monkeypatch.setattr(fmt, "_read_open", read_open)
    doc = load_document(fmt.read_file(cassette) or b"", cassette)
    assert len(calls) == 2  # read again
    got = [e["key"] for e in doc["entries"]]
    assert got == (before if when == "killed during" else keys(cassette))
    assert len(got) == len(before) + (0 if when == "killed during" else 3)
    assert not fmt.undo_path(cassette).exists()


READER = textwrap.dedent("""
    import sys, time, dejacache
    from dejacache.cassettes import format as fmt
    from dejacache.cassettes.document import load_document
    fmt.EAGER_CHECK_UNDER = 0
    path, stop = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "mapped":
        fmt._MMAP_FROM = 0

    @dejacache.cache(name="llm")
    def llm(messages):
        raise RuntimeError("a replay went live")

    seen, rounds = 0, 0
    import os
    while not os.path.exists(stop) or rounds < 3:
        doc = load_document(fmt.read_file(__import__("pathlib").Path(path)), path)
        n = len(doc["entries"])
        assert n >= seen, (n, seen)
        seen = n
        first = doc["entries"][0]
        with dejacache.cassette(path, mode="replay"):
            got = llm([{"role": "user", "content": "question 0 0 0 " * 60}])
        assert got["content"] == "live " + ("question 0 0 0 " * 60)[:20], got
        rounds += 1
    print(rounds, seen, flush=True)
""")


@pytest.mark.parametrize("how", ["read", "mapped"])
def test_readers_never_see_half_an_append(cassette: pathlib.Path, tmp_path: pathlib.Path,
                                          how: str) -> None:
    """A reader process parses the file and replays from it in a loop while another
    process appends (and compacts): never an error, never fewer entries, never a wrong
    answer (readers take no lock: each read is checked, and read again if an append
    overlapped it)."""
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(cassette), str(stop), how],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        done = save(cassette, 2, count=1, blocks=24)  # past MAX_SEGMENTS: one compaction
        assert done.returncode == 0, done.stderr
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    rounds, seen = map(int, out.split())
    assert rounds >= 3 and seen <= len(keys(cassette))
    assert FileIndex.open(cassette.read_bytes()).segments < fmt.MAX_SEGMENTS  # type: ignore[union-attr]



def test_a_writer_that_read_before_the_crash_rolls_it_back_and_merges(
        cassette: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import dejacache

    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)

    @dejacache.cache(name="llm")
    def llm(messages: list[dict[str, str]]) -> dict[str, str]:
        return {"role": "assistant", "content": "mine"}

    before = keys(cassette)
    with dejacache.cassette(cassette, mode="auto") as tape:
        assert tape.exists  # read now, before the other process's save is killed
        assert save(cassette, 2, crash_at="half-written").returncode == 75
        llm([{"role": "user", "content": "mine " * 60}])
    after = keys(cassette)
    assert after[: len(before)] == before and len(after) == len(before) + 1
    assert not fmt.undo_path(cassette).exists() and verified(cassette, capsys)
