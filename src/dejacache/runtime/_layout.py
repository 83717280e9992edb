"""Entry keys and generation counter names: the contract ``@tool_cache`` reads by and
``@invalidates`` writes by, and the registry of readers a write must reach.

Entry keys::

    <scope prefix>/<resource>/<tool>/[<entity>/]<epoch>.<g1>.<g2>.../<argument digest>

where the scope prefix is ``rt1/g`` (global), ``rt1/t/<tenant>`` or
``rt1/s/<tenant>/<session>``, and every name is encoded by ``_core.scopes``, so different
tenants can never share a key. ``<entity>`` (a tool with ``key=``): what its template
formats, so two entities never share an entry, whatever the argument digest holds.
``g1...`` are the generation counters the entry depends on (see :mod:`.generations`):
for a tool with ``key=`` the resource counter and the entity counter; without ``key=`` the
resource counter and the resource's "any entity written" counter (a listing must not
survive a write to one of its items). Tenant and session entries
also depend on the global counters, so a write made outside any session (an admin job)
reaches every tenant. Global entries also depend on the "any tenant" level (``rt1/a``),
which every tenant's write bumps: so a tenant's write reaches the global readers of its
resource wherever they run, without invalidating the other tenants' entries.

Counter names::

    gen/<resource>/<level>/R | W | e/<entity>

The resource comes first so ``_redis_counters.counter_tag`` can read it back: every counter one call
reads (tenant and global levels) and every counter one write bumps belong to one resource,
so a store that groups keys by it (a Redis Cluster hash tag) reads them in one single-slot
``MGET`` and bumps them in one atomic script.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

from .._core.scopes import KEY_VERSION, encode_component, global_prefix
from .generations import LocalGenerations, SharedGenerations

SCOPES = ("global", "tenant", "session")
GLOBAL = global_prefix()
# The level every tenant's write bumps besides its own, and only global readers read. A
# registry of this process's global readers was used instead: a process that writes for a
# tenant without declaring the global reader (a worker, an admin job) left the readers of
# other processes serving what it replaced. ("a": no tenant or session prefix starts so.)
ANY_TENANT = f"{KEY_VERSION}/a"

Gens = LocalGenerations | SharedGenerations

# Explicit per-tool stores of readers, by resource: writes bump the counters of each.
# Strong references: decorated tools (and so their stores) live as long as their module.
READER_STORES: dict[str, dict[int, Any]] = {}
REG_LOCK = threading.Lock()
# The configured stores (``configure(store=...)``) readers of a resource have read through,
# by resource, weakly: a write bumps them too. Writes bumped only the store configured at
# the time, so a reader that went back to an earlier configured store served what the
# write had replaced there. Weak: a process that configures a store per job lets each go.
ROUTED: dict[str, weakref.WeakValueDictionary[int, Any]] = {}
# Every resource a ``@tool_cache`` of this process reads, and each one an ``@invalidates``
# wrote (-> the writer's name): a resource written and read by none is most likely a typo
# (``invalidates("cartz")`` invalidates nothing, and the readers of "cart" serve stale data),
# named at the end of the agent session and of the pytest session. Never cleared: a reader
# declared once is a reader.
READ: set[str] = set()
WRITTEN: dict[str, str] = {}


def register_reader(resource: str, store: Any) -> None:
    """Note a ``@tool_cache`` reader of ``resource`` that writes must reach."""
    with REG_LOCK:
        READ.add(resource)
        if store is not None:
            READER_STORES.setdefault(resource, {})[id(store)] = store


def register_route(resource: str, store: Any) -> None:
    """Note a configured store a reader of ``resource`` reads through (see ``ROUTED``)."""
    with REG_LOCK:
        try:
            ROUTED.setdefault(resource, weakref.WeakValueDictionary())[id(store)] = store
        except TypeError:  # no weak reference to it: kept as an explicit store is
            READER_STORES.setdefault(resource, {})[id(store)] = store


def reader_stores(resource: str) -> tuple[list[Any], list[Any]]:
    """The stores a write to ``resource`` must reach besides the writer's and the one
    configured now: (readers' explicit stores, configured ones readers read through)."""
    with REG_LOCK:
        return (list(READER_STORES.get(resource, {}).values()),
                list(ROUTED.get(resource, {}).values()))


def unread(resources: Iterable[str]) -> list[str]:
    """Of ``resources`` (written), those no reader in this process reads; none at all when
    the process declares no reader (a process that only writes, for readers elsewhere)."""
    # (``mcp:<server>#<id>``: the MCP cache's own per-server resource, which a writer
    # invalidates whether or not a reader of that server is cached; no user typed it)
    return [] if not READ else sorted(r for r in set(resources)
                                      if r not in READ and not r.startswith("mcp:"))


def unread_note(resources: Iterable[str], where: str) -> str | None:
    """The warning naming written resources that nothing reads (None: there are none)."""
    missing = unread(resources)
    if not missing:
        return None
    from .._suggest import closest

    parts = []
    for r in missing:
        meant = closest(r, READ)
        parts.append(f"{WRITTEN.get(r, '@invalidates')} invalidates {r!r}"
                     + (f" (did you mean the resource {meant!r}?)" if meant else ""))
    read = sorted(READ)
    shown = ", ".join(read[:10]) + (f" and {len(read) - 10} more" if len(read) > 10 else "")
    return (f"dejacache: {'; '.join(parts)}. No @tool_cache {where} reads "
            f"{'that resource' if len(missing) == 1 else 'those resources'}, so the write "
            f"invalidated nothing and the readers of what it changed may serve stale data "
            f"(resources read: {shown}).")


def unmatched_invalidations() -> str | None:
    """The pytest plugin's end-of-session note (see :data:`WRITTEN`)."""
    return unread_note(list(WRITTEN), "in this process")


def reset_readers() -> None:
    """Forget every registered reader (tests: a reader registered by an earlier test, over
    a server since stopped, would otherwise be bumped by every later write to its resource
    and retried by its background flush)."""
    with REG_LOCK:
        READER_STORES.clear()
        ROUTED.clear()


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

