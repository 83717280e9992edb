"""``match="vcr"``: method + URL in recorded order (``cassettes/vcr_match.py``).

The rules as pure functions, then a cassette recorded by dejacache and replayed with changed
bodies through the real openai SDK against the loopback provider (the vcrpy-written
recordings are in ``tests/cassettes/importers/test_vcr_import_match.py``).
"""

from __future__ import annotations

import pathlib
import warnings
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dejacache
from dejacache.cassettes import format as fmt
from dejacache.cassettes.document import load_document, verify_document
from dejacache.cassettes.render import render
from dejacache.cassettes.vcr_match import check_match, rekey_entries, stale_fields, target_key
from loopback_provider import fake_provider_module

openai = pytest.importorskip("openai")
FakeProvider = fake_provider_module().FakeProvider
LONG = "context " * 60


@pytest.mark.parametrize(("old", "new", "want"), [
    ({"body": {"n": 1, "m": "x"}}, {"body": {"m": "x"}}, ["body.n removed"]),
    ({"body": {}}, {"body": {"tool_choice": "auto"}}, ["body.tool_choice added"]),
    ({"body": {"system": "s"}}, {"body": {"system": [{"type": "text", "text": "s"}]}},
     ["body.system changed"]),
    ({"body": {"m": [{"c": "a\u2014b"}]}}, {"body": {"m": [{"c": "a-b"}]}},
     ["body.m[0].c changed"]),
    ({"body": {"m": "removed (was x)"}}, {"body": {"m": "y"}}, ["body.m changed"]),
    ({"body": {"m": 1}}, {"body": {"m": 1}}, []),
])
def test_stale_fields_name_each_changed_field_with_one_verb(old: Any, new: Any,
                                                            want: list[str]) -> None:
    assert stale_fields(old, new) == want


def test_the_method_and_url_key_leaves_the_body_out_and_never_equals_a_request_key() -> None:
    a = {"method": "POST", "path": "/v1/chat/completions", "body": {"n": 1}}
    b = {"method": "post", "path": "/v1/chat/completions", "body": {"n": 2}}
    k = target_key("ns", "openai.chat.completions", a)
    assert k == target_key("ns", "openai.chat.completions", b)
    assert k != target_key("other", "openai.chat.completions", a)
    assert k != target_key("ns", "openai.embeddings", a)
    assert k != target_key("ns", "openai.chat.completions", {**a, "query": {"v": "1"}})
    assert k != target_key("ns", "openai.chat.completions", {**a, "method": "GET"})
    assert target_key("ns", "f", {"args": [1]}) is None
    assert target_key("ns", "f", "text") is None


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@given(body_a=_JSON, body_b=_JSON,
       query=st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=4))
def test_the_method_and_url_key_ignores_the_body_and_the_query_order(
    body_a: Any, body_b: Any, query: dict[str, str]
) -> None:
    a = {"method": "POST", "path": "/v1/x", "query": query, "body": body_a}
    b = {"body": body_b, "query": dict(reversed(list(query.items()))), "path": "/v1/x",
         "method": "POST"}
    assert target_key("ns", "n", a) == target_key("ns", "n", b)


def test_only_http_entries_are_rekeyed() -> None:
    req = {"method": "GET", "path": "/x"}
    http = {"kind": "http", "name": "n", "namespace": "", "key": "k1", "request": "@ref:h"}
    call = {"kind": "call", "name": "f", "namespace": "", "key": "k2", "request": req}
    out = rekey_entries([http, call], lambda t: req if t == "@ref:h" else t)
    assert out[0]["key"] == target_key("", "n", req) and out[0]["match"] == "vcr"
    assert out[0]["request"] == "@ref:h"  # still packed: only the key and the mark change
    assert out[1] is call


def test_an_unknown_match_is_a_configuration_error(tmp_path: pathlib.Path) -> None:
    assert check_match("vcr") == "vcr"
    with pytest.raises(dejacache.ConfigurationError, match="match must be one of"):
        dejacache.cassette(tmp_path / "t.json", match="body")


def _ask(base: str, questions: list[str], **extra: Any) -> list[str]:
    with openai.OpenAI(base_url=base, api_key="sk-test-FAKE", max_retries=0,
                       http_client=dejacache.http_client()) as oc:
        return [oc.chat.completions.create(model="gpt-4o-mini", **extra,
                                           messages=[{"role": "user", "content": q}]).id
                for q in questions]


def _stale(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, dejacache.DejacacheWarning)]


def test_a_block_with_match_vcr_serves_changed_bodies_in_recorded_order(
    tmp_path: pathlib.Path
) -> None:
    p = tmp_path / "t.json"
    fake = FakeProvider().start()
    try:
        with dejacache.cassette(p, mode="record"):
            # long enough that the file stores the messages once, by reference
            live = _ask(fake.openai_url, [LONG + "one", LONG + "two", LONG + "one"], n=1)
    finally:
        fake.stop()
    with pytest.raises(dejacache.ReplayMiss), dejacache.cassette(p, mode="replay"):
        _ask(fake.openai_url, [LONG + "one"])  # matched whole by default: the body changed
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(p, mode="replay", match="vcr") as tape:
            # the n-th call gets the n-th answer, whatever its body
            assert _ask(fake.openai_url, ["uno", "dos", "tres"]) == live
            with pytest.raises(dejacache.ReplayMiss):  # past the recorded count
                _ask(fake.openai_url, ["cuatro"])
    assert tape.counters.replayed == 3 and tape.vcr.served == 3
    (message,) = _stale(record)
    assert "body.messages[0].content changed, body.n removed" in message
    assert "answered 3 call(s) (openai.chat.completions x3)" in message


def test_unchanged_bodies_under_match_vcr_warn_nothing(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "t.json"
    fake = FakeProvider().start()
    try:
        with dejacache.cassette(p, mode="record"):
            live = _ask(fake.openai_url, ["one", "two"])
    finally:
        fake.stop()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(p, mode="replay", match="vcr") as tape:
            assert _ask(fake.openai_url, ["one", "two"]) == live
    assert tape.vcr.served == 2 and tape.vcr.stale == [] and not _stale(record)


def test_function_calls_in_a_match_vcr_block_are_matched_whole(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "t.json"
    f = dejacache.cache(name="double")(lambda x: 2 * x)
    with dejacache.cassette(p, mode="record"):
        assert f(1) == 2
    with dejacache.cassette(p, mode="replay", match="vcr"):
        assert f(1) == 2
        with pytest.raises(dejacache.ReplayMiss):
            f(2)


def test_an_imported_entry_keeps_its_request_and_a_checksummed_file(
    tmp_path: pathlib.Path
) -> None:
    p = tmp_path / "t.json"
    fake = FakeProvider().start()
    try:
        with dejacache.cassette(p, mode="record"):
            _ask(fake.openai_url, ["one"])
    finally:
        fake.stop()
    doc = load_document(p.read_bytes(), p)
    values = doc["values"]
    entries = rekey_entries(doc["entries"], lambda t: fmt.unpack(t, values.__getitem__))
    p.write_bytes(render(entries, values))
    again = orjson.loads(p.read_bytes())
    verify_document(again, p)
    (e,) = again["entries"]
    assert e["match"] == "vcr" and e["request"]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with dejacache.cassette(p, mode="replay"):
            _ask(fake.openai_url, ["changed"])
    assert "body.messages[0].content changed" in _stale(record)[0]
