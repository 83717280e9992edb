"""dejacache: never pay twice for the same agent step.

One engine (canonical keys → safe codec → tiered stores) with two faces: record/replay for
tests, and tool-result caching for running agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cassettes import Cassette, cassette
from .cassettes.trajectory import diff_cassettes, load_cassette
from .codec import Codec, JsonCodec, PickleCodec
from .config import configure
from .decorators import cache
from .errors import (
    AgentLoopDetected,
    CassetteError,
    ConfigurationError,
    DejacacheError,
    DejacacheWarning,
    IncompatibleStore,
    IntegrityError,
    NetworkBlocked,
    PoolError,
    ReplayDivergence,
    ReplayMiss,
    ScopeError,
    SerializationError,
    StoreError,
    StoreUnavailable,
    UnhashableArgument,
)
from .http import async_http_client, http_client, intercept
from .keys import KeyParts, call_key, explain
from .runtime import (
    AgentPool,
    LoopGuard,
    PrefixBreak,
    PrefixMonitor,
    RuntimeStats,
    agent_session,
    invalidates,
    reset_runtime_stats,
    runtime_stats,
    tool,
    tool_cache,
)
from .scope import propagate, scope, wrap_executor
from .stats import Stats, reset_stats, stats
from .stores import MemoryStore, Record, SQLiteStore, Store, StoreStats, TieredStore

if TYPE_CHECKING:
    from .stores.redis import RedisStore

__version__ = "0.1.0"

__all__ = [
    "AgentLoopDetected",
    "AgentPool",
    "Cassette",
    "CassetteError",
    "Codec",
    "ConfigurationError",
    "DejacacheError",
    "DejacacheWarning",
    "IncompatibleStore",
    "IntegrityError",
    "JsonCodec",
    "KeyParts",
    "LoopGuard",
    "MemoryStore",
    "NetworkBlocked",
    "PickleCodec",
    "PoolError",
    "PrefixBreak",
    "PrefixMonitor",
    "Record",
    "RedisStore",
    "ReplayDivergence",
    "ReplayMiss",
    "RuntimeStats",
    "SQLiteStore",
    "ScopeError",
    "SerializationError",
    "Stats",
    "Store",
    "StoreError",
    "StoreStats",
    "StoreUnavailable",
    "TieredStore",
    "UnhashableArgument",
    "__version__",
    "agent_session",
    "async_http_client",
    "cache",
    "call_key",
    "cassette",
    "configure",
    "diff_cassettes",
    "explain",
    "http_client",
    "intercept",
    "invalidates",
    "load_cassette",
    "propagate",
    "reset_runtime_stats",
    "reset_stats",
    "runtime_stats",
    "scope",
    "stats",
    "tool",
    "tool_cache",
    "wrap_executor",
]


def __getattr__(name: str) -> Any:
    # RedisStore needs the optional redis package; importing it lazily keeps
    # ``import dejacache`` working without the extra.
    if name == "RedisStore":
        from . import stores

        return stores.RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
