"""Gemini's explicit cache (``CachedContent``) as a fix: the prefix every turn of a conversation
repeats, created once as a cache with a lifetime, and named by each request instead of sent.
Conversations that repeat the same prefix (one system instruction) share the cache: it is
created by the first request that needs it and stored until the last one that reads it, its
storage shared among its uses (each conversation's saving bears its part).

Implicit caching already serves a repeated prefix at the read price while the provider keeps it
(minutes); an explicit cache is kept for as long as it is asked to, at a storage price per
million tokens per hour (``cache_rules.CacheRules.storage``). So it pays where turns come
further apart than implicit caching keeps a prefix, and where the read discount on the turns
outweighs storage for as long as it is kept; the planner prices both and proposes it only
when the sum saves. Lifetime asked: from its first use to its last, and one implicit lifetime
more (the conversations may go on); without a clock, Gemini's default of an hour.

Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .cache_rules import CacheRules
from .prefix import Prefix

__all__ = ["describe", "held", "lifetime", "pinned"]


def held(prefixes: Sequence[Prefix]) -> int:
    """Leading items every prefix repeats, short of the whole first one: a request must send
    some contents of its own (Gemini refuses one without)."""
    k = min(len(p.items) for p in prefixes) - 1
    first = prefixes[0].chain
    for p in prefixes[1:]:
        while k > 0 and p.chain[k - 1] != first[k - 1]:
            k -= 1
    return k


def pinned(prefixes: Sequence[Prefix]) -> list[Prefix] | None:
    """A Gemini conversation's prefixes with the leading items every turn repeats held in an
    explicit cache (None: not Gemini, one turn, or nothing repeated)."""
    if len(prefixes) < 2 or any(p.provider != "gemini" for p in prefixes):
        return None
    k = held(prefixes)
    return [dataclasses.replace(p, pinned=k) for p in prefixes] if k > 0 else None


def lifetime(times: Sequence[float | None], rules: CacheRules) -> float:
    """Seconds the cache is asked to live when it is used at ``times``."""
    known = [t for t in times if t is not None]
    if len(known) < 2:
        return rules.long_ttl or 3600.0
    return max(known) - min(known) + rules.ttl


def describe(prefixes: Sequence[Prefix], tokens: int, seconds: float, rules: CacheRules
             ) -> str:
    """The fix for one conversation: what the cache holds, for how long, at what prices."""
    k = max(held(prefixes), 1)
    items = prefixes[0].items[:k]
    share = sum(i.size for i in items) / prefixes[0].size if prefixes[0].size else 0.0
    where = f"`{items[0].path}`" + (f" to `{items[-1].path}`" if k > 1 else "")
    return (f"create a Gemini CachedContent with what every turn repeats ({where}, about "
            f"{round(tokens * share):,} tokens; shared by the conversations that repeat it) and "
            f"a ttl of {seconds:,.0f} s (from its first use to its last and {rules.ttl:,.0f} s "
            f"more), and send the rest with "
            f"`cachedContent` naming it: reads at {rules.read:g}x the input price, storage "
            f"${rules.storage:g} per million tokens per hour")
