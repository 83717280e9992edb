"""Field-level diffs between canonical requests, and the nearest recorded call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["distance", "field_diff", "nearest", "short", "string_window"]

# Either side of the first differing character: enough to read a timestamp or an id in
# context without printing a 2,000-line prompt twice.
_WINDOW = 40


def short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 15] + "…" + text[-12:]


def field_diff(old: Any, new: Any, path: str = "", out: list[str] | None = None,
               limit: int = 50) -> list[str]:
    """Lines naming each changed leaf: ``messages[3].content: 'a' -> 'b'``."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in new:
                out.append(f"{p}: removed (was {short(old[k])})")
            elif k not in old:
                out.append(f"{p}: added {short(new[k])}")
            else:
                field_diff(old[k], new[k], p, out, limit)
        return out
    if isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            p = f"{path}[{i}]"
            if i >= len(new):
                out.append(f"{p}: removed (was {short(old[i])})")
            elif i >= len(old):
                out.append(f"{p}: added {short(new[i])}")
            else:
                field_diff(old[i], new[i], p, out, limit)
        return out
    if isinstance(old, str) and isinstance(new, str) and old != new:
        out.append(f"{path or '<root>'}: {string_window(old, new)}")
        return out
    if old != new or type(old) is not type(new):
        out.append(f"{path or '<root>'}: {short(old)} -> {short(new)}")
    return out


def string_window(old: str, new: str, width: int = _WINDOW) -> str:
    """Two strings shown around their first difference, so long texts that differ in one
    timestamp do not print identically (cutting both in the middle hid exactly that)."""
    if len(old) + len(new) <= 2 * (width + 15):
        return f"{old!r} -> {new!r}"
    at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
              min(len(old), len(new)))
    # The same suffix length on both sides keeps the windows aligned on the change.
    tail = 0
    while (tail < len(old) - at and tail < len(new) - at
           and old[-1 - tail] == new[-1 - tail]):
        tail += 1
    start = max(0, at - width)

    def cut(text: str) -> str:
        end = min(len(text), max(len(text) - tail, at) + width)
        body = repr(text[start:end])
        return ("…" if start else "") + body + ("…" if end < len(text) else "")

    return (f"differs at offset {at:,} (lengths {len(old):,} and {len(new):,}): "
            f"{cut(old)} -> {cut(new)}")


def distance(old: Any, new: Any) -> tuple[int, int]:
    """How far apart two canonical requests are: the fields that differ, then how much of
    them (the characters added, removed or rewritten). The second part breaks ties: an
    agent's next turn adds whole messages (two fields: ``contents[1]``, ``contents[2]``),
    as far in fields from the turn before it as the same turn with its two tool-call ids
    changed, but hundreds of characters farther than those two ids."""
    return _measure(old, new)


def _weight(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return len(repr(value))


def _measure(old: Any, new: Any) -> tuple[int, int]:
    if isinstance(old, dict) and isinstance(new, dict):
        fields = size = 0
        for k in set(old) | set(new):
            if k not in new or k not in old:
                fields, size = fields + 1, size + _weight(old[k] if k in old else new[k])
            else:
                f, n = _measure(old[k], new[k])
                fields, size = fields + f, size + n
        return fields, size
    if isinstance(old, list) and isinstance(new, list):
        fields = size = 0
        for i in range(max(len(old), len(new))):
            if i >= len(old) or i >= len(new):
                fields, size = fields + 1, size + _weight(old[i] if i < len(old) else new[i])
            else:
                f, n = _measure(old[i], new[i])
                fields, size = fields + f, size + n
        return fields, size
    if isinstance(old, str) and isinstance(new, str):
        if old == new:
            return 0, 0
        head = 0
        while head < min(len(old), len(new)) and old[head] == new[head]:
            head += 1
        tail = 0
        while (tail < min(len(old), len(new)) - head
               and old[-1 - tail] == new[-1 - tail]):
            tail += 1
        return 1, len(old) + len(new) - 2 * (head + tail)
    if old != new or type(old) is not type(new):
        return 1, _weight(old) + _weight(new)
    return 0, 0


def nearest(
    target: Any, candidates: Iterable[tuple[str, Any]]
) -> tuple[str, Any, list[str]] | None:
    """The candidate whose canonical request differs from ``target`` in the fewest fields,
    and of those, by the fewest characters (:func:`distance`); file order only among equals."""
    best: tuple[tuple[int, int], str, Any] | None = None
    for key, cand in candidates:
        d = distance(cand, target)
        if best is None or d < best[0]:
            best = (d, key, cand)
            if d == (0, 0):
                break
    if best is None:
        return None
    return best[1], best[2], field_diff(best[2], target)
