"""Cassettes keyed again under new rules replay without re-recording (``_learn/rekey.py``)."""

from __future__ import annotations

import pathlib

import orjson
import pytest

import dejacache
from dejacache._learn.masking import Rules
from dejacache._learn.rekey import cassette_files, rekey_file

RULE = r"re:(?<=at )\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"
CALLS: list[str] = []


@dejacache.cache(kind="tool")
def plan(city: str, note: str) -> str:
    CALLS.append(note)
    return f"plan {len(CALLS)} for {city}"


def _record(path: pathlib.Path, notes: list[str]) -> list[str]:
    with dejacache.cassette(path, mode="record"):
        return [plan("Paris", n) for n in notes]


def test_a_rekeyed_cassette_replays_calls_that_differ_in_what_the_rule_masks(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cassettes" / "c.json"
    recorded = _record(path, ["made at 2026-01-01T00:00:01 for Ann",
                              "made at 2026-01-01T00:00:02 for Bob"])
    with pytest.raises(dejacache.ReplayMiss), dejacache.cassette(path, mode="replay",
                                                                 volatile=[RULE]):
        plan("Paris", "made at 2031-05-05T10:00:00 for Ann")
    done = rekey_file(path, Rules([RULE]))
    assert (done.changed, done.kept, done.problem) == (2, 0, None)
    text = path.read_text()
    assert "made at <volatile> for Ann" in text and "2026-01-01" not in text
    with dejacache.cassette(path, mode="replay", volatile=[RULE]):
        assert [plan("Paris", "made at 2031-05-05T10:00:00 for Ann"),
                plan("Paris", "made at 1999-01-01T00:00:00 for Bob")] == recorded
    assert rekey_file(path, Rules([RULE])).changed == 0  # again: nothing left to change


@dejacache.cache(kind="tool")
def weather(city: str, note: str) -> str:
    CALLS.append(note)
    return f"sunny in {city}"


def test_calls_merged_by_a_rule_keep_their_recorded_order(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(path, mode="record"):
        recorded = [weather("Paris", "at 2026-01-01T00:00:01"),
                    weather("Rome", "at 2026-01-01T00:00:05"),
                    weather("Paris", "at 2026-01-01T00:00:09")]
    assert rekey_file(path, Rules([RULE])).changed == 3
    doc = orjson.loads(path.read_bytes())
    assert [e["occurrence"] for e in doc["entries"]] == [0, 0, 1]
    with dejacache.cassette(path, mode="replay", volatile=[RULE]):
        assert [weather("Paris", "at 2030-01-01T00:00:00"),
                weather("Rome", "at 2030-01-01T00:00:00"),
                weather("Paris", "at 2030-01-01T00:00:00")] == recorded


ORDER = r"re:(?<=order )\d+"


@dejacache.cache(kind="tool")
def order_status(order: str) -> str:
    return {"order 1234": "shipped", "order 5678": "lost"}[order]


def test_rules_that_would_merge_calls_answered_differently_leave_the_cassette_alone(
        tmp_path: pathlib.Path) -> None:
    # Keyed as one, the two orders replay by position: order 5678 alone gets "shipped".
    path = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(path, mode="record"):
        assert [order_status("order 1234"), order_status("order 5678")] == ["shipped", "lost"]
    before = path.read_bytes()
    done = rekey_file(path, Rules([ORDER]))
    assert done.changed == 0 and done.problem is not None
    assert "entries #0 and #1 one key, and they were answered differently" in done.problem
    assert path.read_bytes() == before
    with pytest.raises(dejacache.ReplayMiss), dejacache.cassette(path, mode="replay",
                                                                 volatile=[ORDER]):
        order_status("order 5678")  # a miss, not the other order's answer


def test_calls_recorded_under_one_key_may_hold_different_answers(
        tmp_path: pathlib.Path) -> None:
    # One call asked twice and answered twice: its occurrences replay in order, merged or not.
    path = tmp_path / "cassettes" / "c.json"
    recorded = _record(path, ["at 2026-01-01T00:00:01", "at 2026-01-01T00:00:01"])
    assert rekey_file(path, Rules([RULE])).changed == 2
    with dejacache.cassette(path, mode="replay", volatile=[RULE]):
        assert [plan("Paris", "at 2030-01-01T00:00:00"),
                plan("Paris", "at 2030-01-01T00:00:00")] == recorded


def test_an_entry_whose_request_cannot_give_its_key_back_keeps_it(
        tmp_path: pathlib.Path) -> None:
    # An API key pasted into an argument is keyed as it is but stored masked: the file
    # cannot give the key back, so the entry is left for a re-record (the other is re-keyed).
    path = tmp_path / "cassettes" / "c.json"
    _record(path, ["key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12 at 2026-01-01T00:00:01",
                   "at 2026-01-01T00:00:02"])
    done = rekey_file(path, Rules([RULE]))
    assert (done.changed, done.kept) == (1, 1)
    assert "sk-proj-AbCd" not in path.read_text()


def test_substituted_values_are_keyed_as_their_placeholders_and_rekey(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(path, mode="record", substitute={"<ACCOUNT>": "987654"}):
        recorded = plan("Paris", "account 987654 at 2026-01-01T00:00:01")
    assert rekey_file(path, Rules([RULE])).changed == 1
    with dejacache.cassette(path, mode="replay", substitute={"<ACCOUNT>": "987654"},
                            volatile=[RULE]):
        assert plan("Paris", "account 987654 at 2030-01-01T00:00:00") == recorded


def test_files_that_are_not_cassettes_are_left_alone(tmp_path: pathlib.Path) -> None:
    other = tmp_path / "cassettes" / "notes.json"
    other.parent.mkdir()
    other.write_text('{"a": 1}')
    done = rekey_file(other, Rules([RULE]))
    assert done.problem is not None and "not a dejacache cassette" in done.problem
    assert other.read_text() == '{"a": 1}'


def test_cassette_files_skip_environments_and_hidden_directories(tmp_path: pathlib.Path
                                                                 ) -> None:
    for rel in ("tests/cassettes/a/t.json", "tests/cassettes/x.txt", "tests/other/o.json",
                ".hidden/cassettes/h.json", "venv/cassettes/v.json",
                "node_modules/p/cassettes/n.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("")
    found = sorted(p.relative_to(tmp_path).as_posix() for p in cassette_files([tmp_path]))
    assert found == ["tests/cassettes/a/t.json"]


def test_an_append_killed_midway_is_rolled_back_before_the_cassette_is_rekeyed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The file is read under the lock rekey holds: reading it took the lock again when an
    # undo record was there, and waited for itself (60 s) before giving up.
    from dejacache.cassettes import format as fmt
    from dejacache.cassettes import lock

    monkeypatch.setattr(lock, "TIMEOUT_S", 2.0)
    path = tmp_path / "cassettes" / "c.json"
    recorded = _record(path, ["made at 2026-01-01T00:00:01 for Ann"])
    good = path.read_bytes()
    with path.open("ab") as fh:
        fh.write(b"half an append")
    fmt.undo_path(path).write_bytes(fmt.undo_record(len(good), len(good), b""))
    done = rekey_file(path, Rules([RULE]))
    assert (done.changed, done.problem) == (1, None)
    assert not fmt.undo_path(path).exists()
    with dejacache.cassette(path, mode="replay", volatile=[RULE]):
        assert plan("Paris", "made at 2031-05-05T10:00:00 for Ann") == recorded[0]
