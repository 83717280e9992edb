"""A learning run records every call into a scratch copy of the project's layout
(``cassettes/scratch.py``)."""

from __future__ import annotations

import pathlib

import pytest

import dejacache
from dejacache.cassettes import scratch

CALLS: list[str] = []


@dejacache.cache(kind="tool")
def ask(q: str) -> str:
    CALLS.append(q)
    return f"answer {len(CALLS)}"


def test_blocks_record_into_the_scratch_directory_whatever_their_mode(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "proj"
    (project / "tests" / "cassettes").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    monkeypatch.chdir(project)
    real = project / "tests" / "cassettes" / "t.json"
    with dejacache.cassette(real, mode="record"):
        ask("q")
    before = real.read_bytes()
    learn = tmp_path / "run1"
    monkeypatch.setenv(scratch.ENV, str(learn))
    with dejacache.cassette(real, mode="replay") as tape:  # replay asked: learning records
        assert tape.mode == "record"
        ask("q")
    copy = learn / "tests" / "cassettes" / "t.json"
    assert copy.exists() and real.read_bytes() == before
    assert scratch.original(copy, learn, project) == real
    outside = tmp_path / "elsewhere" / "c.json"
    with dejacache.cassette(outside):
        ask("q")
    moved = learn / scratch.OUTSIDE / outside.relative_to(outside.anchor)
    assert moved.exists() and not outside.exists()
    assert scratch.original(moved, learn, project) == outside


def test_without_the_variable_nothing_moves(tmp_path: pathlib.Path) -> None:
    assert not scratch.active()
    assert scratch.redirect(tmp_path / "c.json") == tmp_path / "c.json"
