"""``@tool_cache``, ``@invalidates`` and the ``@tool`` tracer: the runtime face's decorators.

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

Runtime caches ignore the test faces' modes, scopes and cassettes: they always serve hits
and store misses, and have one answer per key.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

import orjson

from .. import config
from .._core.scopes import encode_component, global_prefix
from .._engine import warn_once
from ..errors import (
    AgentLoopDetected,
    ConfigurationError,
    IntegrityError,
    ScopeError,
    SerializationError,
)
from ..keys import KeyBuilder, digest, key_seed
from ..stores._base import BaseStore, Record, Store
from ..stores.memory import MemoryStore
from . import metrics as m
from ._binding import Template, is_error_result
from .generations import (
    LocalGenerations,
    SharedGenerations,
    generations_for,
    local_generations,
    maybe_generations_for,
)
from .guard import PROCEED
from .session import _SESSION, agent_session
from .singleflight import SingleFlight

__all__ = ["invalidates", "tool", "tool_cache"]

F = TypeVar("F", bound=Callable[..., Any])
SCOPES = ("global", "tenant", "session")
_GLOBAL = global_prefix()

# Resources that have a global-scope reader somewhere in this process: a tenant's write must
# then also bump the global counters, or the global entry would stay stale.
_GLOBAL_READERS: set[str] = set()
# Explicit per-tool stores of readers, by resource: writes bump the counters of each.
# Strong references: decorated tools (and so their stores) live as long as their module.
_READER_STORES: dict[str, dict[int, Any]] = {}
_REG_LOCK = threading.Lock()

Gens = LocalGenerations | SharedGenerations
# The in-process counters' values for one (prefix, entity), the key part they make, and the
# counters' version they were read at: (counters, version, key part, values).
_Memo = tuple[LocalGenerations, int, str, list[int]]
# (key prefix, entry key head, counter names, [memo or None]) of one (prefix, entity).
_Where = tuple[str, str, tuple[str, ...], list[_Memo | None]]
# A read's (value or PROCEED, bytes served, body, blob); a flight's (result, body, blob).
_Read = tuple[Any, int, Any, "bytes | None"]
_Led = tuple[Any, Any, "bytes | None"]
_MISSED: _Read = (PROCEED, 0, None, None)


class _Trace:
    """What one call did, for ``agent_session(...).calls`` (filled in as the call runs)."""

    __slots__ = ("digest", "loops", "outcome")

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.digest = ""
        self.loops: list[Any] = []


@contextlib.contextmanager
def _tracing(sess: agent_session, name: str, resource: str, outcome: str
             ) -> Iterator[_Trace]:
    """One traced call's record, noted on the session however the call ends (the sync and
    async drivers share it)."""
    tr = _Trace(outcome)
    try:
        yield tr
    except AgentLoopDetected:
        tr.outcome = "blocked"
        raise
    except BaseException:
        tr.outcome = "error"
        raise
    finally:
        sess.note_call(name, resource, tr.digest, tr.outcome,
                       tr.loops[-1].pattern if tr.loops else None)


def _traced_call(sess: agent_session | None, name: str, resource: str,
                 run: Callable[[_Trace], Any], outcome: str) -> Any:
    if sess is None or not sess.tracing:
        return run(_Trace(outcome))
    with _tracing(sess, name, resource, outcome) as tr:
        return run(tr)


async def _atraced_call(sess: agent_session | None, name: str, resource: str,
                        run: Callable[[_Trace], Any], outcome: str) -> Any:
    if sess is None or not sess.tracing:
        return await run(_Trace(outcome))
    with _tracing(sess, name, resource, outcome) as tr:
        return await run(tr)


def _names(fn: Callable[..., Any], name: str | None) -> tuple[str, str]:
    """(key name, display name): keys use the qualified name so two modules' ``get_cart``
    never share entries; metrics and loop messages use the short one the model knows."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    qual = getattr(target, "__qualname__", type(target).__qualname__)
    module = getattr(target, "__module__", "") or ""
    short = getattr(target, "__name__", type(target).__name__)
    return (name or f"{module}.{qual}"), (name or short)


# Where the agent frameworks define their tool classes (top-level package), and what those
# classes are called: enough to recognise one without importing any framework.
_FRAMEWORKS = frozenset({
    "agents", "agno", "autogen_core", "crewai", "crewai_tools", "dspy", "google", "haystack",
    "langchain", "langchain_community", "langchain_core", "langgraph", "llama_index",
    "pydantic_ai", "semantic_kernel", "smolagents", "strands",
})


def _framework_tool(obj: Any) -> type | None:
    """The framework tool class ``obj`` is an instance of, or None."""
    for cls in type(obj).__mro__:
        top = (getattr(cls, "__module__", "") or "").partition(".")[0]
        if top in _FRAMEWORKS and ("Tool" in cls.__name__ or cls.__name__ == "Function"):
            return cls
    return None


def _function_only(fn: Any, decorator: str) -> None:
    """Refuse what is not a function: above all a framework's tool object, which is what
    dejacache gets when the two decorators are stacked the wrong way round (issue 11). The
    wrapper built around it would hide the tool from its framework, or run a callable object
    nobody meant to cache, and neither would say so."""
    cls = _framework_tool(fn)
    if cls is None and callable(fn):
        return
    kind = type(fn)
    label = next((v for v in (getattr(fn, "name", None), getattr(fn, "__name__", None),
                              getattr(getattr(fn, "metadata", None), "name", None))
                  if isinstance(v, str)), None)
    what = f"{kind.__module__}.{kind.__qualname__}" + (f" {label!r}" if label else "")
    if cls is None:
        raise ConfigurationError(f"dejacache.{decorator} decorates functions, not a {what} "
                                 "object")
    base = "" if cls is kind else f" (a {cls.__module__}.{cls.__name__})"
    raise ConfigurationError(
        f"dejacache.{decorator} was given a {what} object{base}: "
        "a framework's tool, not a function. Stack the other way round: dejacache's "
        "decorator on the function, the framework's outermost (written above it, applied "
        f"last), e.g. `@function_tool` / `@tool` over `@dejacache.{decorator}(...)`, or "
        f"`Tool(dejacache.{decorator}(...)(fn))` (docs/recipes/frameworks.md)."
    )


def _probe(fn: Callable[..., Any]) -> Any:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.isfunction(target) or inspect.ismethod(target):
        return target
    return type(target).__call__


def _levels(sess: agent_session | None, resource: str, scope: str | None,
            where: str) -> list[str]:
    """The counter levels a write bumps."""
    tenant_pfx = sess.prefixes.get("tenant") if sess is not None else None
    if scope == "global" or (scope is None and tenant_pfx is None):
        return [_GLOBAL]
    if tenant_pfx is None:
        raise ScopeError(
            f"{where} invalidates {resource!r} for a tenant but was called outside "
            "dejacache.agent_session(tenant=...); pass scope='global' to invalidate for "
            "everyone"
        )
    return [tenant_pfx, _GLOBAL] if resource in _GLOBAL_READERS else [tenant_pfx]


def _counter_names(levels: Iterable[str], res: str, entity: str | None) -> list[str]:
    out: list[str] = []
    tail = f"e/{encode_component(entity)}" if entity is not None else "W"
    for lv in levels:
        out.append(f"gen/{lv}/{res}/R")
        out.append(f"gen/{lv}/{res}/{tail}")
    return out


_MAX_HEADS = 4096  # per tool: (prefix, entity) pairs remembered before starting over
_UNSET: Any = object()


class _Route:
    """Where one tool's entries live under one configuration: the store, its counters, and
    whether a hit may take the store's short path (``hit()``: a body checked against its
    key, whose one ``orjson.loads`` is the caller's own copy), decided as ``@cache``'s plan
    decides it: the store offers ``short_hits`` and the codec ``plain_payloads``."""

    __slots__ = ("ashort", "codec", "configured", "gens", "local", "short", "store")

    def __init__(self, tc: _ToolCache | None, configured: Any, codec: Any) -> None:
        self.configured = configured
        self.codec = codec
        if tc is None:  # the placeholder before the first call: never matches
            self.configured = self.codec = _UNSET
            self.store: Any = None
            self.gens: Any = None
            self.short = self.ashort = self.local = False
            return
        store = self.store = tc.store_for(configured)
        self.gens = tc.generations(store)
        self.local = isinstance(self.gens, LocalGenerations)
        self.short = (getattr(store, "short_hits", False) is True
                      and getattr(codec, "plain_payloads", False) is True)
        # Async callers read through ``aget``; ``hit`` stands in for it only where ``aget``
        # is the base class's direct call of ``get`` (no await to keep).
        self.ashort = self.short and getattr(type(store), "aget", None) is BaseStore.aget


class _ToolCache:
    """Everything one decorated tool needs; the wrappers are thin closures around it."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        resource: str | None,
        scope: str,
        ttl: float | None,
        maxsize: int,
        key: str | None,
        max_bytes: int,
        store: Store | None,
        name: str | None,
        ignore: Iterable[str],
        counter_max_age: float,
    ) -> None:
        if scope not in SCOPES:
            raise ConfigurationError(f"tool_cache scope must be one of {', '.join(SCOPES)}, "
                                     f"not {scope!r}")
        if store is not None and not isinstance(store, Store):
            raise ConfigurationError(f"store must be a Store, not {type(store).__name__}")
        if store is not None:
            generations_for(store)  # refuse at decoration a store no counter can keep fresh
        self.fn = fn
        self.key_name, self.name = _names(fn, name)
        self.resource = resource or self.name
        self.scope = scope
        self.ttl = ttl
        self.max_bytes = max_bytes
        self.counter_max_age = counter_max_age
        self.explicit_store = store
        self._own: MemoryStore | None = None
        self._maxsize = maxsize
        # No default volatile fields: they are HTTP/LLM tracing names (``request_id``...), and
        # a tool argument of that name is data: dropping it would serve one answer to all.
        self.keys = KeyBuilder(fn, self.key_name, ignore=ignore, use_default_volatile=False)
        self.template = Template(fn, key, f"tool_cache({self.name})") if key else None
        self.res = encode_component(self.resource)
        self.res_tool = f"{self.res}/{encode_component(self.key_name)}"
        self.flights: SingleFlight[_Led] = SingleFlight()
        self._gens: tuple[Any, Gens] = (None, local_generations())
        # The argument digest is ``digest("", key_name, canonical)``: the seed once, and
        # ``KeyBuilder.hit_key`` answers the commonest call (one plain argument) without
        # binding (see ``_Route`` and ``_lookup`` for why a hit proves its key).
        self.seed = key_seed("", self.key_name)
        # (key prefix, entity) -> (entry key head, counter names): pure functions of the
        # two, so worked out once instead of formatting four names and a prefix per call.
        # The counters themselves are read on every call (they are the invalidation).
        self._heads: dict[tuple[str, str | None], _Where] = {}
        self._route = _Route(None, None, None)
        with _REG_LOCK:
            if scope == "global":
                _GLOBAL_READERS.add(self.resource)
            if store is not None:
                _READER_STORES.setdefault(self.resource, {})[id(store)] = store

    def store(self) -> Store:
        """``store=`` if given, else the store passed to ``configure(store=...)``, else this
        tool's own in-process LRU. Never the implicit on-disk test default, and never a
        sequenced (cassette) store: runtime caches have one answer per key."""
        return self.store_for(config.settings_object().store)

    def store_for(self, configured: Store | None) -> Store:
        """:meth:`store` given the configured store."""
        if self.explicit_store is not None:
            return self.explicit_store
        if configured is not None and not getattr(configured, "sequenced", False):
            return configured
        own = self._own
        if own is None:
            with _REG_LOCK:
                if self._own is None:
                    self._own = MemoryStore(maxsize=self._maxsize)
                own = self._own
        return own

    def generations(self, store: Store) -> Gens:
        """The counters for ``store``, remembered for the last store (hot path)."""
        last, gens = self._gens
        if last is not store:
            gens = generations_for(store)
            self._gens = (store, gens)
        return gens

    def route(self) -> _Route:
        """The store, its counters and how hits may be read, for the current settings;
        worked out again only when the configured store or codec object changes."""
        s = config.settings_object()
        r = self._route
        if r.configured is not s.store or r.codec is not s.codec:
            r = self._route = _Route(self, s.store, s.codec)
        return r

    def where(self, sess: agent_session | None, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> _Where | None:
        """(key prefix, entry key head, counter names, counter memo) for a call; None: the
        template does not bind."""
        scope = self.scope
        if scope == "global":
            prefix = _GLOBAL
        else:
            pfx = sess.prefixes.get(scope) if sess is not None else None
            if pfx is None:
                raise ScopeError(
                    f"{self.name} caches per {self.scope} (resource {self.resource!r}) but was "
                    + ("called outside dejacache.agent_session(...)" if sess is None else
                       "called in an agent_session without a tenant")
                    + "; refusing to share cached results between tenants. Run the agent "
                    "step inside `with dejacache.agent_session(tenant=..., session_id=...)`; "
                    "worker threads need the caller's context (dejacache.propagate(fn), "
                    "dejacache.wrap_executor(pool) or asyncio.to_thread)."
                )
            prefix = pfx
        entity: str | None = None
        template = self.template
        if template is not None:
            entity = template.format(args, kwargs)
            if entity is None:
                return None
        got = self._heads.get((prefix, entity))
        if got is None:
            # A session prefix names its tenant, so (prefix, entity) fixes the levels too.
            levels = ([_GLOBAL] if self.scope == "global" or sess is None
                      else [sess.prefixes["tenant"], _GLOBAL])
            got = (prefix, f"{prefix}/{self.res_tool}/",
                   tuple(_counter_names(levels, self.res, entity)), [None])
            heads = self._heads
            if len(heads) >= _MAX_HEADS:
                heads.clear()
            heads[(prefix, entity)] = got
        return got

    def full_digest(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The argument digest of the full canonical form (what entries are stored under)."""
        return digest("", self.key_name, self.keys.canonical(args, kwargs))

    def local_counters(self, gens: LocalGenerations, names: tuple[str, ...],
                       cell: list[_Memo | None]) -> tuple[list[int], str]:
        """(values, key part) of in-process counters: as ``read``, reusing the values read
        for the same names while no counter anywhere has changed since (``version``)."""
        version = gens.version  # before the values: they are then at least this new
        memo = cell[0]
        if memo is not None and memo[0] is gens and memo[1] == version:
            return memo[3], memo[2]
        values = gens.read(names)
        assert values is not None  # in-process counters are always readable
        part = f"{gens.epoch}.{'.'.join(map(str, values))}/"
        cell[0] = (gens, version, part, values)  # one tuple: readers never see half of it
        return values, part

    def settle(self, tenant: str | None, prefix: str, key: str, value: Any,
               duration: float) -> tuple[Record | None, bytes | None]:
        """Decide whether a fresh result may be stored; the record and blob if so."""
        if is_error_result(value):
            m.count(tenant, self.resource, self.name, m.NOT_CACHED)
            return None, None
        codec = config.settings_object().codec
        try:
            blob = codec.encode(value, key=key, namespace=prefix)
        except SerializationError as exc:
            m.count(tenant, self.resource, self.name, m.NOT_CACHED)
            warn_once(f"tool_cache-encode:{self.key_name}",
                      f"dejacache: {self.name} results are not cached: {exc}")
            return None, None
        if len(blob) > self.max_bytes:
            m.count(tenant, self.resource, self.name, m.NOT_CACHED)
            return None, None
        try:
            # A value that encodes but cannot be rebuilt (a class defined in a function, a
            # module the codec may not import) would be stored, fail, and miss forever.
            codec.decode(blob, key=key, namespace=prefix)
        except SerializationError as exc:
            m.count(tenant, self.resource, self.name, m.NOT_CACHED)
            warn_once(f"tool_cache-decode:{self.key_name}",
                      f"dejacache: {self.name} results are not cached: {exc}")
            return None, None
        rec = Record(value=blob, name=self.key_name, namespace=prefix, kind="tool",
                     duration=duration, created=time.time())
        return rec, blob

    def decode(self, prefix: str, key: str, blob: bytes) -> Any:
        return config.settings_object().codec.decode(blob, key=key, namespace=prefix)


_loads = orjson.loads
# ``hit`` raised: the general read reports it (and fails open).
_GENERAL_ITEM = (None, 0.0, None, None, None)
_settings = config.settings_object


def _blob_size(body: Any) -> int:
    """The encoded size behind a short hit's body (``bytes_served`` counts whole blobs)."""
    return body.obj.__len__() if type(body) is memoryview else len(body)  # type: ignore[attr-defined]


def _discard(tc: _ToolCache, key: str, exc: SerializationError) -> None:
    """Say once per entry that a stored value could not be used (it is deleted and the
    call runs the tool), as ``@cache`` does."""
    what = "discarding damaged" if isinstance(exc, IntegrityError) else "cannot use"
    warn_once(f"tool_cache-decode:{key}",
              f"dejacache: {what} entry for {tc.name}, treating it as a miss: {exc}")


def _wrap_cached(tc: _ToolCache) -> Callable[..., Any]:
    """The sync or async wrapper of one tool.

    A warm hit (issue 5: within 2x of ``@cache``'s) is: the session, the key head and
    counter names (remembered per prefix and entity), the counters read (every call, unless
    ``counter_max_age`` says otherwise: they are the invalidation), the argument digest
    (``KeyBuilder.hit_key``), the store's short ``hit`` and one ``orjson.loads``, the loop
    guard, one metrics increment, the session trace.

    The digest looked up first is that of the fast canonical form (``KeyBuilder.bind_key``);
    entries are stored under the full form's (``digest(canonical)``). The two differ only
    for arguments holding credentials or volatile fields below the top level, and then the
    fast one matches no stored entry (a stored form never holds an unmasked credential, so
    equal digests mean equal forms, and such a form is the full one): a hit proves its
    digest is the full one. A miss works the full digest out before the loop guard sees it.
    """
    fn = tc.fn
    name, resource = tc.name, tc.resource
    quick, seed = tc.keys.hit_key, tc.seed

    # Reads answer (value or PROCEED, bytes served, body, blob): single-flight waiters make
    # their own copy from the body (one ``orjson.loads``) or the blob (the codec).

    def _general(store: Store, prefix: str, key: str, rec: Record | None) -> _Read:
        """A read through ``get`` and the codec (``rec``: already read)."""
        if rec is None:
            try:
                rec = store.get(key)
            except Exception as exc:  # a failing tier must not fail the tool call
                warn_once(f"tool_cache-get:{type(store).__name__}",
                          f"dejacache: tool cache read failed ({exc!r}); treating as a miss")
                return _MISSED
            if rec is None:
                return _MISSED
        try:
            return tc.decode(prefix, key, rec.value), len(rec.value), None, rec.value
        except SerializationError as exc:
            _discard(tc, key, exc)
            with contextlib.suppress(Exception):
                store.delete(key)
            return _MISSED

    async def _ageneral(store: Store, prefix: str, key: str) -> _Read:
        try:
            rec = await store.aget(key)
        except Exception as exc:
            warn_once(f"tool_cache-get:{type(store).__name__}",
                      f"dejacache: tool cache read failed ({exc!r}); treating as a miss")
            return _MISSED
        if rec is None:
            return _MISSED
        try:
            return tc.decode(prefix, key, rec.value), len(rec.value), None, rec.value
        except SerializationError as exc:
            _discard(tc, key, exc)
            with contextlib.suppress(Exception):
                await store.adelete(key)
            return _MISSED

    def _short(store: Any, prefix: str, key: str) -> _Read:
        """A read through the store's ``hit`` (``_Route.short``)."""
        try:
            item = store.hit(key)
        except Exception:  # the general read reports it (and fails open)
            return _general(store, prefix, key, None)
        if item is None:
            return _MISSED
        body = item[0]
        if body is not None:
            try:
                # Checked against the key by the store: one loads is the caller's own copy.
                return _loads(body), _blob_size(body), body, None
            except orjson.JSONDecodeError:
                pass  # decoded again below, which reports it
        # Tagged values and anything the store would not vouch for: the codec decides.
        return _general(store, prefix, key, item[3])

    def _load(r: _Route, prefix: str, key: str) -> _Read:
        if r.short:
            return _short(r.store, prefix, key)
        return _general(r.store, prefix, key, None)

    async def _aload(r: _Route, prefix: str, key: str) -> _Read:
        if r.ashort:
            return _short(r.store, prefix, key)
        return await _ageneral(r.store, prefix, key)

    def _copy(prefix: str, key: str, body: Any, blob: bytes | None, result: Any) -> Any:
        """A single-flight waiter's own copy of the leader's result."""
        if body is not None:
            return _loads(body)
        if blob is not None:
            return tc.decode(prefix, key, blob)
        return result  # not cached: the leader's object, as for any uncached call

    def _first_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, bool]:
        """(argument digest to look up first, whether it is the full form's)."""
        fast = quick(args, kwargs, tc.seed)
        if fast is not None:
            return fast, False
        _bound, fast, _body, _tail, full = tc.keys.bind_key(args, kwargs, tc.seed)
        return fast, full

    def _finish(sess: agent_session | None, adigest: str, value: Any, tr: _Trace) -> Any:
        gs = sess.guard if sess is not None else None
        if gs is None:
            return value
        out = gs.after(name, resource, adigest, value, seen=tr.loops)
        if out is not value:
            tr.outcome = "nudged"
        return out

    def _note(sess: agent_session, tr: _Trace) -> None:
        sess.note_call(name, resource, tr.digest, tr.outcome,
                       tr.loops[-1].pattern if tr.loops else None)

    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        # One function for the whole of a hit: every call level was ~0.1 µs of ~7 (issue 5).
        # A hit without a loop guard traces from locals; the other paths fill a _Trace.
        sess = _SESSION.get()
        tr: _Trace | None = None
        outcome = "hit"
        adigest = ""
        try:
            where = tc.where(sess, args, kwargs)
            if where is None:
                tr = _Trace("bypassed")
                return fn(*args, **kwargs)  # the arguments do not bind: let the tool say why
            prefix, head, names, cell = where
            r = tc._route
            settings = _settings()
            if r.configured is not settings.store or r.codec is not settings.codec:
                r = tc.route()
            gens = r.gens
            if r.local:
                memo = cell[0]
                if memo is not None and memo[0] is gens and memo[1] == gens.version:
                    values, vpart = memo[3], memo[2]
                else:
                    values, vpart = tc.local_counters(gens, names, cell)
            else:
                values = gens.read(names, tc.counter_max_age)
                if values is None:  # unknown: no entry can be proven fresh, skip the cache
                    tr = _Trace("miss")
                    return _sync_bypass(sess, tr, args, kwargs)
                vpart = f"{gens.epoch}.{'.'.join(map(str, values))}/"
            fast = quick(args, kwargs, seed)
            full = False
            if fast is None:
                fast, full = _first_key(args, kwargs)
            key = head + vpart + fast
            if r.short:
                # _short inlined: a checked body, one loads.
                try:
                    item = r.store.hit(key)
                except Exception:
                    item = _GENERAL_ITEM
                if item is None:
                    value = PROCEED
                else:
                    body = item[0]
                    if body is not None:
                        try:
                            value = _loads(body)  # checked by the store: a fresh copy
                        except orjson.JSONDecodeError:
                            body = None  # decoded again below, which reports it
                        else:
                            size = _blob_size(body)
                    if body is None:  # tagged values, damage, a failing hit: the codec
                        value, size, _b, _s = _general(r.store, prefix, key, item[3])
            else:
                value, size, _b, _s = _general(r.store, prefix, key, None)
            if value is PROCEED:
                tr = _Trace("miss")
                return _sync_miss(sess, tr, args, kwargs, prefix, head, names, r, values,
                                  vpart, fast, full)
            adigest = fast  # a hit proves it is the full form's digest
            if sess is None:
                m.count_hit(None, resource, name, size)
                return value
            gs = sess.guard
            if gs is None:
                m.count_hit(sess.tenant, resource, name, size)
                return value
            tr = _Trace("hit")
            tr.digest = adigest
            nudge = gs.before(name, resource, adigest, seen=tr.loops)
            if nudge is not PROCEED:
                tr.outcome = "nudged"
                return nudge
            m.count_hit(sess.tenant, resource, name, size)
            return _finish(sess, adigest, value, tr)
        except AgentLoopDetected:
            outcome = "blocked"
            raise
        except BaseException:
            outcome = "error"
            raise
        finally:
            if sess is not None and sess.calls.maxlen != 0:
                if tr is None:
                    sess.note_call(name, resource, adigest, outcome, None)
                else:
                    if outcome != "hit":  # raised
                        tr.outcome = outcome
                    sess.note_call(name, resource, tr.digest, tr.outcome,
                                   tr.loops[-1].pattern if tr.loops else None)

    def _sync_bypass(sess: agent_session | None, tr: _Trace, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        """The counters cannot be read: run the tool, neither reading nor writing entries."""
        gs = sess.guard if sess is not None else None
        adigest = tr.digest = tc.full_digest(args, kwargs)
        if gs is not None:
            nudge = gs.before(name, resource, adigest, seen=tr.loops)
            if nudge is not PROCEED:
                tr.outcome = "nudged"
                return nudge
        m.count(sess.tenant if sess is not None else None, resource, name, m.BYPASSED)
        tr.outcome = "bypassed"
        return _finish(sess, adigest, fn(*args, **kwargs), tr)

    def _sync_miss(sess: agent_session | None, tr: _Trace, args: tuple[Any, ...],
                   kwargs: dict[str, Any], prefix: str, head: str, names: tuple[str, ...],
                   r: _Route, values: list[int], vpart: str, fast: str, full: bool) -> Any:
        """No entry under the first key: the full digest, the loop guard, single-flight."""
        tenant = sess.tenant if sess is not None else None
        gs = sess.guard if sess is not None else None
        gens = r.gens
        key = head + vpart + fast
        adigest = tr.digest = fast if full else tc.full_digest(args, kwargs)
        if gs is not None:
            nudge = gs.before(name, resource, adigest, seen=tr.loops)
            if nudge is not PROCEED:
                tr.outcome = "nudged"
                return nudge
        if adigest != fast:  # looked up under the fast form's digest: now the full one
            key = head + vpart + adigest
            value, size, _b, _s = _load(r, prefix, key)
            if value is not PROCEED:
                m.count_hit(tenant, resource, name, size)
                tr.outcome = "hit"
                return _finish(sess, adigest, value, tr)
        store = r.store

        def lead() -> _Led:
            # Checked again as leader: a flight that finished (or was abandoned) between our
            # miss and now may have stored the value; running the tool again would be waste.
            again, size, body, blob = _load(r, prefix, key)
            if again is not PROCEED:
                m.count_hit(tenant, resource, name, size)
                tr.outcome = "hit"
                return again, body, blob
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            m.count(tenant, resource, name, m.MISSES)
            rec, blob = tc.settle(tenant, prefix, key, result, time.perf_counter() - t0)
            if rec is None:
                return result, None, None
            now = gens.read(names)  # fresh, whatever counter_max_age says
            if now != values:
                # An invalidation ran while the tool was loading: the result may predate it.
                # (None: the counters cannot be read now, so freshness cannot be proven.)
                m.count(tenant, resource, name, m.STALE if now is not None else m.BYPASSED)
                return result, None, blob
            try:
                store.put(key, rec, ttl=tc.ttl)
                m.count(tenant, resource, name, m.BSTORED, len(rec.value))
            except Exception as exc:
                warn_once(f"tool_cache-put:{type(store).__name__}",
                          f"dejacache: tool cache write failed ({exc!r}); not storing")
            return result, None, blob

        (result, body, blob), led = tc.flights.run(key, lead)
        if not led:
            m.count(tenant, resource, name, m.COALESCED)
            tr.outcome = "coalesced"
            result = _copy(prefix, key, body, blob, result)  # each waiter gets its own copy
        return _finish(sess, adigest, result, tr)

    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        sess = _SESSION.get()
        tr = _Trace("miss")
        if sess is None or sess.calls.maxlen == 0:
            return await _async_call(sess, tr, args, kwargs)
        try:
            return await _async_call(sess, tr, args, kwargs)
        except AgentLoopDetected:
            tr.outcome = "blocked"
            raise
        except BaseException:
            tr.outcome = "error"
            raise
        finally:
            _note(sess, tr)

    async def _async_call(sess: agent_session | None, tr: _Trace, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
        where = tc.where(sess, args, kwargs)
        if where is None:
            tr.outcome = "bypassed"
            return await fn(*args, **kwargs)
        prefix, head, names, cell = where
        r = tc.route()
        gens = r.gens
        if r.local:
            values, vpart = tc.local_counters(gens, names, cell)
        else:
            values = await gens.aread(names, tc.counter_max_age)
            vpart = "" if values is None else f"{gens.epoch}.{'.'.join(map(str, values))}/"
        tenant = sess.tenant if sess is not None else None
        gs = sess.guard if sess is not None else None
        if values is None:
            adigest = tr.digest = tc.full_digest(args, kwargs)
            if gs is not None:
                nudge = gs.before(name, resource, adigest, seen=tr.loops)
                if nudge is not PROCEED:
                    tr.outcome = "nudged"
                    return nudge
            m.count(tenant, resource, name, m.BYPASSED)
            tr.outcome = "bypassed"
            return _finish(sess, adigest, await fn(*args, **kwargs), tr)
        fast, full = _first_key(args, kwargs)
        key = head + vpart + fast
        value, size, _b, _s = await _aload(r, prefix, key)
        if value is not PROCEED:
            adigest = tr.digest = fast
            if gs is not None:
                nudge = gs.before(name, resource, adigest, seen=tr.loops)
                if nudge is not PROCEED:
                    tr.outcome = "nudged"
                    return nudge
            m.count_hit(tenant, resource, name, size)
            tr.outcome = "hit"
            return value if gs is None else _finish(sess, adigest, value, tr)
        adigest = tr.digest = fast if full else tc.full_digest(args, kwargs)
        if gs is not None:
            nudge = gs.before(name, resource, adigest, seen=tr.loops)
            if nudge is not PROCEED:
                tr.outcome = "nudged"
                return nudge
        if adigest != fast:
            key = head + vpart + adigest
            value, size, _b, _s = await _aload(r, prefix, key)
            if value is not PROCEED:
                m.count_hit(tenant, resource, name, size)
                tr.outcome = "hit"
                return _finish(sess, adigest, value, tr)
        store = r.store

        async def lead() -> _Led:
            again, size, body, blob = await _aload(r, prefix, key)
            if again is not PROCEED:
                m.count_hit(tenant, resource, name, size)
                tr.outcome = "hit"
                return again, body, blob
            t0 = time.perf_counter()
            result = await fn(*args, **kwargs)
            m.count(tenant, resource, name, m.MISSES)
            rec, blob = tc.settle(tenant, prefix, key, result, time.perf_counter() - t0)
            if rec is None:
                return result, None, None
            now = await gens.aread(names)
            if now != values:
                m.count(tenant, resource, name, m.STALE if now is not None else m.BYPASSED)
                return result, None, blob
            try:
                await store.aput(key, rec, ttl=tc.ttl)
                m.count(tenant, resource, name, m.BSTORED, len(rec.value))
            except Exception as exc:
                warn_once(f"tool_cache-put:{type(store).__name__}",
                          f"dejacache: tool cache write failed ({exc!r}); not storing")
            return result, None, blob

        (result, body, blob), led = await tc.flights.arun(key, lead)
        if not led:
            m.count(tenant, resource, name, m.COALESCED)
            tr.outcome = "coalesced"
            result = _copy(prefix, key, body, blob, result)
        return _finish(sess, adigest, result, tr)

    probe = _probe(fn)
    if inspect.isgeneratorfunction(probe) or inspect.isasyncgenfunction(probe):
        raise ConfigurationError(
            f"tool_cache({tc.name}): generators are not supported; return a value (use "
            "@dejacache.cache for generators)"
        )
    wrapper = async_wrapper if inspect.iscoroutinefunction(probe) else sync_wrapper
    out = functools.wraps(fn)(wrapper)
    out.tool_cache = tc  # type: ignore[attr-defined]
    return out


@overload
def tool_cache(fn: F, /) -> F: ...


@overload
def tool_cache(
    *,
    resource: str | None = None,
    scope: str = "tenant",
    ttl: float | None = 3600.0,
    maxsize: int = 1024,
    key: str | None = None,
    max_bytes: int = 1024 * 1024,
    store: Store | None = None,
    name: str | None = None,
    ignore: Iterable[str] = (),
    counter_max_age: float = 0.0,
) -> Callable[[F], F]: ...


def tool_cache(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    resource: str | None = None,
    scope: str = "tenant",
    ttl: float | None = 3600.0,
    maxsize: int = 1024,
    key: str | None = None,
    max_bytes: int = 1024 * 1024,
    store: Store | None = None,
    name: str | None = None,
    ignore: Iterable[str] = (),
    counter_max_age: float = 0.0,
) -> Any:
    """Cache a read tool's results per canonical arguments, tenant-isolated (sync or async).

    ``resource`` names what the tool reads (for ``@invalidates``; default: the tool's name);
    ``scope`` is ``"tenant"`` (default), ``"session"`` or ``"global"``; ``key`` an entity
    template such as ``"cart:{user_id}"`` so writes to one entity leave the others cached.
    ``ttl`` seconds (None: no expiry), ``maxsize`` entries of the in-process store used when
    no store is configured, ``max_bytes`` the largest encoded result stored. ``store``
    overrides the store (default: the one given to ``configure(store=...)``, else an
    in-process LRU). A store whose entries outlive the process keeps the generation
    counters too (SQLite, Redis, or the tier behind a ``TieredStore``); one that cannot is
    refused with ``ConfigurationError``. ``counter_max_age`` (seconds) lets such a tool reuse
    counters that long instead of reading them on every call.

    Not cached: exceptions, results marked ``is_error``/``isError``, results over
    ``max_bytes``. Identical concurrent misses run the tool once.
    """
    ignore = tuple(ignore)

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        _function_only(f, "tool_cache")
        tc = _ToolCache(f, resource=resource, scope=scope, ttl=ttl, maxsize=maxsize, key=key,
                        max_bytes=max_bytes, store=store, name=name, ignore=ignore,
                        counter_max_age=counter_max_age)
        return _wrap_cached(tc)

    return deco(fn) if fn is not None else deco


# ---------------------------------------------------------------- writes


def _bump_targets(resource: str, store: Store | None) -> list[Gens]:
    """Every counter backend a reader of ``resource`` may be using."""
    out: list[Gens] = [local_generations()]
    cands: list[Any] = [store, config.settings_object().store]
    with _REG_LOCK:
        cands.extend(_READER_STORES.get(resource, {}).values())
    for s in cands:
        if s is None:
            continue
        # None: a store tool_cache refuses (a reader using it has already raised), or a
        # configured cassette, which runtime caches never read.
        g = maybe_generations_for(s)
        if g is not None and all(g is not o for o in out):
            out.append(g)
    return out


class _Writer:
    def __init__(self, fn: Callable[..., Any], resource: str, key: str | None,
                 scope: str | None, store: Store | None, name: str | None) -> None:
        if scope not in (None, "tenant", "global"):
            raise ConfigurationError(f"invalidates scope must be 'tenant', 'global' or None, "
                                     f"not {scope!r}")
        if store is not None:
            generations_for(store)  # the same refusal as tool_cache(store=...)
        self.fn = fn
        self.key_name, self.name = _names(fn, name)
        self.resource = resource
        self.res = encode_component(resource)
        self.scope = scope
        self.store = store
        self.template = Template(fn, key, f"invalidates({self.name})") if key else None
        self.keys = KeyBuilder(fn, self.key_name, use_default_volatile=False)

    def plan(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[
        agent_session | None, list[str] | None, list[Gens]
    ]:
        sess = _SESSION.get()
        levels = _levels(sess, self.resource, self.scope, self.name)
        entity: str | None = None
        if self.template is not None:
            entity = self.template.format(args, kwargs)
            if entity is None:
                return sess, None, []
        return sess, _counter_names_w(levels, self.res, entity), _bump_targets(
            self.resource, self.store)

    def args_digest(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        try:
            return digest("", self.key_name, self.keys.canonical(args, kwargs))
        except TypeError:  # unhashable write arguments: a unique digest never repeats
            return f"unkeyable-{time.perf_counter_ns()}"


def _counter_names_w(levels: Iterable[str], res: str, entity: str | None) -> list[str]:
    """Counters a write bumps: the resource counter for a whole-resource write; the entity
    counter and the "any entity written" counter for an entity write."""
    out: list[str] = []
    for lv in levels:
        if entity is None:
            out.append(f"gen/{lv}/{res}/R")
        else:
            out.append(f"gen/{lv}/{res}/e/{encode_component(entity)}")
            out.append(f"gen/{lv}/{res}/W")
    return out


def invalidates(
    resource: str,
    /,
    *,
    key: str | None = None,
    scope: str | None = None,
    store: Store | None = None,
    name: str | None = None,
) -> Callable[[F], F]:
    """Mark a write tool: entries of ``resource`` are invalidated before and after it runs.

    With ``key`` (``"cart:{user_id}"``) only that entity's entries, and listings of the
    resource (tools without ``key``); without it, the whole resource. ``scope``: ``None``
    invalidates the current session's tenant (or everyone's global entries outside a
    tenant session), ``"global"`` every tenant. O(1): generation counters, never a scan.
    The second invalidation runs even when the write raises (it may have half-happened).
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        _function_only(f, "invalidates")
        w = _Writer(f, resource, key, scope, store, name)
        probe = _probe(f)

        def _trace_before(sess: agent_session | None, adigest: str, tr: _Trace) -> Any:
            gs = sess.guard if sess is not None else None
            if gs is None:
                return PROCEED
            nudge = gs.before(w.name, resource, adigest, write=True, seen=tr.loops)
            if nudge is not PROCEED:
                tr.outcome = "nudged"
            return nudge

        def _trace_after(sess: agent_session | None, adigest: str, result: Any,
                         tr: _Trace) -> Any:
            gs = sess.guard if sess is not None else None
            if gs is None:
                return result
            out = gs.after(w.name, resource, adigest, result, seen=tr.loops)
            if out is not result:
                tr.outcome = "nudged"
            return out

        if inspect.iscoroutinefunction(probe):

            async def async_writer(*args: Any, **kwargs: Any) -> Any:
                return await _atraced_call(_SESSION.get(), w.name, resource,
                                           lambda tr: _awrite(tr, args, kwargs), "invalidation")

            async def _awrite(tr: _Trace, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                sess, names, targets = w.plan(args, kwargs)
                if names is None:
                    return await f(*args, **kwargs)
                adigest = tr.digest = w.args_digest(args, kwargs)
                nudge = _trace_before(sess, adigest, tr)
                if nudge is not PROCEED:
                    return nudge
                tenant = sess.tenant if sess is not None else None
                for g in targets:
                    await g.abump(names)
                try:
                    result = await f(*args, **kwargs)
                finally:
                    for g in targets:
                        await g.abump(names)
                    m.count(tenant, resource, w.name, m.INVALIDATIONS)
                return _trace_after(sess, adigest, result, tr)

            wrapper: Callable[..., Any] = async_writer
        else:

            def sync_writer(*args: Any, **kwargs: Any) -> Any:
                return _traced_call(_SESSION.get(), w.name, resource,
                                    lambda tr: _write(tr, args, kwargs), "invalidation")

            def _write(tr: _Trace, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                sess, names, targets = w.plan(args, kwargs)
                if names is None:
                    return f(*args, **kwargs)
                adigest = tr.digest = w.args_digest(args, kwargs)
                nudge = _trace_before(sess, adigest, tr)
                if nudge is not PROCEED:
                    return nudge
                tenant = sess.tenant if sess is not None else None
                for g in targets:
                    g.bump(names)
                try:
                    result = f(*args, **kwargs)
                finally:
                    for g in targets:
                        g.bump(names)
                    m.count(tenant, resource, w.name, m.INVALIDATIONS)
                return _trace_after(sess, adigest, result, tr)

            wrapper = sync_writer
        out = functools.wraps(f)(wrapper)
        out.invalidates = w  # type: ignore[attr-defined]
        return out

    return deco  # type: ignore[return-value]


# ---------------------------------------------------------------- tracing only


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, write: bool = False) -> Callable[[F], F]: ...


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         write: bool = False) -> Any:
    """Trace an uncached tool for the session's loop guard (no caching at all).

    ``write=True`` marks a tool that changes state, which resets the repeat counts of reads.
    Outside a session with a loop guard it costs one context-variable read.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        _function_only(f, "tool")
        key_name, display = _names(f, name)
        kb = KeyBuilder(f, key_name, use_default_volatile=False)

        def args_digest(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            try:
                return digest("", key_name, kb.canonical(args, kwargs))
            except TypeError:
                return f"unkeyable-{time.perf_counter_ns()}"

        if inspect.iscoroutinefunction(_probe(f)):

            async def async_traced(*args: Any, **kwargs: Any) -> Any:
                sess = _SESSION.get()
                if sess is None or (sess.guard is None and not sess.tracing):
                    return await f(*args, **kwargs)
                return await _atraced_call(sess, display, display,
                                           lambda tr: _arun(sess, tr, args, kwargs), "traced")

            async def _arun(sess: agent_session, tr: _Trace, args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> Any:
                gs = sess.guard
                adigest = tr.digest = args_digest(args, kwargs)
                if gs is None:
                    return await f(*args, **kwargs)
                nudge = gs.before(display, display, adigest, write=write, seen=tr.loops)
                if nudge is not PROCEED:
                    tr.outcome = "nudged"
                    return nudge
                value = await f(*args, **kwargs)
                out = gs.after(display, display, adigest, value, seen=tr.loops)
                if out is not value:
                    tr.outcome = "nudged"
                return out

            wrapper: Callable[..., Any] = async_traced
        else:

            def traced(*args: Any, **kwargs: Any) -> Any:
                sess = _SESSION.get()
                if sess is None or (sess.guard is None and not sess.tracing):
                    return f(*args, **kwargs)
                return _traced_call(sess, display, display,
                                    lambda tr: _run(sess, tr, args, kwargs), "traced")

            def _run(sess: agent_session, tr: _Trace, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
                gs = sess.guard
                adigest = tr.digest = args_digest(args, kwargs)
                if gs is None:
                    return f(*args, **kwargs)
                nudge = gs.before(display, display, adigest, write=write, seen=tr.loops)
                if nudge is not PROCEED:
                    tr.outcome = "nudged"
                    return nudge
                value = f(*args, **kwargs)
                out = gs.after(display, display, adigest, value, seen=tr.loops)
                if out is not value:
                    tr.outcome = "nudged"
                return out

            wrapper = traced
        return functools.wraps(f)(wrapper)

    return deco(fn) if fn is not None else deco

