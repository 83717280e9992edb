"""The rule a replay miss prints when the call differs from its nearest recording only in
volatile text (a timestamp, a UUID, a nonce, a temp path...).

Suggested only when every difference fits a volatile shape (or is a whole field of one),
the rules make the two requests key alike, and they merge no two recordings of the same
name that were keyed apart (so the call would get the answer recorded for it, not another
one's). A plain value that changed (``"seed": 1`` -> ``2``) is never suggested: one call and
one recording cannot tell a volatile field from an argument that changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .diffs import FIELD, SPAN, differences
from .masking import Rules, canonical, masked
from .rules import CallRef, Observed, propose

__all__ = ["HOW", "for_miss"]

#: Where a suggested rule goes, as a miss message says it.
HOW: Final = ("where: volatile in pyproject.toml's [tool.dejacache] (every run reads it), "
              "then `dejacache rekey` keys the recordings as the call will be; "
              "`dejacache learn --from-miss` does both")


def for_miss(recorded: Any, call: Any, others: Sequence[Any], kind: str = "http",
             base: Sequence[str] = ()) -> list[str] | None:
    """The rules that make ``call`` key like ``recorded`` (the nearest of ``others``, the
    recordings of that name), or None. ``base``: rules in force already."""
    if type(recorded) is not dict or type(call) is not dict:
        return None
    diffs = differences(recorded, call)
    if not diffs or any(d.kind not in (SPAN, FIELD) for d in diffs):
        return None
    stored = [canonical(o) for o in others]

    def check(rules: Rules) -> str | None:
        seen: dict[bytes, bytes] = {}
        for raw, o in zip(stored, others, strict=True):
            m = canonical(masked(o, kind, rules))
            if seen.setdefault(m, raw) != raw:
                return "it would give two recordings one key"
        return None

    observed = [Observed(CallRef("", 0, ""), kind, recorded, call, diffs)]
    proposal = propose(observed, check, by_place=False, base=base)
    if not proposal.rules or proposal.refused or proposal.other:
        return None
    rules = Rules([*base, *proposal.texts])
    if canonical(masked(recorded, kind, rules)) != canonical(masked(call, kind, rules)):
        return None
    return proposal.texts
