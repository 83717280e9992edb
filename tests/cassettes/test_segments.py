"""Saves that add entries append a segment; any file of appends reads what the whole save
of the same calls reads, and compacts to its bytes."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache.cassettes import format as fmt
from dejacache.cassettes import writer as writer_mod
from dejacache.cassettes.document import load_document
from dejacache.cassettes.reader import FileIndex
from dejacache.cassettes.render import render

WORDS = ["alpha", "beta", "gamma", "delta", "eps"]


@dejacache.cache(name="llm")
def llm(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": f"reply to {messages[-1]['content'][:40]}"}


def request(word: str, size: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "you answer briefly " * 20},
            {"role": "user", "content": f"{word} " * size}]


def run(path: pathlib.Path, calls: list[tuple[str, int]]) -> None:
    with dejacache.cassette(path, mode="auto"):
        for word, size in calls:
            llm(request(word, size))


def whole_save(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_mod.Writer, "_splice_plan", lambda self, prune: None)


def timeless(monkeypatch: pytest.MonkeyPatch) -> None:
    real = writer_mod.Writer.add

    def add(self: writer_mod.Writer, doc: dict[str, Any], **kw: Any) -> Any:
        return real(self, doc, **{**kw, "duration": 0.0})

    monkeypatch.setattr(writer_mod.Writer, "add", add)


def segments(path: pathlib.Path) -> int:
    ix = FileIndex.open(path.read_bytes())
    assert ix is not None
    return ix.segments


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from([3, 90])),
                         min_size=1, max_size=4), min_size=1, max_size=9))
def test_appends_read_as_the_whole_save_and_compact_to_its_bytes(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        blocks: list[list[tuple[str, int]]]) -> None:
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    monkeypatch.setattr(fmt, "MAX_SEGMENTS", 4)  # compactions within a few saves
    timeless(monkeypatch)
    d = tmp_path_factory.mktemp("seg")
    a, b = d / "a.json", d / "b.json"
    run(a, [("first", 90)])
    shutil.copy(a, b)
    for calls in blocks:
        run(a, calls)
        with monkeypatch.context() as m:
            whole_save(m)
            run(b, calls)
        da, db = load_document(a.read_bytes(), a), load_document(b.read_bytes(), b)
        assert da["entries"] == db["entries"] and da["values"] == db["values"]
        assert render(da["entries"], da["values"]) == b.read_bytes()
        n = segments(a)
        assert n <= 4
        if n == 1:  # written whole, or compacted: the very bytes of the whole save
            assert a.read_bytes() == b.read_bytes()
        for word, size in calls:  # and it replays
            with dejacache.cassette(a, mode="replay"):
                assert llm(request(word, size))["content"].startswith("reply to")


def test_an_appended_segment_is_what_dumps_writes(tmp_path: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The bytes an append writes are orjson's layout of the same members (2-space indent,
    sorted keys inside each member), so the file diffs and reads like a rendered one."""
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    p = tmp_path / "c.json"
    run(p, [("alpha", 90), ("beta", 3)])
    run(p, [("gamma", 90), ("gamma", 90)])
    data = p.read_bytes()
    doc = orjson.loads(data)
    assert list(doc) == ["checksums", "entries", "format", "values", "xref", "entries.1",
                         "values.1", "xref.1", "xref_at"]
    assert doc["format"] == 4 and len(doc["entries.1"]) == 2
    assert orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE) == data
    assert len(doc["xref_at"]) == 8
    assert set(doc["values.1"]).isdisjoint(doc["values"])  # only what the file lacked


def test_a_save_that_is_not_an_append_writes_one_segment(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    p = tmp_path / "c.json"
    run(p, [("alpha", 90), ("beta", 3)])
    run(p, [("gamma", 90)])
    assert segments(p) == 2
    run(p, [("beta", 3), ("alpha", 90), ("delta", 3)])  # replayed out of order: renumbered
    assert segments(p) == 1
    doc = load_document(p.read_bytes(), p)
    assert render(doc["entries"], doc["values"]) == p.read_bytes()


def test_a_format_3_file_is_written_whole_in_format_4_by_its_next_save(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    p = tmp_path / "c.json"
    run(p, [("alpha", 90), ("beta", 3)])
    data = p.read_bytes()
    old = data.replace(b'\n  "format": 4,', b'\n  "format": 3,')
    tail = old.rindex(b'"xref_at": [') + len(b'"xref_at": [')
    first = old.index(b",", tail)  # format 3 listed the last three places
    p.write_bytes(old[:tail] + old[first + 1 :])
    ix = FileIndex.open(p.read_bytes())
    assert ix is not None and ix.version == 3
    run(p, [("alpha", 90), ("gamma", 90)])
    assert orjson.loads(p.read_bytes())["format"] == 4 and segments(p) == 1
    doc = load_document(p.read_bytes(), p)
    assert [e["name"] for e in doc["entries"]] == ["llm"] * 3
