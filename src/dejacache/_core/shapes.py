"""Volatile shapes: what clocks, ids, temp paths, ports and nonces look like inside text, and
where two strings that should be "the same call" differ. Pure functions over strings.

:func:`spans` aligns two strings token by token and widens each difference to the shape
that covers it in both (a timestamp whose seconds changed is one timestamp span, not two
digits), with the literal text around it that both share. :func:`rule_for` writes the
``re:`` rule that masks a group of such spans: a **strong** shape (an ISO timestamp, a
UUID, a pytest or ``mkdtemp`` directory, a loopback port) is distinctive enough to be masked
wherever it appears; a **weak** one (a hex or base64 nonce, a number, a duration, a bare
date) only after the literal text that came before it every time (``(?<=nonce=)``), so a
hex order id elsewhere in a prompt stays keyed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["MKDTEMP_RUN", "PYTEST_RUN", "SHAPES", "Shape", "Span", "rule_for", "shape_of", "spans"]

_UNITS = r"(?:ns|µs|us|ms|s|sec|secs|seconds|m|min|mins|minutes|h|hrs?|hours)"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
#: pytest's directory for one session, below the temp root ('/'-separated).
PYTEST_RUN: Final = r"pytest-of-[\w.-]+/pytest-\d+"
#: ``tempfile.mkdtemp``'s (and ``TemporaryDirectory``'s) directory, below the temp root: not
#: a longer name or a file with a suffix (``tmpsettings.json`` is a file of the project's).
MKDTEMP_RUN: Final = r"tmp[a-z0-9_]{8}(?![\w-]|\.\w)"
# The directories tempfile and pytest's tmp_path make (the varying part only: what follows
# in the path, a file's name, stays keyed): macOS and Linux roots, then Windows.
_TEMP = (r"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[\w-]+/[\w-]+/T)/"
         rf"(?:{PYTEST_RUN}|{MKDTEMP_RUN})")
_WINDOWS_PYTEST = PYTEST_RUN.replace("/", r"\\")
_WINDOWS_TEMP = (r"[A-Za-z]:\\(?:Users\\[\w.-]+\\AppData\\Local\\Temp|Windows\\Temp)\\"
                 rf"(?:{_WINDOWS_PYTEST}|{MKDTEMP_RUN})")


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """``find``: what the shape looks like in text; ``strong``: its own pattern is a rule
    (``find`` as written); weak shapes are written with their context (:func:`rule_for`)."""

    name: str
    find: re.Pattern[str]
    strong: bool


def _shape(name: str, pattern: str, strong: bool = False) -> Shape:
    return Shape(name, re.compile(pattern), strong)


#: In priority order: a span is given the first shape that covers it on both sides.
SHAPES: Final[tuple[Shape, ...]] = (
    _shape("temp path", _TEMP, True),
    _shape("Windows temp path", _WINDOWS_TEMP, True),
    _shape("timestamp", r"(?<!\d)\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
           r"(?:Z|[+-]\d{2}(?::?\d{2})?)?(?!\d)", True),
    _shape("HTTP date", _DAY + r", \d{2} " + _MONTH + r" \d{4} \d{2}:\d{2}:\d{2} "
           r"(?:GMT|UTC|[+-]\d{4})", True),
    _shape("ctime", _DAY + " " + _MONTH + r" [ \d]\d \d{2}:\d{2}:\d{2} \d{4}", True),
    _shape("UUID", r"(?<![0-9A-Fa-f])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
           r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Fa-f])", True),
    _shape("port", r"(?:(?<=localhost:)|(?<=127\.0\.0\.1:)|(?<=0\.0\.0\.0:)|(?<=\[::1\]:))"
           r"\d{1,5}(?!\d)", True),
    _shape("date", r"(?<![\d/.-])(?:\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4})(?![\d/-]|\.\d)"),
    _shape("time", r"(?<![\d:.])\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:\s?[AaPp][Mm])?"
           r"(?![\d:])"),
    _shape("epoch", r"(?<![\d.])1\d{9}(?:\d{3}|\d{6}|\d{9})?(?:\.\d+)?(?!\d|\.\d)"),
    _shape("duration", r"(?<![\w.])\d+(?:\.\d+)?\s?" + _UNITS + r"(?!\w)"),
    _shape("hex nonce", r"(?<![0-9A-Za-z])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}"
           r"(?![0-9A-Za-z])|(?<![0-9A-Za-z])(?=[0-9A-F]*\d)(?=[0-9A-F]*[A-F])[0-9A-F]{6,}"
           r"(?![0-9A-Za-z])"),
    # Digits and both cases; or, from 20 characters, both cases and two capitals: one
    # random 24-character token in 60 has no digit, and a word or an identifier that long
    # rarely takes two capitals inside it.
    _shape("base64 nonce", r"(?<![A-Za-z0-9+/_-])(?:(?=[A-Za-z0-9+/_-]*\d)"
           r"(?=[A-Za-z0-9+/_-]*[A-Z])(?=[A-Za-z0-9+/_-]*[a-z])[A-Za-z0-9+/_-]{12,}"
           r"|(?=[A-Za-z0-9+/_-]*[A-Z][A-Za-z0-9+/_-]*[A-Z])(?=[A-Za-z0-9+/_-]*[a-z])"
           r"[A-Za-z0-9+/_-]{20,})={0,2}(?![A-Za-z0-9+/=_-])"),
    _shape("random token", r"(?<![A-Za-z0-9_])(?=[A-Za-z0-9_]*\d)(?=[A-Za-z0-9_]*[A-Za-z])"
           r"[A-Za-z0-9_]{6,}(?![A-Za-z0-9_])"),
    _shape("number", r"(?<![\w.])\d+(?:\.\d+)?(?!\w|\.\d)"),
)
_BY_NAME: Final = {s.name: s for s in SHAPES}

#: Literal text kept on each side of a span, to anchor a weak shape's rule.
CONTEXT: Final = 24
# A window of text searched around a difference for the shape covering it (the longest
# shape, a Windows temp path, stays well under it).
_WINDOW: Final = 160
# Token alignment is quadratic in the worst case: past this many tokens in the differing
# middle of two strings, the middle is one difference.
_MAX_TOKENS: Final = 20_000
_TOKEN: Final = re.compile(r"\w+|\s+|[^\w\s]")


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """One place two strings differ: ``a`` and ``b`` are ``(start, end)`` in each, widened to
    ``shape`` (None: it fits none), with the literal text both share just ``before`` and
    ``after`` it (up to :data:`CONTEXT` characters)."""

    shape: Shape | None
    a: tuple[int, int]
    b: tuple[int, int]
    a_text: str
    b_text: str
    before: str
    after: str


def shape_of(name: str) -> Shape:
    return _BY_NAME[name]


def _common_prefix(a: str, b: str, limit: int | None = None) -> int:
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str, limit: int) -> int:
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _regions(a: str, b: str) -> list[tuple[int, int, int, int]]:
    """The differing regions of ``a`` and ``b`` as ``(a0, a1, b0, b1)``, aligned by tokens."""
    p = _common_prefix(a, b)
    s = _common_suffix(a[p:], b[p:], min(len(a), len(b)) - p)
    ma, mb = a[p:len(a) - s], b[p:len(b) - s]
    ta = [(m.start() + p, m.end() + p, m.group()) for m in _TOKEN.finditer(ma)]
    tb = [(m.start() + p, m.end() + p, m.group()) for m in _TOKEN.finditer(mb)]
    if not ta or not tb or len(ta) + len(tb) > _MAX_TOKENS:
        return [(p, len(a) - s, p, len(b) - s)]
    import difflib  # only when two recordings differ: learning, or explaining a miss

    ops = difflib.SequenceMatcher(None, [t[2] for t in ta], [t[2] for t in tb],
                                  autojunk=False).get_opcodes()
    out = []
    for tag, i0, i1, j0, j1 in ops:
        if tag == "equal":
            continue
        a0 = ta[i0][0] if i0 < len(ta) else ta[-1][1]
        a1 = ta[i1 - 1][1] if i1 > i0 else a0
        b0 = tb[j0][0] if j0 < len(tb) else tb[-1][1]
        b1 = tb[j1 - 1][1] if j1 > j0 else b0
        out.append((a0, a1, b0, b1))
    return out


def _covering(shape: Shape, text: str, lo: int, hi: int) -> tuple[int, int] | None:
    """The match of ``shape`` in ``text`` that covers ``[lo, hi)``."""
    start = max(0, lo - _WINDOW)
    for m in shape.find.finditer(text, start, min(len(text), hi + _WINDOW)):
        if m.start() > lo:
            break
        if m.start() <= lo and m.end() >= hi and m.end() > m.start():
            return m.start(), m.end()
    return None


# A random nonce sometimes comes out without a letter (one 8-digit hex id in 40) or without
# a digit: then only one side fits the nonce's shape. The other side still counts as that
# nonce when it is a whole run of the nonce's alphabet at the same place and of the same
# length (the rule written for nonces masks any run of the alphabet of that length).
_ALPHABETS: Final = {"hex nonce": re.compile(r"[0-9a-f]+|[0-9A-F]+"),
                     "base64 nonce": re.compile(r"[A-Za-z0-9+/_-]+={0,2}")}


def _same_alphabet(shape: Shape, x: str, cx: tuple[int, int], x0: int, y: str, y0: int
                   ) -> tuple[int, int] | None:
    """The run of ``y`` standing where ``x``'s match ``cx`` of ``shape`` stands (the two
    differ from ``x0`` and ``y0`` on, what comes before is the same), when it is ``shape``'s
    alphabet throughout, of the same length, and a whole run."""
    alphabet = _ALPHABETS[shape.name]
    start = y0 - (x0 - cx[0])
    end = start + cx[1] - cx[0]
    if start < 0 or end > len(y) or y[start:y0] != x[cx[0]:x0] \
            or not alphabet.fullmatch(y, start, end):
        return None
    if (start and alphabet.fullmatch(y, start - 1, start)) or \
            (end < len(y) and alphabet.fullmatch(y, end, end + 1)):
        return None  # part of a longer run: not the same token
    return start, end


def _widen(a: str, b: str, region: tuple[int, int, int, int]
           ) -> tuple[Shape | None, tuple[int, int], tuple[int, int]]:
    a0, a1, b0, b1 = region
    for shape in SHAPES:
        ca = _covering(shape, a, a0, a1)
        if ca is None:
            continue
        cb = _covering(shape, b, b0, b1)
        if cb is not None:
            return shape, ca, cb
    for name in _ALPHABETS:
        shape = _BY_NAME[name]
        ca = _covering(shape, a, a0, a1)
        if ca is not None and (cb := _same_alphabet(shape, a, ca, a0, b, b0)) is not None:
            return shape, ca, cb
        cb = _covering(shape, b, b0, b1)
        if cb is not None and (ca := _same_alphabet(shape, b, cb, b0, a, a0)) is not None:
            return shape, ca, cb
    return None, (a0, a1), (b0, b1)


def spans(a: str, b: str) -> list[Span]:
    """Where ``a`` and ``b`` differ, each place widened to the shape covering it on both
    sides (adjacent pieces of one timestamp or UUID become one span)."""
    if a == b:
        return []
    widened: list[tuple[Shape | None, tuple[int, int], tuple[int, int]]] = []
    for region in _regions(a, b):
        shape, ra, rb = _widen(a, b, region)
        if widened and (ra[0] < widened[-1][1][1] or rb[0] < widened[-1][2][1]):
            last = widened.pop()  # the same match again, or overlapping pieces: one span
            same = last[0] is shape and shape is not None
            shape = shape if same else None
            ra = (min(ra[0], last[1][0]), max(ra[1], last[1][1]))
            rb = (min(rb[0], last[2][0]), max(rb[1], last[2][1]))
        widened.append((shape, ra, rb))
    out = []
    for i, (shape, ra, rb) in enumerate(widened):
        # Context stops at the neighbouring differences: it is the text both strings share.
        pa, pb = (widened[i - 1][1][1], widened[i - 1][2][1]) if i else (0, 0)
        na_, nb_ = ((widened[i + 1][1][0], widened[i + 1][2][0]) if i + 1 < len(widened)
                    else (len(a), len(b)))
        nb = _common_suffix(a[pa:ra[0]], b[pb:rb[0]], CONTEXT)
        na = _common_prefix(a[ra[1]:na_], b[rb[1]:nb_], CONTEXT)
        out.append(Span(shape, ra, rb, a[ra[0]:ra[1]], b[rb[0]:rb[1]],
                        _last_word(a[ra[0] - nb:ra[0]]), _first_word(a[ra[1]:ra[1] + na])))
    return out


_LAST_WORD: Final = re.compile(r"(?:\w+)?[^\w]*\Z")
_FIRST_WORD: Final = re.compile(r"[^\w]*(?:\w+)?")


def _last_word(before: str) -> str:
    """The literal anchor just before a span: its last word and the separators after it
    (``"Request nonce="`` -> ``"nonce="``; ``"took "`` stays)."""
    m = _LAST_WORD.search(before)
    return m.group() if m else ""


def _first_word(after: str) -> str:
    m = _FIRST_WORD.match(after)
    return m.group() if m else ""


# ---------------------------------------------------------------- rules


def _lengths(texts: Sequence[str]) -> str:
    lo, hi = min(map(len, texts)), max(map(len, texts))
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


def _body(shape: Shape, texts: Sequence[str]) -> str:
    """The pattern a weak shape's rule writes for the values seen."""
    name = shape.name
    if name in ("date", "time"):
        return shape.find.pattern
    if name == "epoch":  # the same unit (s, ms, µs, ns: the number of digits) as seen
        whole = [t.split(".")[0] for t in texts]
        lo, hi = min(map(len, whole)), max(map(len, whole))
        digits = f"{{{lo - 1}}}" if lo == hi else f"{{{lo - 1},{hi - 1}}}"
        return r"1\d" + digits + (r"(?:\.\d+)?" if any("." in t for t in texts) else "") + \
            r"(?!\d)"
    if name == "duration":  # any unit: the run that took 980ms may take 1.2s the next time
        return r"\d+(?:\.\d+)?\s?" + _UNITS + r"(?!\w)"
    if name == "hex nonce":
        cls = "0-9a-f" if all(t == t.lower() for t in texts) else "0-9A-F"
        return f"[{cls}]" + _lengths(texts) + "(?![0-9A-Za-z])"
    if name == "base64 nonce":
        return r"[A-Za-z0-9+/_-]" + _lengths([t.rstrip("=") for t in texts]) + \
            r"={0,2}(?![A-Za-z0-9+/=_-])"
    if name == "random token":
        cls = "a-z0-9_" if all(t == t.lower() for t in texts) else "A-Za-z0-9_"
        return f"[{cls}]" + _lengths(texts) + "(?![A-Za-z0-9_])"
    return r"\d+(?:\.\d+)?(?!\d|\.\d)" if any("." in t for t in texts) else r"\d+(?!\d)"


# Where a weak shape may start, as its pattern says (``_body`` writes only the value): a
# rule anchored on the text after it alone would otherwise mask the tail of a longer token
# (``abc123 items``: ``123``; a 40-digit hash: its last 16).
_START: Final = {"epoch": r"(?<![\d.])", "duration": r"(?<![\w.])",
                 "hex nonce": r"(?<![0-9A-Za-z])", "base64 nonce": r"(?<![A-Za-z0-9+/_-])",
                 "random token": r"(?<![A-Za-z0-9_])", "number": r"(?<![\w.])"}


_SPECIAL: Final = frozenset(".^$*+?{}[]\\|()")
_CONTROL: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"} | {
    chr(i): f"\\x{i:02x}" for i in (*range(32), 127) if chr(i) not in "\n\t\r"}


def literal(text: str) -> str:
    """``text`` as a regular expression matching itself, escaping only what must be (a
    rule stays readable: ``(?<=request id: )``, not ``(?<=request\\ id:\\ )``)."""
    return "".join("\\" + c if c in _SPECIAL else _CONTROL.get(c, c) for c in text)


def _word_trimmed(context: str, *, leading: bool) -> str:
    """``context`` without a word cut in half at its outer end (``"ent nonce="`` ->
    ``" nonce="``), so a rule never depends on the middle of a word."""
    if leading:  # the outer end is the start
        i = 0
        while i < len(context) and (context[i].isalnum() or context[i] == "_"):
            i += 1
        return context[i:] if i < len(context) else context
    j = len(context)
    while j > 0 and (context[j - 1].isalnum() or context[j - 1] == "_"):
        j -= 1
    return context[:j] if j > 0 else context


def common_before(contexts: Iterable[str]) -> str:
    """The longest literal text every one of ``contexts`` ends with."""
    items = list(contexts)
    if not items:
        return ""
    n = min(map(len, items))
    i = 0
    while i < n and len({c[len(c) - 1 - i] for c in items}) == 1:
        i += 1
    found = items[0][len(items[0]) - i:] if i else ""
    return _word_trimmed(found, leading=True) if i < min(len(c) for c in items) else found


def common_after(contexts: Iterable[str]) -> str:
    """The longest literal text every one of ``contexts`` starts with."""
    items = list(contexts)
    if not items:
        return ""
    n = min(map(len, items))
    i = 0
    while i < n and len({c[i] for c in items}) == 1:
        i += 1
    found = items[0][:i]
    return _word_trimmed(found, leading=False) if i < min(len(c) for c in items) else found


def _anchored(before: str, after: str) -> bool:
    """Enough literal text around a weak shape to anchor it: two characters in all, one of
    them not a letter or digit (``=``, ``: ``, ``[``...``]``), or a word of three."""
    text = before + after
    return len(text) >= 2 and (any(not (c.isalnum() or c == "_") for c in text)
                               or len(text.strip()) >= 3)


def rule_for(shape: Shape, texts: Sequence[str], before: str = "", after: str = "",
             *, bare: bool = False) -> str | None:
    """The ``re:`` rule masking ``texts`` (values of ``shape``) after ``before`` / before
    ``after``; ``bare``: the strong shape's own pattern, anywhere. None when a weak shape
    has no literal text to anchor it."""
    if bare:
        return "re:" + shape.find.pattern if shape.strong else None
    if not _anchored(before, after):
        return None
    if _anchored(before, ""):
        after = ""  # the text before is anchor enough: the rule then fits other endings too
    body = shape.find.pattern if shape.strong else _body(shape, texts)
    if not before:  # only the text after: the shape's own start, or "v2 items" masks "2"
        body = _START.get(shape.name, "") + body
    lead = f"(?<={literal(before)})" if before else ""
    tail = f"(?={literal(after)})" if after else ""
    return "re:" + lead + body + tail
