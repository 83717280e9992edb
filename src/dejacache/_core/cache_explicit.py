"""Gemini's explicit cache (``CachedContent``) as a fix: the prefix every turn of a conversation
repeats, created once as a cache with a lifetime, and named by each request instead of sent.

Implicit caching already serves a repeated prefix at the read price while the provider keeps it
(minutes); an explicit cache is kept for as long as it is asked to, at a storage price per
million tokens per hour (``cache_rules.CacheRules.storage``). So it pays where turns come
further apart than implicit caching keeps a prefix, and where the read discount on the turns
outweighs storage for the conversation's length; the planner prices both and proposes it only
when the sum saves. Lifetime asked: from the first turn to the last, and one implicit lifetime
more (the conversation may go on); without a clock, Gemini's default of an hour.

Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .cache_rules import CacheRules
from .prefix import Prefix

__all__ = ["describe", "lifetime", "pinned"]


def _common(prefixes: Sequence[Prefix]) -> int:
    k = min(len(p.items) for p in prefixes)
    first = prefixes[0].chain
    for p in prefixes[1:]:
        while k and p.chain[k - 1] != first[k - 1]:
            k -= 1
    return k


def pinned(prefixes: Sequence[Prefix]) -> list[Prefix] | None:
    """A Gemini conversation's prefixes with the leading items every turn repeats held in an
    explicit cache (None: not Gemini, one turn, or nothing repeated)."""
    if len(prefixes) < 2 or any(p.provider != "gemini" for p in prefixes):
        return None
    k = _common(prefixes)
    return [dataclasses.replace(p, pinned=k) for p in prefixes] if k else None


def lifetime(times: Sequence[float | None], rules: CacheRules) -> float:
    """Seconds the cache is asked to live for a conversation whose turns came at ``times``."""
    known = [t for t in times if t is not None]
    if len(known) < 2:
        return rules.long_ttl or 3600.0
    return max(known) - min(known) + rules.ttl


def describe(prefixes: Sequence[Prefix], tokens: int, seconds: float, rules: CacheRules
             ) -> str:
    """The fix for one conversation: what the cache holds, for how long, at what prices."""
    k = _common(prefixes)
    items = prefixes[0].items[:k]
    share = sum(i.size for i in items) / prefixes[0].size if prefixes[0].size else 0.0
    held = f"`{items[0].path}`" + (f" to `{items[-1].path}`" if k > 1 else "")
    return (f"create a Gemini CachedContent with what every turn repeats ({held}, about "
            f"{round(tokens * share):,} tokens) and a ttl of {seconds:,.0f} s (the "
            f"conversation and {rules.ttl:,.0f} s more), and send the rest with "
            f"`cachedContent` naming it: reads at {rules.read:g}x the input price, storage "
            f"${rules.storage:g} per million tokens per hour")
