"""Counts as users write them (bytes a buffer may hold, connections), checked where they are
written: one rule for ``configure()``, the project file and the proxy's flags and arguments;
and counts as users read them, the noun agreeing with the number (:func:`counted`).

A count is a whole number > 0. ``True`` is refused though Python counts it as 1, and so are
text (``"64MiB"``) and floats: a limit read wrongly would bound the wrong thing silently.
"""

from __future__ import annotations

from ..errors import ConfigurationError

__all__ = ["counted", "whole_count"]


def whole_count(value: object, what: str) -> int:
    """``value`` as a count, or ``ConfigurationError`` naming ``what`` and the value; ``what``
    is written just before it: ``"--max-message "``, ``"max_message="``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{what}{value!r}: expected a whole number > 0")
    return value


def counted(n: int, noun: str, many: str = "") -> str:
    """``n`` and ``noun`` agreeing with it: ``1 call``, ``2 calls``, ``0 calls``; ``many`` is
    the plural when it is not the noun and an ``s`` (``counted(n, "entry", "entries")``)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"
