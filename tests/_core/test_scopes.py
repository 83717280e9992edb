"""Scope encoding: injective, separator-free, so tenants can never share a key prefix."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.scopes import (
    decode_component,
    encode_component,
    session_prefix,
    tenant_prefix,
)

TRICKY = [
    "a", "a/b", "a%2Fb", "a%2fb", "../a", "..", ".", "%", "%%", "a\x00b", "a\x00", "\x00",
    "é", unicodedata.normalize("NFD", "é"), "ﬁ", "fi", "A", "a ", " a", "a/", "a//b",
    "t/s", "t%2Fs", "x" * 10_000, "x" * 10_001, "\ud800", "🙂", "a:b", "a\nb",
]


@given(st.text())
def test_round_trip_and_no_separator(value: str) -> None:
    enc = encode_component(value)
    assert "/" not in enc
    assert enc.isascii()
    assert decode_component(enc) == value


@given(st.text(), st.text())
def test_distinct_tenants_never_share_a_prefix(a: str, b: str) -> None:
    if a == b:
        return
    pa, pb = tenant_prefix(a), tenant_prefix(b)
    assert pa != pb
    # No prefix is a path-prefix of another: keys under one can never be keys under the other.
    assert not (pa + "/").startswith(pb + "/")
    assert not (pb + "/").startswith(pa + "/")


@given(st.text(), st.text(), st.text(), st.text())
def test_session_prefixes_injective(t1: str, s1: str, t2: str, s2: str) -> None:
    if (t1, s1) != (t2, s2):
        assert session_prefix(t1, s1) != session_prefix(t2, s2)


def test_tricky_ids_all_distinct() -> None:
    encoded = {encode_component(v) for v in TRICKY}
    assert len(encoded) == len(set(TRICKY))
    assert len({tenant_prefix(v) for v in TRICKY}) == len(set(TRICKY))


def test_empty_string_is_distinct() -> None:
    assert encode_component("") == "%"
    assert decode_component("%") == ""
    assert encode_component("") != encode_component("%")


@pytest.mark.parametrize("bad", ["%zz", "%4", "a b", "é", "a/b"])
def test_decode_rejects_non_encodings(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_component(bad)
