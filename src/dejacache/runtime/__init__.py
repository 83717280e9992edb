"""The runtime face: tool-result caching, invalidation, single-flight, loop guard, metrics,
the agent pool.

Public names are re-exported from ``dejacache``; this package is the implementation.
"""

from __future__ import annotations

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
