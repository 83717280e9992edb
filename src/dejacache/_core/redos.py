"""Which user regexes can take exponential time: a static check run when a pattern is parsed.

Python's ``re`` backtracks, so a repeated part that can match the same text in two ways
(``(a+)+``, ``(\\w+\\s?)+``, ``(a|ab)*``) makes a failing match try every split of the text:
``(a+)+$`` took 7 s on a 25-character argument, twice as long per extra character. A volatile
pattern runs over every string of every request, so one such pattern hangs every call.

The check walks the parsed pattern (``re._parser``, the parser ``re.compile`` itself uses) and
refuses a pattern when, inside a repetition of more than one pass,

* a part of variable length can be followed by a character it could also start with (the
  next pass, or what follows it in the same pass), or
* two alternatives can start with the same character.

Character sets are compared on a sample alphabet (ASCII, a few non-ASCII letters, digits and
spaces, and every literal and range end of the pattern), which decides overlaps of literals
and ranges exactly. Possessive repetitions (``a++``) and atomic groups (``(?>...)``) never
backtrack and are accepted. Polynomial cases outside repetition (``.*a.*b``) are accepted:
they stay fast on arguments of ordinary size.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["exponential"]

# The parser ``re.compile`` uses: private, but parsing is all we ask of it (``sre_parse``, its
# public alias, warns DeprecationWarning since 3.11).
_p: Any = importlib.import_module("re._parser")

_REPS = (_p.MAX_REPEAT, _p.MIN_REPEAT)
_OPAQUE = (_p.POSSESSIVE_REPEAT, _p.ATOMIC_GROUP)  # match once, never backtracked into
_ZERO = (_p.AT, _p.ASSERT, _p.ASSERT_NOT)
_BASE = frozenset(chr(i) for i in range(128)) | frozenset(
    "\u00a0\u00e9\u00c9\u0663\u4e2d\u2028\u3000\uffff\U0001f600")
_CATEGORY = {
    _p.CATEGORY_DIGIT: r"\d", _p.CATEGORY_NOT_DIGIT: r"\D",
    _p.CATEGORY_SPACE: r"\s", _p.CATEGORY_NOT_SPACE: r"\S",
    _p.CATEGORY_WORD: r"\w", _p.CATEGORY_NOT_WORD: r"\W",
    _p.CATEGORY_LINEBREAK: r"\n", _p.CATEGORY_NOT_LINEBREAK: r"[^\n]",
}

Chars = frozenset[str]


class _Refused(Exception):
    pass


def exponential(pattern: re.Pattern[str]) -> str | None:
    """Why ``pattern`` can take exponential time, or None when it cannot (as far as this
    check sees)."""
    return _verdict(pattern.pattern, pattern.flags)


@functools.lru_cache(maxsize=256)
def _verdict(text: str, flags: int) -> str | None:
    tree = _p.parse(text, flags)
    check = _Check(_alphabet(tree), bool(flags & re.IGNORECASE))
    try:
        check.seq(list(tree), frozenset(), False)
    except _Refused as exc:
        return str(exc)
    return None


def _alphabet(tree: Any) -> Chars:
    """The sample: ``_BASE`` plus every literal and range end in the pattern, and neighbours."""
    extra: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, (list, tuple)) or type(node).__name__ == "SubPattern":
            for x in node:
                visit(x)
        elif isinstance(node, int) and 0 <= node <= 0x10FFFF:
            for c in (node - 1, node, node + 1):
                if 0 <= c <= 0x10FFFF:
                    extra.add(chr(c))

    visit(tree)
    return _BASE | frozenset(extra)


class _Check:
    __slots__ = ("alpha", "icase")

    def __init__(self, alpha: Chars, icase: bool) -> None:
        self.alpha = alpha
        self.icase = icase

    # ------------------------------------------------------------------ first sets

    def chars(self, op: Any, av: Any) -> Chars:
        """The characters one character item can match."""
        if op is _p.LITERAL:
            out = frozenset({chr(av)})
        elif op is _p.NOT_LITERAL:
            out = self.alpha - {chr(av)}
        elif op is _p.ANY:
            out = self.alpha
        else:  # IN
            out = self._in(av)
        if self.icase:
            out |= {c.swapcase() for c in out} & self.alpha
        return out

    def _in(self, items: Iterable[Any]) -> Chars:
        negate = False
        found: set[str] = set()
        for op, av in items:
            if op is _p.NEGATE:
                negate = True
            elif op is _p.LITERAL:
                found.add(chr(av))
            elif op is _p.RANGE:
                lo, hi = av
                found |= {c for c in self.alpha if lo <= ord(c) <= hi}
            elif op is _p.CATEGORY:
                rx = re.compile(_CATEGORY.get(av, r"[\s\S]"))
                found |= {c for c in self.alpha if rx.match(c)}
            else:  # anything unforeseen: any character (refuses more, never less)
                found |= self.alpha
        return self.alpha - found if negate else frozenset(found)

    def first(self, seq: list[Any]) -> tuple[Chars, bool]:
        """The characters ``seq`` can start with, and whether it can match empty text."""
        out: set[str] = set()
        for op, av in seq:
            chars, empty = self.item_first(op, av)
            out |= chars
            if not empty:
                return frozenset(out), False
        return frozenset(out), True

    def item_first(self, op: Any, av: Any) -> tuple[Chars, bool]:
        if op in (_p.LITERAL, _p.NOT_LITERAL, _p.ANY, _p.IN):
            return self.chars(op, av), False
        if op in _ZERO:
            return frozenset(), True
        if op is _p.SUBPATTERN:
            return self.first(list(av[-1]))
        if op is _p.ATOMIC_GROUP:
            return self.first(list(av))
        if op in _REPS or op is _p.POSSESSIVE_REPEAT:
            chars, empty = self.first(list(av[2]))
            return chars, empty or av[0] == 0
        if op is _p.BRANCH:
            firsts = [self.first(list(alt)) for alt in av[1]]
            return (frozenset().union(*(c for c, _ in firsts)),
                    any(e for _, e in firsts))
        if op is _p.GROUPREF_EXISTS:
            alts = [list(a) if a is not None else [] for a in av[1:]]
            firsts = [self.first(a) for a in alts]
            return frozenset().union(*(c for c, _ in firsts)), any(e for _, e in firsts)
        return self.alpha, True  # a backreference: any text, possibly empty

    # ------------------------------------------------------------------ the walk

    def seq(self, seq: list[Any], follow: Chars, looping: bool) -> None:
        """Check ``seq``, which ``follow`` follows; ``looping``: inside a repetition of more
        than one pass, where an ambiguity multiplies with every pass."""
        for i, (op, av) in enumerate(seq):
            rest, empty = self.first(seq[i + 1:])
            after = rest | follow if empty else rest
            self.item(op, av, after, looping)

    def item(self, op: Any, av: Any, after: Chars, looping: bool) -> None:
        if op is _p.SUBPATTERN:
            self.seq(list(av[-1]), after, looping)
        elif op in _OPAQUE:  # checked on their own: nothing outside backtracks into them
            self.seq(list(av[2] if op is _p.POSSESSIVE_REPEAT else av), frozenset(), False)
        elif op in (_p.ASSERT, _p.ASSERT_NOT):
            self.seq(list(av[1]), frozenset(), False)
        elif op in _REPS:
            self.repeat(av, after, looping)
        elif op is _p.BRANCH:
            self.branch([list(alt) for alt in av[1]], after, looping)
        elif op is _p.GROUPREF_EXISTS:
            self.branch([list(a) if a is not None else [] for a in av[1:]], after, looping)

    def repeat(self, av: Any, after: Chars, looping: bool) -> None:
        lo, hi, body = av
        body = list(body)
        start, _ = self.first(body)
        if looping and lo != hi and start & after:
            raise _Refused(f"a repetition inside a repetition can end where it could go on, "
                           f"at {_show(start & after)}")
        passes = hi > 1
        self.seq(body, after | start if passes else after, looping or passes)

    def branch(self, alts: list[list[Any]], after: Chars, looping: bool) -> None:
        if looping:
            seen: Chars = frozenset()
            for alt in alts:
                chars, empty = self.first(alt)
                if empty:
                    chars |= after
                if chars & seen:
                    raise _Refused(f"alternatives inside a repetition can both start with "
                                   f"{_show(chars & seen)}")
                seen |= chars
        for alt in alts:
            self.seq(alt, after, looping)


def _show(chars: Chars) -> str:
    return repr(min(chars))
