"""Applying declared volatile paths and patterns to a call's arguments (``apply``).

Apart from :mod:`.volatile`, which parses the items and watches which paths match, because
only a key builder or request that declares a path or a pattern ever applies one: every
block parses its (usually empty) ``volatile=`` items, and a replay hit with nothing declared
never runs a line of this module (12 KB of bytecode off the path of every first cassette
block). ``volatile.apply`` serves :func:`apply` from here, loaded the first time a call
with something declared reads it, then a plain attribute of that module.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .. import _secrets
from .._lazy import pattern
from .volatile import PLACEHOLDER, Path
from .volatile_watch import WATCH

__all__ = ["apply", "strip_paths"]

# A literal placeholder in the text, and the escaped ones (``<volatile\\>``...): one more
# backslash each, so text never keys like a match that was replaced.
_LITERAL = pattern(r"<volatile(\\*)>")


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
    w = WATCH.get()
    for p in paths:
        new = _strip(obj, p)
        # Noted once per watch: after that a path costs two set lookups (two paths on a chat
        # request: apply 3.55 -> 3.66 µs CPU; calling note() every time made it 4.0).
        if new is not obj:
            if p not in w.matched:
                w.note(p, True)
        elif p not in w.tried and isinstance(obj, Mapping) and p[0] in obj:
            w.note(p, False)
        obj = new
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


# Names seen not to be credentials (one set lookup per dict key); never an ``auth``-like
# name, whose value decides (``_secrets.held_kind``).
_PLAIN: set[Any] = set()


def _secret(name: Any) -> bool:
    if isinstance(name, str):
        if _secrets.is_secret_name(name):
            return True
        if _secrets.is_auth_name(name):
            return False
    if len(_PLAIN) < 50_000:
        _PLAIN.add(name)
    return False


def _masked(obj: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    """A value under a credential name: what the key masks is left alone (``keys._Canon.mask``,
    ``_secrets.credential``'s rule: every leaf of anything but a JSON Schema describing the
    credential); a schema is walked, but for the values it gives."""
    if not _secrets.is_schema(obj):
        return obj
    changed = False
    new: dict[str, Any] = {}
    for k, v in obj.items():
        nv = v if k in _secrets.SCHEMA_VALUES else _scrub(v, patterns)
        changed = changed or nv is not v
        new[k] = nv
    return new if changed else obj


def _scrub(obj: Any, patterns: tuple[re.Pattern[str], ...], parent: Any = None) -> Any:
    """``parent``: the field ``obj`` is held under (None: a list item or the whole), which
    says whether a list of two is a credential's ``[name, value]`` pair."""
    t = type(obj)
    if t is str:
        return _text(obj, patterns)
    if isinstance(obj, Mapping):
        changed = False
        new: dict[Any, Any] = {}
        for k, v in obj.items():
            secret = k not in _PLAIN and (
                _secrets.held_kind(k, v, _secret) != _secrets.DATA if type(k) is str
                else _secret(k))
            nv = _masked(v, patterns) if secret else _scrub(v, patterns, k)
            changed = changed or nv is not v
            new[k] = nv
        return new if changed else obj
    if t is list or t is tuple:
        if _secrets.pair_kind(obj, _secret, parent if type(parent) is str else None):
            # Keyed as a field of that name is: a date pattern turned passwords
            # ``pw-2024-01-01`` and ``pw-1999-12-31`` in a header pair into one key.
            value = _masked(obj[1], patterns)
            return obj if value is obj[1] else [obj[0], value]
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


