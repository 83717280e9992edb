"""What a run quotes of its own earlier answers is translated, never learned
(``_learn/echo.py``)."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from dejacache._learn.echo import Echoes


def test_a_quoted_answer_reads_as_the_other_runs_answer() -> None:
    e = Echoes()
    e.learn({"json": {"choices": [{"message": {"content": "Hello, reply 1 (1b5f08aa)"}}]}},
            {"json": {"choices": [{"message": {"content": "Hello, reply 1 (9a8b7c6d)"}}]}})
    second = {"messages": [{"role": "assistant", "content": "Hello, reply 1 (9a8b7c6d)"},
                           {"role": "user", "content": "you said 9a8b7c6d, why?"}]}
    assert e.translate(second) == {
        "messages": [{"role": "assistant", "content": "Hello, reply 1 (1b5f08aa)"},
                     {"role": "user", "content": "you said 1b5f08aa, why?"}]}
    assert e.used == 2


def test_a_streamed_answer_is_read_as_its_text() -> None:
    def stream(words: list[str]) -> dict[str, object]:
        def event(w: str) -> str:
            return "data: " + json.dumps({"choices": [{"delta": {"content": w}}]}) + "\n\n"

        return {"events": [[0.0, event(w)] for w in words]}

    e = Echoes()
    e.learn(stream(["Hello ", "(1b5f08aa)"]), stream(["Hello ", "there ", "(9a8b7c6d)"]))
    assert e.translate("Hello there (9a8b7c6d)") == "Hello (1b5f08aa)"


def test_short_strings_are_not_translated_inside_text() -> None:
    e = Echoes()
    e.learn({"n": "ab1"}, {"n": "cd2"})
    assert e.translate("cd2") == "ab1"  # quoted whole
    assert e.translate("abcd2x") == "abcd2x"  # but never rewritten inside other text


def test_nothing_learned_nothing_translated() -> None:
    tree = {"a": ["b", 1]}
    assert Echoes().translate(tree) is tree


def test_a_value_each_run_took_from_its_own_answers_is_quoted() -> None:
    e = Echoes()
    e.learn({"json": {"content": "Let me check Paris.", "arguments": '{"city": "Paris"}'}},
            {"json": {"content": "Let me check Rome.", "arguments": '{"city": "Rome"}'}})
    assert e.quoted("Paris", "Rome") and e.quoted("check Paris", "Rome")
    assert not e.quoted("Rome", "Paris")  # each value from its own run's answers
    assert not e.quoted("Paris", "Oslo") and not e.quoted("", "Rome")


def test_an_answers_headers_are_not_what_it_said() -> None:
    e = Echoes()
    e.learn({"status": 200, "headers": [["date", "Sat, 05 Dec 2026 04:32:50 GMT"]]},
            {"status": 200, "headers": [["date", "Sat, 05 Dec 2026 04:32:51 GMT"]]})
    assert not e.quoted("04:32:50", "04:32:51")


def test_a_long_cassette_is_translated_in_linear_time() -> None:
    # An agent sends its history again every turn. One pattern of every part learned was
    # compiled after each call: 400 turns took 39 s; now 0.9 s (bound: 10 s).
    import time

    e = Echoes()
    history_a: list[str] = []
    history_b: list[str] = []
    start = time.perf_counter()
    for i in range(400):
        assert e.translate(history_b) == history_a
        a, b = f"reply {i} ({i:04x}aa11bb22)", f"reply {i} ({i:04x}cc33dd44)"
        e.learn({"content": a}, {"content": b})
        history_a.append(f"you said: {a}")
        history_b.append(f"you said: {b}")
    assert time.perf_counter() - start < 10


@given(st.lists(st.tuples(st.text("abc ", min_size=6, max_size=12),
                          st.text("abc ", min_size=6, max_size=12)), max_size=12),
       st.lists(st.text("abc ", max_size=40), max_size=6))
def test_translation_is_one_pattern_of_every_part_longest_first(
        answers: list[tuple[str, str]], requests: list[str]) -> None:
    e = Echoes()
    for i, (a, b) in enumerate(answers):
        e.learn({"n": i}, {"n": i})
        e._strings(a, b)  # the parts one answer's strings add
        for r in requests:  # looked at again as more parts are learned
            assert e.translate(r) == _naive(e, r)


def _naive(e: Echoes, s: str) -> str:
    if s in e._whole:
        return e._whole[s]
    if not e._parts:
        return s
    keys = sorted(e._parts, key=len, reverse=True)
    return re.sub("|".join(map(re.escape, keys)), lambda m: e._parts[m.group()], s)


def test_a_string_equal_in_both_runs_is_never_translated() -> None:
    # Run 1 was told "no", run 2 "yes"; both then sent confirm "yes" (the test's own word).
    # Translated, run 2's "yes" read "no": a difference the runs never had, learned as the
    # rule `body.confirm`, which gave "yes" and "no" one key.
    e = Echoes()
    e.learn({"answer": "no"}, {"answer": "yes"})
    assert e.translate({"confirm": "yes"}, {"confirm": "yes"}) == {"confirm": "yes"}
    assert e.translate({"confirm": "yes", "l": ["yes"]}, {"confirm": "ok", "l": []}) == {
        "confirm": "no", "l": ["no"]}
