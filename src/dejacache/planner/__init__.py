"""The prompt-cache planner: what to change so the provider's prompt cache hits, what each
change saves, and a gate that fails when a change to the prompts makes it worse.

- :func:`plan_recordings`: the plan of cassettes, a directory of them, or a
  ``PrefixMonitor(trace=...)`` file (``dejacache prompt-cache plan``).
- :func:`check_recordings`: the gate's verdicts (``dejacache prompt-cache check``, and the
  pytest option ``--dejacache-min-hit-rate``).
- :func:`set_cache_rules`, :func:`rules_for`, :class:`CacheRules`: the provider rules the
  model follows, with their sources (``dejacache prompt-cache rules``).

The pure parts live in ``dejacache._core``: ``cache_rules`` (the table), ``cache_model`` (a
provider's cache simulated), ``cache_fixes`` and ``cache_transforms`` (the fixes),
``cache_plan`` and ``cache_gate``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from .._core.cache_gate import Verdict, check
from .._core.cache_plan import Fix, Plan, SessionPlan, plan
from .._core.cache_rules import CacheRules, rules_for, set_cache_rules

__all__ = ["CacheRules", "Fix", "Plan", "SessionPlan", "Verdict", "check_recordings",
           "plan_recordings", "rules_for", "set_cache_rules"]


def plan_recordings(target: str | pathlib.Path, *, per_cassette: bool = False,
                    prices: Mapping[str, tuple[float, float]] | None = None) -> Plan:
    """The plan of the recordings under ``target`` (``prices``: ``{model prefix: (input,
    output)}`` per million tokens; default: the cassette price table)."""
    from ..cassettes.prices import rates_from_table
    from .load import accounts

    return plan(accounts(target, per_cassette=per_cassette), rates_from_table(prices))


def check_recordings(target: str | pathlib.Path, min_hit_rate: float, *,
                     baseline: str | pathlib.Path | None = None, max_drop: float = 0.05,
                     per_cassette: bool = False) -> list[Verdict]:
    """The gate's verdict on each session under ``target`` (see ``_core/cache_gate.py``)."""
    current = plan_recordings(target, per_cassette=per_cassette)
    base = plan_recordings(baseline, per_cassette=per_cassette) if baseline else None
    return check(current, min_hit_rate, base, max_drop)
