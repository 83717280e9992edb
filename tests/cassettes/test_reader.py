"""The byte index of a written cassette (``cassettes/reader.py``): keys found and read by
their place, one copy of a recording's cross-reference however many blocks open it."""

from __future__ import annotations

import pathlib

import orjson
import pytest

from dejacache.cassettes import Cassette, reader, shapes
from dejacache.cassettes import format as fmt
from dejacache.cassettes.reader import FileIndex
from dejacache.codec import JsonCodec
from dejacache.stores import Record

CODEC = JsonCodec()


def write(path: pathlib.Path, keys: list[str], *, pad: int = 0) -> None:
    tape = Cassette(path, mode="record")
    for i, key in enumerate(keys):
        value = {"n": i, "pad": chr(65 + i % 26) * pad + str(i)}  # (each its own)
        tape.put(key, Record(value=CODEC.encode(value, key=key), name=f"tool-{i % 3}",
                             kind="tool",
                             request=orjson.dumps({"i": i}), duration=0.0))
    tape.save()


def test_keys_of_one_width_are_found_and_read_by_their_place(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    keys = [f"{i:032x}" for i in range(50)]
    write(p, [*keys, keys[7]])
    ix = FileIndex.open(p.read_bytes())
    assert ix is not None
    assert [ix.positions(keys[i]) for i in (0, 7, 49)] == [[0], [7, 50], [49]]
    assert [ix.key_at(i) for i in (0, 7, 49, 50)] == [keys[0], keys[7], keys[49], keys[7]]
    assert ix._segs[0].stride == len(b'\n      "",') + 32
    assert ix._keys is None  # no column parsed for either
    assert ix.names() == [f"tool-{i % 3}" for i in range(51)]


def test_keys_of_other_widths_are_found_by_counting_lines(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    keys = ["a", "bb" * 20, "c" * 32, "dd", "a,", "e"]  # ("a," : no key is another's prefix)
    write(p, keys)
    ix = FileIndex.open(p.read_bytes())
    assert ix is not None
    assert [ix.positions(k) for k in keys] == [[i] for i in range(len(keys))]
    assert ix._segs[0].stride == 0
    assert [ix.key_at(i) for i in range(len(keys))] == keys
    assert ix.positions("b") == [] and ix.positions("bb") == []


def test_blocks_of_one_recording_share_one_copy_of_its_index_and_none_of_the_file(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    keys = [f"{i:032x}" for i in range(40)]
    write(p, keys, pad=40_000)  # over a megabyte: read through a memory map
    maps = [fmt.read_file(p) for _ in range(2)]
    assert all(isinstance(m, fmt.Mapped) for m in maps)
    ixs = [FileIndex.open(m) for m in maps]  # type: ignore[arg-type]
    assert ixs[0] is not None and ixs[1] is not None
    a, b = (ix._segs[0].xref for ix in ixs)  # type: ignore[union-attr]
    assert a is b
    assert len(a) < p.stat().st_size // 100  # the cross-reference alone
    assert ixs[0].positions(keys[39]) == [39]
    closed = [ix.detached() for ix in ixs]  # type: ignore[union-attr]
    for m in maps:
        m.close()  # type: ignore[union-attr]  (nothing holds a view of the map)
    for ix in closed:
        assert ix.keys() == keys and ix.key_at(39) == keys[39]
        assert ix.names() == [f"tool-{i % 3}" for i in range(40)]
        assert ix.kinds() == ["tool"] * 40


def test_a_changed_recording_gets_its_own_copy(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    write(p, [f"{i:032x}" for i in range(10)])
    before = FileIndex.open(p.read_bytes())
    write(p, [f"{i:032x}" for i in range(1, 11)])
    after = FileIndex.open(p.read_bytes())
    assert before is not None and after is not None
    assert before._segs[0].xref != after._segs[0].xref
    assert after.positions(f"{10:032x}") == [9] and before.positions(f"{10:032x}") == []


def test_the_kept_copies_are_bounded(monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: pathlib.Path) -> None:
    monkeypatch.setattr(reader, "_KEPT", type(reader._KEPT)())
    monkeypatch.setattr(reader, "_KEPT_BYTES", 10_000)
    for n in range(5):
        p = tmp_path / f"c{n}.json"
        write(p, [f"{n}-{i:030x}" for i in range(60)])
        assert FileIndex.open(p.read_bytes()) is not None
    assert 0 < sum(len(v) for v in reader._KEPT.values()) <= 10_000


REQUESTS: list[object] = [
    {"i": 0}, {"method": "GET", "path": "/a"},
    {"method": "POST", "path": "/b", "headers": {"accept": "x"}, "body": {"q": [1, {"k": 2}]}},
    {"method": "POST", "path": "/b", "headers": {"accept": "x"}, "body": {"q": [1, {"k": 2}]}},
    {}, None, {'we"ird': 1, "method": "GET"}, {"body": "x" * 300, "path": "/c"},
]


def test_request_members_are_read_from_the_bytes_as_a_parse_reads_them(
        tmp_path: pathlib.Path) -> None:
    """Which forms of keys a file holds is read from its requests' member names, from the
    entries' bytes: the same names a parse gives, however the request was written (shared
    by reference, empty, none, a name with an escape)."""
    path = tmp_path / "c.json"
    tape = Cassette(path, mode="record")
    for i, request in enumerate(REQUESTS):
        tape.put(f"k{i}", Record(value=CODEC.encode({"n": i}, key=f"k{i}"), name="http.x",
                                 kind="http", request=orjson.dumps(request), duration=0.0))
    tape.save()
    ix = FileIndex.open(fmt.read_file(path))
    assert ix is not None
    parsed = [shapes.parsed_members(ix, i, k) for i, k in enumerate(ix.keys())]
    assert [shapes.request_members(ix, i, k) for i, k in enumerate(ix.keys())] == parsed
    assert parsed == [frozenset(r) if isinstance(r, dict) else frozenset() for r in REQUESTS]


def test_a_recordings_request_shapes_are_read_once_for_every_block(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.cassettes import store

    path = tmp_path / "c.json"
    write(path, [f"k{i}" for i in range(30)], pad=40_000)  # over 1 MB: the byte index
    monkeypatch.setattr(store, "_ASKS_BEFORE_SHAPES", 2)
    monkeypatch.setattr(shapes, "_SHAPES", {})
    first = Cassette(path, mode="replay")
    assert [first.request_shapes() for _ in range(2)] == [None, None]  # a few calls: unread
    assert first.request_shapes() == frozenset({frozenset({"i"})})
    assert isinstance(first._tape.ix, FileIndex)
    reads: list[int] = []
    members = shapes.request_members
    monkeypatch.setattr(shapes, "request_members",
                        lambda ix, i, k: reads.append(i) or members(ix, i, k))
    again = Cassette(path, mode="replay")
    assert [again.request_shapes() for _ in range(3)][-1] == frozenset({frozenset({"i"})})
    assert reads == []  # the same recording: its shapes were kept
    assert Cassette(path, mode="record").request_shapes() == frozenset()
