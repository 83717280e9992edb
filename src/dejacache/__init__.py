"""dejacache: never pay twice for the same agent step.

One engine (canonical keys → safe codec → tiered stores) with two faces: record/replay for
tests, and tool-result caching for running agents.
"""

from __future__ import annotations

from ._engine import DejacacheWarning
from .codec import Codec, JsonCodec, PickleCodec
from .config import configure
from .decorators import cache
from .errors import (
    AgentLoopDetected,
    CassetteError,
    ConfigurationError,
    DejacacheError,
    IncompatibleStore,
    IntegrityError,
    NetworkBlocked,
    ReplayMiss,
    ScopeError,
    SerializationError,
    StoreError,
    StoreUnavailable,
    UnhashableArgument,
)
from .keys import KeyParts, call_key, explain
from .scope import propagate, scope, wrap_executor
from .stats import Stats, reset_stats, stats
from .stores import MemoryStore, Record, SQLiteStore, Store, StoreStats

__version__ = "0.1.0"

__all__ = [
    "AgentLoopDetected",
    "CassetteError",
    "Codec",
    "ConfigurationError",
    "DejacacheError",
    "DejacacheWarning",
    "IncompatibleStore",
    "IntegrityError",
    "JsonCodec",
    "KeyParts",
    "MemoryStore",
    "NetworkBlocked",
    "PickleCodec",
    "Record",
    "ReplayMiss",
    "SQLiteStore",
    "ScopeError",
    "SerializationError",
    "Stats",
    "Store",
    "StoreError",
    "StoreStats",
    "StoreUnavailable",
    "UnhashableArgument",
    "__version__",
    "cache",
    "call_key",
    "configure",
    "explain",
    "propagate",
    "reset_stats",
    "scope",
    "stats",
    "wrap_executor",
]
