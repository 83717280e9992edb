"""Field-level diffs and the nearest recorded call (pure functions)."""

from __future__ import annotations

from dejacache._core.diff import distance, field_diff, nearest, short, string_window


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


def test_nearest_breaks_a_tie_in_fields_by_the_smallest_diff() -> None:
    # An agent's second turn, sent again with its two client-made ids changed: as many
    # fields away from the first turn (two messages added) as from itself (two ids
    # changed), but far fewer characters from itself. File order used to pick the first.
    user = {"role": "user", "parts": [{"text": "Two names for a pet pelican"}]}
    call = {"role": "model", "parts": [{"function_call": {
        "name": "pelican_name_generator", "args": {}, "id": "call_" + "a" * 32}}]}
    result = {"role": "user", "parts": [{"function_response": {
        "name": "pelican_name_generator", "response": {"output": "Beaky"},
        "id": "call_" + "a" * 32}}]}
    turn1 = {"body": {"contents": [user]}}
    turn2 = {"body": {"contents": [user, call, result]}}
    now = {"body": {"contents": [user, {**call, "parts": [{"function_call": {
        **call["parts"][0]["function_call"], "id": "call_" + "b" * 32}}]},
        {**result, "parts": [{"function_response": {
            **result["parts"][0]["function_response"], "id": "call_" + "b" * 32}}]}]}}
    key, _, diff = nearest(now, [("turn1", turn1), ("turn2", turn2)]) or ("", None, [])
    assert key == "turn2"
    assert diff == [
        "body.contents[1].parts[0].function_call.id: " + string_window(
            "call_" + "a" * 32, "call_" + "b" * 32),
        "body.contents[2].parts[0].function_response.id: " + string_window(
            "call_" + "a" * 32, "call_" + "b" * 32)]
    assert distance(turn2, now) < distance(turn1, now)
    assert distance(turn1, now)[0] == distance(turn2, now)[0] == 2  # a tie in fields
