"""The spellings of a credential an answer may quote (src/dejacache/_core/spellings.py)."""

from __future__ import annotations

import base64
import re
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


# ------------------------------------------------------------ inside a larger base64 blob

_B64_KEY = "sk-echo-7f3a9c2d+e0b/4a5f"  # 25 characters, ``+`` and ``/`` in it


def _loose_decodings(text: str) -> list[bytes]:
    """Every reading of ``text``'s base64 a decoder could make: each run of either
    alphabet's characters, from each of its four alignments, and the same with the
    placeholder dropped."""
    out = []
    for source in (text, text.replace("<REDACTED>", "")):
        for run in re.findall(r"[A-Za-z0-9+/_\-]{4,}", source):
            std = run.replace("-", "+").replace("_", "/")
            for k in range(4):
                cut = std[k:][:len(std) - k - ((len(std) - k) % 4 == 1)]  # a lone char: cut
                out.append(base64.b64decode(cut + "=" * (-len(cut) % 4)))
    return out


def _blob(key: str, before: bytes, after: bytes, urlsafe: bool, padded: bool) -> str:
    coded = base64.b64encode(before + key.encode() + after).decode()
    if urlsafe:
        coded = coded.replace("+", "-").replace("/", "_")
    if not padded:
        coded = coded.rstrip("=")
    return coded


@given(key=st.text(st.sampled_from("abcXYZ0189-_+/=.~:é\U0001f511"), min_size=16,
                   max_size=90),
       before=st.binary(max_size=40), after=st.binary(max_size=40), urlsafe=st.booleans(),
       padded=st.booleans())
@example(key="a" * 16, before=b"", after=b"", urlsafe=False, padded=True)
@example(key=_B64_KEY, before=b"\x00", after=b"", urlsafe=True, padded=False)
def test_a_credential_inside_a_base64_blob_no_longer_decodes_from_it(
        key: str, before: bytes, after: bytes, urlsafe: bool, padded: bool) -> None:
    coded = _blob(key, before, after, urlsafe, padded)
    assert any(key.encode() in d for d in _loose_decodings(coded))  # (the test's own reading)
    text = '{"data": "data:application/octet-stream;base64,' + coded + '", "n": 1}'
    kept = Spellings([key]).replaced(text)
    assert "<REDACTED>" in kept and Spellings([key]).held(text.encode())
    assert not any(key.encode() in d for d in _loose_decodings(kept))
    assert kept.startswith('{"data": "data:application/octet-stream;base64,')
    assert kept.endswith('", "n": 1}')
    assert orjson.loads(kept)  # still JSON: the blob's characters only are replaced


@pytest.mark.parametrize("coded", [
    # httpbin's /anything answering a binary body: the request's body as a data URL
    base64.b64encode(b'\x89PNG{"api_key": "' + _B64_KEY.encode() + b'"}').decode(),
    # a JWT-like token whose payload holds the key (base64url, no padding)
    "eyJhbGciOiJub25lIn0." + base64.urlsafe_b64encode(
        orjson.dumps({"sub": "u", "key": _B64_KEY})).decode().rstrip("=") + ".c2ln",
    # JSON text escaping the standard alphabet's ``/``
    base64.b64encode(b"x" + _B64_KEY.encode()).decode().replace("/", "\\/"),
    # a URL percent-encoding it
    urllib.parse.quote(base64.b64encode(b"xy" + _B64_KEY.encode()).decode(), safe=""),
])
def test_a_credential_is_found_in_base64_as_echo_servers_and_tokens_write_it(
        coded: str) -> None:
    kept = Spellings([_B64_KEY]).replaced(f"echo: {coded} ok")
    assert "<REDACTED>" in kept and kept.startswith("echo: ") and kept.endswith(" ok")
    unescaped = urllib.parse.unquote(kept).replace("\\/", "/")
    assert not any(_B64_KEY.encode() in d for d in _loose_decodings(unescaped))


def test_basic_credentials_are_found_inside_a_base64_blob() -> None:
    from dejacache.http.headers import credential_values

    sent = credential_values([("Authorization", "Basic YWxpY2U6aHVudGVyMjAyNC1sb25n")])
    echoed = base64.b64encode(b"GET / HTTP/1.1\r\nAuthorization: Basic "
                              b"YWxpY2U6aHVudGVyMjAyNC1sb25n\r\n\r\n").decode()
    kept = spellings(tuple(sent)).replaced(echoed)
    assert not any(b"YWxpY2U6aHVudGVyMjAyNC1sb25n" in d for d in _loose_decodings(kept))


def test_unrelated_base64_and_a_short_credentials_run_without_its_edges_are_left_alone(
        ) -> None:
    # Under 16 bytes a key's inner base64 runs are 12 characters or fewer (72 bits): a
    # megabyte of images would hold one by chance too often to damage them for it, so the
    # bits the key shares with the groups either side must match too (64 bits at 8 bytes).
    short = "0123456789abcde"
    aligned = b"\x01\x02Z" + short[1:].encode()  # its run from its 2nd byte, not its 1st
    coded = base64.b64encode(aligned).decode()
    assert base64.b64encode(short[1:13].encode()).decode() in coded
    assert Spellings([short]).replaced(coded) == coded
    assert Spellings([short]).replaced(base64.b64encode(b"\x01" + short.encode()).decode()
                                       ) != base64.b64encode(b"\x01" + short.encode()).decode()
    seven = "hunt3r!"  # under 8 bytes: never looked for in base64 (48 bits)
    coded = base64.b64encode(b"xy" + seven.encode() + b"z").decode()
    assert Spellings([seven]).replaced(coded) == coded
    other = base64.b64encode(bytes(range(256)) * 8).decode()
    assert Spellings([_B64_KEY]).replaced(other) is other
    assert not Spellings([_B64_KEY]).may_hold(other.encode())
    wrapped = base64.encodebytes(bytes(range(256)) * 8).decode()
    assert Spellings([_B64_KEY, short]).replaced(wrapped) == wrapped


def _unwrapped(text: str) -> str:
    """``text`` without its line breaks, raw or as JSON writes them."""
    for brk in ("\\r", "\\n", "\r", "\n"):
        text = text.replace(brk, "")
    return text


def _wrap(coded: str, width: int, eol: str) -> str:
    return eol.join(coded[i:i + width] for i in range(0, len(coded), width)) + eol


@given(key=st.text(st.sampled_from("abcXYZ0189-_+/=.~:é\U0001f511"), min_size=8,
                   max_size=90).filter(lambda k: len(k.encode()) >= 8),
       before=st.binary(max_size=120), after=st.binary(max_size=120), urlsafe=st.booleans(),
       width=st.sampled_from([76, 64, 48]), eol=st.sampled_from(["\n", "\r\n"]),
       written=st.booleans())
@example(key="hunt3r-7", before=b"", after=b"", urlsafe=False, width=76, eol="\n",
         written=False)
@example(key=_B64_KEY, before=b"x" * 40, after=b"", urlsafe=False, width=76, eol="\r\n",
         written=True)
def test_a_credential_in_base64_wrapped_in_lines_no_longer_decodes_from_it(
        key: str, before: bytes, after: bytes, urlsafe: bool, width: int, eol: str,
        written: bool) -> None:
    # MIME (76 characters a line), PEM (64): a break may fall anywhere in the key's runs,
    # and a key of 8 to 15 bytes is found too, at any offset.
    coded = _wrap(_blob(key, before, after, urlsafe, True), width, eol)
    text = "Content-Transfer-Encoding: base64\r\n\r\n" + coded
    if written:  # JSON text kept as text: the breaks written ``\n``
        text = orjson.dumps(text).decode()
    assert any(key.encode() in d for d in _loose_decodings(_unwrapped(text)))
    kept = Spellings([key]).replaced(text)
    assert "<REDACTED>" in kept
    assert Spellings([key]).held(text.encode()) and Spellings([key]).held(orjson.dumps(text))
    assert not any(key.encode() in d for d in _loose_decodings(_unwrapped(kept)))
    assert kept.startswith(text[:20])


@given(key=st.text(st.sampled_from("abcXYZ0189-_+/=.~:"), min_size=8, max_size=40),
       before=st.binary(max_size=120), after=st.binary(max_size=120), urlsafe=st.booleans(),
       width=st.integers(48, 80),
       eol=st.sampled_from(["\\u000a", "\\u000D\\u000A", "%0A", "%0d%0a", "%250A",
                            "\\\\n"]))
@example(key="abcXYZ0189abcXYZ", before=b"x" * 37, after=b"y" * 50, urlsafe=False, width=50,
         eol="\\u000a")
@example(key="abcXYZ0189abcXYZ", before=b"x" * 37, after=b"y" * 50, urlsafe=False, width=49,
         eol="%0A")
def test_a_mask_in_wrapped_base64_never_cuts_a_break_written_as_an_escape(
        key: str, before: bytes, after: bytes, urlsafe: bool, width: int, eol: str) -> None:
    # Walking out from the run to the groups either side, a break is passed over whole:
    # ``\u000A``'s ``000A`` and ``%0A``'s ``0A`` are base64 letters too, and a mask starting
    # inside them left ``\u00<REDACTED>`` (invalid JSON) or ``%<REDACTED>``.
    text = "data: " + _wrap(_blob(key, before, after, urlsafe, True), width, eol) + " end"
    kept = Spellings([key]).replaced(text)
    assert "<REDACTED>" in kept
    assert re.search(r"\\+u(?![0-9a-fA-F]{4})", kept) is None, kept
    assert re.search(r"%(?![0-9a-fA-F]{2})", kept) is None, kept
    assert re.search(r"(?<!\\)(?:\\\\)*\\<", kept) is None, kept  # no lone backslash
    flat = re.sub(r"\\+(?:u000[aAdD]|[nr])|%(?:25)*0[aAdD]", "", kept)
    assert not any(key.encode() in d for d in _loose_decodings(flat))


@given(key=st.text(st.sampled_from("abcXYZ0189-_+/=.~:"), min_size=8, max_size=15),
       before=st.binary(max_size=40), after=st.binary(max_size=40), urlsafe=st.booleans(),
       padded=st.booleans())
def test_a_short_credential_inside_a_base64_blob_no_longer_decodes_from_it(
        key: str, before: bytes, after: bytes, urlsafe: bool, padded: bool) -> None:
    coded = _blob(key, before, after, urlsafe, padded)
    kept = Spellings([key]).replaced('{"token": "' + coded + '"}')
    assert not any(key.encode() in d for d in _loose_decodings(kept))
    assert orjson.loads(kept)


def test_a_credential_under_8_characters_is_found_only_as_a_whole_word() -> None:
    # A Basic password such as ``hunt3r``: hidden inside longer words, it would hide parts
    # of every answer that spells them.
    found = Spellings(["hunt3r"])
    said = "bad password hunt3r for alice (hunt3r); hunt3rs, xhunt3r, hunt3r_1"
    assert found.replaced(said) == (
        "bad password <REDACTED> for alice (<REDACTED>); hunt3rs, xhunt3r, <REDACTED>_1")
    assert found.held(orjson.dumps("line one\nhunt3r"))  # ``\n`` written before it
    assert not found.held(orjson.dumps("hunt3rs only"))
    assert Spellings(["pw!"]).replaced("a pw!x b") == "a <REDACTED>x b"  # ``!`` ends no word


def test_a_whole_word_credential_never_stands_for_a_longer_one_holding_it() -> None:
    # ``pw`` is no word inside ``pwd-7f3a9c2d4e``: that key is looked for on its own.
    found = Spellings(["pw", "pwd-7f3a9c2d4e"])
    assert found.held(b'"key pwd-7f3a9c2d4e"')
    assert found.replaced("key pwd-7f3a9c2d4e, pw") == "key <REDACTED>, <REDACTED>"


def _looked_for_everywhere(found: Spellings, text: str) -> str:
    """The slow form: every credential's pattern and every base64 run's run over the whole
    text, no needle asked first."""
    from dejacache._core.spellings import _blotted, _least, _pattern, _runs

    for secret in sorted(set(found._secrets), key=len, reverse=True):
        text = re.sub(_pattern(secret), "<REDACTED>", text)
    coded = [c for c in _least(found._secrets) if len(c.encode()) >= 8]
    runs = sorted((r for c in coded for r in _runs(c)), key=lambda r: len(r.chars),
                  reverse=True)
    for run in runs:
        text = _blotted(re.compile(run.pattern()), text)
    return text


def _held_anywhere(found: Spellings, data: bytes) -> bool:
    from dejacache._core.spellings import _least, _pattern, _runs

    least = _least(found._secrets)
    runs = [r for c in least if len(c.encode()) >= 8 for r in _runs(c)]
    return any(re.search(p.encode(), data) for p in [*map(_pattern, least),
                                                    *(r.pattern() for r in runs)])


_PROSE = st.sampled_from(["lorem ipsum ", "Dolor SIT amet, ", "https://h/a%2Fb?q=1 ",
                          "x = 42\n", "## Title\r\n", "see \\u000a and \\n ", "QZJX 7 "])


@st.composite
def _answers(draw: st.DrawFn) -> tuple[list[str], str]:
    """Credentials (a long key, short ones, a password under 8) and a text holding some
    of them, in base64 one line or MIME- or PEM-wrapped (LF or CRLF), raw or written as
    JSON, and decoys: another blob, a run with one character changed, a run's half."""
    keys = draw(st.lists(st.text(st.sampled_from("abcXYZ0189-_+/.:Q"), min_size=6,
                                 max_size=40), min_size=1, max_size=3))
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["prose", "blob", "blob", "blob", "decoy", "half",
                                     "plain"]))
        key = draw(st.sampled_from(keys))
        if kind == "prose":
            parts.append(draw(_PROSE) * draw(st.integers(1, 5)))
            continue
        if kind == "plain":
            parts.append(key)
            continue
        inside = key.encode() if kind == "blob" else draw(st.binary(min_size=8, max_size=40))
        coded = _blob("", draw(st.binary(max_size=80)) + inside, draw(st.binary(max_size=60)),
                      draw(st.booleans()), draw(st.booleans()))
        if kind == "decoy" and len(key.encode()) >= 8:  # a run of the key, one bit off
            run = base64.b64encode(key.encode()[:len(key.encode()) // 3 * 3]).decode()
            coded = run[:-1] + ("A" if run[-1] != "A" else "B")
        if kind == "half":
            run = base64.b64encode(key.encode()[:len(key.encode()) // 3 * 3]).decode()
            coded = run[:len(run) // 2]
        width = draw(st.sampled_from([0, 48, 64, 76]))
        if width:
            coded = _wrap(coded, width, draw(st.sampled_from(
                ["\n", "\r\n", "\n", "\r\n", "\\u000a", "%0D%0A", "%250A"])))
        parts.append(coded)
    text = "".join(parts)
    if draw(st.booleans()):
        text = orjson.dumps(text).decode()
    return keys, text


@given(_answers())
@example((["alice:hunt3r-long", "hunt3r"], "\\n" + base64.encodebytes(
    b"x" * 50 + b"alice:hunt3r-long" + b"y" * 50).decode().replace("\n", "\\n")))
@example((["k3y-7f3a9c2d"], orjson.dumps(base64.encodebytes(b"\x00" * 52 + b"k3y-7f3a9c2d")
                                         .decode().replace("\n", "\r\n")).decode()))
@example((["k3y-7f3a9c2d"], _wrap(_blob("k3y-7f3a9c2d", b"\x00" * 50, b"", False, True),
                                  64, "\r\n")))
@example((["k3y-7f3a9c2d"], _wrap(_blob("k3y-7f3a9c2d", b"\x00" * 40, b"", False, True),
                                  64, "\\u000a")))  # a break written ``\u000a``
def test_the_needles_find_exactly_what_the_patterns_find_over_the_whole_text(
        answer: tuple[list[str], str]) -> None:
    # The needles first (characters held, anchors, flat forms, halves) only spare the
    # patterns' runs over texts that cannot hold a match: they never hide one.
    from dejacache._core import spellings as module

    keys, text = answer
    found = Spellings(keys)
    expected = _looked_for_everywhere(found, text)
    datas = [(d, _held_anywhere(found, d)) for d in (text.encode(), orjson.dumps(text))]
    gated_from = module._GATED_FROM
    for module._GATED_FROM in (gated_from, 0):  # characters looked up in short text too
        try:
            assert found.replaced(text) == expected
            for data, held in datas:
                assert found.held(data) == held
                assert found.may_hold(data) or not held
        finally:
            module._GATED_FROM = gated_from
