"""What a cassette save writes when the file may have changed since the block read it:
the pure decision (``cassettes/merge.py``) as a table over mode x shared x what happened to
the file, then the same rule through real blocks and files."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import dejacache
from dejacache.cassettes.document import load_document
from dejacache.cassettes.merge import merge


def entry(name: str) -> dict[str, Any]:
    """``"x"`` / ``"x2"``: the call keyed ``x``, first / second answer (two recordings of
    one call differ in their answer and their timing)."""
    return {"key": name[0], "response": name, "duration": len(name) / 10}


X, X2, XO, S, B, Z = (entry(n) for n in ("x", "x2", "xo", "s", "b", "z"))
# The file as the block read it: X (this run replays or re-records it), S (another test's).
READ = [X, S]
# What happened to the file before the block saved (another test, another xdist worker).
NOW = {
    "unchanged": READ,
    "added": [X, S, Z],  # another writer appended Z
    "re-recorded": [XO, S],  # another writer re-recorded X (another answer)
    "deleted": None,  # the file is gone
}
# What each block would write alone, and which of it is new.
MINE = {
    "record": ([X2, B], [X2, B]),  # record: every call is new (X re-recorded)
    "auto": ([X, S, B], [B]),  # auto: the file as read, plus the new call B
    "replay": ([X, S], []),  # replay: nothing new (a shared file is never pruned)
}
TABLE = [
    # mode, shared, what happened, what is written
    ("record", False, "unchanged", "x2 b"),
    ("record", False, "added", "x2 b"),  # the block owns the file
    ("record", False, "re-recorded", "x2 b"),
    ("record", False, "deleted", "x2 b"),
    ("record", True, "unchanged", "x2 s b"),  # other tests' entries stay
    ("record", True, "added", "x2 s z b"),
    ("record", True, "re-recorded", "x2 s b"),  # the later recording wins, in place
    ("record", True, "deleted", "x2 b"),
    ("auto", False, "unchanged", "x s b"),
    ("auto", False, "added", "x s b z"),
    ("auto", False, "re-recorded", "s b xo"),  # the re-recorded answer, not both
    ("auto", False, "deleted", "x s b"),
    ("auto", True, "unchanged", "x s b"),
    ("auto", True, "added", "x s z b"),  # a shared file keeps its order: new calls last
    ("auto", True, "re-recorded", "xo s b"),
    ("auto", True, "deleted", "x s b"),
    ("replay", True, "unchanged", "x s"),
    ("replay", True, "added", "x s z"),
    ("replay", True, "re-recorded", "xo s"),
    ("replay", True, "deleted", "x s"),
]


def written(entries: list[dict[str, Any]]) -> str:
    return " ".join(d["response"] for d in entries)


@pytest.mark.parametrize(("mode", "shared", "what", "expected"), TABLE)
def test_the_merge_decision(mode: str, shared: bool, what: str, expected: str) -> None:
    mine, new = MINE[mode]
    out = merge(list(mine), new={id(d) for d in new}, read=READ, now=NOW[what], mode=mode,
                shared=shared)
    assert written(out.entries) == expected


def test_a_pruned_own_file_keeps_what_another_writer_added() -> None:
    # replay + prune on a file of its own: S was pruned; Z, added since, is not this
    # block's to prune (a kept entry is never a wrong answer; a lost one is).
    out = merge([X], new=(), read=READ, now=[X, S, Z], mode="replay", shared=False)
    assert written(out.entries) == "x z"


def test_a_file_created_since_the_block_read_none() -> None:
    for mode, shared, expected in (("record", True, "z b"), ("auto", False, "b z")):
        out = merge([B], new={id(B)}, read=[], now=[Z], mode=mode, shared=shared)
        assert written(out.entries) == expected


def test_identical_entries_are_counted_not_collapsed() -> None:
    # another writer added a second, identical X; this run recorded the same Z it did
    for shared, expected in ((True, "x x z"), (False, "x z x")):
        out = merge([X, Z], new={id(Z)}, read=[X], now=[X, dict(X), dict(Z)], mode="auto",
                    shared=shared)
        assert written(out.entries) == expected


def test_a_shared_file_keeps_its_order_so_the_next_writer_can_append() -> None:
    # Another writer appended Z after the entries this block read; this block's whole save
    # keeps them where they are and puts its own new call after them, as its append would.
    out = merge([X, B, S], new={id(B)}, read=[X, S], now=[dict(X), dict(S), Z], mode="auto",
                shared=True)
    assert written(out.entries) == "x s z b"
    # A call this block made twice with the same answer is two entries, even where the
    # file holds one of them.
    x2 = dict(X)
    out = merge([x2, X], new={id(x2)}, read=[X], now=[dict(X), Z], mode="auto", shared=True)
    assert written(out.entries) == "x z x"


def test_a_re_recorded_entry_stands_in_for_the_one_it_replaced() -> None:
    out = merge([X2], new={id(X2)}, read=READ, now=[XO, S], mode="record", shared=True)
    assert out.stand_ins == {id(XO): X2}
    out = merge([X, B], new={id(B)}, read=[X], now=[dict(X), Z], mode="auto", shared=False)
    assert [written([d]) for d in out.stand_ins.values()] == ["x"]


# ---------------------------------------------------------------- through blocks and files


@dejacache.cache(name="answer")
def answer(q: str) -> str:
    return q.upper()


def content(path) -> list[tuple[str, Any]]:
    doc = load_document(path.read_bytes(), path)  # every segment (shared files append)
    return sorted((e["request"]["q"], e["response"]) for e in doc["entries"])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("mode", ["record", "auto"])
def test_concurrent_saves_write_what_saves_one_after_another_write(
    tmp_path, mode: str, shared: bool,
) -> None:
    # Two blocks read the same file, then save one after the other (two xdist workers):
    # the file must be what the two would have written had the second opened after the
    # first saved.
    def prepare(path):
        with dejacache.cassette(path, mode="record"):
            answer("x")
            answer("s")

    def a() -> None:
        answer("x")
        answer("a")

    def b() -> None:
        answer("x")
        answer("b")

    concurrent, sequential = tmp_path / "concurrent.json", tmp_path / "sequential.json"
    for path in (concurrent, sequential):
        prepare(path)
    with dejacache.cassette(concurrent, mode, shared=shared) as tape_b:
        assert tape_b.exists  # read now, before the other block saves
        with dejacache.cassette(concurrent, mode, shared=shared):
            a()
        b()
    with dejacache.cassette(sequential, mode, shared=shared):
        a()
    with dejacache.cassette(sequential, mode, shared=shared):
        b()
    assert content(concurrent) == content(sequential)


def test_shared_re_recording_keeps_the_other_tests_recorded_order(tmp_path) -> None:
    path = tmp_path / "shared.json"
    with dejacache.cassette(path, mode="record", shared=True):  # test one: a1 then a2
        answer("a1")
        answer("a2")
    with dejacache.cassette(path, mode="record", shared=True):  # test two
        answer("b1")
    entries = orjson.loads(path.read_bytes())["entries"]
    assert [e["request"]["q"] for e in entries] == ["a1", "a2", "b1"]
    assert [e.get("follows") for e in entries] == [-1, 0, -1]
    with dejacache.cassette(path, mode="replay", shared=True) as tape:
        answer("a1")
        answer("a2")
    assert tape.divergences == []


@pytest.mark.parametrize("mode", ["auto", "replay"])
def test_a_shared_cassette_is_never_pruned_by_one_block(tmp_path, mode) -> None:
    path = tmp_path / "shared.json"
    for q in ("mine", "theirs"):
        with dejacache.cassette(path, mode="auto", shared=True):
            answer(q)
    with dejacache.cassette(path, mode, shared=True, prune=True) as tape:
        answer("mine")
    assert [i.name for i in tape.unused] == ["answer"]
    assert [q for q, _ in content(path)] == ["mine", "theirs"]
