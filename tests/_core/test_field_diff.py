"""Field-level diffs and the nearest recorded call (pure functions)."""

from __future__ import annotations

from dejacache._core.diff import field_diff, nearest, short


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
