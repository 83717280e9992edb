"""The file format: deterministic bytes, shared values, the cross-reference, linear size."""

from __future__ import annotations

import pathlib

import orjson
import pytest

from dejacache.cassettes import Cassette, reader
from dejacache.cassettes import format as fmt
from dejacache.cassettes._workload import agent_steps
from dejacache.cassettes.document import load_document
from dejacache.cassettes.pack import Packer
from dejacache.cassettes.reader import FileIndex
from dejacache.cassettes.render import (
    build_xref,
    dumps,
    entry_bytes,
    entry_checksum,
    with_xref_at,
    xref_checksum,
)
from dejacache.codec import JsonCodec
from dejacache.errors import CassetteError
from dejacache.keys import digest
from dejacache.stores import Record

CODEC = JsonCodec()


def record_steps(path: pathlib.Path, n: int, mode: str = "record") -> int:
    """Record n agent steps straight into a cassette; returns the naive JSON size."""
    tape = Cassette(path, mode=mode)
    raw = 0
    for req, resp in agent_steps(n):
        canonical = orjson.dumps({"body": req}, option=orjson.OPT_SORT_KEYS)
        key = digest("default", "openai.chat", canonical)
        raw += len(orjson.dumps({"request": req, "response": resp}))
        tape.put(key, Record(value=CODEC.encode(resp, key=key), name="openai.chat",
                             kind="llm", request=canonical, duration=1.25,
                             usage=resp["usage"]))
    tape.save()
    return raw


def test_bytes_are_deterministic_sorted_indented_with_final_newline(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    record_steps(a, 5)
    record_steps(b, 5)
    data = a.read_bytes()
    assert data == b.read_bytes()
    assert data.endswith(b"}\n")
    assert data.startswith(b'{\n  "checksums": "xxh3-128 of each entry; after editing by hand '
                           b'run: dejacache rehash FILE",\n  "entries": [\n    {\n      '
                           b'"checksum": "')
    doc = orjson.loads(data)
    assert list(doc) == ["checksums", "entries", "format", "values", "xref", "xref_at"]
    assert doc["format"] == fmt.FORMAT == 4
    assert dumps(doc) == data
    assert all(e["checksum"] == entry_checksum(e) for e in doc["entries"])
    assert doc["xref"] == build_xref(doc["entries"])
    xref = data.rindex(b'\n  "xref": {\n    "checksum": "' + doc["xref"]["checksum"].encode()
                       + b'",\n    "follows": [\n      -1,\n')
    tail = b'\n  "xref_at": [\n    %d,\n    %d,\n    %d,\n    %d\n  ]\n}\n' % tuple(doc["xref_at"])
    assert data.endswith(b"\n    ]\n  }," + tail)  # the cross-reference, then where it is
    assert data.count(b'\n  "') == 6  # the six members, each on its own line
    first, at, keys, end = doc["xref_at"]
    assert first == len(fmt.ENTRIES_HEAD)
    assert data[at:].startswith(b'{\n    "checksum": "') and at == xref + len(b'\n  "xref": ')
    assert data[keys - len(b'"keys": '):keys + 1] == b'"keys": ['
    assert data[end:].startswith(b'\n    ],\n    "kinds": [')


def test_an_entry_checksum_is_the_hash_of_its_bytes_in_the_file(tmp_path):
    p = tmp_path / "c.json"
    record_steps(p, 3)
    data = p.read_bytes()
    doc = orjson.loads(data)
    lazy = FileIndex.open(data)
    assert lazy is not None and lazy.n == 3
    for i, e in enumerate(doc["entries"]):
        assert doc["xref"]["sizes"][i] == len(entry_bytes(e))
        raw = lazy.checked_slice(i)  # checked against its checksum on the way
        line = f'      "checksum": "{e["checksum"]}",\n'.encode()
        assert raw.replace(line, b"") == b"    " + orjson.dumps(
            {k: v for k, v in e.items() if k != "checksum"},
            option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).replace(b"\n", b"\n    ")


def test_messages_are_stored_once_and_requests_list_references(tmp_path):
    p = tmp_path / "c.json"
    record_steps(p, 4)
    doc = orjson.loads(p.read_bytes())
    msgs = doc["entries"][3]["request"]["body"]["messages"]
    # every message a reference but the last, the new turn, which stays in its entry (a
    # re-record that changes it changes that entry only: test_cassette_diff.py)
    assert all(isinstance(m, str) and m.startswith(fmt.REF) for m in msgs[:-1])
    assert isinstance(msgs[-1], dict) and msgs[-1]["role"]
    # step 3 repeats the system prompt and earlier messages of step 2: same references, and
    # step 2's last turn, shared now that it repeats
    prev = doc["entries"][2]["request"]["body"]["messages"]
    assert msgs[: len(prev) - 1] == prev[:-1]
    assert fmt.unpack(msgs[len(prev) - 1], doc["values"].__getitem__) == prev[-1]
    system = doc["values"][msgs[0][len(fmt.REF):]]
    assert system["role"] == "system"


def test_size_is_linear_and_under_a_third_of_naive_json(tmp_path):
    p = tmp_path / "c.json"
    raw = record_steps(p, 300)
    assert p.stat().st_size <= 0.3 * raw


def test_user_strings_that_look_like_references_round_trip(tmp_path):
    packer = Packer({})
    tree = {"a": fmt.REF + "deadbeef", "b": ["x" * 300, 1], "c": [1.5] * 200}
    packed = packer.pack_root(tree)
    assert packed["a"] != tree["a"] and packed["a"].startswith(fmt.REF)
    assert isinstance(packed["c"], str)  # a long list of numbers is shared whole
    assert fmt.unpack(packed, packer.values.__getitem__) == tree


def test_cross_reference_matches_a_full_parse(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_SEARCHES_BEFORE_MAP", 5)
    p = tmp_path / "c.json"
    record_steps(p, 30)
    data = p.read_bytes()
    doc = load_document(data, p)
    keys = [e["key"] for e in doc["entries"]]
    lazy = FileIndex.open(data)
    assert lazy is not None and lazy.n == 30
    assert lazy._keys is None  # keys are searched in the column's bytes, not parsed
    for i in (29, 0, 7):
        assert lazy.positions(keys[i]) == [i]
        assert lazy.entry(i, keys[i]) == doc["entries"][i]
    assert lazy._keys is None
    assert lazy.positions("0" * 32) == []
    assert lazy.positions(keys[3][:-1]) == []  # a prefix of a key is not that key
    for i in range(30):  # past the searches budget: the column is parsed into a dict once
        assert lazy.positions(keys[i]) == [i]
    assert lazy._keys == keys
    assert lazy.names() == [e["name"] for e in doc["entries"]]
    assert lazy.kinds() == [e["kind"] for e in doc["entries"]]
    assert lazy.follows() == [e["follows"] for e in doc["entries"]]
    for h, v in doc["values"].items():
        assert lazy.value(h) == (True, v)
    assert lazy.value("0" * 24) == (False, None)
    with pytest.raises(CassetteError, match="does not match the index"):
        lazy.entry(3, keys[4])


@pytest.fixture
def lazy(monkeypatch):
    """Files this small are otherwise parsed and checked whole when opened."""
    monkeypatch.setattr(fmt, "EAGER_CHECK_UNDER", 0)


def test_small_files_are_parsed_and_checked_whole_when_opened(tmp_path):
    p = tmp_path / "c.json"
    record_steps(p, 5)
    tape = Cassette(p, mode="replay")
    assert tape.exists and tape._tape.full is not None and not tape._tape.ix.lazy


def test_a_hit_parses_only_its_own_entry_and_no_request(tmp_path, lazy):
    p = tmp_path / "c.json"
    record_steps(p, 50)
    tape = Cassette(p, mode="replay")
    entries = orjson.loads(p.read_bytes())["entries"]
    for i in (0, 49, 7):
        rec = tape.get(entries[i]["key"])
        assert rec is not None
        assert CODEC.decode(rec.value, key=entries[i]["key"])["id"] == f"chatcmpl-{i}"
    assert tape._tape.full is None and all(e is None or e.doc is None for e in tape._tape.old)
    assert sum(e is not None for e in tape._tape.old) == 3  # the other 47 were never touched


@pytest.mark.parametrize("order", ["forward", "backward", "shuffled"])
def test_indexed_lookup_serves_every_entry_in_any_order(tmp_path, monkeypatch, order, lazy):
    monkeypatch.setattr(reader, "_SEARCHES_BEFORE_MAP", 7)  # byte searches, then the dict
    p = tmp_path / "c.json"
    record_steps(p, 40)
    keys = [e["key"] for e in orjson.loads(p.read_bytes())["entries"]]
    ids = list(range(40))
    if order == "backward":
        ids.reverse()
    elif order == "shuffled":
        ids = ids[::7] + [i for i in ids if i % 7]
    tape = Cassette(p, mode="replay")
    for i in ids:
        rec = tape.get(keys[i])
        assert rec is not None, i
        assert CODEC.decode(rec.value, key=keys[i])["id"] == f"chatcmpl-{i}"
    assert tape.get(keys[0]) is None and tape.unused == []


def test_hand_edited_file_is_read_by_the_full_parser(tmp_path):
    p = tmp_path / "c.json"
    record_steps(p, 3)
    doc = orjson.loads(p.read_bytes())
    p.write_bytes(orjson.dumps(doc))  # compact: the lazy index does not apply
    tape = Cassette(p, mode="replay")
    rec = tape.get(doc["entries"][2]["key"])
    assert rec is not None
    assert CODEC.decode(rec.value, key=doc["entries"][2]["key"])["id"] == "chatcmpl-2"


def test_invalid_files_raise_cassette_error_naming_the_path(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(CassetteError, match=r"bad\.json"):
        Cassette(p, mode="replay").get("k")
    p.write_text('{"entries": [], "format": 99, "values": {}}')
    with pytest.raises(CassetteError, match="format 99"):
        Cassette(p, mode="replay").get("k")


def test_closing_an_unchanged_block_reads_only_the_entries_it_used(tmp_path, lazy):
    p = tmp_path / "c.json"
    record_steps(p, 40)
    before = p.read_bytes()
    entries = orjson.loads(before)["entries"]
    tape = Cassette(p, mode="replay")
    assert tape.get(entries[39]["key"]) is not None  # out of order: reported, lazily
    assert tape.save() is False  # nothing changed: no parse, no write
    assert tape._tape.full is None and sum(e is not None for e in tape._tape.old) == 1
    tape.close()
    assert p.read_bytes() == before
    unused = tape.unused
    assert len(unused) == 39 and unused[0].key == entries[0]["key"] and unused[0].occurrence == 0
    divs = tape.divergences  # read from the file after close, which is still the one read
    unmade = [d for d in divs if d.reason == "unmade"]
    assert [d.recorded_step for d in unmade] == list(range(39))
    assert unmade[5].expected is not None and unmade[5].expected.request == orjson.loads(
        orjson.dumps({"body": next(s for i, s in enumerate(agent_steps(6)) if i == 5)[0]}))
    assert [d.reason for d in divs if d.reason != "unmade"] == ["order"]


def test_a_small_file_reports_a_late_hit_when_asked_reading_the_file_again(tmp_path):
    """A file parsed whole when opened names its out-of-order hit and the steps never made
    when ``divergences`` is read after close, from the file, as a lazily read one does."""
    p = tmp_path / "c.json"
    record_steps(p, 5)
    entries = orjson.loads(p.read_bytes())["entries"]
    tape = Cassette(p, mode="replay")
    assert tape.get(entries[4]["key"]) is not None  # out of order
    assert tape._tape.full is not None  # parsed whole
    tape.save()
    tape.close()
    assert tape._order.divergences == []  # nothing named at exit
    divs = tape.divergences
    assert [(d.reason, d.recorded_step) for d in divs] == [
        ("order", 0), ("unmade", 0), ("unmade", 1), ("unmade", 2), ("unmade", 3)]
    assert divs[0].actual is not None and divs[0].actual.recorded_step == 4
    assert divs[0].actual.request == orjson.loads(
        orjson.dumps({"body": next(s for i, s in enumerate(agent_steps(5)) if i == 4)[0]}))
    assert divs[2].expected is not None and divs[2].expected.request == orjson.loads(
        orjson.dumps({"body": next(s for i, s in enumerate(agent_steps(5)) if i == 1)[0]}))


def test_a_small_file_a_block_recorded_into_names_its_late_hit_at_exit(tmp_path):
    """The block rewrites the file: what it reports is named before, from the parse, so
    the requests stay known."""
    p = tmp_path / "c.json"
    record_steps(p, 5)
    entries = orjson.loads(p.read_bytes())["entries"]
    tape = Cassette(p, mode="auto")
    assert tape.get(entries[4]["key"]) is not None  # out of order
    assert tape.get("no-such-key") is None
    tape.put("no-such-key", Record(value=CODEC.encode({"new": 1}, key="no-such-key"),
                                   name="openai.chat", kind="llm", request=b'{"new":1}'))
    assert tape.save() is True
    tape.close()
    divs = tape.divergences
    assert divs[0].reason == "order"
    assert divs[0].actual is not None and divs[0].actual.request is not None


def test_a_block_that_records_a_call_leaves_the_unmade_report_for_later(tmp_path, lazy):
    """An auto-mode miss does not parse the file; the block's exit does not expand the
    requests of every recorded step it never made (2.3 s for a 10k-entry agent run): the
    report is built when asked for, and the requests of a file the block rewrote show as
    unknown rather than as another recording's."""
    p = tmp_path / "c.json"
    record_steps(p, 40)
    entries = orjson.loads(p.read_bytes())["entries"]
    tape = Cassette(p, mode="auto")
    assert tape.get(entries[0]["key"]) is not None
    assert tape.get("no-such-key") is None  # a miss: the cross-reference vouches for it
    assert tape._tape.full is None
    tape.put("no-such-key", Record(value=CODEC.encode({"new": 1}, key="no-such-key"),
                                   name="openai.chat", kind="llm", request=b'{"new":1}'))
    expanded: list[object] = []
    real_expand = tape.expand
    tape.expand = lambda tree: expanded.append(tree) or real_expand(tree)  # type: ignore
    tape.save()
    tape.close()
    assert expanded == []  # nothing expanded at exit
    assert len(load_document(p.read_bytes(), p)["entries"]) == 41
    unmade = [d for d in tape.divergences if d.reason == "unmade"]
    # (step 1 is the one the new call replaced: reported as changed, not unmade)
    assert [d.recorded_step for d in unmade] == list(range(2, 40))
    assert unmade[0].expected is not None and unmade[0].expected.name == "openai.chat"
    assert unmade[0].expected.key == entries[2]["key"]
    assert unmade[0].expected.request is None  # the file was rewritten meanwhile


def test_a_damaged_cross_reference_is_refused_never_served(tmp_path, lazy):
    p = tmp_path / "c.json"
    record_steps(p, 10)
    data = p.read_bytes()
    key = orjson.loads(data)["entries"][3]["key"]
    at = data.rindex(b'"sizes": [') + len(b'"sizes": [\n      ')
    damaged = data[:at] + (b"2" if data[at:at + 1] != b"2" else b"3") + data[at + 1:]
    p.write_bytes(damaged)
    with pytest.raises(CassetteError, match=r"cross-reference \('xref'\) does not match"):
        Cassette(p, mode="replay").get(key)
    # re-checksummed by hand, the stale cross-reference is still refused by the full parse
    doc = orjson.loads(data)
    doc["xref"]["keys"][2], doc["xref"]["keys"][3] = doc["xref"]["keys"][3], doc["xref"]["keys"][2]
    doc["xref"]["checksum"] = xref_checksum(doc["xref"])
    p.write_bytes(dumps(doc))
    with pytest.raises(CassetteError, match="does not describe the entries"):
        Cassette(p, mode="replay").get(key)


def test_xref_at_is_a_checked_hint_and_a_wrong_one_means_a_full_parse(tmp_path, lazy):
    p = tmp_path / "c.json"
    record_steps(p, 12)
    data = p.read_bytes()
    doc = orjson.loads(data)
    entries = doc["entries"]
    assert with_xref_at(dumps({k: v for k, v in doc.items() if k != "xref_at"})) == data
    a, at, keys, end = doc["xref_at"]
    moved = [
        dumps(dict(doc, xref_at=[a, at + 1, keys, end])),  # not the cross-reference
        dumps(dict(doc, xref_at=[a, at, keys - 1, end])),  # not its keys
        dumps(dict(doc, xref_at=[a, at, keys, end + 8])),  # past their end
        dumps(dict(doc, xref_at=[a, "x", keys, end])),
        dumps(dict(doc, xref_at=[a + 1, at, keys, end])),  # not the entries
        dumps(dict(doc, xref_at=[a, at, keys, end, 1])),
    ]
    for bad in moved:
        with pytest.raises(CassetteError, match="xref_at"):
            FileIndex.open(bad)
    without = dumps({k: v for k, v in doc.items() if k != "xref_at"})  # unreleased files
    assert FileIndex.open(without) is None

    def replay() -> tuple[list[object], bool]:
        tape = Cassette(p, mode="replay")
        keys = [entries[i]["key"] for i in (11, 0, 5)]
        got = [(k, tape.get(k)) for k in keys]
        parsed = tape._tape.full is not None
        tape.close()
        return [CODEC.decode(r.value, key=k) for k, r in got if r is not None], parsed

    expected, parsed = replay()
    assert len(expected) == 3 and not parsed  # served through the cross-reference
    for bad in [*moved, without]:  # read whole: every entry, exactly
        p.write_bytes(bad)
        assert replay() == (expected, True)
    p.write_bytes(data)
    tape = Cassette(p, mode="replay")
    assert tape.get(entries[11]["key"]) is not None and tape._tape.full is None
    tape.close()
    assert len(tape.unused) == 11 and tape.unused[-1].key == entries[10]["key"]


def test_format_2_files_replay_and_their_next_write_upgrades_them(tmp_path):
    p = tmp_path / "c.json"
    record_steps(p, 4)
    doc = orjson.loads(p.read_bytes())
    del doc["xref"]
    doc["format"] = 2
    old = dumps(doc)
    p.write_bytes(old)
    tape = Cassette(p, mode="replay")
    rec = tape.get(doc["entries"][2]["key"])
    assert rec is not None and CODEC.decode(rec.value, key=doc["entries"][2]["key"])["id"] == (
        "chatcmpl-2")
    assert tape.save() is False and p.read_bytes() == old
    record_steps(p, 5, mode="auto")  # one new call: the file is rewritten as format 3
    assert orjson.loads(p.read_bytes())["format"] == fmt.FORMAT
