"""Bodies of imported vcrpy interactions: the serializer shapes that keep JSON parsed are read,
a body that cannot be read skips its interaction (listed, never written hollow), and
compressed bodies inflate within the file's budget.

Each import is replayed through dejacache's httpx transport with no server anywhere: a hit
needs no network, and a miss would raise.
"""

from __future__ import annotations

import json
import pathlib
import time
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("httpx")

import dejacache
from dejacache.cassettes.importers import import_file
from dejacache.cassettes.importers._bodies import (
    Unreadable,
    codings,
    decode,
    request_body,
    response_body,
)
from dejacache.cassettes.importers._limits import (
    INFLATE_FLOOR,
    InflateBudget,
    OverBudget,
)
from dejacache.cli import main

URI = "https://api.openai.com/v1/chat/completions"
ASKED = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {"id": "chatcmpl-7", "object": "chat.completion",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
JSON = ["application/json"]


def _vcr(*interactions: dict[str, Any]) -> dict[str, Any]:
    return {"interactions": list(interactions), "version": 1}


DROP = object()  # a field the interaction does not have


def _interaction(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    req = {"method": "POST", "uri": URI, "headers": {"content-type": JSON}, **request}
    resp = {"status": {"code": 200, "message": "OK"}, "headers": {"content-type": JSON},
            **response}
    return {"request": {k: v for k, v in req.items() if v is not DROP},
            "response": {k: v for k, v in resp.items() if v is not DROP}}


def _write(path: pathlib.Path, doc: dict[str, Any]) -> pathlib.Path:
    path.write_text(json.dumps(doc))  # vcrpy's JSON serializer: the same dict
    return path


def _replay(out: pathlib.Path, asked: Any = ASKED) -> Any:
    with dejacache.cassette(out, mode="replay") as tape, \
            dejacache.http_client(library="httpx") as client:
        answer = client.post(URI, json=asked)
        assert tape.counters.replayed == 1
    return answer.json()


# ---------------------------------------------------------------- serializer shapes

# pydantic-ai's suite registers a YAML serializer that parses JSON bodies into `parsed_body`
# (and drops `body`), lowercases and filters headers, and writes multi-line text as literal
# blocks. This file is written by hand in that shape.
PARSED_BODY_YAML = """\
interactions:
- request:
    headers:
      accept:
      - application/json
      content-length:
      - '71'
      content-type:
      - application/json
      host:
      - api.openai.com
    method: POST
    parsed_body:
      messages:
      - content: hi
        role: user
      model: gpt-4o-mini
    uri: https://api.openai.com/v1/chat/completions
  response:
    headers:
      content-encoding:
      - gzip
      content-length:
      - '160'
      content-type:
      - application/json
    parsed_body:
      choices:
      - index: 0
        message:
          content: hello
          role: assistant
      id: chatcmpl-7
      object: chat.completion
    status:
      code: 200
      message: OK
version: 1
"""


def test_parsed_body_cassettes_are_read_and_replay(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("yaml")
    src, out = tmp_path / "pydantic_ai.yaml", tmp_path / "out.json"
    src.write_text(PARSED_BODY_YAML)
    report = import_file(src, out)
    assert [c.index for c in report.converted] == [0] and not report.skipped
    # The parsed answer is decoded already: the leftover content-encoding is not applied.
    assert _replay(out) == ANSWER
    with dejacache.cassette(out, mode="replay"), \
            dejacache.http_client(library="httpx") as client, \
            pytest.raises(dejacache.ReplayMiss):
        client.post(URI, json={**ASKED, "model": "gpt-4o"})  # the request body was kept


@pytest.mark.parametrize("shape", ["mapping", "mapping under string"])
def test_json_bodies_stored_as_mappings_are_read(shape: str, tmp_path: pathlib.Path) -> None:
    body: Any = ANSWER if shape == "mapping" else {"string": ANSWER}
    src = _write(tmp_path / "v.json", _vcr(_interaction({"body": ASKED}, {"body": body})))
    report = import_file(src, tmp_path / "out.json")
    assert len(report.converted) == 1 and not report.skipped
    assert _replay(tmp_path / "out.json") == ANSWER


OK_BODY = {"body": {"string": "{}"}}
HOLLOW: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "no request body": ({"body": DROP}, OK_BODY, "the request has no body"),
    "no response body": ({"body": "{}"}, {"body": DROP}, "the response has no body"),
    "a null response body": ({"body": "{}"}, {"body": None}, "the response has no body"),
    "a null body string": ({"body": "{}"}, {"body": {"string": None}},
                           "the response has no body"),
    "a mapping that is not JSON": ({"body": {"q": "x"}, "headers": {"content-type": ["text/x"]}},
                                   OK_BODY, "content type is text/x, not JSON"),
    "a body and a parsed body": ({"body": "{}", "parsed_body": {"a": 1}}, OK_BODY,
                                 "both a body and a parsed_body"),
    "a number for a body": ({"body": 5}, OK_BODY, "is a int"),
    "no status": ({"body": "{}"}, {**OK_BODY, "status": {"code": "200"}}, "no status code"),
    "a header that is a list of lists": ({"body": "{}"}, {**OK_BODY, "headers": {"x": [["a"]]}},
                                         "header 'x' is not text"),
}


@pytest.mark.parametrize("case", HOLLOW.values(), ids=HOLLOW.keys())
def test_an_unreadable_body_is_skipped_and_listed_never_written_hollow(
    case: tuple[dict[str, Any], dict[str, Any], str], tmp_path: pathlib.Path
) -> None:
    request, response, why = case
    good = _interaction({"body": orjson.dumps(ASKED).decode()},
                        {"body": {"string": orjson.dumps(ANSWER).decode()}})
    src = _write(tmp_path / "v.json", _vcr(_interaction(request, response), good))
    out = tmp_path / "out.json"
    report = import_file(src, out)
    assert [c.index for c in report.converted] == [1]
    assert [s.index for s in report.skipped] == [0]
    assert why in report.skipped[0].reason
    assert report.skipped[0].name == report.converted[0].name  # named as the live call is
    assert _replay(out) == ANSWER  # only the readable one was written


@pytest.mark.parametrize("value", [".nan", "!!set {a: null}", "2024-01-01", "{1: a}",
                                   "!!python/tuple [1]", "!!binary YQ=="])
def test_a_parsed_body_that_json_cannot_hold_is_skipped(value: str, tmp_path: pathlib.Path
                                                        ) -> None:
    pytest.importorskip("yaml")
    src = tmp_path / "v.yaml"
    src.write_text(PARSED_BODY_YAML.replace("      model: gpt-4o-mini", f"      model: {value}"))
    report = import_file(src, tmp_path / "out.json")
    assert not report.converted and not report.written
    assert "its request parsed_body is not JSON" in report.skipped[0].reason


def test_the_cli_counts_hollow_interactions_as_skipped(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _write(tmp_path / "v.json", _vcr(
        _interaction({"body": "{}"}, {"body": DROP, "content_json": {"gone": 1}}),
        _interaction({"body": "{}"}, {"body": {"string": "{}"}})))
    assert main(["import", str(src), "-o", str(tmp_path / "out.json")]) == 0
    text = capsys.readouterr().out
    assert "converted: 1 call(s)" in text and "skipped: 1 call(s)" in text
    assert "the response has no body" in text.split("skipped: 1 call(s)")[1]


def test_request_and_response_body_shapes() -> None:
    assert request_body({"body": None}, "") == b""
    assert request_body({"body": "x"}, "") == b"x"
    assert request_body({"parsed_body": [1, "é"]}, "") == '[1,"é"]'.encode()
    assert response_body({"body": {"string": b"\x1f"}}, "") == (b"\x1f", True)
    assert response_body({"parsed_body": None}, "") == (b"null", False)
    assert response_body({"status_code": 200, "content": "x"}, "") == (b"x", True)
    for bad in ({}, {"body": {1: 2}}, {"body": {"a": (1, 2)}}, {"body": "\ud800"},
                {"parsed_body": {"a": "\ud800"}}):
        with pytest.raises(Unreadable):
            request_body(bad, "application/json")


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8,
)
_PLACES = [("request",), ("request", "method"), ("request", "uri"), ("request", "body"),
           ("request", "headers"), ("request", "headers", "content-type"),
           ("request", "parsed_body"), ("response",), ("response", "status"),
           ("response", "status", "code"), ("response", "headers"),
           ("response", "headers", "content-encoding"), ("response", "body"),
           ("response", "body", "string"), ("response", "parsed_body"),
           ("response", "status_code")]


def _put(doc: dict[str, Any], place: tuple[str, ...], value: Any) -> None:
    for key in place[:-1]:
        if not isinstance(doc.get(key), dict):
            return
        doc = doc[key]
    if value is DROP:
        doc.pop(place[-1], None)
    else:
        doc[place[-1]] = value


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.sampled_from(_PLACES), _JSONISH | st.just(DROP)),
                      min_size=1, max_size=3))
def test_mutated_interactions_give_a_report_or_a_cassette_error(
    edits: list[tuple[tuple[str, ...], Any]], tmp_path: pathlib.Path
) -> None:
    it = _interaction({"body": orjson.dumps(ASKED).decode()},
                      {"body": {"string": orjson.dumps(ANSWER).decode()}})
    for place, value in edits:
        _put(it, place, value)
    src, out = _write(tmp_path / "v.json", _vcr(it)), tmp_path / "out.json"
    out.unlink(missing_ok=True)
    try:
        report = import_file(src, out)
    except dejacache.CassetteError as exc:
        assert str(src) in str(exc)
        return
    assert len(report.converted) + len(report.skipped) == 1


# ---------------------------------------------------------------- compressed bodies


def _gzip_of_zeros(mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join([*(c.compress(block) for _ in range(mib)), c.flush()])


def _bomb_yaml(path: pathlib.Path, bodies: list[bytes]) -> pathlib.Path:
    yaml = pytest.importorskip("yaml")
    doc = _vcr(*(_interaction({"body": "{}"}, {
        "headers": {"content-type": JSON, "content-encoding": ["gzip"]},
        "body": {"string": body}}) for body in bodies))
    path.write_text(yaml.safe_dump(doc))  # bytes as !!binary, as vcrpy writes them
    return path


@pytest.mark.timeout(20)
def test_a_gzip_bomb_is_refused_before_it_inflates(tmp_path: pathlib.Path) -> None:
    bomb = _gzip_of_zeros((INFLATE_FLOOR >> 20) + 16)  # ~80 KB that inflate to 80 MiB
    src, out = _bomb_yaml(tmp_path / "bomb.yaml", [bomb]), tmp_path / "out.json"
    started = time.perf_counter()
    with pytest.raises(dejacache.CassetteError, match="inflate past") as info:
        import_file(src, out)
    assert time.perf_counter() - started < 10
    assert str(src) in str(info.value) and "interaction #0" in str(info.value)
    assert not out.exists()


@pytest.mark.timeout(20)
def test_small_bombs_in_many_interactions_share_one_budget(tmp_path: pathlib.Path) -> None:
    bomb = _gzip_of_zeros(8)
    n = INFLATE_FLOOR // (8 << 20) + 2
    src, out = _bomb_yaml(tmp_path / "bombs.yaml", [bomb] * n), tmp_path / "out.json"
    with pytest.raises(dejacache.CassetteError, match="inflate past") as info:
        import_file(src, out)
    assert f"interaction #{INFLATE_FLOOR // (8 << 20)}" in str(info.value)
    assert not out.exists()


def test_decoding_undoes_each_coding_within_the_budget() -> None:
    text = orjson.dumps(ANSWER) * 50
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    gzipped = gz.compress(text) + gz.flush()
    raw = zlib.compressobj(6, zlib.DEFLATED, -15)
    assert decode(gzipped, codings(["gzip"]), InflateBudget(0)) == text
    assert decode(zlib.compress(text), codings(["deflate"]), InflateBudget(0)) == text
    assert decode(raw.compress(text) + raw.flush(), ["deflate"], InflateBudget(0)) == text
    both = zlib.compress(gzipped)
    assert decode(both, codings(["gzip, deflate"]), InflateBudget(0)) == text
    assert codings(["identity", " GZIP "]) == ["gzip"]
    budget = InflateBudget(0)
    budget.left = len(text) - 1
    with pytest.raises(OverBudget):
        decode(gzipped, ["gzip"], budget)


@pytest.mark.parametrize(("body", "coding", "why"), [
    (zlib.compress(b"x" * 1000)[:-6], "deflate", "cut short"),
    (b"\x1f\x8b not gzip at all", "gzip", "cannot be decoded"),
    (b"zstd frame", "zstd", "zstd-encoded, which this importer cannot decode"),
])
def test_a_body_that_cannot_be_decoded_is_unreadable(body: bytes, coding: str, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        decode(body, [coding], InflateBudget(0))


def test_brotli_bodies_are_decoded_within_the_budget() -> None:
    brotli = pytest.importorskip("brotli")
    if not hasattr(brotli.Decompressor(), "can_accept_more_data"):
        pytest.skip("brotli < 1.2 cannot bound its output")
    text = orjson.dumps(ANSWER) * 50
    assert decode(brotli.compress(text), ["br"], InflateBudget(0)) == text
    bomb = brotli.compress(bytes(INFLATE_FLOOR + (1 << 20)), quality=1)
    started = time.perf_counter()
    with pytest.raises(OverBudget):
        decode(bomb, ["br"], InflateBudget(len(bomb)))
    assert time.perf_counter() - started < 5
    with pytest.raises(Unreadable, match="cut short"):
        decode(brotli.compress(text)[:-4], ["br"], InflateBudget(0))
