"""The runtime face: tool-result caching, invalidation, single-flight, loop guard, metrics,
the agent pool.

Public names are re-exported from ``dejacache``; this package is the implementation.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .guard import LoopGuard
    from .metrics import (
        PrometheusCollector,
        RuntimeStats,
        ToolStats,
        reset_runtime_stats,
        runtime_stats,
    )
    from .pool import AgentPool, PoolStats
    from .prefix import PrefixBreak, PrefixHazard, PrefixMonitor, SessionReport
    from .session import agent_session, current_session
    from .tools import invalidates, tool, tool_cache

__all__ = [
    "AgentPool",
    "LoopGuard",
    "PoolStats",
    "PrefixBreak",
    "PrefixHazard",
    "PrefixMonitor",
    "PrometheusCollector",
    "RuntimeStats",
    "SessionReport",
    "ToolStats",
    "agent_session",
    "current_session",
    "invalidates",
    "reset_runtime_stats",
    "runtime_stats",
    "tool",
    "tool_cache",
]

# Loaded on first use, to keep imports cheap: ``tool_cache`` alone need not import the
# agent pool, the loop guard and the prefix monitor.
__getattr__, __dir__ = attach(__name__, {
    "LoopGuard": ".guard",
    "PrometheusCollector": ".metrics", "RuntimeStats": ".metrics", "ToolStats": ".metrics",
    "reset_runtime_stats": ".metrics", "runtime_stats": ".metrics",
    "AgentPool": ".pool", "PoolStats": ".pool",
    "PrefixBreak": ".prefix", "PrefixHazard": ".prefix", "PrefixMonitor": ".prefix",
    "SessionReport": ".prefix",
    "agent_session": ".session", "current_session": ".session",
    "invalidates": ".tools", "tool": ".tools", "tool_cache": ".tools",
})
