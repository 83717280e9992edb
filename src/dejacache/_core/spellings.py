"""The spellings an answer may quote a credential in, found and replaced in one place.

A server quoting the key it was sent does not always write it as it is: JSON text escapes
``/`` as ``\\/`` (PHP, some Java encoders) or writes characters as ``\\u002B`` (Go escapes
``<``, ``>``, ``&``; ``ensure_ascii`` encoders everything beyond ASCII), a URL echoed in an
error percent-encodes ``/``, ``+`` and ``=`` (``%2F`` or ``%2f``). A body parsed as JSON has
lost its escapes already; they survive where the answer is kept as text (JSON served as
``text/plain``, an event's ``data:``, an upstream's JSON document embedded in an error
message, a WebSocket text frame) and in every percent-encoded URL.

Each credential becomes one pattern, character by character: an ASCII letter or digit as it
is (no writer escapes those), any other character as itself after any number of
backslashes (``\\/``, and one more level each time a JSON text is embedded in another),
as ``\\uXXXX`` or a short escape (``\\n``), or percent-encoded (``%2F``, ``%252F``), hex
digits in either case. So a credential where only some characters are escaped, each its own
way, is one match, without a variant per combination; and the same pattern matches the
spelling inside a string and inside that string written again as JSON (orjson only adds
backslashes, which the pattern absorbs).

Looking costs a substring search per credential, not a regular expression: every spelling
holds the credential's longest run of letters and digits as it is (its anchor), so text
without any anchor holds no spelling, and the patterns (compiled on first need) only run
where one is.

A credential may also be quoted inside a larger base64 blob: an echo server answering the
request's bytes base64-encoded (httpbin's ``/anything`` with a binary body), a JWT-like
token whose payload holds it, a WebSocket binary frame (kept as base64), an email
attachment. Its characters there depend on its offset in the blob modulo 3, so each offset
gives its own *inner run*: the base64 of the credential's whole 3-byte groups at that
offset, the same in every blob (:func:`_runs`), in the standard or the URL-safe alphabet,
padded or not, in the spellings above, and with a line break (``\\n``, ``\\r\\n``, escaped
or percent-encoded) anywhere in it: MIME wraps base64 at 76 characters, PEM at 64. The run
is replaced with the group either side of it (the 1-2 bytes of the credential that share a
group with its neighbours; across a line break too), so the blob no longer decodes to it.
A credential of 8 to 15 bytes must also match those neighbouring groups' bits that are
its own (:func:`_edges`), so every one of its bits is checked: 64 bits or more, where its
inner runs alone (48 for 8 bytes) would match random base64 by chance once in a few
hundred terabytes, each a damaged image on replay. Shorter ones are not looked for in
base64 (a 6-character password is 48 bits).

Looked for the same way, by anchors: each run's longest run of letters and digits, three
more substring searches per credential (``benchmarks/bench_unechoed.py``: a 2 KB answer,
2.2 -> 4.5 us beside ~350 us of recording; a megabyte of JSON, 123 -> 291 us). Text
holding a line break (most answers) may hold a run broken by one, so there each short
anchor is looked for in the text's flat form (:class:`_Looked`: without backslashes,
raw breaks and the letters ``n`` and ``r``, where a broken run is whole), and each long
one (:data:`_FLAT_BELOW`) as the two halves of its first 48 characters (a line of 48
characters or more breaks them at most once, so one half is whole); in text of 16 KB or
more an anchor is looked for only once the text holds its rarest characters (:func:`_gate`:
a ``memchr`` each). The patterns then run only where a needle was found, over the whole
text, so what is found is what the patterns find (a test compares them on random texts).
Costs: ``CHANGELOG.md``, the entry on wrapped base64. Each short credential adds its
own three runs.

A credential shorter than :data:`WORD_SHORTEST` characters (a Basic password such as
``hunt3r``) is found only as a whole word: not where a letter or digit continues it on
either side, so ``hunt3rs`` and ``xhunt3r`` are left as they are.
"""

from __future__ import annotations

import binascii
import functools
import re
from collections.abc import Sequence

from .._lazy import pattern
from .._secrets import PLACEHOLDER

__all__ = ["Spellings", "spellings"]

_HEX = {d: f"[{d}{d.upper()}]" if d.isalpha() else d for d in "0123456789abcdef"}
_SHORT = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
_RUNS = pattern(r"[A-Za-z0-9]+")


def _hex(value: int, width: int) -> str:
    return "".join(_HEX[d] for d in f"{value:0{width}x}")


def _char(c: str) -> str:
    """The pattern of one character of a credential, in any of its spellings."""
    if c.isascii() and c.isalnum():
        return c
    units = c.encode("utf-16-be")
    escaped = "".join(r"\\+u" + _hex(int.from_bytes(units[i:i + 2], "big"), 4)
                      for i in range(0, len(units), 2))
    short = [r"\\+" + _SHORT[c]] if c in _SHORT else []
    percent = "".join("%(?:25)*" + _hex(b, 2) for b in c.encode())
    # The escapes first: a backslash's own pattern would match the one opening its
    # ``\\u005c`` and stop there.
    return "(?:" + "|".join([escaped, *short, r"\\*" + re.escape(c), percent]) + ")"


# Where a short credential's first (last) letter or digit starts (ends) a word: after the
# first character, so sre searches for that literal (a lookbehind first tried every
# position); ``\n`` written as JSON (``\\npw``) still starts one.
_WORD_START = r"(?:(?<![A-Za-z0-9].)|(?<=\\[nrtbf].))"
_WORD_END = r"(?![A-Za-z0-9])"


def _pattern(secret: str) -> str:
    """Every spelling of ``secret``; a whole word only when it is shorter than
    :data:`WORD_SHORTEST` (a letter or digit either side continues another word)."""
    chars = [_char(c) for c in secret]
    if len(secret) < WORD_SHORTEST and secret:
        if _alnum(secret[0]):
            chars[0] += _WORD_START
        if _alnum(secret[-1]):
            chars[-1] += _WORD_END
    return "".join(chars)


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


#: Credentials shorter than this (in UTF-8 bytes) are not looked for inside base64: 8 bytes
#: are 64 bits, which random base64 holds by chance once in 2**64 positions (a gigabyte of
#: images: once in 2**34); a 6-byte password's 48 bits, once in 2**28 megabytes of them.
B64_SHORTEST = 8
#: From this many bytes on a credential's inner run alone is enough (16 characters, 96
#: bits): a blob cut short inside it still has the run replaced. Shorter ones must match
#: their edges too (:func:`_edges`).
B64_EDGELESS = 16
#: Credentials shorter than this (characters) are found only as whole words.
WORD_SHORTEST = 8
_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_ALPHABETS = {"+": "(?:" + _char("+") + "|" + _char("-") + ")",
              "/": "(?:" + _char("/") + "|" + _char("_") + ")"}
# A line break base64 may be wrapped with, in any spelling (raw, ``\\r\\n`` written as
# JSON, ``%0D%0A`` in a form), between any two of a run's characters.
_BREAK = "(?:" + _char("\r") + "?" + _char("\n") + ")?"
# The prefix of an anchor whose halves are looked for in text holding a line break: a
# line of at least this many characters (MIME's 76, PEM's 64) breaks it at most once.
_WRAP_WINDOW = 48
# Anchors shorter than this are looked for whole in a text's flat form (:class:`_Looked`)
# rather than by halves: a needle of 6 to 12 characters is searched at a half to a third
# of the speed of one of 20 (200 KB of base64: 250-310K instructions against 115K), so the
# eighteen halves of a Basic token's and two 12-character keys' nine runs took 3-12 ms
# where one flat form and nine whole anchors take ~0.7 ms. A long anchor's halves (24
# characters) cost less than the flat form (~0.2 ms for 200 KB) unless it is made anyway.
_FLAT_BELOW = 32
# How many of an anchor's characters are looked up before its searches (:func:`_gate`),
# in text of at least :data:`_GATED_FROM` characters: in less, the searches cost less than
# the look-ups' Python (a 2 KB answer: 4.5 us, ~2 us more with them).
_GATE = 8
_GATED_FROM = 16 << 10
# What the flat form drops: every character a line break may be spelt with but for ``%``
# and ``\\u000A`` (texts with those have none), and so the letters ``n`` and ``r`` of the
# anchors too.
_FLAT_DROPPED = "\\\n\rnr"


def _gate(anchor: str) -> str:
    """Up to :data:`_GATE` distinct characters of ``anchor``, capitals first, then digits:
    the ones text without base64 most often lacks (a looked-up character that is absent
    costs one ``memchr`` over the text, 5 us for 200 KB; a present one stops at its first
    occurrence)."""
    return "".join(sorted(set(anchor), key=lambda c: (not c.isupper(), not c.isdigit(), c))
                   [:_GATE])


def _dropped(text: str) -> str:
    for c in _FLAT_DROPPED:
        text = text.replace(c, "")
    return text


class _Run:
    """One offset of a credential inside base64: the characters every blob holding it
    there holds (the inner run, and for a short credential the edges), and the needles
    that say a text may hold them."""

    __slots__ = ("anchor", "anchor_b", "chars", "flat", "flat_b", "gate", "gate_b", "halves",
                 "halves_b", "long")

    def __init__(self, chars: list[str], core: str) -> None:
        self.chars = chars  # each character's pattern
        self.anchor = _anchor(core)
        window = self.anchor[:_WRAP_WINDOW]
        half = len(window) // 2
        self.halves = (window[:half], window[half:]) if half else (window,)
        self.anchor_b = self.anchor.encode()
        self.halves_b = tuple(h.encode() for h in self.halves)
        self.flat = _dropped(self.anchor)  # the anchor as a text's flat form holds it
        self.flat_b = self.flat.encode()
        self.gate = tuple(_gate(self.anchor))
        self.gate_b = tuple(c.encode() for c in self.gate)
        self.long = len(self.anchor) >= _FLAT_BELOW

    def pattern(self) -> str:
        return _BREAK.join(self.chars)


def _runs(secret: str) -> list[_Run]:
    """The runs of ``secret``, one per offset modulo 3: the base64 of its whole 3-byte
    groups from its first, second and third byte on (its inner run), in either alphabet;
    under :data:`B64_EDGELESS` bytes with the edges it shares with the groups either side."""
    data = secret.encode("utf-8", "surrogatepass")
    out = []
    for s in range(3):
        whole = (len(data) - s) // 3 * 3
        core = binascii.b2a_base64(data[s:s + whole], newline=False).decode()
        chars = [_ALPHABETS.get(c) or _char(c) for c in core]
        if len(data) < B64_EDGELESS:
            chars = _edges(data[:s], True) + chars + _edges(data[s + whole:], False)
        out.append(_Run(chars, core))
    return out


def _edges(known: bytes, lead: bool) -> list[str]:
    """The patterns of the characters of a 3-byte group that ``known`` (its last bytes when
    ``lead``, else its first) fixes some bits of: each, the characters whose bits agree."""
    if not known:
        return []
    shift = (3 - len(known)) * 8 if not lead else 0
    value = int.from_bytes(known, "big") << shift
    fixed = ((1 << len(known) * 8) - 1) << shift
    out = []
    for i in range(4):
        at = 18 - 6 * i  # the group's 24 bits, char i's 6 of them
        need, bits = (fixed >> at) & 63, (value >> at) & 63
        if need:
            out.append(_one_of([v for v in range(64) if v & need == bits]))
    return out


def _one_of(values: list[int]) -> str:
    """A pattern of the base64 characters of ``values`` in either alphabet."""
    plain = "".join(_STANDARD[v] for v in values if v < 62)
    extra = [_ALPHABETS[_STANDARD[v]] for v in values if v >= 62]
    if not extra:
        return plain if len(plain) == 1 else f"[{plain}]"
    return "(?:" + "|".join(([f"[{plain}]"] if plain else []) + extra) + ")"


def _least(credentials: Sequence[str]) -> list[str]:
    """A credential holding another (``Bearer KEY``, ``KEY``) is spelt only where that one
    is: only the others are looked for. A whole-word one (shorter than
    :data:`WORD_SHORTEST`) holds no other: ``pw`` inside ``pwd-…`` is no word."""
    return [c for c in credentials if not any(
        o in c for o in credentials if o != c and len(o) >= WORD_SHORTEST)]


def _anchor(secret: str) -> str:
    """The longest run of ASCII letters and digits of ``secret``: every spelling writes it
    as it is ("" for a credential without one: then it is always looked for)."""
    return max(_RUNS.findall(secret), key=len, default="")


def _wrapped(data: str | bytes) -> bool:
    """Whether ``data`` may hold base64 wrapped in lines: it holds a line feed in a spelling
    :data:`_BREAK` allows (raw; ``\\n`` or ``\\u000A`` as JSON writes them;
    percent-encoded, ``%0A`` or ``%250A``). A two-character search runs at a fifth of
    memchr's speed (``"%0" in`` a megabyte without a ``%``: 2.7 ms), so each is asked only
    after a one-character one found its first character."""
    if type(data) is str:
        return "\n" in data or ("\\" in data and ("\\n" in data or "\\u" in data)) or (
            "%" in data and ("%0" in data or "%25" in data))
    assert type(data) is bytes
    return b"\n" in data or (b"\\" in data and (b"\\n" in data or b"\\u" in data)) or (
        b"%" in data and (b"%0" in data or b"%25" in data))


def _widened(text: str, start: int, end: int, floor: int) -> tuple[int, int]:
    """``start:end`` (a run found in ``text``) with the base64 group either side of it, as
    far as ``floor`` back, and the padding after: those groups hold the credential's bytes
    that share them with its neighbours. Line breaks between are passed over (raw, or
    ``\\n`` as JSON writes them: base64 holds no backslash)."""
    return _back(text, start, floor), _ahead(text, end)


def _back(text: str, at: int, floor: int) -> int:
    i, n = at, 0
    while n < 4 and i > floor:
        brk = _break_before(text, i, floor)
        if brk:
            i -= brk
        elif text[i - 1] in _B64:
            i -= 1
            n += 1
            at = i
        else:
            break
    return at


# One line break in any spelling :data:`_BREAK` allows. Walking a run's groups out, a break
# is passed over whole: ``\\u000A``'s ``000A`` and ``%0A``'s ``0A`` read as base64, and a
# mask starting inside them left ``\\u00<REDACTED>`` (invalid JSON) or ``%<REDACTED>``.
_ONE_BREAK = pattern(_char("\r") + "|" + _char("\n"))
_LONGEST_BREAK = 16  # characters back a break spelling is looked for (``\\\\u000a``: 8)


def _break_before(text: str, i: int, floor: int) -> int:
    """The length of the longest break spelling ending at ``i`` (not before ``floor``);
    0 for none. Asked only at a found run's edges."""
    c = text[i - 1]
    if c not in "\r\nrnaAdD":
        return 0
    for s in range(max(floor, i - _LONGEST_BREAK), i):
        if _ONE_BREAK.fullmatch(text, s, i):
            return i - s
    return 0


def _ahead(text: str, at: int) -> int:
    i, n = at, 0
    while i < len(text):
        c = text[i]
        m = _ONE_BREAK.match(text, i) if c in "\r\n\\%" else None
        if m is not None:
            i = m.end()
        elif n < 4 and c in _B64:
            i += 1
            n += 1
            at = i
        elif c == "=":
            i += 1
            at = i
        else:
            break
    return at


def _wrapped_in(run: _Run, looked: _Looked) -> bool:
    """Whether ``looked`` (text holding a line break) may hold ``run`` broken by one: its
    flat form holds the run's (a short anchor; a long one too where the flat form was made
    already), or, where it has none, the text holds one of the anchor's halves."""
    if not run.long or looked.has_flat():
        flat = looked.flat()
        if flat is not None:
            return (run.flat if type(flat) is str else run.flat_b) in flat  # type: ignore[operator]
    if type(looked.data) is str:
        return any(h in looked.data for h in run.halves)
    return any(h in looked.data for h in run.halves_b)


class _Looked:
    """One text as the searches see it: which characters it holds (each looked up once, as
    an anchor asks for it) and, made when first asked, its flat form: the text without
    backslashes, raw line breaks and the letters ``n`` and ``r``. A run broken by line
    breaks (``\\n``, ``\\r\\n`` as JSON writes them, raw, more backslashes) is whole
    there, without its own ``n`` and ``r``: five one-character replacements and a look for
    ``u000`` (200 KB of MIME-wrapped base64: ~0.2 ms) where removing the two-character
    ``\\n`` itself (a search stepping a third of a character at a time) took ~0.5 ms. A
    text spelling a break with ``%`` or ``\\u000A`` has no flat form (the halves are
    looked for instead)."""

    __slots__ = ("_flat", "_has", "data", "gated")

    def __init__(self, data: str | bytes) -> None:
        self.data = data
        self.gated = len(data) >= _GATED_FROM  # characters looked up before searches
        self._has: dict[str | bytes, bool] = {}
        self._flat: str | bytes | bool | None = False  # False: not made yet

    def holds(self, chars: tuple[str, ...], chars_b: tuple[bytes, ...]) -> bool:
        """Whether the text holds each of ``chars`` (``chars_b`` for bytes)."""
        has, data = self._has, self.data
        for c in chars if type(data) is str else chars_b:
            h = has.get(c)
            if h is None:
                h = has[c] = c in data  # type: ignore[operator]
            if not h:
                return False
        return True

    def has_flat(self) -> bool:
        return self._flat is not False

    def flat(self) -> str | bytes | None:
        if self._flat is False:
            self._flat = _flat(self.data)
        assert self._flat is not True
        return self._flat


def _flat(data: str | bytes) -> str | bytes | None:
    if type(data) is str:
        if "%" in data:
            return None
        flat = _dropped(data)
        return None if "u000" in flat else flat
    assert type(data) is bytes
    if b"%" in data:
        return None
    for c in _FLAT_DROPPED.encode():
        data = data.replace(bytes((c,)), b"")
    return None if b"u000" in data else data


class _Coded:
    """Credentials inside larger base64 blobs (the module docstring's second half): which
    of their runs text may hold, whether it does, and the text with each replaced."""

    __slots__ = ("_bytes", "_runs", "_texts")

    def __init__(self, credentials: Sequence[str]) -> None:
        runs = [r for c in credentials for r in _runs(c)]
        self._runs = sorted(runs, key=lambda r: len(r.chars), reverse=True)
        self._texts: dict[int, re.Pattern[str]] = {}
        self._bytes: dict[int, re.Pattern[bytes]] = {}

    def present(self, looked: _Looked) -> list[_Run]:
        """The runs ``looked`` may hold: those whose characters it holds (:func:`_gate`)
        and their anchor; where it holds a line break, in its flat form, or half of it
        (:data:`_WRAP_WINDOW`, :data:`_FLAT_BELOW`)."""
        data = looked.data
        runs = self._runs
        if _wrapped(data):
            if looked.gated:
                runs = [r for r in runs if looked.holds(r.gate, r.gate_b)]
            return [r for r in runs if _wrapped_in(r, looked)]
        # A long anchor is searched for at about a memchr's cost: looked up first only
        # when short (a needle of 12 characters: 250K instructions for 200 KB, a missing
        # character's memchr 30K).
        if looked.gated:
            runs = [r for r in runs if r.long or looked.holds(r.gate, r.gate_b)]
        if type(data) is str:
            return [r for r in runs if r.anchor in data]
        return [r for r in runs if r.anchor_b in data]

    def held(self, looked: _Looked) -> bool:
        data = looked.data
        assert type(data) is bytes
        for run in self.present(looked):
            p = self._bytes.get(id(run))
            if p is None:
                p = self._bytes[id(run)] = re.compile(run.pattern().encode())
            if p.search(data) is not None:
                return True
        return False

    def replaced(self, looked: _Looked) -> str:
        text = looked.data
        assert type(text) is str
        for run in self.present(looked):
            p = self._texts.get(id(run))
            if p is None:
                p = self._texts[id(run)] = re.compile(run.pattern())
            text = _blotted(p, text)
        return text


def _blotted(p: re.Pattern[str], text: str) -> str:
    """``text`` with each match of ``p`` (an inner run), widened (:func:`_widened`),
    replaced by the placeholder."""
    parts: list[str] = []
    last = 0
    for m in p.finditer(text):
        start, end = _widened(text, m.start(), m.end(), last)
        parts += [text[last:start], PLACEHOLDER]
        last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


class Spellings:
    """Some credentials in every spelling: whether text may hold one (:meth:`may_hold`),
    whether it does (:meth:`held`), and the text with each replaced by the placeholder,
    everything else as it was (:meth:`replaced`). Made once per set of credentials
    (:func:`spellings`)."""

    __slots__ = ("_anchors", "_bytes", "_coded", "_secrets", "_texts")

    def __init__(self, credentials: Sequence[str]) -> None:
        # Longest first, so a credential holding another is replaced whole.
        self._secrets = sorted(set(credentials), key=len, reverse=True)
        least = _least(self._secrets)
        anchors = [_anchor(c) for c in least]
        self._anchors = None if "" in anchors else [
            (a, a.encode(), tuple(_gate(a)) if len(a) < _FLAT_BELOW else (),
             tuple(c.encode() for c in _gate(a)) if len(a) < _FLAT_BELOW else ())
            for a in set(anchors)]
        self._texts: list[re.Pattern[str]] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        coded = [c for c in least if len(c.encode("utf-8", "surrogatepass")) >= B64_SHORTEST]
        self._coded = _Coded(coded) if coded else None

    def _spelt(self, looked: _Looked) -> bool:
        """Whether ``looked`` holds an anchor (a substring search per credential whose
        characters it holds: 1 MB in 100-300 us, by the text and the anchor's length)."""
        if self._anchors is None:
            return True
        data = looked.data
        if not looked.gated:
            if type(data) is str:
                return any(a in data for a, _, _, _ in self._anchors)
            return any(b in data for _, b, _, _ in self._anchors)
        if type(data) is str:
            return any(looked.holds(g, gb) and a in data for a, _, g, gb in self._anchors)
        return any(looked.holds(g, gb) and b in data for _, b, g, gb in self._anchors)

    def may_hold(self, data: str | bytes) -> bool:
        """Whether ``data`` may hold a spelling: it holds an anchor of a credential or of
        one of its inner base64 runs."""
        looked = _Looked(data)
        return self._spelt(looked) or (
            self._coded is not None and bool(self._coded.present(looked)))

    def held(self, data: bytes) -> bool:
        """Whether ``data`` holds a credential in some spelling."""
        looked = _Looked(data)
        if self._spelt(looked):
            if self._bytes is None:
                self._bytes = re.compile("|".join(_pattern(c) for c in _least(self._secrets))
                                         .encode())
            if self._bytes.search(data) is not None:
                return True
        return self._coded is not None and self._coded.held(looked)

    def replaced(self, text: str) -> str:
        """``text`` with every spelling of a credential replaced by the placeholder."""
        looked = _Looked(text)
        if self._spelt(looked):
            if self._texts is None:
                # One pattern each, not one alternation: a pattern opening with letters is
                # searched for by them (sre's literal prefix), an alternation at every
                # position.
                self._texts = [re.compile(_pattern(c)) for c in self._secrets]
            for p in self._texts:
                text = p.sub(PLACEHOLDER, text)
        if self._coded is None:
            return text
        return self._coded.replaced(looked if text is looked.data else _Looked(text))

    def replaced_bytes(self, data: bytes) -> bytes:
        """``data`` (a body that was not text, holding a credential as its UTF-8) with every
        spelling replaced by the placeholder."""
        if not self.may_hold(data):
            return data
        text = data.decode("utf-8", "surrogateescape")
        return self.replaced(text).encode("utf-8", "surrogateescape")


@functools.lru_cache(maxsize=256)
def spellings(credentials: tuple[str, ...]) -> Spellings:
    """The :class:`Spellings` of ``credentials``: a request's are the same call after call
    (kept in memory only, as the session keeps them)."""
    return Spellings(credentials)
