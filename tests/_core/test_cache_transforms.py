"""The fixes that change what the model reads, on a session's prefixes: a volatile span moved
after the cacheable prefix, an agent pooled."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.cache_transforms import head_length, leaf_of, moved, pooled, spans
from dejacache._core.prefix import build_prefix, compare

RULES = "Answer briefly. " * 200


def turn(n: int, clock: str, rules: str = RULES) -> Any:
    msgs: list[Any] = [{"role": "system", "content": f"Now: {clock}\n{rules}"}]
    for i in range(n):
        msgs += [{"role": "user", "content": f"q{i}"}]
        if i < n - 1:
            msgs += [{"role": "assistant", "content": f"a{i}"}]
    return build_prefix("chat", {"model": "gpt-4.1", "messages": msgs})


def test_leaf_of_reads_the_paths_breaks_name() -> None:
    p = build_prefix("messages", {"model": "m", "system": [{"type": "text", "text": "x"}],
                                  "messages": [{"role": "user", "content": "hi"}]})
    assert leaf_of(p, "system[0].text") == (0, ["text"])
    assert leaf_of(p, "messages[0].content[0].text") == (1, ["content", 0, "text"])
    assert leaf_of(p, "messages[0]") == (1, [])
    assert leaf_of(p, "messages[9].content") is None
    odd = build_prefix("chat", {"model": "m", "messages": [
        {"role": "system", "content": "x", "odd key": {"a b": "v"}}]})
    assert leaf_of(odd, "messages[0]['odd key']['a b']") == (0, ["odd key", "a b"])


def test_spans_are_the_common_ends() -> None:
    assert spans(["Now: 12:04:31\nrules", "Now: 12:05:02\nrules"]) == (9, 6)
    assert spans(["same", "same"]) == (4, 0)  # all common: nothing left for a suffix
    assert spans(["ab", "b"]) == (0, 1)
    assert spans([]) == (0, 0)


@given(st.lists(st.text(max_size=12), min_size=1, max_size=5))
def test_spans_never_overlap(values: list[str]) -> None:
    lead, tail = spans(values)
    for v in values:
        assert lead + tail <= len(v)
        assert v.startswith(values[0][:lead]) and v.endswith(values[0][len(values[0]) - tail:])


def test_a_moved_clock_leaves_the_prefix_stable() -> None:
    session = [turn(1, "12:04:31"), turn(2, "12:05:02"), turn(3, "12:05:33")]
    assert compare(session[0], session[1]) is not None  # the clock breaks it
    fixed = moved(session, "messages[0].content[0].text")
    assert fixed is not None
    for a, b in itertools.pairwise(fixed):
        # Each turn shares all of the one before but the span moved after it.
        d = compare(a, b)
        assert d is not None and d.common == a.size - a.items[-1].size
        assert a.items[-1].segment == "moved"
    assert fixed[0].items[0].data["content"][0]["text"] == f"Now: 12:0\n{RULES}"
    assert fixed[1].items[-1].data == {"text": "5:02"}  # the varying run, after the rest
    assert fixed[0].chain[:2] == fixed[1].chain[:2]  # system and first question shared
    assert moved(session[:1], "messages[0].content[0].text") is None  # nothing varies
    assert moved(session, "messages[0].role") is None  # the same in every turn


def test_pooling_keeps_the_first_turns_built_once_items() -> None:
    session = [turn(1, "12:04:31"), turn(2, "12:05:02")]
    assert head_length(session[1]) == 1
    fixed = pooled(session)
    assert fixed is not None
    assert compare(fixed[0], fixed[1]) is None  # the second turn extends the first
    assert fixed[1].items[0] is session[0].items[0]
    assert pooled([turn(1, "x"), turn(2, "x")]) is None
