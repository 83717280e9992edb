"""Text that looks like it changes between builds of a prompt (a clock, an id, a counter):
the patterns the prefix monitor's hazards are found by, and what a break inside one is named
as. Pure and import-free, for ``hazards.py`` and ``prefix.py`` alike."""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["find", "span_at"]

# Order matters: the first pattern that matches a span names it; later ones skip the span.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                        r"[0-9a-fA-F]{12}\b")),
    ("timestamp", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                             r"(?:Z|[+-]\d{2}:?\d{2})?")),
    ("time", re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp][Mm])?(?![\d:])")),
    ("epoch", re.compile(r"(?<!\d)1[5-9]\d{8}(?:\d{3})?(?!\d)")),
    ("id", re.compile(r"\b(?:msg|req|run|call|chatcmpl|resp|toolu|evt|sess)_[A-Za-z0-9]{6,}\b")),
    ("hex_id", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b")),
    ("counter", re.compile(r"\b(?:turn|message|msg|request|step|iteration|attempt|run|"
                           r"session|call)\s*(?:#|no\.?|number|count|id)?\s*[:=#]?\s*\d+\b",
                           re.IGNORECASE)),
    ("date", re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct"
                        r"|Nov|Dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?,? \d{4}\b")),
)


def find(text: str) -> Iterator[tuple[str, int, str]]:
    """``(kind, offset, text)`` of each volatile-looking value in ``text``; a span an earlier
    pattern took is not named again."""
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            s, e = m.span()
            if any(s < te and ts < e for ts, te in taken):
                continue
            taken.append((s, e))
            yield kind, s, m.group(0)


def span_at(text: str, offset: int) -> tuple[int, int] | None:
    """``(start, end)`` of the volatile-looking value of ``text`` holding ``offset`` (a
    timestamp whose minutes changed), or None."""
    for _, at, found in find(text):
        if at <= offset < at + len(found):
            return at, at + len(found)
    return None
