"""The closest valid name to a misspelt one, for errors that say "did you mean ...?".

One helper for every place a user writes a name dejacache must know (settings keys,
``configure()`` arguments, pytest ini keys, marker arguments, ``live=`` patterns, invalidated
resources): a misspelling is an error or a warning that names the closest valid name, never
a setting silently ignored. Only loaded when a name did not match: ``difflib`` is not imported
by anything on a hot path.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "did_you_mean", "not_parameters"]


def _norm(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice ``name`` most likely meant (same spelling but for case, ``-``/``_`` or a
    few letters), or None when nothing is close."""
    options = [c for c in dict.fromkeys(choices) if c != name]
    wanted = _norm(name)
    for c in options:  # the same word in another case or with dashes
        if _norm(c) == wanted:
            return c
    import difflib  # ~1 ms with heapq: only when a name is wrong

    by_norm = {_norm(c): c for c in options}
    near = difflib.get_close_matches(wanted, list(by_norm), n=1, cutoff=0.6)
    if near:
        return by_norm[near[0]]
    # A prefix or a part of it ("dir" for "cassette_dir", "allow" for "allow_hosts").
    parts = [c for c in options if len(wanted) >= 3 and (wanted in _norm(c))]
    return parts[0] if len(parts) == 1 else None


def did_you_mean(name: str, choices: Iterable[str], what: str = "") -> str:
    """``"; did you mean 'x'?"`` (``what``: a word before the name, e.g. "the key"), or
    ``""``, to end an error message with."""
    near = closest(name, choices)
    if near is None:
        return ""
    return f"; did you mean {what + ' ' if what else ''}{near!r}?"


def not_parameters(where: str, unknown: list[str], params: list[str]) -> str:
    """The error for ``ignore=`` names that are none of a function's parameters (a
    misspelling would keep the argument in the key without a word)."""
    return (f"ignore= on {where} names {', '.join(map(repr, unknown))}, which is not one of "
            f"its parameters ({', '.join(params)}){did_you_mean(unknown[0], params)}")
