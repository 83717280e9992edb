"""``Cassette.plain_hit``: a hit as the engine's ``CallSite`` reads it."""

from __future__ import annotations

import datetime
import pathlib
from typing import Any

import orjson
import pytest

import dejacache
from dejacache.cassettes import format as fmt
from dejacache.cassettes.document import load_document
from dejacache.cassettes.store import Cassette
from dejacache.scope import current
from dejacache.stores._base import Record


@dejacache.cache(name="plain")
def plain(x: int) -> dict[str, int]:
    return {"x": x}


@dejacache.cache(name="tagged")
def tagged(x: int) -> datetime.date:
    return datetime.date(2020, 1, x)


def _keys(path: pathlib.Path) -> dict[str, str]:
    doc = load_document(path.read_bytes(), path)
    return {e["name"]: e["key"] for e in doc["entries"]}


def test_a_plain_answer_is_its_json_and_anything_else_is_gets_record(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read through the byte index, as a large file is (a small one is parsed whole: its
    # answers are trees, not bytes, and come as records).
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        plain(1)
        plain(1)
        tagged(2)
    keys = _keys(path)
    with dejacache.cassette(path, mode="replay"):
        store: Any = current().store
        assert isinstance(store, Cassette) and type(store).plain_hits
        first = store.plain_hit(keys["plain"])
        assert first[3] is None and orjson.loads(first[0]) == {"x": 1}
        assert orjson.loads(store.plain_hit(keys["plain"])[0]) == {"x": 1}  # the 2nd
        assert store.plain_hit(keys["plain"]) is None  # none left
        hit = store.plain_hit(keys["tagged"])
        assert hit[0] is None and isinstance(hit[3], Record)
        assert current().codec.decode(hit[3].value, key=keys["tagged"]) == \
            datetime.date(2020, 1, 2)
        assert store.counters.replayed == 3


def test_a_subclass_that_reads_hits_its_own_way_is_not_read_through_plain_hit() -> None:
    class Own(Cassette):
        def get(self, key: str) -> Record | None:
            return None

    class Same(Cassette):
        pass

    assert not Own.plain_hits
    assert Same.plain_hits


def test_a_file_parsed_whole_answers_with_records(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        plain(3)
    with dejacache.cassette(path, mode="replay"):
        store: Any = current().store
        key = _keys(path)["plain"]
        hit = store.plain_hit(key)
        assert hit[0] is None
        assert current().codec.decode(hit[3].value, key=key) == {"x": 3}
