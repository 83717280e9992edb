"""``@invalidates``: the write side. A write bumps the generation counters its readers'
entries depend on (see :mod:`._layout`), before and after it runs."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .. import config
from .._core.scopes import encode_component
from ..errors import ConfigurationError, ScopeError
from ..keys import KeyBuilder
from ..stores._protocols import Store
from . import metrics as m
from ._binding import Template
from ._decorate import F, function_only, probe, resource_name, tool_names
from ._layout import ANY_TENANT, GLOBAL, WRITTEN, Gens, reader_stores, write_counters
from ._tracing import (
    Args,
    Kwargs,
    Trace,
    args_digest,
    atraced_call,
    guard_after,
    guard_before,
    traced_call,
)
from .generations import generations_for, local_generations, maybe_generations_for
from .guard import PROCEED
from .session import SESSION, agent_session


def _levels(sess: agent_session | None, resource: str, scope: str | None,
            where: str) -> list[str]:
    """The counter levels a write bumps."""
    tenant_pfx = sess.prefixes.get("tenant") if sess is not None else None
    if scope == "global" or (scope is None and tenant_pfx is None):
        return [GLOBAL]
    if tenant_pfx is None:
        raise ScopeError(
            f"{where} invalidates {resource!r} for a tenant but was called outside "
            "dejacache.agent_session(tenant=...); pass scope='global' to invalidate for "
            "everyone"
        )
    return [tenant_pfx, ANY_TENANT]


def bump_targets(resource: str, store: Store | None) -> list[tuple[Gens, bool]]:
    """Every counter backend a reader of ``resource`` may be using, each with whether the
    bump after the write waits for it to land (``LAND_WITHIN``). A store that was configured
    before, and is no longer, does not: readers elsewhere read the store configured now, and
    a bump queued there keeps this process off it until it lands; a store gone for good
    would otherwise hold every write up to ``LAND_WITHIN``."""
    out: list[tuple[Gens, bool]] = [(local_generations(), True)]
    explicit, routed = reader_stores(resource)
    cands = [(s, True) for s in (store, config.settings_object().store, *explicit)]
    cands += [(s, False) for s in routed]
    for s, land in cands:
        if s is None:
            continue
        # None: a store tool_cache refuses (a reader using it has already raised), or a
        # configured cassette, which runtime caches never read.
        g = maybe_generations_for(s)
        if g is not None and all(g is not o for o, _ in out):
            out.append((g, land))
    return out


class Writer:
    """Everything one ``@invalidates`` tool needs; the drivers are thin closures around it."""

    def __init__(self, fn: Callable[..., Any], resource: str, key: str | None,
                 scope: str | None, store: Store | str | None, name: str | None,
                 key_self: bool | None = None) -> None:
        if scope not in (None, "tenant", "global"):
            raise ConfigurationError(f"invalidates scope must be 'tenant', 'global' or None, "
                                     f"not {scope!r}")
        store = config.resolve_store(store)
        if store is not None:
            generations_for(store)  # the same refusal as tool_cache(store=...)
        self.fn = fn
        self.key_name, self.name = tool_names(fn, name)
        self.resource = resource
        self.res = encode_component(resource)
        self.scope = scope
        self.store = store
        self.template = Template(fn, key, f"invalidates({self.name})") if key else None
        self.keys = KeyBuilder(fn, self.key_name, use_default_volatile=False,
                               key_self=key_self)

    def plan(self, sess: agent_session | None, args: Args, kwargs: Kwargs
             ) -> tuple[list[str], list[tuple[Gens, bool]]]:
        """(counter names, counter backends) to bump."""
        levels = _levels(sess, self.resource, self.scope, self.name)
        if self.resource not in WRITTEN:
            WRITTEN.setdefault(self.resource, self.name)
        if sess is not None:
            sess.written.add(self.resource)
        # A call the template does not bind (a ``**fields`` writer called without the
        # name) may still write: with no entity to name, the whole resource is invalidated.
        entity = self.template.format(args, kwargs) if self.template is not None else None
        return write_counters(levels, self.res, entity), bump_targets(self.resource,
                                                                       self.store)

    def before(self, sess: agent_session | None, tr: Trace, args: Args, kwargs: Kwargs
               ) -> tuple[str, Any]:
        """(argument digest, PROCEED or the loop guard's answer instead of the write)."""
        adigest = tr.digest = args_digest(self.keys, self.key_name, args, kwargs)
        return adigest, guard_before(sess, self.name, self.resource, adigest, tr, write=True)

    def after(self, sess: agent_session | None, adigest: str, result: Any, tr: Trace) -> Any:
        return guard_after(sess, self.name, self.resource, adigest, result, tr)

    def count(self, sess: agent_session | None) -> None:
        m.count(sess.tenant if sess is not None else None, self.resource, self.name,
                m.INVALIDATIONS)


def invalidates(
    resource: str,
    /,
    *,
    key: str | None = None,
    scope: str | None = None,
    store: Store | str | None = None,
    name: str | None = None,
    key_self: bool | None = None,
) -> Callable[[F], F]:
    """Mark a write tool: entries of ``resource`` are invalidated before and after it runs.

    With ``key`` (``"cart:{user_id}"``) only that entity's entries, and listings of the
    resource (tools without ``key``); without it, the whole resource. ``scope``: ``None``
    invalidates the current session's tenant (or everyone's global entries outside a
    tenant session), ``"global"`` every tenant. O(1): generation counters, never a scan.
    The second invalidation runs even when the write raises (it may have half-happened).
    ``store`` as ``tool_cache(store=...)`` takes it: a ``Store`` or a URL. ``key_self``: as
    ``@tool``'s, for the loop guard's digest of a method's call.
    """
    resource_name(resource, "invalidates() resource")

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        function_only(f, "invalidates")
        w = Writer(f, resource, key, scope, store, name, key_self)

        # The two drivers differ only by their awaits: the decisions are Writer's.
        if inspect.iscoroutinefunction(probe(f)):

            async def async_writer(*args: Any, **kwargs: Any) -> Any:
                return await atraced_call(SESSION.get(), w.name, resource, "invalidation",
                                          _awrite, args, kwargs)

            async def _awrite(sess: agent_session | None, tr: Trace, args: Args,
                              kwargs: Kwargs) -> Any:
                names, targets = w.plan(sess, args, kwargs)
                adigest, nudge = w.before(sess, tr, args, kwargs)
                if nudge is not PROCEED:
                    return nudge
                for g, _ in targets:
                    await g.abump(names)
                try:
                    result = await f(*args, **kwargs)
                finally:
                    for g, land in targets:  # landed before the write returns (LAND_WITHIN)
                        await g.abump(names, land=land)
                    w.count(sess)
                return w.after(sess, adigest, result, tr)

            wrapper: Callable[..., Any] = async_writer
        else:

            def sync_writer(*args: Any, **kwargs: Any) -> Any:
                return traced_call(SESSION.get(), w.name, resource, "invalidation", _write,
                                   args, kwargs)

            def _write(sess: agent_session | None, tr: Trace, args: Args,
                       kwargs: Kwargs) -> Any:
                names, targets = w.plan(sess, args, kwargs)
                adigest, nudge = w.before(sess, tr, args, kwargs)
                if nudge is not PROCEED:
                    return nudge
                for g, _ in targets:
                    g.bump(names)
                try:
                    result = f(*args, **kwargs)
                finally:
                    for g, land in targets:  # landed before the write returns (LAND_WITHIN)
                        g.bump(names, land=land)
                    w.count(sess)
                return w.after(sess, adigest, result, tr)

            wrapper = sync_writer
        out = functools.wraps(f)(wrapper)
        out.invalidates = w  # type: ignore[attr-defined]
        return out

    return deco  # type: ignore[return-value]
