"""Field-level diffs between canonical requests, and the nearest recorded call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["field_diff", "nearest", "short", "string_window"]

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


def _distance(old: Any, new: Any) -> int:
    return len(field_diff(old, new, limit=10_000))


def nearest(
    target: Any, candidates: Iterable[tuple[str, Any]]
) -> tuple[str, Any, list[str]] | None:
    """The candidate whose canonical request differs from ``target`` in the fewest fields."""
    best: tuple[int, str, Any] | None = None
    for key, cand in candidates:
        d = _distance(cand, target)
        if best is None or d < best[0]:
            best = (d, key, cand)
            if d == 0:
                break
    if best is None:
        return None
    return best[1], best[2], field_diff(best[2], target)
