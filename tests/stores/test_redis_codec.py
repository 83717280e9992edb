"""The bytes of a Redis entry and the memos of a warm hit (pure: no server)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache.codec import JsonCodec
from dejacache.stores import Record
from dejacache.stores import _redis_codec as rc
from dejacache.stores._base import NOT_SHARED
from dejacache.stores._redis_codec import (
    KnownHits,
    counter_values,
    pack_record,
    record_with_ttl,
    unpack_record,
)

_text = st.text(max_size=30)
_finite = st.floats(allow_nan=False, allow_infinity=False)
records = st.builds(
    Record,
    value=st.binary(max_size=200),
    name=_text,
    namespace=_text,
    kind=_text,
    duration=_finite,
    usage=st.none() | st.dictionaries(_text, st.integers(-(2**53), 2**53), max_size=4),
    created=_finite,
)


@given(records)
def test_a_packed_record_unpacks_to_itself(record: Record) -> None:
    back = unpack_record(pack_record(record), b"req")
    assert back is not None
    assert back.value == record.value and back.request == b"req"
    assert (back.name, back.namespace, back.kind) == (record.name, record.namespace, record.kind)
    assert back.duration == record.duration and back.created == record.created
    assert back.usage == (dict(record.usage) if record.usage else None)


@given(records, st.data())
def test_cut_or_damaged_bytes_never_raise(record: Record, data: st.DataObject) -> None:
    raw = pack_record(record)
    cut = data.draw(st.integers(0, len(raw)))
    flip = data.draw(st.integers(0, max(len(raw) - 1, 0)))
    damaged = raw[:flip] + bytes([raw[flip] ^ 0xFF]) + raw[flip + 1:] if raw else raw
    for candidate in (raw[:cut], damaged):
        got = unpack_record(candidate)
        assert got is None or isinstance(got, Record)


def test_record_with_ttl_reads_a_get_pttl_reply() -> None:
    raw = pack_record(Record(value=b"v", name="n"))
    assert record_with_ttl(None) == (None, None, False)  # Redis unavailable
    assert record_with_ttl([None, -2]) == (None, None, False)  # absent
    assert record_with_ttl([b"not ours", 100]) == (None, None, True)  # malformed: delete it
    rec, ttl, bad = record_with_ttl([raw, 1500])
    assert rec is not None and rec.value == b"v" and ttl == 1.5 and not bad
    assert record_with_ttl([raw, -1])[1] is None  # no expiry


@pytest.mark.parametrize(("reply", "values"), [
    ([], []),
    ([None, b"3", 7], [0, 3, 7]),
    ([b"x"], None),  # someone else's data under a counter key
    ([[1, 2]], None),  # not a scalar at all (a script's reply)
])
def test_counter_values(reply: list[object], values: list[int] | None) -> None:
    assert counter_values(reply) == values


def _plain(key: str, value: object) -> bytes:
    return pack_record(Record(value=JsonCodec().encode(value, key=key), name="n"))


def test_known_hits_remember_a_checked_body_and_hand_it_out_again() -> None:
    known = KnownHits()
    raw = _plain("k", {"a": 1})
    hit = known.decode("k", raw)
    assert hit is not None and hit[3] is None and bytes(hit[0] or b"") == b'{"a":1}'
    assert known.entries["k"] == (raw, hit)
    known.share("k", hit, "frozen")
    shared = known.entries["k"][1]
    assert shared[4] == "frozen" and shared[0] is hit[0]
    known.share("k", hit, "again")  # not the remembered Hit any more: nothing changes
    assert known.entries["k"][1] is shared
    known.forget("k")
    assert "k" not in known.entries
    known.decode("k", raw)
    known.forget()
    assert known.entries == {} and known.size == 0


def test_known_hits_leave_what_the_codec_must_read() -> None:
    known = KnownHits()
    wrong_key = known.decode("other", _plain("k", {"a": 1}))  # checksum bound to "k"
    assert wrong_key is not None and wrong_key[0] is None and wrong_key[3] is not None
    error = pack_record(Record(value=b"boom", name="n", kind="error"))
    got = known.decode("k", error)
    assert got is not None and got[0] is None and got[3] is not None
    assert got[3].kind == "error" and got[4] is NOT_SHARED
    assert known.decode("k", b"not ours") is None
    assert known.entries == {}


def test_known_hits_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rc, "_KNOWN_MAX", 3)
    known = KnownHits()
    for i in range(3):
        known.decode(f"k{i}", _plain(f"k{i}", i))
    assert len(known.entries) == 3
    known.decode("k3", _plain("k3", 3))  # full: started over
    assert list(known.entries) == ["k3"]
    monkeypatch.setattr(rc, "_KNOWN_BYTES", 1)
    known.decode("k4", _plain("k4", 4))
    assert list(known.entries) == ["k4"] and known.size == len(_plain("k4", 4))


def test_hit_memos_stay_small_while_writes_mint_new_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write makes the keys it invalidates unreachable, so a server under writes reads
    an endless run of new keys: what the memos hold at their bound is kept for good."""
    monkeypatch.setattr(rc, "_METAS", {})
    known = KnownHits()
    most = most_metas = 0
    for i in range(5000):
        key = f"t1/cart/g0.{i}.0/digest"
        assert known.decode(key, _plain(key, {"cart": 3, "v": i})) is not None
        most, most_metas = max(most, len(known.entries)), max(most_metas, len(rc._METAS))
    assert most <= 1024 and most_metas <= 1024
