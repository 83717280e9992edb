"""The files blocks opened across recorded runs (``cassettes/claimed.py``): carried from
record to record, pruned only of files that no longer exist, bounded."""

from __future__ import annotations

import pathlib

import pytest

from dejacache.cassettes import claimed
from dejacache.cassettes.claimed import holder, remember


def _files(*paths: pathlib.Path, tests: tuple[str, ...] = ("t.py::a",), outside: bool = False
           ) -> dict[str, dict[str, object]]:
    return {str(p): {"tests": list(tests), "outside": outside} for p in paths}


def test_a_file_stays_until_it_no_longer_exists(tmp_path: pathlib.Path) -> None:
    kept, gone = tmp_path / "kept.json", tmp_path / "gone.json"
    kept.write_text("{}")
    gone.write_text("{}")
    opened, overflow = remember(None, _files(kept, gone))
    assert list(opened) == [str(kept), str(gone)] and not overflow
    gone.unlink()
    # The next run opened neither: the one that still exists is still claimed.
    opened, _ = remember({"opened": opened}, {})
    assert opened == {str(kept): {"tests": ["t.py::a"]}}


def test_the_latest_opened_come_last_and_tests_are_bounded(tmp_path: pathlib.Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for p in (a, b):
        p.write_text("{}")
    opened, _ = remember(None, _files(a, b))
    many = tuple(f"t.py::t{i}" for i in range(claimed.MAX_TESTS + 2))
    opened, _ = remember({"opened": opened}, _files(a, tests=many))
    assert list(opened) == [str(b), str(a)]
    assert opened[str(a)]["tests"] == list(many[-claimed.MAX_TESTS:])
    # Tests dropped from the list may still exist: the file is claimed whatever the suite.
    assert opened[str(a)]["more"] is True
    assert holder(opened[str(a)], []) == f"more than {claimed.MAX_TESTS} tests opened it in " \
                                         "earlier runs"


def test_a_claim_lasts_while_a_test_that_opened_it_is_in_the_suite() -> None:
    o = {"tests": ["t.py::old", "t.py::new"]}
    assert holder(o, {"t.py::new", "t.py::x"}) == "test t.py::new opened it in an earlier run"
    assert holder(o, {"t.py::old"}) == "test t.py::old opened it in an earlier run"
    assert holder(o, {"t.py::renamed"}) == ""  # every test that opened it has gone
    assert holder({"tests": [], "outside": True}, set()) == (
        "a block opened it outside a test in an earlier run")


def test_overflow_drops_the_oldest_and_stays(tmp_path: pathlib.Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claimed, "MAX_FILES", 2)
    paths = [tmp_path / f"{i}.json" for i in range(3)]
    for p in paths:
        p.write_text("{}")
    opened, overflow = remember(None, _files(*paths))
    assert list(opened) == [str(paths[1]), str(paths[2])] and overflow
    # Sticky: a dropped file may be one a test still opens, so no later record judges.
    opened, overflow = remember({"opened": opened, "overflow": True}, {})
    assert overflow


def test_a_damaged_previous_map_is_read_as_far_as_it_goes(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "a.json"
    p.write_text("{}")
    opened, overflow = remember({"opened": {str(p): {"tests": "not a list", "more": 1},
                                            str(tmp_path / "x"): "junk"}}, {})
    assert opened == {str(p): {"tests": [], "more": True}} and not overflow
    assert remember({"opened": ["junk"]}, {}) == ({}, False)


# ---------------------------------------------------------------- counts of complete runs


def _used(path: pathlib.Path, unused: list[list[object]] | None, digest: str | None = "d1",
          tests: tuple[str, ...] = ("t.py::a",)) -> dict[str, dict[str, object]]:
    """A ``files`` row of a run that opened ``path`` (``unused`` None: usage unknown)."""
    return {str(path): {"tests": list(tests), "outside": False, "unused": unused,
                        "digest": digest}}


def _run(previous: dict[str, object] | None, files: dict[str, dict[str, object]], *,
         judged: bool = True, suite: tuple[str, ...] = ("t.py::a",), now: str = "day1"
         ) -> dict[str, object]:
    opened, overflow = remember(previous, files, suite=suite, judged=judged, now=now)
    return {"opened": opened, "overflow": overflow}


def test_entry_counts_stop_at_runs_and_a_use_clears_them(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "a.json"
    p.write_text("{}")
    rec = _run(None, _used(p, [["k", 0, "llm"], ["k", 1, "llm"]]))
    for n in range(2, claimed.RUNS + 3):
        rec = _run(rec, _used(p, [["k", 0, "llm"], ["k", 1, "llm"]]), now=f"day{n}")
    o = rec["opened"][str(p)]  # type: ignore[index]
    # Bounded: the counts stop at RUNS (a run that sees the same changes nothing)...
    assert o["entries"] == [["k", 0, claimed.RUNS, "day1"], ["k", 1, claimed.RUNS, "day1"]]
    assert claimed.idle_entries(o, "d1") == {("k", 0): (claimed.RUNS, "day1"),
                                             ("k", 1): (claimed.RUNS, "day1")}
    # ...and only entries still unused are kept: one used again starts over.
    rec = _run(rec, _used(p, [["k", 1, "llm"]]), now="day9")
    rec = _run(rec, _used(p, [["k", 0, "llm"], ["k", 1, "llm"]]), now="day10")
    assert rec["opened"][str(p)]["entries"] == [  # type: ignore[index]
        ["k", 0, 1, "day10"], ["k", 1, claimed.RUNS, "day1"]]
    assert rec == _run(rec, {}, judged=True)  # a run that did not open it: as it was


def test_a_changed_file_or_an_unknown_usage_starts_the_count_again(tmp_path: pathlib.Path
                                                                   ) -> None:
    p = tmp_path / "a.json"
    p.write_text("{}")
    rec = _run(_run(None, _used(p, [["k", 0, "llm"]])), _used(p, [["k", 0, "llm"]]))
    assert claimed.idle_entries(rec["opened"][str(p)], "d1") == {  # type: ignore[index]
        ("k", 0): (2, "day1")}
    # Rewritten since (another hash): its entries are numbered anew, so the count is too.
    changed = _run(rec, _used(p, [["k", 0, "llm"]], digest="d2"), now="day3")
    assert changed["opened"][str(p)]["entries"] == [["k", 0, 1, "day3"]]  # type: ignore[index]
    # A run that recorded into it (usage unknown) clears every count of the file.
    unknown = _run(rec, _used(p, None))
    assert "entries" not in unknown["opened"][str(p)]  # type: ignore[index]


def test_a_run_that_cannot_judge_neither_counts_nor_clears(tmp_path: pathlib.Path) -> None:
    p, q = tmp_path / "a.json", tmp_path / "b.json"
    for f in (p, q):
        f.write_text("{}")
    rec = _run(_run(None, {**_used(p, [["k", 0, "llm"]]), **_used(q, [])}),
               _used(p, [["k", 0, "llm"], ["j", 0, "tool"]]), suite=())
    assert rec["opened"][str(q)]["idle"] == [1, "day1"]  # type: ignore[index]
    narrowed = _run(rec, _used(p, [["k", 0, "llm"], ["j", 0, "tool"]]), judged=False, suite=())
    assert narrowed["opened"][str(p)]["entries"] == [  # type: ignore[index]
        ["k", 0, 2, "day1"], ["j", 0, 1, "day1"]]
    assert narrowed["opened"][str(q)]["idle"] == [1, "day1"]  # type: ignore[index]
    # ...but an entry it used is used: that count is over.
    narrowed = _run(rec, _used(p, [["j", 0, "tool"]]), judged=False)
    assert narrowed["opened"][str(p)]["entries"] == [["j", 0, 1, "day1"]]  # type: ignore[index]


def test_a_file_counts_only_while_no_test_that_opened_it_is_left(tmp_path: pathlib.Path
                                                                ) -> None:
    p = tmp_path / "a.json"
    p.write_text("{}")
    rec = _run(None, _used(p, []))
    rec = _run(rec, {})  # t.py::a still in the suite: it may open it again
    assert "idle" not in rec["opened"][str(p)]  # type: ignore[index]
    for n in range(claimed.RUNS + 2):
        rec = _run(rec, {}, suite=("t.py::renamed",), now=f"day{n}")
    assert claimed.idle_runs(rec["opened"][str(p)]) == (  # type: ignore[index]
        claimed.RUNS, "day0")
    rec = _run(rec, {}, suite=("t.py::a",))  # back in the suite: claimed again
    assert claimed.idle_runs(rec["opened"][str(p)]) == (0, "")  # type: ignore[index]
    rec = _run(_run(rec, {}, suite=()), _used(p, []))  # opened again: its count is over
    assert claimed.idle_runs(rec["opened"][str(p)]) == (0, "")  # type: ignore[index]
