"""``@tool_cache``, ``@invalidates`` and the ``@tool`` tracer: the runtime face's decorators.

This module is the public face; the work is done in private modules, one job each:

- :mod:`._cached`: the read side (a tool's store, counters and keys; its sync and async
  wrappers, hits and single-flight misses);
- :mod:`._invalidate`: the write side (``@invalidates`` bumps generation counters);
- :mod:`._layout`: entry keys and counter names, the contract between the two;
- :mod:`._tracing`: a call's trace on the session and the loop guard's checks (``@tool``);
- :mod:`._decorate`: what the decorators accept and what they call a tool.

Runtime caches ignore the test faces' modes, scopes and cassettes: they always serve hits
and store misses, and have one answer per key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

from ..config import Duration
from ..errors import ConfigurationError
from ..stores._protocols import Store
from ._cached import ToolCache, wrap_cached
from ._decorate import F, function_only, resource_name
from ._invalidate import invalidates
from ._layout import write_counters as _counter_names_w  # noqa: F401  (tests pin names)
from ._tracing import tool

__all__ = ["invalidates", "tool", "tool_cache"]


@overload
def tool_cache(fn: F, /) -> F: ...


@overload
def tool_cache(
    *,
    resource: str | None = None,
    scope: str = "tenant",
    ttl: Duration | None = 3600.0,
    maxsize: int = 1024,
    key: str | None = None,
    max_bytes: int = 1024 * 1024,
    store: Store | str | None = None,
    name: str | None = None,
    ignore: Iterable[str] = (),
    counter_max_age: Duration = 0.0,
    key_self: bool | None = None,
    enabled: bool = True,
) -> Callable[[F], F]: ...


def tool_cache(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    resource: str | None = None,
    scope: str = "tenant",
    ttl: Duration | None = 3600.0,
    maxsize: int = 1024,
    key: str | None = None,
    max_bytes: int = 1024 * 1024,
    store: Store | str | None = None,
    name: str | None = None,
    ignore: Iterable[str] = (),
    counter_max_age: Duration = 0.0,
    key_self: bool | None = None,
    enabled: bool = True,
) -> Any:
    """Cache a read tool's results per canonical arguments, tenant-isolated (sync or async).

    ``resource`` names what the tool reads (for ``@invalidates``; default: the tool's name);
    ``scope`` is ``"tenant"`` (default), ``"session"`` or ``"global"``; ``key`` an entity
    template such as ``"cart:{user_id}"`` so writes to one entity leave the others cached.
    ``ttl`` how long an entry lives (seconds, a ``timedelta`` or text such as ``"5m"``;
    None: no expiry), ``maxsize`` entries of the in-process store used when no store is
    configured, ``max_bytes`` the largest encoded result stored. ``store`` overrides the
    store, as a ``Store`` or a URL as ``configure(store=...)`` takes it (default: the one
    given to ``configure``, else an in-process LRU). A store whose entries outlive the
    process keeps the generation counters too (SQLite, Redis, or the tier behind a
    ``TieredStore``); one that cannot is refused with ``ConfigurationError``.
    ``counter_max_age`` (a duration, default 0) lets such a tool reuse counters that long
    instead of reading them on every call. On a method, the instance is in the key as for
    ``@cache`` (its data, what its class's ``__dejacache_key__`` says, or with
    ``key_self=False`` nothing). ``enabled=False`` switches this tool's cache off (it runs on
    every call, counted as ``off``; ``fn.tool_cache.enabled`` switches it at run time), as
    ``configure(runtime_cache=False)`` or ``DEJACACHE_RUNTIME_CACHE=off`` do for every tool;
    its writers keep invalidating.

    Not cached: exceptions, results marked ``is_error``/``isError``, results over
    ``max_bytes``. Identical concurrent misses run the tool once.
    """
    if isinstance(ignore, str):
        # Read as its letters, it left the argument in the key. Taking it as one name would
        # change the keys of tools decorated so; refusing it changes none.
        raise ConfigurationError(
            f"tool_cache ignore= takes a list of parameter names, not the string {ignore!r} "
            f"(write ignore=[{ignore!r}])")
    ignore = tuple(ignore)
    if resource is not None:  # (left out: the tool's name)
        resource_name(resource, "tool_cache resource=")

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        function_only(f, "tool_cache")
        tc = ToolCache(f, resource=resource, scope=scope, ttl=ttl, maxsize=maxsize, key=key,
                       max_bytes=max_bytes, store=store, name=name, ignore=ignore,
                       counter_max_age=counter_max_age, key_self=key_self, enabled=enabled)
        return wrap_cached(tc)

    return deco(fn) if fn is not None else deco
