"""Saves that cost what changed: a spliced save writes the bytes a whole render would, an
appended one a file that reads the same (and compacts to those bytes), and opening,
hitting, missing and appending touch O(1) entries (counted, not timed)."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import traceback
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache.cassettes import append as append_mod
from dejacache.cassettes import document as document_mod
from dejacache.cassettes import format as fmt
from dejacache.cassettes import render as render_mod
from dejacache.cassettes import splice as splice_mod
from dejacache.cassettes import writer as writer_mod
from dejacache.cassettes.document import load_document
from dejacache.cassettes.reader import FileIndex
from dejacache.cassettes.render import dumps, render
from dejacache.errors import CassetteError

SYSTEM = {"role": "system", "content": "you plan trips; answer briefly " * 12}


@dejacache.cache(name="llm")
def llm(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": f"reply to {messages[-1]['content'][:40]}"}


def conversation(turn: int, conv: int = 0) -> list[dict[str, Any]]:
    """The request of an agent loop's turn: the whole history plus one new message."""
    out = [SYSTEM]
    for t in range(turn + 1):
        out.append({"role": "user", "content": f"conversation {conv} question {t} " * 4})
        if t < turn:
            out.append({"role": "assistant", "content": f"c{conv} answer {t} " * 6})
    return out


def record(path: pathlib.Path, convs: int = 5, turns: int = 8) -> None:
    with dejacache.cassette(path, mode="record"):
        for c in range(convs):
            for t in range(turns):
                llm(conversation(t, c))


@pytest.fixture(autouse=True)
def timeless(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every live call recorded as taking no time: two runs of one block write the same
    bytes (a duration over 50 us shows in the file)."""
    real = writer_mod.Writer.add

    def add(self: writer_mod.Writer, doc: dict[str, Any], **kw: Any) -> Any:
        return real(self, doc, **{**kw, "duration": 0.0})

    monkeypatch.setattr(writer_mod.Writer, "add", add)


@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read through the cross-reference, as for files over ``EAGER_CHECK_UNDER``."""
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)


PARSED_FROM: list[str] = []  # the stack of each whole parse the counts saw


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> dict[str, int]:
    """How many entries were parsed from the file, encoded, and whole files of this test
    parsed (a parse of another file, by whatever else this process runs meanwhile, is not
    this test's)."""
    n = {"decoded": 0, "encoded": 0, "parsed": 0, "spliced": 0, "appended": 0}
    PARSED_FROM.clear()
    real_checked, real_bytes = FileIndex._checked, render_mod.entry_bytes
    real_load, real_splice = load_document, splice_mod.splice
    real_append = append_mod.append

    def append(*a: Any) -> Any:
        done = real_append(*a)
        n["appended"] += done
        return done

    def checked(raw: bytes, key: str) -> dict[str, Any]:
        n["decoded"] += 1
        return real_checked(raw, key)

    def entry_bytes(entry: dict[str, Any]) -> bytes:
        n["encoded"] += 1
        return real_bytes(entry)

    def load(data: bytes, path: Any = None, *a: Any, **kw: Any) -> dict[str, Any]:
        if path is not None and tmp_path in pathlib.Path(path).parents:
            n["parsed"] += 1
            # Where from, for the assertion's message: one CI run (of many) counted a parse
            # in "a repeated call" that no local run of it, alone or with its directory, did.
            PARSED_FROM.append("".join(traceback.format_stack(limit=14)[:-1]))
        return real_load(data, path, *a, **kw)

    def splice(*a: Any) -> Any:
        n["spliced"] += 1
        return real_splice(*a)

    monkeypatch.setattr(FileIndex, "_checked", staticmethod(checked))
    monkeypatch.setattr(render_mod, "entry_bytes", entry_bytes)
    monkeypatch.setattr(splice_mod, "entry_bytes", entry_bytes)
    monkeypatch.setattr(document_mod, "load_document", load)
    monkeypatch.setattr(writer_mod, "load_document", load)
    monkeypatch.setattr(splice_mod, "splice", splice)
    monkeypatch.setattr(append_mod, "append", append)
    return n


def same_as_whole(a: pathlib.Path, b: pathlib.Path) -> None:
    """``a`` (saved by splicing or appending) reads the entries, values and order of ``b``
    (saved whole), and written whole again it is ``b``'s bytes."""
    da, db = load_document(a.read_bytes(), a), load_document(b.read_bytes(), b)
    assert da["entries"] == db["entries"] and da["values"] == db["values"]
    assert render(da["entries"], da["values"]) == b.read_bytes()


def whole_save(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_mod.Writer, "_splice_plan", lambda self, prune: None)


SCENARIOS: dict[str, list[tuple[int, int] | str]] = {
    "append": ["new a"],
    "replayed then new": [(2, 3), (2, 4), "new a", "new b"],
    "out of order": [(1, 5), (1, 2), "new a", (3, 0), "new b"],
    "a repeated call": [(0, 0), (0, 0), (4, 7), "new a"],
    "new first": ["new a", (0, 1), (0, 2)],
}


def run(path: pathlib.Path, steps: list[tuple[int, int] | str]) -> None:
    with dejacache.cassette(path, mode="auto"):
        for s in steps:
            llm(conversation(*s) if isinstance(s, tuple) else
                [SYSTEM, {"role": "user", "content": f"{s} " * 80}])


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_spliced_save_writes_the_bytes_of_a_whole_save(
        tmp_path: pathlib.Path, lazy: None, monkeypatch: pytest.MonkeyPatch,
        counts: dict[str, int], scenario: str) -> None:
    base = tmp_path / "base.json"
    record(base)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(base, a)
    shutil.copy(base, b)
    run(a, SCENARIOS[scenario])
    assert counts["spliced"] + counts["appended"] == 1
    assert counts["parsed"] == 0, f"parsed whole, from:\n{''.join(PARSED_FROM)}"
    whole_save(monkeypatch)
    run(b, SCENARIOS[scenario])
    if counts["spliced"]:
        assert a.read_bytes() == b.read_bytes()
    same_as_whole(a, b)  # (checks every entry, value and cross-reference)


def test_open_and_one_late_hit_decode_one_entry(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    p = tmp_path / "c.json"
    record(p, convs=20, turns=10)
    counts.update(decoded=0, encoded=0, parsed=0)
    with dejacache.cassette(p, mode="replay") as tape:
        llm(conversation(9, 19))  # the last entry
        assert tape._tape.full is None
        # no column read whole: the one recording of its key needs no recorded order
        assert tape._tape.ix._parsed == {}  # type: ignore[union-attr]
    assert counts == {"decoded": 1, "encoded": 0, "parsed": 0, "spliced": 0, "appended": 0}


def test_an_auto_miss_and_its_save_encode_only_the_new_entry(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    p = tmp_path / "c.json"
    record(p, convs=20, turns=10)
    before = p.read_bytes()
    counts.update(decoded=0, encoded=0, parsed=0)
    with dejacache.cassette(p, mode="auto") as tape:
        llm(conversation(10, 19))  # the next turn of the last conversation: a miss
        assert tape._tape.full is None
        # the recorded order, not the names or keys (read per step where they are needed)
        assert set(tape._tape.ix._parsed) == {"follows"}  # type: ignore[union-attr]
    # the new entry: once for its checksum, once for its bytes; none of the 200 others
    # (one recorded entry may be read to name where the new call diverged)
    assert counts["decoded"] <= 1
    assert counts == {"decoded": counts["decoded"], "encoded": 2, "parsed": 0, "spliced": 0,
                      "appended": 1}
    after = load_document(p.read_bytes(), p)
    assert len(after["entries"]) == 201
    assert p.read_bytes().startswith(before[: before.index(fmt.ENTRIES_END)])
    with dejacache.cassette(p, mode="replay"):
        want = f"reply to {conversation(10, 19)[-1]['content'][:40]}"
        assert llm(conversation(10, 19))["content"] == want


def test_a_save_after_another_writers_append_appends_after_it(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    # Two workers sharing a cassette: the second save neither parses nor rewrites the file.
    p = tmp_path / "c.json"
    record(p)
    with dejacache.cassette(p, mode="auto", shared=True) as tape:
        assert tape.exists  # read now
        llm([SYSTEM, {"role": "user", "content": "mine " * 80}])
        with dejacache.cassette(p, mode="auto", shared=True):  # saves first
            llm([SYSTEM, {"role": "user", "content": "theirs " * 80}])
        parsed = counts["parsed"]
    assert counts["appended"] == 2 and counts["parsed"] == parsed
    doc = load_document(p.read_bytes(), p)
    assert len(doc["entries"]) == 42
    last = [s.request["messages"][-1]["content"].split()[0]
            for s in dejacache.load_cassette(p).steps[-2:]]
    assert last == ["theirs", "mine"]
    with dejacache.cassette(p, mode="replay"):  # each answers its own request
        assert llm([SYSTEM, {"role": "user", "content": "mine " * 80}])["content"].startswith(
            "reply to mine")
        assert llm([SYSTEM, {"role": "user", "content": "theirs " * 80}])[
            "content"].startswith("reply to theirs")


def test_the_same_call_recorded_by_another_writer_in_between_gets_the_whole_merge(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    p = tmp_path / "c.json"
    record(p)
    same = [SYSTEM, {"role": "user", "content": "both " * 80}]
    with dejacache.cassette(p, mode="auto", shared=True) as tape:
        assert tape.exists
        llm(same)
        with dejacache.cassette(p, mode="auto", shared=True):
            llm(same)
    assert counts["appended"] == 1  # the inner block only: the outer one merged
    doc = load_document(p.read_bytes(), p)
    assert len(doc["entries"]) == 41  # one recording of the call, as saved one after another


def test_a_file_written_whole_in_between_that_kept_the_entries_read_is_appended_to(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    # (a whole write that reordered or changed an entry read gets the whole merge: its keys
    # or checksums differ, test_merge.py's table says what the merge writes)
    p = tmp_path / "c.json"
    record(p)
    with dejacache.cassette(p, mode="auto", shared=True) as tape:
        assert tape.exists
        llm([SYSTEM, {"role": "user", "content": "mine " * 80}])
        with dejacache.cassette(p, mode="record", shared=True):  # re-records, whole
            llm([SYSTEM, {"role": "user", "content": "theirs " * 80}])
    assert counts["appended"] == 1  # the outer block's, after the inner one's whole write
    doc = load_document(p.read_bytes(), p)
    assert len(doc["entries"]) == 42


def test_damage_in_an_untouched_entry_is_still_refused_after_a_save(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    at = data.index(b'"content": "reply to conversation 1 question 3')
    p.write_bytes(data[:at] + data[at:].replace(b"reply", b"REPLY", 1))
    run(p, ["new a"])  # copies the damaged entry as it is
    with pytest.raises(CassetteError) as info, dejacache.cassette(p, mode="replay"):
        llm(conversation(3, 1))
    assert str(p) in str(info.value)


@pytest.mark.parametrize("lie", ["truncated", "sizes"])
def test_lying_offsets_are_damage_never_a_wrong_answer(
        tmp_path: pathlib.Path, lazy: None, lie: str) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    if lie == "truncated":
        data = data[: len(data) // 2] + data[-200:]
    else:  # one entry's size one byte longer, the next one's shorter: the same total
        at = data.rindex(b'"sizes": [') + len(b'"sizes": [\n      ')
        end = data.index(b",", at)
        nxt = data.index(b",", end + 1)
        size, size2 = int(data[at:end]), int(data[end + 1 : nxt].strip())
        data = data[:at] + f"{size + 1},\n      {size2 - 1}".encode() + data[nxt:]
    p.write_bytes(data)
    for mode in ("replay", "auto"):
        with pytest.raises(CassetteError) as info, dejacache.cassette(p, mode=mode):
            llm(conversation(1, 0))
        assert str(p) in str(info.value)
    assert p.read_bytes() == data  # nothing written over it


def test_a_cross_reference_pointer_that_lies_is_only_a_hint(
        tmp_path: pathlib.Path, lazy: None) -> None:
    """``xref_at`` is checked against the bytes it points at; when it lies the whole file
    is parsed and checked, and answers come from that (right, or a CassetteError)."""
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    at = data.rindex(b'"xref_at": [') + len(b'"xref_at": [\n    ')
    p.write_bytes(data[:at] + b"1" + data[at:])
    with dejacache.cassette(p, mode="replay") as tape:
        want = f"reply to {conversation(1, 0)[-1]['content'][:40]}"
        assert llm(conversation(1, 0))["content"] == want
        assert tape._tape.full is not None


def test_an_old_format_file_still_opens_and_is_upgraded_by_a_save(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p, convs=2, turns=3)
    doc = orjson.loads(p.read_bytes())
    for e in doc["entries"]:  # as dejacache 0.1 wrote it: format 1, no checksums, no xref
        e.pop("checksum")
        e.pop("follows", None)
    old = dumps({"entries": doc["entries"], "format": 1, "values": doc["values"]})
    p.write_bytes(old)
    with dejacache.cassette(p, mode="replay"):
        llm(conversation(2, 1))
    run(p, ["new a"])
    new = load_document(p.read_bytes(), p)
    assert new["format"] == fmt.FORMAT and len(new["entries"]) == 7


SAVER = textwrap.dedent("""
    import sys, dejacache
    from dejacache.cassettes import format as fmt
    from dejacache.cassettes.document import load_document
    from dejacache.cassettes.render import dumps, entry_bytes, render
    fmt.EAGER_CHECK_UNDER = 0

    @dejacache.cache(name="llm")
    def llm(messages):
        return {"role": "assistant", "content": "live " + messages[-1]["content"][:20]}

    i = int(sys.argv[2])
    while True:
        with dejacache.cassette(sys.argv[1], mode="auto"):
            llm([{"role": "user", "content": f"question {i} " * 200}])
        print(i, flush=True)
        i += 1
""")


def test_kill_9_mid_save_loses_no_saved_recording(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    record(p, convs=40, turns=10)  # ~1 MB: each save copies most of it
    saved, start = 400, 0
    for delay in (0.1, 0.25, 0.4):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(p), str(start)],
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # one save done: the next ones are under way
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = [first, *proc.stdout.read().split()]
        proc.stdout.close()
        # whole and checked, never torn (read as every reader does: an append killed
        # before it was durable is rolled back first)
        doc = load_document(fmt.read_file(p) or b"", p)
        saved += len(done)
        assert len(doc["entries"]) in (saved, saved + 1)  # + the save killed after rename
        saved = len(doc["entries"])
        start += 10_000


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.tuples(st.integers(0, 4), st.integers(0, 7)),
                          st.sampled_from(["new a", "new b", "new c"])), max_size=8))
def test_any_run_splices_the_bytes_of_a_whole_save(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        steps: list[tuple[int, int] | str]) -> None:
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    d = tmp_path_factory.mktemp("any")
    base = d / "base.json"
    record(base)
    a, b = d / "a.json", d / "b.json"
    shutil.copy(base, a)
    shutil.copy(base, b)
    run(a, steps)
    with monkeypatch.context() as m:
        whole_save(m)
        run(b, steps)
    same_as_whole(a, b)


def test_without_copy_file_range_the_ranges_are_read_and_written(
        tmp_path: pathlib.Path, lazy: None, monkeypatch: pytest.MonkeyPatch,
        counts: dict[str, int]) -> None:
    base = tmp_path / "base.json"
    record(base)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(base, a)
    shutil.copy(base, b)

    def refuse(*args: Any) -> int:
        raise OSError(18, "Invalid cross-device link")

    with monkeypatch.context() as m:
        m.setattr(os, "copy_file_range", refuse)
        run(a, SCENARIOS["out of order"])
    assert counts["spliced"] == 1
    whole_save(monkeypatch)
    run(b, SCENARIOS["out of order"])
    assert a.read_bytes() == b.read_bytes()


def test_a_new_entry_never_rests_on_a_damaged_shared_value(
        tmp_path: pathlib.Path, lazy: None) -> None:
    p = tmp_path / "c.json"
    record(p)
    data = p.read_bytes()
    values = data.index(fmt.VALUES_HEAD)
    at = data.index(b"you plan trips", values)  # the system prompt every request shares
    damaged = data[:at] + b"Y" + data[at + 1:]
    p.write_bytes(damaged)
    with pytest.raises(CassetteError) as info, dejacache.cassette(p, mode="auto"):
        llm([SYSTEM, {"role": "user", "content": "new " * 80}])
    assert str(p) in str(info.value) and "does not match its hash" in str(info.value)
    assert p.read_bytes() == damaged


def test_a_file_rewritten_in_place_after_the_read_is_merged_not_spliced(
        tmp_path: pathlib.Path, lazy: None, counts: dict[str, int]) -> None:
    """Same inode, other bytes (an editor, a tool writing in place): the save sees the
    change and keeps the other writer's entry (here the file gained one at its end, as an
    append leaves it: the save appends after it)."""
    p, other = tmp_path / "c.json", tmp_path / "other.json"
    record(p)
    shutil.copy(p, other)
    run(other, ["theirs"])  # the file as another writer left it: one more entry
    with dejacache.cassette(p, mode="auto") as tape:
        assert tape.exists  # read now
        with open(p, "r+b") as fh:  # then rewritten where it is
            fh.write(other.read_bytes())
        llm([SYSTEM, {"role": "user", "content": "mine " * 80}])
    doc = load_document(p.read_bytes(), p)
    assert len(doc["entries"]) == 42
    assert counts["appended"] == 2  # "theirs", then "mine" after it


@pytest.mark.parametrize("new", [["short"], ["x" * 300], ["x" * 300, "y" * 300, "z" * 300]])
def test_values_added_to_a_file_that_has_none(
        tmp_path: pathlib.Path, lazy: None, monkeypatch: pytest.MonkeyPatch,
        counts: dict[str, int], new: list[str]) -> None:
    @dejacache.cache(name="small")
    def small(text: str) -> str:
        return text[:10]

    base = tmp_path / "base.json"
    with dejacache.cassette(base, mode="record"):
        for i in range(5):
            small(f"q{i}")
    assert orjson.loads(base.read_bytes())["values"] == {}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(base, a)
    shutil.copy(base, b)
    with dejacache.cassette(a, mode="auto"):
        for text in new:
            small(text)
    assert counts["appended"] == 1
    whole_save(monkeypatch)
    with dejacache.cassette(b, mode="auto"):
        for text in new:
            small(text)
    same_as_whole(a, b)
