"""``@tool_cache``'s read side: one tool's state (:class:`ToolCache`: store, counters, keys,
what may be stored) and its sync or async wrapper (:func:`wrap_cached`).

Runtime caches ignore the test faces' modes, scopes and cassettes: they always serve hits
and store misses, and have one answer per key. Keys and counters: :mod:`._layout`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .. import config
from .._core.durations import seconds
from .._core.scopes import encode_component
from .._engine import warn_once
from ..errors import (
    AgentLoopDetected,
    ConfigurationError,
    IntegrityError,
    ScopeError,
    SerializationError,
    UnhashableArgument,
)
from ..keys import KeyBuilder, canonical_json, digest, key_seed
from ..stores._base import BaseStore, Record
from ..stores._protocols import Store
from ..stores.memory import MemoryStore, bound
from . import metrics as m
from ._binding import Template, is_error_result
from ._decorate import probe, tool_names
from ._layout import (
    ANY_TENANT,
    GLOBAL,
    REG_LOCK,
    SCOPES,
    Gens,
    read_counters,
    register_reader,
    register_route,
)
from ._tracing import Args, Kwargs, Noted, Trace, guard_after, guard_before
from .generations import (
    NOT_READ,
    LocalGenerations,
    SharedGenerations,
    generations_for,
    local_generations,
)
from .guard import PROCEED
from .session import SESSION, agent_session
from .singleflight import SingleFlight

# The in-process counters' values for one (prefix, entity), the key part they make, and the
# counters' version they were read at: (counters, version, key part, values).
_Memo = tuple[LocalGenerations, int, str, list[int]]
# (key prefix, entry key head, counter names, [memo or None, seen or None]) of one (prefix,
# entity); seen: the shared counters' values read last, and the key part they make:
# (counters, epoch, values, key part).
_Seen = tuple[Any, str, list[int], str]
_Where = tuple[str, str, tuple[str, ...], list[Any]]
# A read's (value or PROCEED, bytes served, body, blob); a flight's (result, body, blob).
_Read = tuple[Any, int, Any, "bytes | None"]
_Led = tuple[Any, Any, "bytes | None"]
_MISSED: _Read = (PROCEED, 0, None, None)

# Per tool: (prefix, entity) pairs remembered before starting over, in ``_heads`` and in
# ``_by_value``. A server reading many entities keeps this many for good (~0.9 KB each in
# each memo: 4096 cost a tool ~7 MiB); formatting one again costs ~1 µs.
_MAX_HEADS = 1024
_UNSET: Any = object()


class Route:
    """Where one tool's entries live under one configuration: the store, its counters, and
    whether a hit may take the store's short path (``hit()``: a body checked against its
    key, whose one ``orjson.loads`` is the caller's own copy), decided as ``@cache``'s plan
    decides it: the store offers ``short_hits`` and the codec ``plain_payloads``."""

    __slots__ = ("ashort", "codec", "configured", "fold", "gens", "local", "short", "store")

    def __init__(self, tc: ToolCache | None, configured: Any, codec: Any) -> None:
        self.configured = configured
        self.codec = codec
        if tc is None:  # the placeholder before the first call: never matches
            self.configured = self.codec = _UNSET
            self.store: Any = None
            self.gens: Any = None
            self.short = self.ashort = self.local = self.fold = False
            return
        store = self.store = tc.store_for(configured)
        self.gens = tc.generations(store)
        if store is configured:  # writes must reach it after the configuration changes
            register_route(tc.resource, store)
        self.local = isinstance(self.gens, LocalGenerations)
        self.short = (getattr(store, "short_hits", False) is True
                      and getattr(codec, "plain_payloads", False) is True)
        # Async callers read through ``aget``; ``hit`` stands in for it only where ``aget``
        # is the base class's direct call of ``get`` (no await to keep).
        self.ashort = self.short and getattr(type(store), "aget", None) is BaseStore.aget
        # A short hit may come in the counters' round trip (one MGET of both on one Redis
        # server: a hit was two round trips where a raw GET is one) when the counters live
        # in this very store and it reads entries by key (``entry_key``/``hit_of``).
        self.fold = (self.short and isinstance(self.gens, SharedGenerations)
                     and self.gens.backend is store and self.gens.folds
                     and callable(getattr(store, "entry_key", None))
                     and callable(getattr(store, "hit_of", None)))


class ToolCache:
    """Everything one decorated tool needs; the wrappers are thin closures around it."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        resource: str | None,
        scope: str,
        ttl: config.Duration | None,
        maxsize: int,
        key: str | None,
        max_bytes: int,
        store: Store | str | None,
        name: str | None,
        ignore: Iterable[str],
        counter_max_age: config.Duration,
        key_self: bool | None = None,
        enabled: bool = True,
    ) -> None:
        if scope not in SCOPES:
            raise ConfigurationError(f"tool_cache scope must be one of {', '.join(SCOPES)}, "
                                     f"not {scope!r}")
        self.ttl = config.ttl_seconds(ttl, "tool_cache ttl")
        self.counter_max_age = seconds(counter_max_age, "tool_cache counter_max_age",
                                       zero=True)
        store = config.resolve_store(store)
        if store is not None:
            generations_for(store)  # refuse at decoration a store no counter can keep fresh
        self.fn = fn
        #: This tool's own switch (``tool_cache(enabled=...)``, or set here at run time):
        #: off, the tool runs on every call, as with ``configure(runtime_cache=False)``.
        self.enabled = bool(enabled)
        self.key_name, self.name = tool_names(fn, name)
        self.resource = resource or self.name
        self.scope = scope
        self.max_bytes = bound(max_bytes, "tool_cache max_bytes")
        self.explicit_store = store
        self._own: MemoryStore | None = None
        # Checked here: its own store is made at the first call, which is where a bad bound
        # used to fail, far from the decorator that was given it.
        self._maxsize = bound(maxsize, "tool_cache maxsize")
        # No default volatile fields: they are HTTP/LLM tracing names (``request_id``...), and
        # a tool argument of that name is data: dropping it would serve one answer to all.
        self.keys = KeyBuilder(fn, self.key_name, ignore=ignore, use_default_volatile=False,
                               key_self=key_self)
        unknown, params = self.keys.unknown_ignored()
        if unknown:
            from .._suggest import not_parameters

            raise ConfigurationError(not_parameters(f"tool_cache({self.name})", unknown, params))
        self.template = Template(fn, key, f"tool_cache({self.name})") if key else None
        # A template reading an argument the key leaves out: the entity is all that tells
        # such calls' entries apart, and unequal values can name one entity (``0.1`` and
        # ``Decimal("0.1")``, ``"{x:.0f}"`` of 1.2 and 1.4), so the values it read as given
        # go into the entry key too (one answered for the other).
        self.exact = (self.template is not None
                      and not self.template.roots.isdisjoint(self.keys.unkeyed()))
        self.res = encode_component(self.resource)
        self.res_tool = f"{self.res}/{encode_component(self.key_name)}"
        self.flights: SingleFlight[_Led] = SingleFlight()
        self._gens: tuple[Any, Gens] = (None, local_generations())
        # The argument digest is ``digest("", key_name, canonical)``: the seed once, and
        # ``KeyBuilder.probe_key`` answers the commonest call (one plain argument) without
        # binding (see ``Route`` and ``_lookup`` for why a hit proves its key).
        self.seed = key_seed("", self.key_name)
        # (key prefix, entity) -> (entry key head, counter names): pure functions of the
        # two, so worked out once instead of formatting four names and a prefix per call.
        # The counters themselves are read on every call (they are the invalidation).
        self._heads: dict[tuple[str, str | None, str], _Where] = {}
        # The same by (key prefix, the argument a one-field template formats), when that is
        # an exact int or str (``Template.value_of``): formatting it was 1 µs of a 5 µs hit.
        self._by_value: dict[tuple[str | None, Any], _Where] = {}
        self._route = Route(None, None, None)
        register_reader(self.resource, store)

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
            with REG_LOCK:
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

    def on(self) -> bool:
        """Whether this call may use the cache: the tool's switch and the process's."""
        s = config.settings_object()
        on = s.runtime_on
        return self.enabled and (s.resolve_runtime() if on is None else on)

    def route(self) -> Route:
        """The store, its counters and how hits may be read, for the current settings;
        worked out again only when the configured store or codec object changes."""
        s = config.settings_object()
        r = self._route
        if r.configured is not s.store or r.codec is not s.codec:
            r = self._route = Route(self, s.store, s.codec)
        return r

    def where(self, sess: agent_session | None, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> _Where | None:
        """(key prefix, entry key head, counter names, counter memo) for a call; None: the
        template does not bind."""
        scope = self.scope
        if scope == "global":
            prefix = GLOBAL
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
        exact = entity_part = ""
        template = self.template
        value = None
        if template is not None:
            value = template.value_of(args, kwargs)
            if value is not None:
                got = self._by_value.get((prefix, value))
                if got is not None:
                    return got
            entity = template.format(args, kwargs)
            if entity is None:
                return None
            if self.exact:
                given = self._exact(template, args, kwargs)
                if given is None:
                    return None
                exact = given
                entity_part = f"{encode_component(entity)}/{exact}/"
        got = self._heads.get((prefix, entity, exact))
        if got is None:
            # A session prefix names its tenant, so (prefix, entity) fixes the levels too.
            levels = ([GLOBAL, ANY_TENANT] if self.scope == "global" or sess is None
                      else [sess.prefixes["tenant"], GLOBAL])
            # The entity is in the key, not only in its counters' values: two entities
            # whose counters agree shared one entry when the argument digest did not tell
            # them apart (a template naming an ``ignore``d argument, or ``{self.region}``
            # under ``key_self=False``), and one answered for the other.
            head = f"{prefix}/{self.res_tool}/" + (
                "" if entity is None else entity_part or f"{encode_component(entity)}/")
            got = (prefix, head, tuple(read_counters(levels, self.res, entity)),
                   [None, None])
            heads = self._heads
            if len(heads) >= _MAX_HEADS:
                heads.clear()
            heads[(prefix, entity, exact)] = got
        if value is not None:
            by_value = self._by_value
            if len(by_value) >= _MAX_HEADS:
                by_value.clear()
            by_value[(prefix, value)] = got
        return got

    def _exact(self, template: Template, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> str | None:
        """A digest of the values ``template`` formats, as given (``self.exact``); None
        when they do not bind or cannot be keyed (the call then runs uncached)."""
        values = template.values(args, kwargs)
        if values is None:
            return None
        try:
            return digest("", self.key_name, canonical_json({"entity": values}))
        except UnhashableArgument:
            return None

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
        epoch, values = gens.snapshot(names)
        part = f"{epoch}.{'.'.join(map(str, values))}/"
        cell[0] = (gens, version, part, values)  # one tuple: readers never see half of it
        return values, part

    def settle(self, tenant: str | None, prefix: str, key: str, value: Any,
               duration: float) -> tuple[Record | None, bytes | None]:
        """Count a tool run (a miss) and decide whether its result may be stored; the
        record and blob if so."""
        m.count(tenant, self.resource, self.name, m.MISSES)
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

    def decoded(self, prefix: str, key: str, blob: bytes) -> _Read:
        """A stored blob as a read; ``_MISSED``: it cannot be used (said once per entry; the
        caller deletes it and runs the tool, as ``@cache`` does)."""
        try:
            return self.decode(prefix, key, blob), len(blob), None, blob
        except SerializationError as exc:
            what = "discarding damaged" if isinstance(exc, IntegrityError) else "cannot use"
            warn_once(f"tool_cache-decode:{key}",
                      f"dejacache: {what} entry for {self.name}, treating it as a miss: {exc}")
            return _MISSED

    def fresh(self, tenant: str | None, values: list[int], now: list[int] | None) -> bool:
        """Whether a result loaded under counters ``values`` may be stored, the counters
        being ``now`` (read fresh, whatever ``counter_max_age`` says)."""
        if now == values:
            return True
        # An invalidation ran while the tool was loading: the result may predate it.
        # (None: the counters cannot be read now, so freshness cannot be proven.)
        m.count(tenant, self.resource, self.name, m.STALE if now is not None else m.BYPASSED)
        return False


def _fold_key(r: Route, seen: _Seen | None, head: str, fast: str) -> str | None:
    """The entry to read in the counters' round trip (``Route.fold``): the one under the
    key the counters made last time; None: read the counters alone."""
    if seen is not None and seen[0] is r.gens and r.fold:
        return r.store.entry_key(head + seen[3] + fast)  # type: ignore[no-any-return]
    return None


def _shared_part(cell: list[Any], seen: _Seen | None, gens: Any, values: list[int],
                 raw: Any) -> tuple[str, Any]:
    """The key's version part for shared counters ``values``, and the bytes ``raw`` read
    with them when they are this call's entry (else ``NOT_READ``): the part remembered in
    ``cell`` when the values are the counters it was made from, else a new one, remembered
    (an entry read with the counters is then under another key)."""
    if seen is not None and seen[0] is gens and seen[2] == values and seen[1] == gens.epoch:
        return seen[3], raw
    vpart = f"{gens.epoch}.{'.'.join(map(str, values))}/"
    cell[1] = (gens, gens.epoch, values, vpart)
    return vpart, NOT_READ


def _read_failed(store: Any, exc: Exception) -> _Read:
    # A failing tier must not fail the tool call.
    warn_once(f"tool_cache-get:{type(store).__name__}",
              f"dejacache: tool cache read failed ({exc!r}); treating as a miss")
    return _MISSED


def _put_failed(store: Any, exc: Exception) -> None:
    warn_once(f"tool_cache-put:{type(store).__name__}",
              f"dejacache: tool cache write failed ({exc!r}); not storing")


_loads = orjson.loads
_settings = config.settings_object


def _blob_size(body: Any) -> int:
    """The encoded size behind a short hit's body (``bytes_served`` counts whole blobs)."""
    return body.obj.__len__() if type(body) is memoryview else len(body)  # type: ignore[attr-defined]


# Reads answer (value or PROCEED, bytes served, body, blob): single-flight waiters make their
# own copy from the body (one ``orjson.loads``) or the blob (the codec).


def _general(tc: ToolCache, store: Store, prefix: str, key: str, rec: Record | None) -> _Read:
    """A read through ``get`` and the codec (``rec``: already read)."""
    if rec is None:
        try:
            rec = store.get(key)
        except Exception as exc:
            return _read_failed(store, exc)
        if rec is None:
            return _MISSED
    got = tc.decoded(prefix, key, rec.value)
    if got is _MISSED:  # unusable: deleted, so the tool's fresh result replaces it
        with contextlib.suppress(Exception):
            store.delete(key)
    return got


async def _ageneral(tc: ToolCache, store: Store, prefix: str, key: str) -> _Read:
    # ``_general``'s awaited twin: only its I/O (aget, adelete) differs; what a read means
    # is ``ToolCache.decoded`` and ``_read_failed``.
    try:
        rec = await store.aget(key)
    except Exception as exc:
        return _read_failed(store, exc)
    if rec is None:
        return _MISSED
    got = tc.decoded(prefix, key, rec.value)
    if got is _MISSED:  # unusable: deleted, so the tool's fresh result replaces it
        with contextlib.suppress(Exception):
            await store.adelete(key)
    return got


def _short(tc: ToolCache, store: Any, prefix: str, key: str, raw: Any = NOT_READ) -> _Read:
    """A read through the store's ``hit`` (``Route.short``); of the bytes ``raw`` when they
    were read already (``hit_of``: the counters' round trip brought them)."""
    try:
        item = store.hit(key) if raw is NOT_READ else store.hit_of(key, raw)
    except Exception:  # the general read reports it (and fails open)
        return _general(tc, store, prefix, key, None)
    if item is None:
        return _MISSED
    body = item[0]
    if body is not None:
        try:
            # Checked against the key by the store: one loads is the caller's own copy.
            value = _loads(body)
        except orjson.JSONDecodeError:
            pass  # decoded again below, which reports it
        else:  # _blob_size written out: a call level is ~2% of an in-memory hit
            return value, (body.obj.__len__()  # type: ignore[attr-defined]
                           if type(body) is memoryview else len(body)), body, None
    # Tagged values and anything the store would not vouch for: the codec decides.
    return _general(tc, store, prefix, key, item[3])


def _from_bytes(tc: ToolCache, r: Route, key: str, raw: bytes | None) -> _Read | None:
    """A short read of bytes read with the counters (``Route.fold``), without I/O; None:
    the store's own read decides (a tagged value, damage: it may decode or delete)."""
    try:
        item = r.store.hit_of(key, raw, discard=False)
    except Exception:
        return None
    if item is None:
        return _MISSED if raw is None else None
    body = item[0]
    if body is not None:
        with contextlib.suppress(orjson.JSONDecodeError):
            return _loads(body), _blob_size(body), body, None
    return None


def _load(tc: ToolCache, r: Route, prefix: str, key: str) -> _Read:
    if r.short:
        return _short(tc, r.store, prefix, key)
    return _general(tc, r.store, prefix, key, None)


async def _aload(tc: ToolCache, r: Route, prefix: str, key: str) -> _Read:
    if r.ashort:
        return _short(tc, r.store, prefix, key)
    return await _ageneral(tc, r.store, prefix, key)


# The pure steps both drivers take.


def _first_key(tc: ToolCache, args: Args, kwargs: Kwargs,
               probed: str | bytes | None = None) -> tuple[str, bool]:
    """(argument digest to look up first, whether it is the full form's). ``probed``:
    what ``KeyBuilder.probe_key`` answered, when the caller asked it already (its bytes
    are not written again)."""
    found = tc.keys.probe_key(args, kwargs, tc.seed) if probed is None else probed
    if isinstance(found, str):
        return found, False
    _bound, fast, _body, _tail, full = tc.keys.bind_key(args, kwargs, tc.seed, (), found)
    return fast, full


def _finish(tc: ToolCache, sess: agent_session | None, adigest: str, value: Any, tr: Trace
            ) -> Any:
    return guard_after(sess, tc.name, tc.resource, adigest, value, tr)


def _served(tc: ToolCache, sess: agent_session | None, adigest: str, got: _Read, tr: Trace
            ) -> Any:
    """A hit served: counted, then the loop guard's check of the result."""
    m.count_hit(sess.tenant if sess is not None else None, tc.resource, tc.name, got[1])
    tr.outcome = "hit"
    return guard_after(sess, tc.name, tc.resource, adigest, got[0], tr)


def _bypassing(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
               kwargs: Kwargs, why: int = m.BYPASSED) -> tuple[str, Any]:
    """The counters cannot be read (``why``: ``BYPASSED``), or the cache is switched off
    (``OFF``): the tool runs, neither reading nor writing entries. (argument digest,
    PROCEED or the loop guard's answer instead)."""
    adigest = tr.digest = tc.full_digest(args, kwargs)
    nudge = guard_before(sess, tc.name, tc.resource, adigest, tr)
    if nudge is PROCEED:
        m.count(sess.tenant if sess is not None else None, tc.resource, tc.name, why)
        tr.outcome = "bypassed" if why == m.BYPASSED else "off"
    return adigest, nudge


def _missing(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
             kwargs: Kwargs, fast: str, full: bool) -> tuple[str, Any]:
    """No entry under the first key: (the full digest, PROCEED or the loop guard's answer
    instead). Under a digest other than ``fast`` the entry is looked up again."""
    adigest = tr.digest = fast if full else tc.full_digest(args, kwargs)
    return adigest, guard_before(sess, tc.name, tc.resource, adigest, tr)


def _guarded_hit(tc: ToolCache, sess: agent_session, adigest: str, got: _Read, tr: Trace
                 ) -> Any:
    """A hit under a loop guard: checked before it is served, like any call."""
    tr.digest = adigest
    nudge = guard_before(sess, tc.name, tc.resource, adigest, tr)
    if nudge is not PROCEED:
        return nudge
    return _served(tc, sess, adigest, got, tr)


def _again(tc: ToolCache, tenant: str | None, got: _Read, tr: Trace) -> _Led:
    # Checked again as leader: a flight that finished (or was abandoned) between our miss
    # and now may have stored the value; running the tool again would be waste.
    m.count_hit(tenant, tc.resource, tc.name, got[1])
    tr.outcome = "hit"
    return got[0], got[2], got[3]


def _landed(tc: ToolCache, sess: agent_session | None, tr: Trace, adigest: str, prefix: str,
            key: str, flown: _Led, led: bool) -> Any:
    """A flight's result for this caller: a waiter gets its own copy."""
    result, body, blob = flown
    if not led:
        m.count(sess.tenant if sess is not None else None, tc.resource, tc.name, m.COALESCED)
        tr.outcome = "coalesced"
        if body is not None:
            result = _loads(body)
        elif blob is not None:
            result = tc.decode(prefix, key, blob)
        # else not cached: the leader's object, as for any uncached call
    return _finish(tc, sess, adigest, result, tr)


@dataclasses.dataclass(slots=True)
class _Lookup:
    """Where a call's entry is looked for, once its counters are read: what a miss needs
    to look again, run the tool and store its result."""

    prefix: str
    head: str
    names: tuple[str, ...]
    route: Route
    values: list[int]
    vpart: str
    fast: str
    full: bool


# The sync driver.


def _sync_miss(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
               kwargs: Kwargs, at: _Lookup) -> Any:
    adigest, nudge = _missing(tc, sess, tr, args, kwargs, at.fast, at.full)
    if nudge is not PROCEED:
        return nudge
    r, prefix = at.route, at.prefix
    key = at.head + at.vpart + adigest
    if adigest != at.fast:  # looked up under the fast form's digest: now the full one
        got = _load(tc, r, prefix, key)
        if got[0] is not PROCEED:
            return _served(tc, sess, adigest, got, tr)
    tenant = sess.tenant if sess is not None else None

    def lead() -> _Led:
        got = _load(tc, r, prefix, key)
        if got[0] is not PROCEED:
            return _again(tc, tenant, got, tr)
        t0 = time.perf_counter()
        result = tc.fn(*args, **kwargs)
        rec, blob = tc.settle(tenant, prefix, key, result, time.perf_counter() - t0)
        if rec is not None and tc.fresh(tenant, at.values, r.gens.read(at.names)):
            try:
                r.store.put(key, rec, ttl=tc.ttl)
                m.count(tenant, tc.resource, tc.name, m.BSTORED, len(rec.value))
            except Exception as exc:
                _put_failed(r.store, exc)
        return result, None, blob

    flown, led = tc.flights.run(key, lead)
    return _landed(tc, sess, tr, adigest, prefix, key, flown, led)


def _sync_counters(tc: ToolCache, r: Route, cell: list[Any], names: tuple[str, ...],
                   head: str, fast: str) -> tuple[list[int], str, Any] | None:
    """Shared counters read (and the entry with them where ``_fold_key`` says): (values,
    version part, entry bytes or ``NOT_READ``); None when they cannot be read."""
    seen = cell[1]
    entry = _fold_key(r, seen, head, fast)
    if entry is not None:
        values, raw = r.gens.read_with(names, tc.counter_max_age, entry)
    else:
        values, raw = r.gens.read(names, tc.counter_max_age), NOT_READ
    if values is None:
        return None
    vpart, raw = _shared_part(cell, seen, r.gens, values, raw)
    return values, vpart, raw


def _sync_bypassed(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
                   kwargs: Kwargs, why: int = m.BYPASSED) -> Any:
    """The counters cannot be read (no entry can be proven fresh), or the cache is switched
    off: skip the cache."""
    adigest, nudge = _bypassing(tc, sess, tr, args, kwargs, why)
    if nudge is not PROCEED:
        return nudge
    return _finish(tc, sess, adigest, tc.fn(*args, **kwargs), tr)


def _sync_wrapper(tc: ToolCache) -> Callable[..., Any]:
    """The sync driver. A hit through in-process counters is written out in one closure
    over the tool's state: every call level cost ~0.1 µs of a ~7 µs hit. The rest (shared
    counters, whose round trip dwarfs a call level; misses, bypasses, the loop guard)
    calls the steps above, which the async driver shares."""
    fn = tc.fn
    name, resource = tc.name, tc.resource
    quick, seed = tc.keys.probe_key, tc.seed
    template, by_value, scope = tc.template, tc._by_value, tc.scope
    one = template.one if template is not None else None
    nparams = template.nparams if template is not None else 0
    is_global = scope == "global"

    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        # A hit without a loop guard traces from locals; the other paths fill a Trace. The
        # try/except/finally below is a deliberate twin of ``_tracing.traced_call`` (which
        # the async driver uses): a hit without a loop guard builds no Trace and enters no
        # context manager, which ``traced_call`` cannot avoid (~0.4 µs of a ~5 µs hit).
        sess = SESSION.get()
        tr: Trace | None = None
        outcome = "hit"
        adigest = ""
        try:
            where = None
            if one is not None and not kwargs and one < len(args) <= nparams:
                # ``Template.value_of`` and ``where``'s memo by value, inlined: two call
                # levels of a hit. A prefix of None is in no memo: ``where`` raises.
                v = args[one]
                tv = type(v)
                if tv is int or tv is str:
                    where = by_value.get((GLOBAL if is_global else sess.prefixes.get(scope)
                                          if sess is not None else None, v))
            if where is None:
                where = tc.where(sess, args, kwargs)
            if where is None:
                tr = Trace("bypassed")
                return fn(*args, **kwargs)  # the arguments do not bind: let the tool say why
            prefix, head, names, cell = where
            r = tc._route  # ``ToolCache.route`` inlined
            settings = _settings()
            on = settings.runtime_on  # ``ToolCache.on`` inlined
            if on is None:
                on = settings.resolve_runtime()
            if not (on and tc.enabled):
                tr = Trace("miss")  # the cache is switched off
                return _sync_bypassed(tc, sess, tr, args, kwargs, m.OFF)
            if r.configured is not settings.store or r.codec is not settings.codec:
                r = tc.route()
            if r.local:  # ``ToolCache.local_counters`` inlined for a remembered read
                gens, memo = r.gens, cell[0]
                if memo is not None and memo[0] is gens and memo[1] == gens.version:
                    values, vpart = memo[3], memo[2]
                else:
                    values, vpart = tc.local_counters(gens, names, cell)
            found = quick(args, kwargs, seed)
            full = False
            if isinstance(found, str):
                fast = found
            else:
                fast, full = _first_key(tc, args, kwargs, found)
            raw: Any = NOT_READ
            if not r.local:
                counted = _sync_counters(tc, r, cell, names, head, fast)
                if counted is None:
                    tr = Trace("miss")
                    return _sync_bypassed(tc, sess, tr, args, kwargs)
                values, vpart, raw = counted
            key = head + vpart + fast
            got = (_short(tc, r.store, prefix, key, raw) if r.short
                   else _general(tc, r.store, prefix, key, None))
            if got[0] is PROCEED:
                tr = Trace("miss")
                return _sync_miss(tc, sess, tr, args, kwargs, _Lookup(
                    prefix, head, names, r, values, vpart, fast, full))
            adigest = fast  # a hit proves it is the full form's digest
            if sess is None or sess.guard is None:
                m.count_hit(sess.tenant if sess is not None else None, resource, name, got[1])
                return got[0]
            tr = Trace("hit")
            return _guarded_hit(tc, sess, adigest, got, tr)
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

    return sync_wrapper


# The async driver: the same steps, awaited.


async def _async_counters(tc: ToolCache, r: Route, cell: list[Any], names: tuple[str, ...],
                          head: str, fast: str) -> tuple[list[int], str, Any] | None:
    """:func:`_sync_counters`, awaited."""
    seen = cell[1]
    entry = _fold_key(r, seen, head, fast)
    if entry is not None:
        values, raw = await r.gens.aread_with(names, tc.counter_max_age, entry)
    else:
        values, raw = await r.gens.aread(names, tc.counter_max_age), NOT_READ
    if values is None:
        return None
    vpart, raw = _shared_part(cell, seen, r.gens, values, raw)
    return values, vpart, raw


async def _async_call(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
                      kwargs: Kwargs) -> Any:
    fn = tc.fn
    where = tc.where(sess, args, kwargs)
    if where is None:
        tr.outcome = "bypassed"
        return await fn(*args, **kwargs)
    prefix, head, names, cell = where
    if not tc.on():
        adigest, nudge = _bypassing(tc, sess, tr, args, kwargs, m.OFF)
        return nudge if nudge is not PROCEED else _finish(tc, sess, adigest,
                                                          await fn(*args, **kwargs), tr)
    r = tc.route()
    fast, full = _first_key(tc, args, kwargs)
    raw: Any = NOT_READ
    if r.local:
        values, vpart = tc.local_counters(r.gens, names, cell)
    else:
        counted = await _async_counters(tc, r, cell, names, head, fast)
        if counted is None:
            adigest, nudge = _bypassing(tc, sess, tr, args, kwargs)
            if nudge is not PROCEED:
                return nudge
            return _finish(tc, sess, adigest, await fn(*args, **kwargs), tr)
        values, vpart, raw = counted
    key = head + vpart + fast
    got = _from_bytes(tc, r, key, raw) if raw is not NOT_READ else None
    if got is None:
        got = await _aload(tc, r, prefix, key)
    if got[0] is not PROCEED:
        adigest = tr.digest = fast
        if sess is None or sess.guard is None:  # the commonest async hit, inlined
            m.count_hit(sess.tenant if sess is not None else None, tc.resource, tc.name,
                        got[1])
            tr.outcome = "hit"
            return got[0]
        return _guarded_hit(tc, sess, adigest, got, tr)
    return await _async_miss(tc, sess, tr, args, kwargs, _Lookup(
        prefix, head, names, r, values, vpart, fast, full))


async def _async_miss(tc: ToolCache, sess: agent_session | None, tr: Trace, args: Args,
                      kwargs: Kwargs, at: _Lookup) -> Any:
    adigest, nudge = _missing(tc, sess, tr, args, kwargs, at.fast, at.full)
    if nudge is not PROCEED:
        return nudge
    r, prefix = at.route, at.prefix
    key = at.head + at.vpart + adigest
    if adigest != at.fast:
        got = await _aload(tc, r, prefix, key)
        if got[0] is not PROCEED:
            return _served(tc, sess, adigest, got, tr)
    tenant = sess.tenant if sess is not None else None
    paid: list[Record] = []  # what the tool returned, encoded to be stored

    async def lead() -> _Led:
        got = await _aload(tc, r, prefix, key)
        if got[0] is not PROCEED:
            return _again(tc, tenant, got, tr)
        t0 = time.perf_counter()
        result = await tc.fn(*args, **kwargs)
        rec, blob = tc.settle(tenant, prefix, key, result, time.perf_counter() - t0)
        if rec is not None:
            paid.append(rec)
        return result, None, blob

    async def keep() -> None:
        # After the tool returned: a cancelled leader still stores it (``arun``).
        if paid and tc.fresh(tenant, at.values, await r.gens.aread(at.names)):
            try:
                await r.store.aput(key, paid[0], ttl=tc.ttl)
                m.count(tenant, tc.resource, tc.name, m.BSTORED, len(paid[0].value))
            except Exception as exc:
                _put_failed(r.store, exc)

    flown, led = await tc.flights.arun(key, lead, keep)
    return _landed(tc, sess, tr, adigest, prefix, key, flown, led)


def _async_wrapper(tc: ToolCache) -> Callable[..., Any]:
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        # ``atraced_call`` written out: its extra coroutine level is ~0.5 µs of an async hit.
        sess = SESSION.get()
        if sess is None or not sess.tracing:
            return await _async_call(tc, sess, Trace("miss"), args, kwargs)
        with Noted(sess, tc.name, tc.resource, "miss") as tr:
            return await _async_call(tc, sess, tr, args, kwargs)

    return async_wrapper


def wrap_cached(tc: ToolCache) -> Callable[..., Any]:
    """The sync or async wrapper of one tool.

    A warm hit (the target: within 2x of ``@cache``'s, which ``benchmarks/bench_runtime.py``
    checks) is: the session, the key head and counter names (remembered per prefix and
    entity), the counters read (every call, unless ``counter_max_age`` says otherwise: they
    are the invalidation), the argument digest (``KeyBuilder.hit_key``), the store's short
    ``hit`` and one ``orjson.loads``, the loop guard, one metrics increment, the session
    trace.

    The digest looked up first is that of the fast canonical form (``KeyBuilder.bind_key``);
    entries are stored under the full form's (``digest(canonical)``). The two differ only
    for arguments holding credentials or volatile fields below the top level, and then the
    fast one matches no stored entry (a stored form never holds an unmasked credential, so
    equal digests mean equal forms, and such a form is the full one): a hit proves its
    digest is the full one. A miss works the full digest out before the loop guard sees it.

    The decisions are made once, by ``ToolCache`` and the steps above; the sync and async
    drivers differ by their awaits (reads, counters, the tool, the write), and the sync hit
    path is inlined (see ``_sync_wrapper``).
    """
    fn = tc.fn
    target = probe(fn)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise ConfigurationError(
            f"tool_cache({tc.name}): generators are not supported; return a value (use "
            "@dejacache.cache for generators)"
        )
    make = _async_wrapper if inspect.iscoroutinefunction(target) else _sync_wrapper
    out = functools.wraps(fn)(make(tc))
    out.tool_cache = tc  # type: ignore[attr-defined]
    return out
