"""Rules added to ``[tool.dejacache] volatile`` with the rest of pyproject.toml kept byte
for byte (``_pyproject.py``)."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache._pyproject import add_items, toml_string
from dejacache.errors import ConfigurationError

RULES = ["re:(?<=nonce=)[0-9a-f]{16}(?![0-9A-Za-z])", 're:(?<=started_at": )1\\d{12}',
         "body.metadata.request_id"]


def _subsequence(small: str, big: str) -> bool:
    it = iter(big)
    return all(c in it for c in small)


def test_a_new_table_goes_at_the_end() -> None:
    text = "[project]\nname = 'x'  # the name\n"
    out, added = add_items(text, "volatile", RULES)
    assert added == RULES
    assert out.startswith(text)
    assert tomllib.loads(out)["tool"]["dejacache"]["volatile"] == RULES


def test_items_join_an_array_in_its_own_layout() -> None:
    multi = ("[tool.dejacache]\nmode = 'replay'\nvolatile = [\n  'a',  # why a\n"
             "  \"b]\", # a ] inside a string\n]\n\n[tool.ruff]\nline-length = 100\n")
    out, _ = add_items(multi, "volatile", ["c"])
    assert out == multi.replace(' # a ] inside a string\n]',
                                ' # a ] inside a string\n  \'c\',\n]')
    one = "[tool.dejacache]\nvolatile = ['a']  # keep me\n"
    out, _ = add_items(one, "volatile", ["c"])
    assert out == "[tool.dejacache]\nvolatile = ['a', 'c']  # keep me\n"


def test_a_key_missing_from_the_table_goes_after_its_last_line() -> None:
    text = "[tool.dejacache]\nmode = 'replay'\n\n# the linter\n[tool.ruff]\n"
    out, _ = add_items(text, "volatile", ["a"])
    assert out == ("[tool.dejacache]\nmode = 'replay'\nvolatile = [\n    'a',\n]\n\n"
                   "# the linter\n[tool.ruff]\n")


def test_items_already_there_are_not_added_twice() -> None:
    text = "[tool.dejacache]\nvolatile = ['a']\n"
    assert add_items(text, "volatile", ["a"]) == (text, [])


@pytest.mark.parametrize("text", [
    "tool.dejacache.volatile = ['a']\n",  # a dotted key, not a table header
    "[tool]\ndejacache = { volatile = ['a'] }\n",  # an inline table
    "[tool.dejacache]\nvolatile = 'a'\n",  # not an array
])
def test_a_layout_the_editor_cannot_change_safely_is_refused_with_the_lines(text: str) -> None:
    with pytest.raises(ConfigurationError, match="by hand") as info:
        add_items(text, "volatile", ["b"])
    assert "'b'" in str(info.value)


def test_strings_are_literal_when_they_can_be() -> None:
    assert toml_string(r"re:\d{4}") == r"'re:\d{4}'"
    assert toml_string("it's") == '"it\'s"'
    odd = "\x01a\\b\""
    assert tomllib.loads("x = " + toml_string(odd))["x"] == odd


# Documents built from pieces a pyproject holds: other tables, comments, blank lines, and a
# [tool.dejacache] table in any of the layouts above.
OTHER = st.sampled_from([
    "[project]\nname = \"x\"\nversion = \"0\"\n", "# a comment\n", "\n",
    "[tool.ruff]\nline-length = 100  # wide\n", "[tool.pytest.ini_options]\naddopts = \"-q\"\n",
    "[[tool.mypy.overrides]]\nmodule = \"a\"\n"])
TABLE = st.sampled_from([
    "", "[tool.dejacache]\n", "[tool.dejacache]  # ours\nmode = \"replay\"\n",
    "[tool.dejacache]\nvolatile = []\n", "[tool.dejacache]\nvolatile = ['a', \"b\"]\n",
    "[tool.dejacache]\nvolatile = [\n    'a',\n    'b'  # last\n]\nmode = 'auto'\n",
    "[tool.dejacache]\nvolatile = [\n  '''x]''',\n  \"y\"]\n"])
ITEMS = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1,
                         max_size=20), min_size=1, max_size=4)


@given(st.lists(OTHER, max_size=4), TABLE, st.lists(OTHER, max_size=3), ITEMS)
def test_the_rest_of_the_file_is_kept_and_the_items_are_added(
        before: list[str], table: str, after: list[str], items: list[str]) -> None:
    text = "".join(before) + table + "".join(after)
    try:
        old = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return  # pieces that do not make a valid document (a table twice)
    out, added = add_items(text, "volatile", items)
    assert _subsequence(text, out)  # only insertions: every byte of the file is still there
    new = tomllib.loads(out)
    had = old.get("tool", {}).get("dejacache", {}).get("volatile", [])
    assert new["tool"]["dejacache"]["volatile"] == had + added
    assert added == [i for i in dict.fromkeys(items) if i not in had]
    strip = ({k: v for k, v in d.items() if k != "tool"} for d in (old, new))
    assert next(strip) == next(strip)
