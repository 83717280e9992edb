"""Entry keys and generation counter names: the contract ``@tool_cache`` reads by and
``@invalidates`` writes by, and the registry of readers a write must reach.

Entry keys::

    <scope prefix>/<resource>/<tool>/<epoch>.<g1>.<g2>.../<argument digest>

where the scope prefix is ``rt1/g`` (global), ``rt1/t/<tenant>`` or
``rt1/s/<tenant>/<session>``, and every name is encoded by ``_core.scopes``, so different
tenants can never share a key. ``g1...`` are the generation counters the entry depends on
(see :mod:`.generations`): for a tool with ``key=`` the resource counter and the entity
counter; without ``key=`` the resource counter and the resource's "any entity written"
counter (a listing must not survive a write to one of its items). Tenant and session entries
also depend on the global counters, so a write made outside any session (an admin job)
reaches every tenant.

Counter names::

    gen/<resource>/<level>/R | W | e/<entity>

The resource comes first so ``_redis_counters.counter_tag`` can read it back: every counter one call
reads (tenant and global levels) and every counter one write bumps belong to one resource,
so a store that groups keys by it (a Redis Cluster hash tag) reads them in one single-slot
``MGET`` and bumps them in one atomic script.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .._core.scopes import encode_component, global_prefix
from .generations import LocalGenerations, SharedGenerations

SCOPES = ("global", "tenant", "session")
GLOBAL = global_prefix()

Gens = LocalGenerations | SharedGenerations

# Resources that have a global-scope reader somewhere in this process: a tenant's write must
# then also bump the global counters, or the global entry would stay stale.
GLOBAL_READERS: set[str] = set()
# Explicit per-tool stores of readers, by resource: writes bump the counters of each.
# Strong references: decorated tools (and so their stores) live as long as their module.
READER_STORES: dict[str, dict[int, Any]] = {}
REG_LOCK = threading.Lock()


def register_reader(resource: str, scope: str, store: Any) -> None:
    """Note a ``@tool_cache`` reader of ``resource`` that writes must reach."""
    with REG_LOCK:
        if scope == "global":
            GLOBAL_READERS.add(resource)
        if store is not None:
            READER_STORES.setdefault(resource, {})[id(store)] = store


def reset_readers() -> None:
    """Forget every registered reader (tests: a reader registered by an earlier test, over
    a server since stopped, would otherwise be bumped by every later write to its resource
    and retried by its background flush)."""
    with REG_LOCK:
        GLOBAL_READERS.clear()
        READER_STORES.clear()


def read_counters(levels: Iterable[str], res: str, entity: str | None) -> list[str]:
    """Counters an entry depends on: the resource counter, and the entity counter (with
    ``key=``) or the "any entity written" counter (a listing)."""
    out: list[str] = []
    tail = f"e/{encode_component(entity)}" if entity is not None else "W"
    for lv in levels:
        out.append(f"gen/{res}/{lv}/R")
        out.append(f"gen/{res}/{lv}/{tail}")
    return out


def write_counters(levels: Iterable[str], res: str, entity: str | None) -> list[str]:
    """Counters a write bumps: the resource counter for a whole-resource write; the entity
    counter and the "any entity written" counter for an entity write."""
    out: list[str] = []
    for lv in levels:
        if entity is None:
            out.append(f"gen/{res}/{lv}/R")
        else:
            out.append(f"gen/{res}/{lv}/e/{encode_component(entity)}")
            out.append(f"gen/{res}/{lv}/W")
    return out

