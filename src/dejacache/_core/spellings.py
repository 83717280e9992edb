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
"""

from __future__ import annotations

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


def _least(credentials: Sequence[str]) -> list[str]:
    """A credential holding another (``Bearer KEY``, ``KEY``) is spelt only where that one
    is: only the others are looked for."""
    return [c for c in credentials if not any(o in c for o in credentials if o != c)]


def _anchor(secret: str) -> str:
    """The longest run of ASCII letters and digits of ``secret``: every spelling writes it
    as it is ("" for a credential without one: then it is always looked for)."""
    return max(_RUNS.findall(secret), key=len, default="")


class Spellings:
    """Some credentials in every spelling: whether text may hold one (:meth:`may_hold`),
    whether it does (:meth:`held`), and the text with each replaced by the placeholder,
    everything else as it was (:meth:`replaced`). Made once per set of credentials
    (:func:`spellings`)."""

    __slots__ = ("_anchors", "_bytes", "_secrets", "_texts")

    def __init__(self, credentials: Sequence[str]) -> None:
        # Longest first, so a credential holding another is replaced whole.
        self._secrets = sorted(set(credentials), key=len, reverse=True)
        anchors = [_anchor(c) for c in _least(self._secrets)]
        self._anchors = None if "" in anchors else [(a, a.encode()) for a in set(anchors)]
        self._texts: list[re.Pattern[str]] | None = None
        self._bytes: re.Pattern[bytes] | None = None

    def may_hold(self, data: str | bytes) -> bool:
        """Whether ``data`` may hold a spelling: it holds an anchor (a substring search per
        credential: 1 MB in 100-300 us, by the text and the anchor's length)."""
        if self._anchors is None:
            return True
        if type(data) is str:
            return any(a in data for a, _ in self._anchors)
        return any(b in data for _, b in self._anchors)

    def held(self, data: bytes) -> bool:
        """Whether ``data`` holds a credential in some spelling."""
        if not self.may_hold(data):
            return False
        if self._bytes is None:
            self._bytes = re.compile("|".join(_pattern(c) for c in _least(self._secrets))
                                     .encode())
        return self._bytes.search(data) is not None

    def replaced(self, text: str) -> str:
        """``text`` with every spelling of a credential replaced by the placeholder."""
        if not self.may_hold(text):
            return text
        if self._texts is None:
            # One pattern each, not one alternation: a pattern opening with letters is
            # searched for by them (sre's literal prefix), an alternation at every position.
            self._texts = [re.compile(_pattern(c)) for c in self._secrets]
        for p in self._texts:
            text = p.sub(PLACEHOLDER, text)
        return text

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
