"""Volatile shapes: where two strings differ, widened to the clock, id, path or nonce that
covers it, and the rules written for them (``_core/shapes.py``)."""

from __future__ import annotations

import base64
import datetime
import random
import re
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dejacache._core import volatile as _vol
from dejacache._core.shapes import (
    SHAPES,
    common_after,
    common_before,
    literal,
    rule_for,
    shape_of,
    spans,
)

# Plain words around the volatile part: letters only, so no shape can start in them.
WORDS = st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=30)
TIMES = st.datetimes(min_value=datetime.datetime(2000, 1, 1),
                     max_value=datetime.datetime(2099, 12, 31))


def _names(a: str, b: str) -> list[str | None]:
    return [s.shape.name if s.shape else None for s in spans(a, b)]


@pytest.mark.parametrize(("a", "b", "shape", "a_text"), [
    ("at 2026-12-02T03:56:04.489680 ok", "at 2026-12-02T03:58:14.1 ok", "timestamp",
     "2026-12-02T03:56:04.489680"),
    ("id 0b2f6da4-1cca-4c57-8a2d-6279e3d30aaa.", "id a1106da4-9cca-4c57-8a2d-6279e3d300d5.",
     "UUID", "0b2f6da4-1cca-4c57-8a2d-6279e3d30aaa"),
    ("in /tmp/tmpbthwrh9f.", "in /tmp/tmpk2l3m4n5.", "temp path", "/tmp/tmpbthwrh9f"),
    ("to /tmp/pytest-of-ci/pytest-12/test_a0/r.md", "to /tmp/pytest-of-ci/pytest-3/test_a0/r.md",
     "temp path", "/tmp/pytest-of-ci/pytest-12"),
    ("on 127.0.0.1:41234 now", "on 127.0.0.1:8001 now", "port", "41234"),
    ("took 1.41s", "took 980ms", "duration", "1.41s"),
    ("nonce=3fa9c2d1e0b41234 ", "nonce=77b0e1aa42c9ff00 ", "hex nonce", "3fa9c2d1e0b41234"),
    ("pid 4411.", "pid 5123.", "number", "4411"),
    ("sent 1796185683073,", "sent 1796185742950,", "epoch", "1796185683073"),
    ("Date: Wed, 02 Dec 2026 03:56:04 GMT", "Date: Wed, 02 Dec 2026 03:57:11 GMT", "HTTP date",
     "Wed, 02 Dec 2026 03:56:04 GMT"),
])
def test_a_difference_is_widened_to_the_shape_covering_it(a: str, b: str, shape: str,
                                                          a_text: str) -> None:
    (found,) = spans(a, b)
    assert found.shape is not None and found.shape.name == shape
    assert found.a_text == a_text
    assert a[found.a[0]:found.a[1]] == a_text


def test_ordinary_words_fit_no_shape() -> None:
    assert _names("Tell me about Paris", "Tell me about Rome") == [None]


def test_equal_strings_have_no_spans() -> None:
    assert spans("same", "same") == []


def test_context_stops_at_the_neighbouring_difference() -> None:
    a = "Duration: 334ms\n\n[a07cd7e7] x"
    b = "Duration: 1204ms\n\n[b1c2d3e4] x"
    dur, hexa = spans(a, b)
    assert (dur.before, dur.after) == ("Duration: ", "\n\n[")
    assert (hexa.before, hexa.after) == ("\n\n[", "] x")  # not "4ms\n\n[": that part varies


@given(WORDS, WORDS, TIMES, TIMES)
def test_any_two_timestamps_are_one_timestamp_span(head: str, tail: str,
                                                   t1: datetime.datetime,
                                                   t2: datetime.datetime) -> None:
    a, b = f"{head} {t1.isoformat()} {tail}", f"{head} {t2.isoformat()} {tail}"
    if a == b:
        return
    (found,) = spans(a, b)
    assert found.shape is shape_of("timestamp")
    assert (found.a_text, found.b_text) == (t1.isoformat(), t2.isoformat())
    rule = rule_for(found.shape, [found.a_text, found.b_text], bare=True)
    assert rule is not None
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b) == f"{head} <v> {tail}"


@given(WORDS, st.uuids(), st.uuids())
def test_uuids_are_masked_by_the_bare_rule_and_nothing_else(head: str, u1: uuid.UUID,
                                                            u2: uuid.UUID) -> None:
    a, b = f"{head}request {u1} done", f"{head}request {u2} done"
    if u1 == u2:
        return
    (found,) = spans(a, b)
    assert found.shape is shape_of("UUID")
    rule = rule_for(found.shape, [found.a_text], bare=True)
    assert rule is not None
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b) == f"{head}request <v> done"


@given(st.binary(min_size=4, max_size=24), st.binary(min_size=4, max_size=24),
       st.sampled_from(["nonce=", "trace: ", "[", "key "]))
def test_a_weak_shape_is_anchored_on_the_text_before_it(x: bytes, y: bytes, ctx: str) -> None:
    a, b = f"start {ctx}{x.hex()}] end", f"start {ctx}{y.hex()}] end"
    found = spans(a, b)
    if len(found) != 1 or found[0].shape is None or found[0].shape.strong:
        return  # equal, or a hex string of digits only (a number): not this property
    s = found[0]
    rule = rule_for(s.shape, [s.a_text, s.b_text], s.before, s.after)  # type: ignore[arg-type]
    assert rule is not None and (ctx.strip() in rule or "]" in rule)
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b)
    assert pat.sub("<v>", f"other {x.hex()}") == f"other {x.hex()}"  # not without its anchor


@pytest.mark.parametrize(("a", "b", "other", "kept"), [
    ("41 items", "97 items", "model v2 items", "v2"),
    ("5f3a9c items", "9b2e4d items", "sha 0123456789abcdef5f3a9c items", "0123456789abcdef5f3a9c"),
    ("1733400000 starts", "1733400999 starts", "v1.1733400000 starts", "1733400000"),
    ("Zm9vYmFyYmF6cXV4 sent", "cXV4YmFyZm9vYmF6 sent", "key/Zm9vYmFyYmF6cXV4 sent", "Zm9v"),
])
def test_a_rule_anchored_after_the_value_never_masks_the_tail_of_a_longer_token(
        a: str, b: str, other: str, kept: str) -> None:
    (s,) = spans(a, b)
    assert s.shape is not None and not s.shape.strong and s.before == ""
    rule = rule_for(s.shape, [s.a_text, s.b_text], s.before, s.after)
    assert rule is not None
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b)  # what it was written for
    assert kept in pat.sub("<v>", other)


def test_a_weak_shape_with_nothing_around_it_gets_no_rule() -> None:
    hexa = shape_of("hex nonce")
    assert rule_for(hexa, ["3fa9c2d1"], "", "") is None
    assert rule_for(hexa, ["3fa9c2d1"], "a", "") is None  # one letter anchors nothing


def test_every_rule_passes_the_exponential_time_check() -> None:
    for shape in SHAPES:
        rules = [rule_for(shape, ["1.5s", "2024-01-01", "12:00:01", "1796185683073",
                                  "3fa9c2d1", "Zm9vYmFyYmF6cXV4MTIz", "abc123def"],
                          "key: ", "")]
        if shape.strong:
            rules.append(rule_for(shape, [], bare=True))
        for rule in rules:
            assert rule is not None, shape.name
            _vol.parse([rule])  # raises for a pattern that can take exponential time


def test_common_context_is_cut_at_a_word_boundary() -> None:
    assert common_before(["Request nonce=", "Session nonce="]) == " nonce="
    assert common_before(["nonce=", "xnonce="]) == "nonce="
    assert common_after(["] 2026", "] 1999"]) == "] "
    assert common_before([]) == ""


def test_literal_escapes_only_what_must_be() -> None:
    text = "request id: [x] (a.b) \n*"
    assert literal(text) == r"request id: \[x\] \(a\.b\) \n\*"
    assert re.fullmatch(literal(text), text)


@settings(max_examples=400)
@given(st.integers(min_value=0, max_value=2**64), st.integers(min_value=15, max_value=32))
def test_any_two_url_safe_tokens_are_one_base64_nonce(seed: int, n: int) -> None:
    # Two tokens as secrets.token_urlsafe makes them (uniform bytes: Hypothesis's own
    # randoms shrink to runs of zero bytes, which no nonce is); one token in 60 of 24
    # characters has no digit, and such a token used to be no shape, its rule lost.
    r = random.Random(seed)
    a, b = (base64.urlsafe_b64encode(r.randbytes(n)).rstrip(b"=").decode() for _ in "ab")
    if a == b:
        return
    found = spans(f"Sign me in. csrf={a} now", f"Sign me in. csrf={b} now")
    assert len(found) == 1 and found[0].shape is not None, (a, b)
    assert found[0].shape.name == "base64 nonce"


def test_a_long_mixed_case_token_without_digits_is_a_base64_nonce() -> None:
    a, b = "csrf=qWeRtYuIoPaSdFgHjKlZxCvB done", "csrf=zXcVbNmAsDfGhJkLqWeRtYuI done"
    (found,) = spans(a, b)
    assert found.shape is not None and found.shape.name == "base64 nonce"
    assert _names("see getUserNameById here", "see getOrderNameById here") == [None]


@pytest.mark.parametrize(("a", "b"), [("[cf569e31] llm", "[09638711] llm"),
                                      ("[09638711] llm", "[cf569e31] llm"),
                                      ("csrf=q8Zk_yTfP0aLm3Xw2sVbN9cE ok",
                                       "csrf=qwERtyUIopASdfGHjklZXcvB ok")])
def test_a_nonce_that_came_out_all_digits_or_letters_is_still_the_nonce(a: str, b: str
                                                                        ) -> None:
    # One 8-digit span id in 40 is all digits: a "number" on one side, a hex nonce on the
    # other, and the whole field used to be left without a rule.
    (found,) = spans(a, b)
    assert found.shape is not None and found.shape.name in ("hex nonce", "base64 nonce")
    rule = rule_for(found.shape, [found.a_text, found.b_text], found.before, found.after)
    assert rule is not None
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b)


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=2**64))
def test_any_two_span_ids_are_masked_by_one_rule(seed: int) -> None:
    r = random.Random(seed)
    x, y = (r.randbytes(4).hex() for _ in "ab")
    a, b = f"Spans: 8\n\n[{x}] 2026 agent", f"Spans: 8\n\n[{y}] 2026 agent"
    if x == y:
        return
    (found,) = spans(a, b)
    assert found.shape is not None, (x, y)
    rule = rule_for(found.shape, [found.a_text, found.b_text], found.before, found.after)
    assert rule is not None, (x, y)
    pat = re.compile(rule[3:])
    assert pat.sub("<v>", a) == pat.sub("<v>", b)
