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
