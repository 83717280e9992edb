"""``@dejacache.cache``: remember any function's results (sync, async, generators)."""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterable

import orjson

from . import _engine
from .config import GLOBAL, Effective, VolatileItems, flag, ttl_seconds, volatile_items
from .errors import ConfigurationError
from .keys import KeyBuilder, explain, key_seed
from .scope import CURRENT, OPEN_BLOCKS, current
from .stats import record_hit
from .stores._base import NOT_SHARED

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import re
    from types import ModuleType
    from typing import Any, TypeVar, overload

    from ._core.durations import Duration
    from .keys import KeyParts
else:
    from ._hints import Any, TypeVar, overload

__all__ = ["cache"]

F = TypeVar("F", bound=Callable[..., Any])
_loads = orjson.loads
_scoped = CURRENT.get


def _default_name(fn: Callable[..., Any]) -> str:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not hasattr(target, "__qualname__"):
        target = type(target)
    return f"{target.__module__}.{target.__qualname__}"


class _Keys:
    """Per-function key builders, one per extra volatile set configured at run time."""

    __slots__ = ("_builders", "fn", "ignore", "key_self", "name", "volatile")

    def __init__(self, fn: Callable[..., Any], name: str, ignore: Iterable[str],
                 volatile: Iterable[str | re.Pattern[str]], key_self: bool | None) -> None:
        self.fn = fn
        self.name = name
        self.ignore = (ignore,) if isinstance(ignore, str) else tuple(ignore)  # as volatile=
        self.key_self = key_self
        self.volatile = volatile_items(volatile)
        self._builders: dict[VolatileItems, KeyBuilder] = {}
        # A path or a name written on the decorator that no call can reach is a mistake to
        # report now, not a key that silently keeps the field.
        first = self.builder(())
        lost = first.unreachable_paths()
        if lost:
            raise ConfigurationError(
                f"volatile path(s) {', '.join(lost)} on {name} can never match: the first name "
                "of a path is one of the function's parameters")
        unkeyed = first.unkeyed_receiver_paths()
        if unkeyed:
            raise ConfigurationError(
                f"volatile path(s) {', '.join(unkeyed)} on {name} can never match: "
                "key_self=False leaves the instance out of the key")
        unknown, params = first.unknown_ignored()
        if unknown:
            from ._suggest import not_parameters

            raise ConfigurationError(not_parameters(name, unknown, params))

    def builder(self, extra: VolatileItems) -> KeyBuilder:
        b = self._builders.get(extra)
        if b is None:
            b = self._builders[extra] = KeyBuilder(
                self.fn, self.name, ignore=self.ignore, volatile=self.volatile + extra,
                key_self=self.key_self,
            )
        return b


_Parts = tuple[dict[str, Any], str, bytes, bytes, bool]  # KeyBuilder.bind_key's answer


class _Plan:
    """What calls of one function under one ``Effective`` share, worked out once: the key
    builder, the digest seed, substitutions, and whether a hit may take the short path (a
    store offering ``hit()``, ``short_hits``: ``MemoryStore`` and ``SQLiteStore``; the plain
    ``JsonCodec``, no scope extras, not recording). Settings and scopes are immutable
    ``Effective`` objects, so a new one (``configure``, entering a scope) is the generation
    change that rebuilds the plan.

    The short path is the whole of a warm hit: the key, the store's
    ``hit``, one ``orjson.loads`` of the checked body (the caller's own fresh object) or,
    with ``frozen=True``, a new read-only view of the immutable value the store keeps for
    those bytes, the hit counted. Anything else it meets goes on to the engine's general path.
    """

    __slots__ = ("eff", "kb", "quick", "seed", "share", "short", "store", "subs")

    def __init__(self, eff: Effective | None, keys: _Keys) -> None:
        self.eff = eff  # None: no call seen yet
        self.kb: KeyBuilder | None = None
        self.seed = 0
        self.subs: tuple[tuple[bytes, bytes], ...] = ()
        self.short = False
        self.quick = False  # short, and no substitutions: ``KeyBuilder.probe_key`` may answer
        self.store: Any = None
        self.share: Callable[[str, Any, Any], None] | None = None
        if eff is None:
            return
        self.store = eff.store
        ns = eff.namespace
        if ns is None or eff.mode == "off":
            return
        self.kb = keys.builder(eff.volatile)
        self.seed = key_seed(ns, keys.name)
        # Substitutions go into the canonicaliser: a credential argument equal to a declared
        # live value is keyed as its placeholder, before masking could hide it.
        self.subs = eff.key_substitute
        features = eff.features
        store = self.store
        # eff.guarded and typing.cast written out: a scope entered per call makes a new
        # Effective, so a new plan, every call
        self.short = (not (eff.ambiguous or eff.key_substitute) and eff.mode != "record"
                      and features.short_hits
                      and getattr(eff.codec, "plain_payloads", False) is True)
        if self.short:
            if features.shares:
                self.share = store.share  # a ShortHitStore (``store`` is Any)
            self.quick = not self.subs


Prep = tuple[Any, str, bytes, "_engine.RekeyFn | None"]  # (eff, key, canonical, rekey)


class Face:
    """What the wrapper of one decorated function works with: its key builders, the plan
    for the last ``Effective`` seen, and the steps its sync, async and generator wrappers
    share (the wrappers themselves are built by ``_sync_wrapper`` and, for coroutine and
    generator functions, by ``_async_and_generators``)."""

    __slots__ = ("call_name", "fn", "frozen", "keys", "kind", "slot", "ttl", "views")

    def __init__(self, fn: Callable[..., Any], call_name: str, keys: _Keys, ttl: float | None,
                 kind: str, frozen: bool) -> None:
        self.fn, self.call_name, self.keys = fn, call_name, keys
        self.ttl, self.kind, self.frozen = ttl, kind, frozen
        # The frozen views (``_frozen``), loaded by the first ``frozen=True`` face and held
        # here: an import in the hit path cost each frozen hit ~0.6 µs (an async frozen
        # MemoryStore hit: 1.5 -> 2.8 µs).
        self.views = _frozen_views() if frozen else None
        # The plan for the last Effective seen. One slot, read and replaced atomically:
        # threads under different scopes at worst rebuild it (~2 µs); it keeps that
        # Effective alive.
        self.slot: list[_Plan] = [_Plan(None, keys)]

    def plan_for(self, eff: Effective) -> _Plan:
        slot = self.slot
        p = slot[0]
        if p.eff is not eff:
            p = slot[0] = _Plan(eff, self.keys)
        return p

    def general(self, p: _Plan, bound: dict[str, Any], key: str, body: bytes, tail: bytes,
                full: bool) -> Prep:
        """``(eff, key, canonical, rekey)`` for the engine's general path."""
        if full:  # already the full form: nothing to rekey. Its None mark (``tail``) is
            # left off: every use of the request strips it (the store keeps it scrubbed,
            # reports parse it), and 200 KB need not be copied to add one byte.
            return p.eff, key, body, None
        canonical = body + tail if tail else body
        kb, subs, eff, seed = p.kb, p.subs, p.eff, p.seed
        assert kb is not None and eff is not None

        def rekey() -> tuple[str, bytes]:
            # Hits skip the volatile-field walk; it runs only when the fast key misses,
            # by parts and cut out of the bytes the fast key wrote (``body``, when no
            # substitution rewrote them). The None mark is in the key and left off the
            # request, as above (and the form stays the object vouched for scrubbing).
            key, form, _mark = kb.full_key(bound, seed, subs, None if subs else body)
            return key, form

        return eff, key, canonical, rekey

    def prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prep | None:
        p = self.plan_for(CURRENT.get() or current())
        kb = p.kb
        if kb is None:
            return None
        return self.general(p, *kb.bind_key(args, kwargs, p.seed, p.subs))

    def short_hit(self, p: _Plan, eff: Effective, key: str, item: tuple[Any, ...]) -> Any:
        """The value of the hit ``item`` that ``p.store.hit`` just returned, or ``MISS``
        (then the general path decides). The wrappers inline the two commonest cases."""
        call_name, views = self.call_name, self.views
        body = item[0]
        if body is None:
            rec = item[3]
            if rec is None:
                return _engine.MISS
            value = _engine.memory_hit(eff, call_name, key, rec)  # tagged values, errors
            if views is not None and value is not _engine.MISS:
                value = views.freeze(value)
            return value
        shared = item[4]
        if views is not None and shared is not NOT_SHARED:
            record_hit(call_name, item[1], item[2])
            return views.view_of(shared)
        try:
            value = _loads(body)  # checked by the store: one loads is the fresh copy
        except orjson.JSONDecodeError:
            return _engine.MISS  # the general path decodes it again and reports it
        if views is not None:
            # The store keeps the immutable node tree; each caller gets its own view of it.
            shared = views.shared_node(value, body)
            if p.share is not None:
                p.share(key, item, shared)
            value = views.view_of(shared)
        record_hit(call_name, item[1], item[2])
        return value

    def try_short(self, p: _Plan, eff: Effective, kb: KeyBuilder, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[Any, _Parts | None]:
        """The short path (sync_wrapper inlines it): ``(value or MISS, bind_key's parts if
        it had to be asked)``. The key alone comes first: a hit needs nothing else."""
        found = kb.probe_key(args, kwargs, p.seed) if p.quick else None
        parts = None
        if isinstance(found, str):
            key = found
        else:  # the bytes probe_key wrote, if any, are not written again
            parts = kb.bind_key(args, kwargs, p.seed, p.subs, found)
            key = parts[1]
        item = p.store.hit(key)
        return (_engine.MISS if item is None else self.short_hit(p, eff, key, item)), parts

def _sync_wrapper(face: Face) -> Callable[..., Any]:
    # The face's parts as closure cells: this is the hot path of a hit.
    fn, call_name, kind, ttl, frozen = face.fn, face.call_name, face.kind, face.ttl, face.frozen
    slot, keys, short_hit, general = face.slot, face.keys, face.short_hit, face.general
    freeze = face.views.freeze if face.views is not None else None

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        # current() and the plan lookup inlined: this is the hot path of a hit.
        eff = _scoped()
        if eff is None:
            eff = GLOBAL[0]
            if eff is None or OPEN_BLOCKS:  # not computed yet / blocks open in other threads
                eff = current()
        p = slot[0]
        if p.eff is not eff:
            p = slot[0] = _Plan(eff, keys)
        found = item = None
        if p.quick:
            # The warm hit written out (try_short and short_hit's two commonest cases: a
            # plain body to decode, or a view of the immutable value frozen hits share);
            # everything else goes on in off_short with what was found. One flag and no
            # locals the other paths need: a 2 KB hit 55.7K -> 53.5K instructions (frozen
            # 36.2K -> 33.9K), with the changes to probe_key, record_hit and the None
            # probe it came with.
            found = p.kb.probe_key(args, kwargs, p.seed)  # type: ignore[union-attr]
            if type(found) is str:  # (probe_key's keys are exact str)
                item = p.store.hit(found)
                if item is not None:
                    if not frozen:
                        body = item[0]
                        if body is not None:
                            try:
                                value = _loads(body)
                            except orjson.JSONDecodeError:
                                pass  # the general path decodes it again and reports it
                            else:
                                record_hit(call_name, item[1], item[2])
                                return value
                    else:
                        node = item[4]
                        if node is not NOT_SHARED:
                            record_hit(call_name, item[1], item[2])
                            if type(node) is not tuple:  # a str or number result
                                return node
                            # view_of inlined (0.1 µs of a 2 KB hit): shared values are
                            # decoded JSON, so the node is a dict's or a list's.
                            view = node[0]()
                            view._node = node
                            return view
        return off_short(p, eff, found, item, args, kwargs)

    def off_short(p: _Plan, eff: Effective, found: str | bytes | None, item: Any,
                  args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The rest of a call: ``found``, what ``probe_key`` answered (None: not asked),
        and ``item``, the store's answer for a str ``found``."""
        # A function of its own: the lambda below made ``args`` and ``kwargs`` cells, built
        # and freed on every hit too (~450 of a 2 KB hit's instructions).
        kb = p.kb
        if kb is None:
            return fn(*args, **kwargs)
        parts = None
        if p.short:
            if isinstance(found, str):
                key = found
            else:  # the bytes probe_key wrote, if any, are not written again
                parts = kb.bind_key(args, kwargs, p.seed, p.subs, found)
                key = parts[1]
                item = p.store.hit(key)
            if item is not None:
                value = short_hit(p, eff, key, item)
                if value is not _engine.MISS:
                    return value
        if parts is None:
            parts = kb.bind_key(args, kwargs, p.seed, p.subs)
        eff, key, canonical, rekey = general(p, *parts)
        value = _engine.call_sync(
            eff, call_name, kind, key, canonical, lambda: fn(*args, **kwargs), ttl=ttl,
            rekey=rekey,
        )
        return freeze(value) if freeze is not None else value

    return sync_wrapper


def _frozen_views() -> ModuleType:
    """``_frozen``, imported by the first ``frozen=True`` face: a process that decorates
    none never loads the frozen views (25 KB of bytecode, ~0.2 ms)."""
    from . import _frozen

    return _frozen


def _probe(fn: Callable[..., Any]) -> Any:
    """What to inspect to tell sync from async and generators: a callable object's
    ``__call__``, a partial's function."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target) or isinstance(target, type)):
        return type(target).__call__
    return target


def _wrap(
    fn: Callable[..., Any],
    *,
    name: str | None,
    ignore: Iterable[str],
    volatile: Iterable[str | re.Pattern[str]],
    ttl: float | None,
    kind: str,
    frozen: bool = False,
    key_self: bool | None = None,
) -> Callable[..., Any]:
    call_name = name or _default_name(fn)
    keys = _Keys(fn, call_name, ignore, volatile, key_self)
    probe = _probe(fn)
    if frozen and (inspect.isasyncgenfunction(probe) or inspect.isgeneratorfunction(probe)):
        raise ConfigurationError(
            f"frozen=True on {call_name}: a generator's items are replayed one by one, not "
            "shared as one value; drop frozen=True")
    face = Face(fn, call_name, keys, ttl, kind, frozen)
    if (inspect.isasyncgenfunction(probe) or inspect.isgeneratorfunction(probe)
            or inspect.iscoroutinefunction(probe)):
        # Imported here: a process decorating plain functions only never loads them.
        from ._async_and_generators import wrapper as other_wrapper

        wrapper = other_wrapper(face, probe)
    else:
        wrapper = _sync_wrapper(face)

    def cache_key(*args: Any, **kwargs: Any) -> str:
        """The key this call would use under the current settings: the one a miss stores
        under, written the way the miss writes it (by parts for a long conversation: the
        full form written from scratch cost 3.9x the orjson floor at 1,000 messages)."""
        eff = current()
        ns = eff.namespace or ""
        kb = keys.builder(eff.volatile)
        seed, subs = key_seed(ns, call_name), eff.key_substitute
        bound, key, body, _tail, full = kb.bind_key(args, kwargs, seed, subs)
        return key if full else kb.full_key(bound, seed, subs, None if subs else body)[0]

    def explain_call(*args: Any, **kwargs: Any) -> KeyParts:
        eff = current()
        return explain(eff.namespace or "", call_name, args, kwargs, fn=fn, ignore=keys.ignore,
                       volatile=keys.volatile + eff.volatile, key_self=keys.key_self)

    wrapper.cache_key = cache_key  # type: ignore[attr-defined]
    wrapper.explain = explain_call  # type: ignore[attr-defined]
    wrapper.cache_name = call_name  # type: ignore[attr-defined]
    if name:
        _NAMED.setdefault(name, weakref.WeakSet()).add(wrapper)
    return wrapper


# Functions decorated with an explicit ``name=``, so a recording that names its calls (an
# agentcassette step) finds the function that makes that call now without being told.
# Weak: a function defined and dropped (a test's local one) does not stay registered.
_NAMED: dict[str, weakref.WeakSet[Callable[..., Any]]] = {}


def named(name: str) -> list[Callable[..., Any]]:
    """The live ``@cache(name=name)`` functions (several: the name alone cannot say which)."""
    found = _NAMED.get(name)
    return list(found) if found is not None else []


@overload
def cache(fn: F, /) -> F: ...


@overload
def cache(
    *,
    name: str | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str | re.Pattern[str]] = (),
    ttl: Duration | None = None,
    kind: str = "call",
    frozen: bool = False,
    key_self: bool | None = None,
) -> Callable[[F], F]: ...


def cache(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str | re.Pattern[str]] = (),
    ttl: Duration | None = None,
    kind: str = "call",
    frozen: bool = False,
    key_self: bool | None = None,
) -> Any:
    """Cache a function's results under the current mode, namespace and store.

    Works on sync and async functions, generators and async generators (items are replayed
    in order; an abandoned generator stores nothing), methods, ``functools.partial`` objects
    and callables. Exceptions are not cached.

    A method's key holds its arguments and the instance it is called on: its class and data
    (attributes, or a dataclass's or model's fields), or what its class's
    ``__dejacache_key__`` says; a classmethod's class by its qualified name. Attributes the
    key cannot hold (clients, locks, callables) are left out (``fn.explain(...).left_out``);
    ``volatile=["self.name"]`` masks one. ``key_self=True`` refuses an attribute it cannot
    key (``ConfigurationError``); ``key_self=False`` never keys the instance.

    ``ignore`` names arguments left out of the key; ``volatile`` adds field names (anywhere in
    the arguments), paths from a parameter (``"messages[*].metadata"``) to drop, or compiled
    patterns whose matches inside strings are replaced by a placeholder; ``ttl`` is how long
    an entry lives: seconds, a ``timedelta`` or text such as ``"1h30m"`` (None: no expiry).

    ``frozen=True`` hands every hit a read-only view of one shared value instead of a fresh
    copy, so an in-memory hit costs no decode at all: dicts and lists come back as
    ``Mapping``/``Sequence`` views that compare, index and iterate as the plain values do
    (``dejacache.thaw`` gives a plain copy, and is the ``default=`` JSON encoders need);
    changing one raises ``ReadOnlyResult``. Misses return a read-only copy too, so code sees
    the same either way.
    """
    ignore = (ignore,) if isinstance(ignore, str) else tuple(ignore)  # one name, as volatile=
    volatile = volatile_items(volatile)
    flag(frozen, "frozen")
    secs = ttl_seconds(ttl, "@cache ttl")

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(f, name=name, ignore=ignore, volatile=volatile, ttl=secs, kind=kind,
                     frozen=frozen, key_self=key_self)

    return deco(fn) if fn is not None else deco
