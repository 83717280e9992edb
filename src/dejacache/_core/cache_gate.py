"""The prompt-cache gate: which sessions' predicted hit rate is below the bar, or below the
baseline recording's by more than allowed, and why (the turn and span that broke the cache).

A session of one turn has nothing to reuse and is not judged. The cause named is the session's
first break (its turn, place and span); without one, what kept the prefix out of the cache
(a prefix under the provider's minimum, no cache marker on Anthropic); else the session is
below the bar with its prefix intact (too short a conversation for the bar).

Pure: it reads plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .cache_plan import Plan, SessionPlan

__all__ = ["Verdict", "check", "failed"]

# Rates are ratios of token counts, and ``baseline - max_drop`` is a float subtraction that
# lands a hair above the decimal it stands for (0.40 - 0.05 > 0.35): a drop of exactly the
# allowance would fail. Differences below this are not differences.
_EPS = 1e-9


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    session: str
    ok: bool
    predicted: float  # the predicted hit rate
    baseline: float | None  # the baseline recording's, when it has the session
    why: str  # what the bar or baseline says ("" when ok)
    cause: str  # the turn and span that broke the cache ("" when ok)
    skipped: bool = False  # one turn: not judged


def _cause(s: SessionPlan) -> str:
    if s.breaks:
        b = s.breaks[0]
        where = f"`{b.path}` at offset {b.offset:,}: " if b.path else ""
        more = f" (and {len(s.breaks) - 1} more)" if len(s.breaks) > 1 else ""
        return (f"turn {b.turn}: {b.reason}: {where}`{b.before}` → `{b.after}` "
                f"({b.tokens:,} tokens){more}")
    for h in s.hazards:
        if h.kind in ("below_minimum", "no_cache_marker"):
            return f"{h.kind}: {h.text}"
    return "no break: the conversation is too short for the bar"


def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` as percentages with the fewest decimals (up to 2) that tell them apart,
    so a failure never reads "70% is below the bar 70%"."""
    for digits in range(3):
        shown, other = f"{a:.{digits}%}", f"{b:.{digits}%}"
        if shown != other:
            break
    return shown, other


def check(plan: Plan, min_hit_rate: float, baseline: Plan | None = None,
          max_drop: float = 0.05) -> list[Verdict]:
    """A verdict per session of ``plan`` (see the module)."""
    base = {s.session: s for s in baseline.sessions} if baseline is not None else {}
    out = []
    for s in plan.sessions:
        rate = s.predicted_hit_rate
        old = base.get(s.session)
        old_rate = old.predicted_hit_rate if old is not None else None
        if s.turns < 2:
            out.append(Verdict(s.session, True, rate, old_rate, "", "", skipped=True))
            continue
        why = []
        if rate < min_hit_rate:
            shown, bar = _apart(rate, min_hit_rate)
            why.append(f"predicted hit rate {shown} is below the bar {bar}")
        if old_rate is not None and old_rate - rate > max_drop + _EPS:
            shown, was = _apart(rate, old_rate)
            drop, allowed = _apart(old_rate - rate, max_drop)
            why.append(f"predicted hit rate {shown} is {drop} below the "
                       f"baseline's {was} (allowed: {allowed})")
        out.append(Verdict(s.session, not why, rate, old_rate, "; ".join(why),
                           _cause(s) if why else ""))
    return out


def failed(verdicts: Sequence[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if not v.ok]
