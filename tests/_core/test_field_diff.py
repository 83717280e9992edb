"""Field-level diffs and the nearest recorded call (pure functions)."""

from __future__ import annotations

from dejacache._core.diff import field_diff, nearest, short, string_window


def test_field_diff_names_each_changed_leaf() -> None:
    old = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "n": 1}
    new = {"model": "a", "messages": [{"role": "user", "content": "yo"}, {"role": "x"}], "t": 2}
    assert field_diff(old, new) == [
        "messages[0].content: 'hi' -> 'yo'",
        "messages[1]: added {'role': 'x'}",
        "n: removed (was 1)",
        "t: added 2",
    ]


def test_type_changes_and_roots() -> None:
    assert field_diff(1, 1.0) == ["<root>: 1 -> 1.0"]
    assert field_diff({"a": [1]}, {"a": {"0": 1}}) == ["a: [1] -> {'0': 1}"]
    assert field_diff({"a": 1}, {"a": 1}) == []


def test_limit_caps_the_output() -> None:
    old = {str(i): i for i in range(100)}
    new = {str(i): -i - 1 for i in range(100)}
    assert len(field_diff(old, new, limit=5)) == 5


def test_short_truncates_long_values() -> None:
    text = short("x" * 500, 40)
    assert len(text) <= 40 and "…" in text
    assert short("abc") == "'abc'"


def test_nearest_picks_fewest_differences() -> None:
    target = {"q": "b", "n": 1, "m": "x"}
    cands = [("k1", {"q": "a", "n": 2, "m": "y"}), ("k2", {"q": "a", "n": 1, "m": "x"}),
             ("k3", {"q": "z", "n": 9, "m": "x"})]
    key, cand, diff = nearest(target, cands) or ("", None, [])
    assert key == "k2" and cand == cands[1][1]
    assert diff == ["q: 'a' -> 'b'"]
    assert nearest(target, []) is None


def test_long_strings_show_the_first_difference_with_a_window() -> None:
    # A judge prompt that differs only in a timestamp deep inside: both sides used to print
    # identically because each was cut in the middle.
    old = "x" * 2000 + "at 12:04:31 UTC" + "y" * 1000
    new = "x" * 2000 + "at 12:05:02 UTC" + "y" * 1000
    [line] = field_diff({"m": [{"c": old}]}, {"m": [{"c": new}]})
    assert line.startswith("m[0].c: differs at offset 2,007")
    before, after = line.split(" -> ")
    assert "12:04:31" in before and "12:05:02" in after
    assert len(line) < 300


def test_string_window_handles_prefixes_and_short_strings() -> None:
    assert string_window("abc", "abd") == "'abc' -> 'abd'"
    text = string_window("a" * 200 + "END", "a" * 200)
    assert "offset 200" in text and "END" in text
