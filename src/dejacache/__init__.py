"""dejacache: never pay twice for the same agent step.

One engine (canonical keys → safe codec → tiered stores) with two faces: record/replay for
tests, and tool-result caching for running agents.
"""

from __future__ import annotations

import sys as _sys

# Under pytest (its assertion rewriting is loaded before any plugin), the finder that keeps
# the rewriting hook off dejacache's own modules goes in before the package's first import:
# then ``_lazy`` and the plugin's entry point are loaded plainly too (~2M instructions each
# through the hook). Outside pytest this is one dict lookup.
if "_pytest.assertion.rewrite" in _sys.modules:
    from . import _pytest_imports  # noqa: F401

# isort: split
from ._lazy import ON_FIRST_BLOCK as _ON_FIRST_BLOCK
from ._lazy import attach

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: typing is not loaded at interpreter start
if TYPE_CHECKING:
    from ._codec_protocol import Codec
    from ._configure import configure
    from ._frozen import thaw
    from ._pickle_codec import PickleCodec
    from .cassettes.block import cassette
    from .cassettes.store import Cassette
    from .cassettes.trajectory import diff_cassettes, load_cassette
    from .codec import JsonCodec
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
        NetworkDisabled,
        PoolError,
        ReadOnlyResult,
        ReplayDivergence,
        ReplayMiss,
        ScopeError,
        SerializationError,
        StoreError,
        StoreUnavailable,
        UnhashableArgument,
    )
    from .http.intercept import intercept
    from .http.transport import async_http_client, http_client
    from .keys import KeyParts, call_key, explain
    from .mcp import mcp_tool_cache
    from .proxying.handle import proxy
    from .runtime.guard import LoopGuard
    from .runtime.metrics import RuntimeStats, reset_runtime_stats, runtime_stats
    from .runtime.pool import AgentPool
    from .runtime.prefix import PrefixBreak, PrefixMonitor
    from .runtime.session import agent_session
    from .runtime.tools import invalidates, tool, tool_cache
    from .scope import propagate, scope, wrap_executor
    from .stats import Stats, reset_stats, stats
    from .stores._base import Record, StoreStats
    from .stores._protocols import Store
    from .stores.memory import MemoryStore
    from .stores.redis import RedisStore
    from .stores.sqlite import SQLiteStore
    from .stores.tiered import TieredStore

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
    "NetworkDisabled",
    "PickleCodec",
    "PoolError",
    "PrefixBreak",
    "PrefixMonitor",
    "ReadOnlyResult",
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
    "mcp_tool_cache",
    "propagate",
    "proxy",
    "reset_runtime_stats",
    "reset_stats",
    "runtime_stats",
    "scope",
    "stats",
    "thaw",
    "tool",
    "tool_cache",
    "wrap_executor",
]


# Where each public name lives. ``import dejacache`` imports none of them (it took 61-65 ms
# with HTTP interception, cassettes, the runtime and asyncio loaded eagerly); each
# module is imported when one of its names is first read, then the name is a plain global.
# HTTP interception still switches on with the first block: see _switch_on_interception.
_WHERE = {
    "._frozen": ("thaw",),
    "._pickle_codec": ("PickleCodec",),
    ".cassettes.block": ("cassette",),
    ".cassettes.store": ("Cassette",),
    ".cassettes.trajectory": ("diff_cassettes", "load_cassette"),
    "._codec_protocol": ("Codec",),
    ".codec": ("JsonCodec",),
    "._configure": ("configure",),
    ".decorators": ("cache",),
    ".errors": ("AgentLoopDetected", "CassetteError", "ConfigurationError", "DejacacheError",
                "DejacacheWarning", "IncompatibleStore", "IntegrityError", "NetworkBlocked",
                "NetworkDisabled", "PoolError", "ReadOnlyResult", "ReplayDivergence",
                "ReplayMiss", "ScopeError", "SerializationError", "StoreError",
                "StoreUnavailable", "UnhashableArgument"),
    ".http.intercept": ("intercept",),
    ".http.transport": ("async_http_client", "http_client"),
    ".keys": ("KeyParts", "call_key", "explain"),
    ".mcp": ("mcp_tool_cache",),
    ".proxying.handle": ("proxy",),
    ".runtime.guard": ("LoopGuard",),
    ".runtime.metrics": ("RuntimeStats", "reset_runtime_stats", "runtime_stats"),
    ".runtime.pool": ("AgentPool",),
    ".runtime.prefix": ("PrefixBreak", "PrefixMonitor"),
    ".runtime.session": ("agent_session",),
    ".runtime.tools": ("invalidates", "tool", "tool_cache"),
    ".scope": ("propagate", "scope", "wrap_executor"),
    ".stats": ("Stats", "reset_stats", "stats"),
    ".stores": ("RedisStore",),  # raises ImportError with the install line without redis
    ".stores._base": ("Record", "StoreStats"),
    ".stores._protocols": ("Store",),
    ".stores.memory": ("MemoryStore",),
    ".stores.sqlite": ("SQLiteStore",),
    ".stores.tiered": ("TieredStore",),
}
__getattr__, __dir__ = attach(
    __name__, {name: where for where, names in _WHERE.items() for name in names}
)


def _switch_on_interception() -> None:
    # A test-facing block intercepts the SDKs' HTTP clients and the MCP transports and carries
    # its context into executor tasks from its first call, so the first block loads what
    # counts the blocks and watches for the modules they patch (it registers its own block
    # hook and import hook on import, and loads each machinery only once it has work).
    # Wired here, at the top of the package, because ``scope`` sits below it.
    from . import _blockwatch  # noqa: F401


_ON_FIRST_BLOCK.append(_switch_on_interception)
