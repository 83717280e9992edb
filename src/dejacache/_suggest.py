"""The closest valid name to a misspelt one, for the errors and warnings that name a typo
(a marker argument, a ``live=`` pattern, an invalidated resource, a configuration key).

Only loaded when a name did not match: ``difflib`` is not imported by anything on a hot path.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice ``name`` most likely meant (case ignored), or None when none is close
    (difflib's ratio under 0.6: ``cassete`` -> ``cassette``, ``strcit`` -> ``strict``,
    ``models`` -> ``model``, ``cartz`` -> ``cart``; ``xyz`` -> None)."""
    import difflib

    options = [c for c in dict.fromkeys(choices) if c != name]
    if not options:
        return None
    lowered = {c.lower(): c for c in options}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[found[0]] if found else None


def did_you_mean(name: str, choices: Iterable[str], what: str = "") -> str:
    """``"; did you mean 'x'?"`` (``what``: a word before the name, e.g. "the kind"), or
    "" when no choice is close."""
    best = closest(name, choices)
    if best is None:
        return ""
    return f"; did you mean {what + ' ' if what else ''}{best!r}?"
