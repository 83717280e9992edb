"""What ``volatile=`` names: field names, dotted/wildcard paths, and patterns inside text.

A volatile item is one of
* a field name (``"trace_id"``): that key is dropped wherever it appears;
* a path (``"messages[*].content"``, ``"body.metadata.run"``, ``"items[0]"``): the value at
  that place is dropped (a key) or replaced by :data:`PLACEHOLDER` (a list position, so later
  positions keep their meaning); lists met on the way are walked, ``[*]`` says so explicitly;
* a compiled regular expression: every match inside any string is replaced by
  :data:`PLACEHOLDER` before keying, so the stored request shows where volatile text was
  (a judge prompt's ``<opentelemetry_traces>`` digest, a timestamp inside a system prompt).
  In ``DEJACACHE_VOLATILE`` a pattern is written ``re:PATTERN``.

Credentials come first: a pattern never sees a value under a credential name, a secret-shaped
string, a keyed mask, or a credential inside a URL query (masked before the pattern runs), so
no pattern can make two credentials key alike. A literal :data:`PLACEHOLDER` in the text is
escaped (``<volatile\\>``), so it never keys like a replaced match. Patterns that can take
exponential time are refused when parsed (see ``redos``).

Pure functions: parsed once per key builder, applied per call, never mutating the input.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .. import _secrets
from ..errors import ConfigurationError
from .redos import exponential

__all__ = ["PLACEHOLDER", "Path", "Volatility", "apply", "parse", "parse_path", "under"]

PLACEHOLDER = "<volatile>"

# A step is a key (str), an index (int) or every element (None).
Step = str | int | None
Path = tuple[Step, ...]

_SEGMENT = re.compile(r"([^.\[\]]+)?((?:\[(?:\*|\d+)\])*)")
_INDEX = re.compile(r"\[(\*|\d+)\]")
# A literal placeholder in the text, and the escaped ones (``<volatile\\>``...): one more
# backslash each, so text never keys like a match that was replaced.
_LITERAL = re.compile(r"<volatile(\\*)>")


@dataclasses.dataclass(frozen=True, slots=True)
class Volatility:
    names: frozenset[str] = frozenset()
    paths: tuple[Path, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names or self.paths or self.patterns)


def _is_path(item: str) -> bool:
    return "." in item or "[" in item


def parse_path(text: str) -> Path:
    """``"messages[*].content"`` -> ``("messages", None, "content")``."""
    steps: list[Step] = []
    for part in text.split("."):
        m = _SEGMENT.fullmatch(part)
        if not part or m is None or (m.group(1) is None and not steps and not m.group(2)):
            raise ConfigurationError(
                f"volatile path {text!r} is malformed at {part!r}: write dotted names with "
                "optional [N] or [*] after each, e.g. 'body.messages[*].content'")
        if m.group(1) is not None:
            steps.append(m.group(1))
        for idx in _INDEX.findall(m.group(2) or ""):
            steps.append(None if idx == "*" else int(idx))
    if not steps:
        raise ConfigurationError(f"volatile path {text!r} names nothing")
    return tuple(steps)


def parse(items: Iterable[str | re.Pattern[str]] | None) -> Volatility:
    """Split ``volatile=`` items into names, paths and patterns (errors name the item)."""
    names: set[str] = set()
    paths: list[Path] = []
    patterns: list[re.Pattern[str]] = []
    for item in items or ():
        if isinstance(item, re.Pattern):
            if not isinstance(item.pattern, str):
                raise ConfigurationError(f"volatile pattern {item.pattern!r} must be a str "
                                         "pattern, not bytes")
            patterns.append(_checked(item))
        elif isinstance(item, str) and item.startswith("re:"):
            try:
                pat = re.compile(item[3:])
            except re.error as exc:
                raise ConfigurationError(f"volatile pattern {item[3:]!r}: {exc}") from None
            patterns.append(_checked(pat))
        elif isinstance(item, str) and item:
            if _is_path(item):
                paths.append(parse_path(item))
            else:
                names.add(item)
        else:
            raise ConfigurationError(
                f"volatile items are field names, dotted paths or compiled patterns, "
                f"not {item!r}")
    return Volatility(frozenset(names), tuple(dict.fromkeys(paths)),
                      tuple(dict.fromkeys(patterns)))


def _checked(pat: re.Pattern[str]) -> re.Pattern[str]:
    if pat.fullmatch(""):
        raise ConfigurationError(
            f"volatile pattern {pat.pattern!r} matches the empty string, so it would insert "
            "placeholders everywhere")
    why = exponential(pat)
    if why is not None:
        # Measured: ``(a+)+$`` took 7 s on a 25-character argument, doubling per character.
        raise ConfigurationError(
            f"volatile pattern {pat.pattern!r} can take exponential time on some text ({why}); "
            "rewrite it so no repeated part can match the same text in two ways, or make the "
            "inner repetition possessive (a++) or atomic ((?>...))")
    return pat


def _strip(obj: Any, path: Path) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(obj, Mapping):
        if not isinstance(head, str) or head not in obj:
            return obj
        if not rest:
            return {k: v for k, v in obj.items() if k != head}
        inner = obj[head]
        new = _strip(inner, rest)
        if new is inner:
            return obj
        return {k: (new if k == head else v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if isinstance(head, str):  # a key under a list: every element has it
            out = [_strip(v, path) for v in obj]
        elif head is None:
            out = [PLACEHOLDER for _ in obj] if not rest else [_strip(v, rest) for v in obj]
        else:
            if head >= len(obj):
                return obj
            out = list(obj)
            out[head] = PLACEHOLDER if not rest else _strip(obj[head], rest)
        if all(a is b for a, b in zip(out, obj, strict=True)):
            return obj
        return out
    return obj


def strip_paths(obj: Any, paths: Iterable[Path]) -> Any:
    for p in paths:
        obj = _strip(obj, p)
    return obj


def _text(s: str, patterns: tuple[re.Pattern[str], ...]) -> str:
    """``s`` with matches replaced, except where they would touch a credential.

    Text no pattern matches comes back as it is (no credential is looked for: the common
    case costs what it did); otherwise the parts ``_secrets.guarded`` names are kept, a match
    that overlaps one is left alone, and credential values inside URLs are put back masked.
    Patterns see the whole string, so anchors and lookarounds mean what they say."""
    if "<" in s and "<volatile" in s:
        s = _LITERAL.sub(r"<volatile\1\\>", s)
    out = s
    regions: list[list[Any]] | None = None
    for pat in patterns:
        if pat.search(out) is None:
            continue
        if regions is None:
            regions = [[a, b, kept] for a, b, kept in _secrets.guarded(out)]
        out = _outside(pat, out, regions) if regions else pat.sub(PLACEHOLDER, out)
    if regions:
        for a, b, kept in reversed(regions):
            out = out[:a] + kept + out[b:]
    return out


def _outside(pat: re.Pattern[str], text: str, regions: list[list[Any]]) -> str:
    """``pat``'s matches in ``text`` replaced unless they overlap one of ``regions`` (sorted,
    disjoint ``[start, end, kept]``), whose offsets are moved to the new text."""
    starts = [r[0] for r in regions]
    parts: list[str] = []
    moves: list[tuple[int, int]] = []  # (end of a replaced match, growth) in text order
    pos = 0
    for m in pat.finditer(text):
        a, b = m.span()
        i = bisect.bisect_left(starts, b) - 1
        if i >= 0 and regions[i][1] > a and regions[i][0] < b:
            continue  # it would rewrite part of a credential
        parts += [text[pos:a], PLACEHOLDER]
        moves.append((b, len(PLACEHOLDER) - (b - a)))
        pos = b
    parts.append(text[pos:])
    j = shift = 0
    for r in regions:
        while j < len(moves) and moves[j][0] <= r[0]:
            shift += moves[j][1]
            j += 1
        r[0] += shift
        r[1] += shift
    return "".join(parts)


_PLAIN: set[Any] = set()  # names seen not to be credentials (one set lookup per dict key)


def _secret(name: Any) -> bool:
    if isinstance(name, str) and _secrets.is_secret_name(name):
        return True
    if len(_PLAIN) < 50_000:
        _PLAIN.add(name)
    return False


def _masked(obj: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    """A value under a credential name: what the key masks whole is left alone (the same
    cases as ``keys._Canon.mask``: scalars, and lists and tuples of them); anything else,
    a JSON schema's ``password`` property say, is walked."""
    t = type(obj)
    if t is list or t is tuple:
        items = [_masked(v, patterns) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    if isinstance(obj, (Mapping, list, tuple)):
        return _scrub(obj, patterns)
    return obj


def _scrub(obj: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    t = type(obj)
    if t is str:
        return _text(obj, patterns)
    if isinstance(obj, Mapping):
        changed = False
        new: dict[Any, Any] = {}
        for k, v in obj.items():
            secret = k not in _PLAIN and _secret(k)
            nv = _masked(v, patterns) if secret else _scrub(v, patterns)
            changed = changed or nv is not v
            new[k] = nv
        return new if changed else obj
    if t is list or t is tuple:
        items = [_scrub(v, patterns) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        return items
    return obj


def apply(obj: Any, paths: tuple[Path, ...], patterns: tuple[re.Pattern[str], ...]) -> Any:
    """``obj`` with pattern matches replaced and volatile paths removed (a copy where
    changed). Patterns first, so the placeholders paths put in list positions are not
    escaped as literal text."""
    if patterns:
        obj = _scrub(obj, patterns)
    if paths:
        obj = strip_paths(obj, paths)
    return obj


def under(paths: tuple[Path, ...], roots: frozenset[str], default: str) -> tuple[Path, ...]:
    """Paths for a request whose top level is ``roots``: one that starts elsewhere is read as
    relative to ``default`` (``messages[*].content`` means ``body.messages[*].content`` for an
    HTTP request), so a path written for the body is never silently ignored."""
    return tuple(p if p[0] in roots else (default, *p) for p in paths)
