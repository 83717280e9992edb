"""The spellings of a credential an answer may quote (src/dejacache/_core/spellings.py)."""

from __future__ import annotations

import urllib.parse

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dejacache._core.spellings import Spellings, spellings

KEY = "FwoGZ/Xk+9dLm=q7Tz"  # a session token's characters
SAID = "bad key {} (seen)"


def _lower(quoted: str) -> str:
    return "%".join(p[:2].lower() + p[2:] if i else p for i, p in enumerate(quoted.split("%")))


@pytest.mark.parametrize("spelt", [
    KEY,
    KEY.replace("/", "\\/"),  # PHP, some Java encoders
    KEY.replace("+", "\\u002B"),  # only some characters escaped...
    KEY.replace("+", "\\u002b").replace("=", "\\u003D").replace("/", "\\/"),  # ...each its way
    KEY.replace("/", "\\\\\\/"),  # a JSON text embedded in another's string
    urllib.parse.quote(KEY, safe=""),
    _lower(urllib.parse.quote(KEY, safe="")),
    urllib.parse.quote(urllib.parse.quote(KEY, safe=""), safe=""),  # encoded twice: %252F
])
def test_a_credential_is_replaced_in_any_spelling_and_nothing_else_changes(spelt: str) -> None:
    text = SAID.format(spelt) + ' {"url": "https://h/v1?x=%2F&y=\\/"}'
    assert Spellings([KEY]).replaced(text) == SAID.format("<REDACTED>") + text[len(
        SAID.format(spelt)):]


@pytest.mark.parametrize("key", ["pässwort-2024-zz", "key-\U0001f511-7d0a3f"])
def test_characters_beyond_ascii_are_found_escaped_as_utf16_or_percent_encoded(key: str) -> None:
    ascii_json = orjson.dumps(key).decode() if key.isascii() else _ensure_ascii(key)
    for spelt in (key, ascii_json, urllib.parse.quote(key, safe="")):
        assert Spellings([key]).replaced(f"[{spelt}]") == "[<REDACTED>]", spelt


def _ensure_ascii(text: str) -> str:
    import json

    return json.dumps(text)[1:-1]


def test_a_spelling_inside_a_string_is_held_by_that_string_written_as_json() -> None:
    node = SAID.format(KEY.replace("/", "\\/").replace("+", "\\u002b"))
    written = orjson.dumps({"text": node, "quote": '"' + KEY + '"'})
    assert Spellings([KEY]).held(written)
    assert not Spellings(["other/key+7d0a3f"]).held(written)


def test_text_without_the_anchor_is_returned_as_it_is() -> None:
    text = "nothing quoted here \\/ %2F " * 100
    assert Spellings([KEY]).replaced(text) is text
    assert not Spellings([KEY]).may_hold(text.encode())
    assert Spellings([KEY]).may_hold(b"...FwoGZ...")  # its longest run of letters and digits


def test_a_credential_holding_another_is_replaced_whole() -> None:
    found = spellings((f"Bearer {KEY}", KEY))
    assert found.replaced(f"auth: Bearer%20{urllib.parse.quote(KEY, safe='')}; {KEY}") == (
        "auth: <REDACTED>; <REDACTED>")
    assert spellings((f"Bearer {KEY}", KEY)) is found  # made once per set


def test_bytes_that_are_not_utf8_are_kept_byte_for_byte() -> None:
    data = b"\xff\xfe" + KEY.replace("/", "\\/").encode() + b"\x80"
    assert Spellings([KEY]).replaced_bytes(data) == b"\xff\xfe<REDACTED>\x80"


def test_a_credential_without_letters_or_digits_is_always_looked_for() -> None:
    odd = "/+=/+=/+=/+="
    assert Spellings([odd]).may_hold(b"anything")
    assert Spellings([odd]).replaced("a %2F%2B%3D/+=/+=/+= b") == "a <REDACTED> b"


_SPELL = st.sampled_from(["as-is", "json", "unicode", "UNICODE", "percent", "PERCENT"])


def _spell(c: str, how: str) -> str:
    if how == "as-is" or (c.isascii() and c.isalnum()):
        return c
    if how == "json":
        return "\\/" if c == "/" else orjson.dumps(c).decode()[1:-1]
    if how.lower() == "unicode":
        units = c.encode("utf-16-be")
        out = "".join(f"\\u{units[i:i + 2].hex()}" for i in range(0, len(units), 2))
        return out.upper().replace("\\U", "\\u") if how == "UNICODE" else out
    out = urllib.parse.quote(c, safe="")
    return out if how == "PERCENT" else out.lower()


@given(key=st.text(st.sampled_from("ab7Z/+=-_.~é\"\\ "), min_size=8, max_size=24)
       .filter(lambda k: sum(c.isascii() and c.isalnum() for c in k) >= 3),
       hows=st.lists(_SPELL, min_size=24, max_size=24))
@example(key="77777777777\\", hows=["as-is"] * 11 + ["unicode"] * 13)  # ``\\u005c`` whole
def test_any_mix_of_spellings_is_one_match_replaced_in_place(key: str, hows: list[str]) -> None:
    spelt = "".join(_spell(c, h) for c, h in zip(key, hows, strict=False))
    assert Spellings([key]).replaced(f"<<{spelt}>>") == "<<<REDACTED>>>"
