"""When new rules would give two recorded calls one key although they were answered
differently: the one test ``learn`` checks its candidates with and ``rekey`` checks the rules
in force with, so a rule refused by one is never applied by the other.

Calls that shared a key already (one call asked twice, answered twice) may hold different
answers: their occurrences replay in order. A merge is wrong when the group a key would hold
has two recorded keys and two answers: then some call recorded under one key was answered
differently from some call recorded under another, and the first of them replayed out of
order (or alone) would be handed the other's answer.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, TypeVar

import orjson

__all__ = ["answer_of", "first_merge"]

T = TypeVar("T")


def answer_of(response: Any, error: Any) -> tuple[Any, bytes]:
    """A recorded answer (``error``: a recorded exception, else None) and its bytes as "the
    same answer" compares them (an HTTP answer without its volatile headers: ``Date``...)."""
    value: Any = {"error": error} if error is not None else response
    comparable = value
    if isinstance(value, dict) and "status" in value:
        from ..http.exchange import comparable as without_volatile_headers

        comparable = dict(without_volatile_headers(value))
    return value, orjson.dumps(comparable, option=orjson.OPT_SORT_KEYS)


def first_merge(calls: Iterable[tuple[Hashable, str, bytes, T]]) -> tuple[T, T] | None:
    """Two calls answered differently that ``calls`` (``(new key, recorded key, answer,
    call)`` in file order) give one new key though they were recorded under two, or None."""
    groups: dict[Hashable, list[tuple[str, bytes, T]]] = {}
    keys: dict[Hashable, set[str]] = {}
    answers: dict[Hashable, set[bytes]] = {}
    for new, old, answer, call in calls:
        groups.setdefault(new, []).append((old, answer, call))
        keys.setdefault(new, set()).add(old)
        answers.setdefault(new, set()).add(answer)
        if len(keys[new]) > 1 and len(answers[new]) > 1:
            # The group had one key or one answer before this call, so an earlier call
            # differs from it in both.
            first = next(c for k, a, c in groups[new] if k != old and a != answer)
            return first, call
    return None
