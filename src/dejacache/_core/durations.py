"""Durations as users write them, checked where they are written.

A duration is seconds as a number, a ``datetime.timedelta``, or text: one or more
``<number><unit>`` parts, largest unit first, each unit once (``"90s"``, ``"5m"``, ``"1h30m"``,
``"1.5h"``, ``"2d"``, ``"250ms"``). Anything else is a ``ConfigurationError`` naming the argument
and the value, raised where the setting is given: a ttl of ``"1h"`` used to reach the stores
as text, where every write failed with a warning and nothing was ever cached.

Bounds: more than 0 (``zero=True`` for settings where 0 means "never reuse"), finite, and at
most 100 years. No expiry is spelt ``None`` by the caller, never ``inf``: Redis refuses an
expiry past its 64-bit millisecond clock, so a huge ttl would fail every write there too.
"""

from __future__ import annotations

import datetime
import math
from typing import Final

from .._lazy import pattern
from ..errors import ConfigurationError

__all__ = ["MAX_SECONDS", "Duration", "seconds"]

Duration = float | datetime.timedelta | str

MAX_SECONDS: Final = 100 * 365.25 * 86400.0

# Largest first; "ms" before "m" so that "250ms" is not read as 250 minutes and an "s".
_UNITS: Final = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ORDER: Final = tuple(_UNITS)
# Compiled when first used (~0.1 ms): only a duration written as text reads it.
_PART: Final = pattern(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|d|h|m|s)")
_FORMS: Final = ("seconds (a number), a datetime.timedelta, or text such as '90s', '5m', "
                 "'1h30m', '2d', '250ms'")


def _from_text(text: str) -> float | None:
    """Seconds from ``text``, or None when it is not a duration."""
    total, pos, last = 0.0, 0, -1
    text = text.strip().lower()
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            return None
        rank = _ORDER.index(m.group(2))
        if rank <= last:  # "30m1h", "1h1h": a slip, not something to add up
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos, last = m.end(), rank
    return total if last >= 0 else None


def _other_real(value: object) -> float | None:
    """Seconds from any other real number (a ``Fraction``, a numpy float), else None."""
    # Imported here: ~0.5 ms of a fresh process's first block, and ints and floats do
    # not need it.
    import numbers

    return float(value) if isinstance(value, numbers.Real) else None


def seconds(value: object, what: str, *, zero: bool = False, hint: str = "") -> float:
    """``value`` as seconds, or ``ConfigurationError`` naming ``what`` and the value.

    ``zero``: 0 is allowed. ``hint`` is added to the range error (``"None: no expiry"``).
    """
    out: float | None
    if isinstance(value, bool):  # True is an int, and never a duration
        out = None
    elif isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, datetime.timedelta):
        out = value.total_seconds()
    elif isinstance(value, str):
        out = _from_text(value)
    else:
        out = _other_real(value)
    if out is None:
        raise ConfigurationError(f"{what} must be a duration: {_FORMS}; got {value!r}")
    if math.isnan(out) or out < 0 or (out == 0 and not zero) or out > MAX_SECONDS:
        low = "0 or more" if zero else "more than 0"
        extra = f" ({hint})" if hint else ""
        raise ConfigurationError(
            f"{what} must be {low} and at most 100 years{extra}; got {value!r}")
    return out
