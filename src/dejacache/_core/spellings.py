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
token whose payload holds it, a WebSocket binary frame (kept as base64). Its characters
there depend on its offset in the blob modulo 3, so each offset gives its own *inner run*:
the base64 of the credential's whole 3-byte groups at that offset, the same in every blob
(:func:`_runs`), in the standard or the URL-safe alphabet, padded or not, in the spellings
above. The run is replaced with the group either side of it (the 1-2 bytes of the
credential that share a group with its neighbours), so the blob no longer decodes to it.
Looked for the same way, by anchors: each run's longest run of letters and digits, three
more substring searches per credential (``benchmarks/bench_unechoed.py``: a 2 KB answer,
2.2 -> 4.5 us beside ~350 us of recording; a megabyte of JSON, 123 -> 291 us; a 200-event
stream, 40 -> 50 us). Base64 wrapped in lines (MIME) is not looked into: a break may fall
inside any run, so each run would be looked for by pieces, three more searches wherever
text holds a line break (most answers; a megabyte of text, +800 us).
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


def _pattern(secret: str) -> str:
    return "".join(_char(c) for c in secret)


#: Credentials shorter than this (in UTF-8 bytes) are not looked for inside base64: the
#: shortest inner run of a 16-byte one is 16 characters (96 bits), which random base64
#: holds by chance once in 2**96 positions (a gigabyte of images: once in 2**66); at 8
#: bytes it is 8 characters (48 bits), once in 2**28 megabytes of them, each a damaged
#: image on replay, and a short credential's needles are the slowest to search for.
B64_SHORTEST = 16
_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_ALPHABETS = {"+": "(?:" + _char("+") + "|" + _char("-") + ")",
              "/": "(?:" + _char("/") + "|" + _char("_") + ")"}


def _runs(secret: str) -> list[str]:
    """The inner runs of ``secret`` in the standard alphabet, one per offset modulo 3: the
    base64 of its whole 3-byte groups from its first, second and third byte on."""
    data = secret.encode("utf-8", "surrogatepass")
    return [binascii.b2a_base64(data[s:s + (len(data) - s) // 3 * 3], newline=False).decode()
            for s in range(3)]


def _run_pattern(run: str) -> str:
    """A run in either alphabet and every spelling."""
    return "".join(_ALPHABETS.get(c) or _char(c) for c in run)


def _least(credentials: Sequence[str]) -> list[str]:
    """A credential holding another (``Bearer KEY``, ``KEY``) is spelt only where that one
    is: only the others are looked for."""
    return [c for c in credentials if not any(o in c for o in credentials if o != c)]


def _anchor(secret: str) -> str:
    """The longest run of ASCII letters and digits of ``secret``: every spelling writes it
    as it is ("" for a credential without one: then it is always looked for)."""
    return max(_RUNS.findall(secret), key=len, default="")


def _widened(text: str, start: int, end: int, floor: int) -> tuple[int, int]:
    """``start:end`` (an inner run found in ``text``) with the base64 group either side of
    it, as far as ``floor`` back, and the padding after: those groups hold the credential's
    bytes that share them with its neighbours."""
    for _ in range(4):
        if start <= floor or text[start - 1] not in _B64:
            break
        start -= 1
    for _ in range(4):
        if end >= len(text) or text[end] not in _B64:
            break
        end += 1
    while end < len(text) and text[end] == "=":
        end += 1
    return start, end


class _Coded:
    """Credentials inside larger base64 blobs (the module docstring's second half): which
    of their inner runs text may hold, whether it does, and the text with each replaced."""

    __slots__ = ("_bytes", "_runs", "_texts")

    def __init__(self, credentials: Sequence[str]) -> None:
        runs = sorted({r for c in credentials for r in _runs(c)}, key=len, reverse=True)
        self._runs = [(r, _anchor(r), _anchor(r).encode()) for r in runs]
        self._texts: dict[str, re.Pattern[str]] = {}
        self._bytes: dict[str, re.Pattern[bytes]] = {}

    def present(self, data: str | bytes) -> list[str]:
        """The runs ``data`` may hold: those with an anchor in it."""
        if type(data) is str:
            return [run for run, a, _ in self._runs if a in data]
        return [run for run, _, b in self._runs if b in data]

    def held(self, data: bytes) -> bool:
        for run in self.present(data):
            p = self._bytes.get(run)
            if p is None:
                p = self._bytes[run] = re.compile(_run_pattern(run).encode())
            if p.search(data) is not None:
                return True
        return False

    def replaced(self, text: str) -> str:
        for run in self.present(text):
            p = self._texts.get(run)
            if p is None:
                p = self._texts[run] = re.compile(_run_pattern(run))
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
        self._anchors = None if "" in anchors else [(a, a.encode()) for a in set(anchors)]
        self._texts: list[re.Pattern[str]] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        coded = [c for c in least if len(c.encode("utf-8", "surrogatepass")) >= B64_SHORTEST]
        self._coded = _Coded(coded) if coded else None

    def _spelt(self, data: str | bytes) -> bool:
        """Whether ``data`` holds an anchor (a substring search per credential: 1 MB in
        100-300 us, by the text and the anchor's length)."""
        if self._anchors is None:
            return True
        if type(data) is str:
            return any(a in data for a, _ in self._anchors)
        return any(b in data for _, b in self._anchors)

    def may_hold(self, data: str | bytes) -> bool:
        """Whether ``data`` may hold a spelling: it holds an anchor of a credential or of
        one of its inner base64 runs."""
        return self._spelt(data) or (self._coded is not None and bool(self._coded.present(data)))

    def held(self, data: bytes) -> bool:
        """Whether ``data`` holds a credential in some spelling."""
        if self._spelt(data):
            if self._bytes is None:
                self._bytes = re.compile("|".join(_pattern(c) for c in _least(self._secrets))
                                         .encode())
            if self._bytes.search(data) is not None:
                return True
        return self._coded is not None and self._coded.held(data)

    def replaced(self, text: str) -> str:
        """``text`` with every spelling of a credential replaced by the placeholder."""
        if self._spelt(text):
            if self._texts is None:
                # One pattern each, not one alternation: a pattern opening with letters is
                # searched for by them (sre's literal prefix), an alternation at every
                # position.
                self._texts = [re.compile(_pattern(c)) for c in self._secrets]
            for p in self._texts:
                text = p.sub(PLACEHOLDER, text)
        return text if self._coded is None else self._coded.replaced(text)

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
