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
``cache_plan`` and ``cache_gate``. Names are loaded on first use: the pytest plugin imports
this package for its options alone.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._core.cache_gate import Verdict
    from .._core.cache_plan import Fix, Plan, SessionPlan
    from .._core.cache_rules import CacheRules, rules_for, set_cache_rules
    from .recordings import check_recordings, plan_recordings

__all__ = ["CacheRules", "Fix", "Plan", "SessionPlan", "Verdict", "check_recordings",
           "plan_recordings", "rules_for", "set_cache_rules"]

__getattr__, __dir__ = attach(__name__, {
    "Verdict": ".._core.cache_gate",
    "Fix": ".._core.cache_plan", "Plan": ".._core.cache_plan",
    "SessionPlan": ".._core.cache_plan",
    "CacheRules": ".._core.cache_rules", "rules_for": ".._core.cache_rules",
    "set_cache_rules": ".._core.cache_rules",
    "check_recordings": ".recordings", "plan_recordings": ".recordings",
})
