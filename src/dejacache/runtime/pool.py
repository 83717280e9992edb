"""``AgentPool``: one agent per session, reused while its signature matches.

Chat gateways that built a fresh agent per message rebuilt the system prompt each turn and
lost the provider's prompt cache; the ones that kept agents were burned by unbounded growth
(hermes-agent #25315: 400 MB → 20-37 GB), evictions that never closed clients, hand-listed
signatures that missed prompt edits (#32007), a volatile id evicting every turn (#55595) and
a cache lock held on the event loop (#52197). So here:

- The signature is a digest of named config values (or of what a callable reads), built with
  dejacache's canonical keys; credentials are masked by a hash of the whole value and only the
  digest is kept. Names outside the signature go to the factory and are set on a reused agent.
- Bounds hold always: ``max_size`` (LRU) and ``idle_ttl`` (monotonic clock). An agent in a
  turn is never released; it counts as the most recently used, and if the pool is over its
  bound when the turn ends, the release happens then.
- ``on_evict`` runs exactly once per agent, outside the pool lock, and off the event loop
  when the caller is on one (a single release thread). No lock is held across an ``await``
  or while a factory runs; one session's turns are serialised (or refused) and never block
  another session's.
- A lease runs inside ``agent_session(session_id=...)`` under the caller's tenant, carried
  into executor tasks and the bare threads the agent starts (``_lease_threads``; a bare
  thread gets the conversation's name, never the tenant), so every request it makes is
  attributed to its session. The tenant is part of every signature: an agent is never
  reused across tenants. ``apply=`` (opt in) rewrites those requests with the prompt-cache planner's
  runtime fixes (``_cache_apply.py``: a ``prompt_cache_key`` per session, cache breakpoints).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent import futures
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from .._core.durations import Duration, seconds
from .._core.scopes import tenant_prefix
from ..errors import ConfigurationError, PoolError
from ..keys import KeyBuilder
from ..stores._base import off_loop_owned
from . import _lease_threads
from ._cache_apply import CacheFixer, fixes_of
from ._conversation import THREAD_SESSION, conversation
from .session import SESSION, agent_session

__all__ = ["AgentPool", "PoolStats"]

A = TypeVar("A")
log = logging.getLogger("dejacache.runtime")

_NAMESPACE = "dejacache.pool"
# Only credentials are treated specially (masked by a hash of the full value): the default
# volatile names (trace ids...) are legitimate signature inputs here.
_KEYS = KeyBuilder(None, "agent-signature", use_default_volatile=False)

# The leases open in this context (threads the agent starts carry it): a nested lease of
# the same session would wait for itself forever, so it is refused instead.
_HELD: contextvars.ContextVar[tuple[_Lease[Any], ...]] = contextvars.ContextVar(
    "dejacache_pool_held", default=()
)


@dataclasses.dataclass(frozen=True, slots=True)
class PoolStats:
    """A snapshot of an :class:`AgentPool`."""

    size: int  # agents held (leased ones included)
    max_size: int
    leased: int  # sessions in a turn right now
    waiting: int  # turns queued behind another turn of their session
    hits: int  # turns served by the session's existing agent
    builds: int  # factory calls for a session without an agent
    rebuilds: int  # factory calls because the signature changed
    evicted: dict[str, int]  # reason -> agents taken out: lru, idle, evict, clear, replaced
    released: int  # on_evict calls completed
    release_errors: int  # on_evict calls that raised (logged, never propagated)
    refused: int  # turns refused because the session was busy (concurrent="refuse")


class _Recorder(Mapping[str, Any]):
    """The config as a read-only mapping that remembers which names the signature read."""

    __slots__ = ("_all", "_data", "read")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.read: set[str] = set()
        self._all = False

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return self._data[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self.read.add(name)
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        self.read.update(self._data)  # iterating reads every name
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class _Waiter:
    __slots__ = ("event", "future", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.granted = False
        self.event: threading.Event | None = None if loop else threading.Event()
        self.future: asyncio.Future[None] | None = loop.create_future() if loop else None


class _Slot:
    """One session: its agent, and the turn gate its leases pass through."""

    __slots__ = ("agent", "busy", "digest", "doomed", "key", "last_used", "waiters")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.agent: Any = None
        self.digest = ""
        self.busy = False
        self.doomed = ""  # eviction reason, applied when the current turn ends
        self.last_used = 0.0
        self.waiters: collections.deque[_Waiter] = collections.deque()


def _on_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _session_id(key: Hashable) -> str:
    return key if isinstance(key, str) else repr(key)


def _turn_session(key: Hashable) -> agent_session:
    """The session a turn of ``key`` runs in: ``session_id=key``, with what the caller's
    session set (its tenant, loop guard and trace bound); the caller's session itself when
    it is already that session. Without the tenant a ``scope="tenant"`` tool in the turn
    raised ``ScopeError`` though the caller had set one."""
    outer = SESSION.get()
    sid = _session_id(key)
    if outer is None:
        return agent_session(session_id=sid)
    if outer.session_id == sid:
        return outer  # (re-entering it continues its loop-guard state and trace)
    maxlen = outer.calls.maxlen
    return agent_session(outer.tenant, sid, loop_guard=outer.loop_guard,
                         max_calls=1000 if maxlen is None else maxlen)


def _tenant_digest(digest: str) -> str:
    """A signature digest that holds the caller's tenant: an agent built for one tenant
    (its history, its credentials, what its tools cached) is never reused for another,
    whatever the signature says; a lease of the same key by another tenant rebuilds it."""
    outer = SESSION.get()
    tenant = outer.tenant if outer is not None else None
    return digest if tenant is None else f"{digest}@{tenant_prefix(tenant)}"


_DEFAULT_SIGNATURE = ("model", "provider", "base_url", "api_key", "toolsets", "system_prompt")


def _factory_takes(factory: Callable[..., Any]) -> tuple[str, ...] | None:
    """The config names ``factory(**config)`` can be given; None when any name can be
    (``**kwargs``) or its signature cannot be read."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _never_given(names: Iterable[str], takes: tuple[str, ...], factory: Any,
                 what: str) -> ConfigurationError | None:
    """The error for signature names ``factory`` never takes, if there are any. Such a name
    always reads as "no value", so a change of the value it was meant to watch (a misspelt
    ``"modle"``) would keep reusing the old agent."""
    never = [n for n in names if n not in takes]
    if not never:
        return None
    fname = getattr(factory, "__qualname__", type(factory).__qualname__)
    them = "that name" if len(never) == 1 else "those names"
    return ConfigurationError(
        f"AgentPool {what} {', '.join(map(repr, never))} but the factory never gets {them} "
        f"({fname} takes {', '.join(takes) or 'no names'}). A name the config never "
        "supplies reads as no value on every turn, so a change of the value it was meant to "
        "watch would reuse the old agent; fix the name")


class AgentPool(Generic[A]):
    """Keeps one agent per session key while its signature matches; bounded, thread- and
    asyncio-safe.

    ``factory(**config)`` builds an agent. ``signature`` is the config names whose values
    decide whether a session's agent can be reused (or a callable taking the config mapping
    and returning the signature's inputs; the names it reads count as inside). Other config
    names are passed to ``factory`` and set with ``setattr`` on a reused agent. A callable's
    return value is the whole signature, by design: configs it maps to one value reuse the
    agent as it was built, and the names it read are not set on it (what leaves a message's
    clock out of a prompt). Return what must rebuild the agent: ``{"model":
    config["model"]}``, not only the model's family, unless an agent built for ``gpt-4.1``
    should answer for ``gpt-4.1-mini``. The caller's tenant is always part of it. ``apply``:
    the prompt-cache fixes applied to the requests made in a lease (``True`` for
    ``"prompt_cache_key"`` and ``"breakpoints"``, or a list of them).
    """

    def __init__(
        self,
        factory: Callable[..., A],
        *,
        signature: Iterable[str] | Callable[[Mapping[str, Any]], Any] = _DEFAULT_SIGNATURE,
        max_size: int = 128,
        idle_ttl: Duration = 3600.0,
        on_evict: Callable[[A], Any] | None = None,
        concurrent: Literal["wait", "refuse"] = "wait",
        clock: Callable[[], float] = time.monotonic,
        apply: bool | Iterable[str] | None = None,
    ) -> None:
        if not callable(factory):
            raise ConfigurationError(f"AgentPool factory must be callable, not "
                                     f"{type(factory).__name__}")
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise ConfigurationError(f"AgentPool max_size must be an int >= 1, got {max_size!r}")
        idle_seconds = seconds(idle_ttl, "AgentPool idle_ttl", hint="the pool is always "
                               "bounded: hermes-agent #25315 grew to 37 GB without one")
        if on_evict is not None and (not callable(on_evict)
                                     or inspect.iscoroutinefunction(on_evict)):
            raise ConfigurationError(
                "AgentPool on_evict must be a plain callable (it runs in a release thread, "
                "off the event loop); to close async clients, schedule that on their loop")
        if concurrent not in ("wait", "refuse"):
            raise ConfigurationError(
                f"AgentPool concurrent must be 'wait' or 'refuse', got {concurrent!r}")
        self._names: frozenset[str] | None
        self._sigfn: Callable[[Mapping[str, Any]], Any] | None
        # What the factory can be given: signature names outside it are refused now; with
        # ``**kwargs`` a turn's config is checked instead (``_check_given``).
        self._takes = _factory_takes(factory)
        self._given_each_turn = False
        if callable(signature):
            self._names, self._sigfn = None, signature
        else:
            names = [signature] if isinstance(signature, str) else list(signature)
            if not all(isinstance(n, str) and n for n in names):
                raise ConfigurationError(
                    f"AgentPool signature must be config names (str) or a callable, "
                    f"got {signature!r}")
            self._names, self._sigfn = frozenset(names), None
            # The default names are a guess at common factories, not the user's words: a
            # factory lacking some of them just never gets them.
            if signature is not _DEFAULT_SIGNATURE:
                if self._takes is None:
                    self._given_each_turn = True
                elif err := _never_given(names, self._takes, factory, "signature names"):
                    raise err
        self.factory = factory
        self.max_size = max_size
        self.idle_ttl = idle_seconds
        self.on_evict = on_evict
        self.concurrent = concurrent
        self._clock = clock
        self._async_factory = inspect.iscoroutinefunction(factory)
        self._lock = threading.Lock()
        self._slots: dict[Hashable, _Slot] = {}
        self._idle: collections.OrderedDict[Hashable, _Slot] = collections.OrderedDict()
        self._size = 0
        self._closed = False
        self._hits = self._builds = self._rebuilds = self._refused = 0
        self._released = self._release_errors = 0
        self._evicted: collections.Counter[str] = collections.Counter()
        self._releaser: futures.ThreadPoolExecutor | None = None
        self._pending: set[futures.Future[None]] = set()
        fixes = fixes_of(apply, "AgentPool")
        self._fixer = CacheFixer(fixes) if fixes else None

    # ------------------------------------------------------------------ public API

    def get(self, session_key: Hashable, /, **config: Any) -> A:
        """The session's agent for ``config``: reused when the signature matches, else built.

        Not leased: the pool may release it as soon as it is evicted. Use :meth:`lease` for a
        turn, so it stays alive and the session's other turns wait for it.
        """
        digest, outside = self._signature(config)
        slot = self._acquire_sync(session_key)
        try:
            with _turn_session(session_key):
                agent = self._resolve_sync(slot, digest, outside, config)
        finally:
            self._finish(slot)
        return agent

    def lease(self, session_key: Hashable, /, **config: Any) -> _Lease[A]:
        """A turn of ``session_key``: ``with pool.lease(key, **config) as agent`` (or
        ``async with``). Inside it the agent is never released, and requests it makes (from
        its own threads too) are attributed to ``agent_session(session_id=key)`` under the
        caller's tenant (and loop guard), if its ``agent_session`` set one. An agent built
        under one tenant is never reused under another: the tenant is part of the
        signature."""
        return _Lease(self, session_key, config)

    def evict(self, session_key: Hashable) -> bool:
        """Drop the session's agent (``/new``, ``/reset``); released now, or when its current
        turn ends. True if there was one."""
        with self._lock:
            slot = self._slots.get(session_key)
            if slot is None or slot.agent is None or slot.doomed:
                return False
            if slot.busy:
                slot.doomed = "evict"
                return True
            released = [self._take(slot, "evict")]
        self._dispatch(released)
        return True

    def clear(self) -> int:
        """Drop every agent (a global model change); agents in a turn go when it ends."""
        with self._lock:
            released, n = [], 0
            for slot in list(self._slots.values()):
                if slot.agent is None or slot.doomed:
                    continue
                n += 1
                if slot.busy:
                    slot.doomed = "clear"
                else:
                    released.append(self._take(slot, "clear"))
        self._dispatch(released)
        return n

    def sweep(self) -> int:
        """Release agents idle past ``idle_ttl`` now (every get/lease also does this)."""
        with self._lock:
            released = self._enforce()
        self._dispatch(released)
        return len(released)

    def close(self) -> None:
        """Clear the pool, refuse further turns, and wait for pending releases (agents in a
        turn are released when it ends)."""
        with self._lock:
            self._closed = True
        self.clear()
        self._drain()

    async def aclose(self) -> None:
        with self._lock:
            self._closed = True
        self.clear()
        await asyncio.to_thread(self._drain)

    def __len__(self) -> int:
        return self._size

    def __contains__(self, session_key: object) -> bool:
        slot = self._slots.get(session_key) if isinstance(session_key, Hashable) else None
        return slot is not None and slot.agent is not None and not slot.doomed

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                size=self._size, max_size=self.max_size,
                leased=sum(1 for s in self._slots.values() if s.busy),
                waiting=sum(len(s.waiters) for s in self._slots.values()),
                hits=self._hits, builds=self._builds, rebuilds=self._rebuilds,
                evicted=dict(self._evicted), released=self._released,
                release_errors=self._release_errors, refused=self._refused,
            )

    def __repr__(self) -> str:
        return (f"AgentPool(size={self._size}, max_size={self.max_size}, "
                f"idle_ttl={self.idle_ttl})")

    # ------------------------------------------------------------------ signature

    def _signature(self, config: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
        """The digest of the signature inputs, and the config names outside it."""
        if self._names is not None:
            inputs: Mapping[str, Any] = {n: config.get(n) for n in self._names}
            outside = tuple(n for n in config if n not in self._names)
            if outside and self._given_each_turn:
                self._check_given(config, outside)
        else:
            assert self._sigfn is not None
            rec = _Recorder(config)
            raw = self._sigfn(rec)
            if self._takes is not None and (
                    err := _never_given(sorted(rec.read), self._takes, self.factory,
                                        "signature reads")):
                raise err
            inputs = raw if isinstance(raw, Mapping) else {"signature": raw}
            outside = tuple(n for n in config if n not in rec.read)
        # Missing and None agree, so adding an optional name does not rebuild every agent.
        inputs = {k: v for k, v in inputs.items() if v is not None}
        return _tenant_digest(_KEYS.key(_NAMESPACE, (), inputs)), outside

    def _check_given(self, config: Mapping[str, Any], outside: tuple[str, ...]) -> None:
        """A turn of a factory taking ``**kwargs`` (any name could be a parameter) whose config
        has names outside the signature, which a reuse sets on the agent. A signature name
        the config lacks is then refused: were it a typo (``"modle"``), the value it was meant
        to watch is among those names, and a change of it would be set on the old agent
        instead of rebuilding it. With every config name inside the signature nothing is set
        in place, and a missing name is only a value left out."""
        assert self._names is not None
        missing = sorted(n for n in self._names if n not in config)
        if missing:
            raise ConfigurationError(
                f"AgentPool signature names {', '.join(map(repr, missing))} but this turn's "
                f"config does not, while it carries names outside the signature "
                f"({', '.join(outside)}) that a reuse sets on the agent. The factory takes "
                "**kwargs, so the pool cannot tell a misspelt name from a value left out: "
                f"fix the name, or pass {missing[0]}=None when there is no value")

    # ------------------------------------------------------------------ turns

    def _check_entry(self, key: Hashable) -> None:
        if self._closed:
            raise PoolError(f"AgentPool is closed; cannot serve session {key!r}", session=key)
        if any(h._pool is self and h._slot is not None and h._key == key
               for h in _HELD.get()):
            raise PoolError(
                f"session {key!r} is already leased in this context; a nested lease (or get) "
                "of the same session would wait for itself", session=key)

    def _try_acquire(self, key: Hashable, loop: asyncio.AbstractEventLoop | None
                     ) -> tuple[_Slot, _Waiter | None, list[Any]]:
        """Under the lock: take the session's turn, or queue a waiter (or refuse)."""
        with self._lock:
            self._check_entry(key)
            released = self._enforce()
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot(key)
            if not slot.busy:
                slot.busy = True
                self._idle.pop(key, None)
                return slot, None, released
            if self.concurrent == "refuse":
                self._refused += 1
                err = PoolError(
                    f"session {key!r} is in a turn already and this pool refuses concurrent "
                    "turns of one session (concurrent='refuse')", session=key)
            else:
                waiter = _Waiter(loop)
                slot.waiters.append(waiter)
                return slot, waiter, released
        self._dispatch(released)
        raise err

    def _acquire_sync(self, key: Hashable) -> _Slot:
        slot, waiter, released = self._try_acquire(key, None)
        self._dispatch(released)
        if waiter is not None:
            if _on_running_loop():
                self._abandon(slot, waiter)
                raise PoolError(
                    f"session {key!r} is in a turn; waiting for it here would block the event "
                    "loop: use 'async with pool.lease(...)'", session=key)
            assert waiter.event is not None
            try:
                waiter.event.wait()
            except BaseException:  # KeyboardInterrupt: do not strand the session's queue
                self._abandon(slot, waiter)
                raise
        return slot

    async def _acquire_async(self, key: Hashable) -> _Slot:
        slot, waiter, released = self._try_acquire(key, asyncio.get_running_loop())
        self._dispatch(released)
        if waiter is not None:
            assert waiter.future is not None
            try:
                await waiter.future
            except BaseException:
                self._abandon(slot, waiter)
                raise
        return slot

    def _abandon(self, slot: _Slot, waiter: _Waiter) -> None:
        """A waiter gave up (cancelled): leave the queue, or pass on a turn already handed."""
        with self._lock:
            if not waiter.granted:
                with contextlib.suppress(ValueError):
                    slot.waiters.remove(waiter)
                return
        self._finish(slot)

    def _resolve_sync(self, slot: _Slot, digest: str, outside: tuple[str, ...],
                      config: Mapping[str, Any]) -> A:
        hit = self._hit(slot, digest, outside, config)
        if hit is not None:
            return hit[0]
        if self._async_factory:
            raise PoolError(f"AgentPool factory {self.factory!r} is async: use 'async with "
                            "pool.lease(...)'", session=slot.key)
        return self._install(slot, digest, outside, self.factory(**config))

    async def _resolve_async(self, slot: _Slot, digest: str, outside: tuple[str, ...],
                             config: Mapping[str, Any]) -> A:
        hit = self._hit(slot, digest, outside, config)
        if hit is not None:
            return hit[0]
        if self._async_factory:
            agent = await self.factory(**config)  # type: ignore[misc]
            return self._install(slot, digest, outside, agent)
        # Building an agent takes a while (hermes: ~0.3 s): never on the event loop. If this
        # turn is cancelled meanwhile, the agent still gets built, and is released by the
        # factory's thread: a done callback on the loop never ran when asyncio.run's end
        # cancelled the build's task with the turn, and the agent's clients leaked.
        agent = await off_loop_owned(functools.partial(self.factory, **config),
                                     self._release_orphan)
        return self._install(slot, digest, outside, agent)

    def _release_orphan(self, agent: A) -> None:
        self._dispatch([agent])

    def _hit(self, slot: _Slot, digest: str, outside: tuple[str, ...],
             config: Mapping[str, Any]) -> tuple[A] | None:
        agent = slot.agent
        if agent is None or slot.digest != digest:
            return None
        self._apply(slot.key, agent, outside, config)
        with self._lock:
            self._hits += 1
        return (agent,)

    def _apply(self, key: Hashable, agent: Any, outside: tuple[str, ...],
               config: Mapping[str, Any]) -> None:
        for name in outside:
            if not hasattr(agent, name):
                raise PoolError(
                    f"config name {name!r} is outside the pool's signature, so it is set on "
                    f"the session's agent when reused, but {type(agent).__name__} has no "
                    f"attribute {name!r}: add it to signature= so a change rebuilds the "
                    "agent instead", session=key)
            setattr(agent, name, config[name])

    def _install(self, slot: _Slot, digest: str, outside: tuple[str, ...], agent: A) -> A:
        missing = [n for n in outside if not hasattr(agent, n)]
        if missing:  # the check a reuse would make, before the agent is kept
            self._dispatch([agent])
            self._apply(slot.key, agent, (missing[0],), {})
        with self._lock:
            old = slot.agent
            slot.agent, slot.digest = agent, digest
            if old is None:
                self._size += 1
                self._builds += 1
                released = self._enforce()
            else:
                self._rebuilds += 1
                self._evicted["replaced"] += 1
                released = [old]
        self._dispatch(released)
        return agent

    def _finish(self, slot: _Slot) -> None:
        """End a turn: release a doomed agent, hand the turn on, re-apply the bounds."""
        released: list[Any] = []
        with self._lock:
            slot.last_used = self._clock()
            if slot.doomed and slot.agent is not None:
                released.append(self._drop(slot, slot.doomed))
            slot.doomed = ""
            while slot.waiters:
                waiter = slot.waiters.popleft()
                if self._grant(waiter):
                    break
            else:
                slot.busy = False
                if slot.agent is not None:
                    self._idle[slot.key] = slot
                    self._idle.move_to_end(slot.key)
                else:
                    self._slots.pop(slot.key, None)
            released += self._enforce()
        self._dispatch(released)

    @staticmethod
    def _grant(waiter: _Waiter) -> bool:
        """Hand the turn to ``waiter`` (under the lock). False if it can no longer take it."""
        waiter.granted = True
        if waiter.event is not None:
            waiter.event.set()
            return True
        fut, loop = waiter.future, waiter.loop
        assert fut is not None and loop is not None
        if fut.done():
            return False

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        try:
            loop.call_soon_threadsafe(wake)
        except RuntimeError:  # its loop is closed: nobody will take this turn
            return False
        return True

    # ------------------------------------------------------------------ bounds & release

    def _enforce(self) -> list[Any]:
        """Under the lock: take out idle agents past the TTL, then LRU ones over max_size."""
        out: list[Any] = []
        idle = self._idle
        if idle:
            deadline = self._clock() - self.idle_ttl
            while idle:
                slot = next(iter(idle.values()))
                if slot.last_used > deadline:
                    break
                out.append(self._take(slot, "idle"))
        while self._size > self.max_size and idle:
            out.append(self._take(next(iter(idle.values())), "lru"))
        return out

    def _take(self, slot: _Slot, reason: str) -> Any:
        """Under the lock: remove an idle slot and return its agent for release."""
        self._idle.pop(slot.key, None)
        self._slots.pop(slot.key, None)
        return self._drop(slot, reason)

    def _drop(self, slot: _Slot, reason: str) -> Any:
        agent, slot.agent, slot.digest = slot.agent, None, ""
        self._size -= 1
        self._evicted[reason] += 1
        return agent

    def _dispatch(self, agents: list[Any]) -> None:
        """Run ``on_evict`` for agents already out of the pool, outside the lock; on an event
        loop thread, in the release thread instead."""
        if not agents or self.on_evict is None:
            return
        if not _on_running_loop():
            for agent in agents:
                self._release(agent)
            return
        for agent in agents:
            with self._lock:  # the same lock _drain swaps the executor out under
                if self._releaser is None:
                    self._releaser = futures.ThreadPoolExecutor(
                        1, thread_name_prefix="dejacache-pool-release")
                fut = self._releaser.submit(self._release, agent)
                self._pending.add(fut)
            fut.add_done_callback(self._done)  # outside the lock: may run right here

    def _done(self, fut: futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(fut)

    def _release(self, agent: Any) -> None:
        assert self.on_evict is not None
        try:
            self.on_evict(agent)
        except Exception:
            # The turn that triggered this eviction was paid for: its caller must not fail
            # because an old agent's cleanup did.
            log.exception("AgentPool on_evict failed for %s", type(agent).__name__)
            with self._lock:
                self._release_errors += 1
        with self._lock:
            self._released += 1

    def _drain(self) -> None:
        with self._lock:
            pending = list(self._pending)
            releaser, self._releaser = self._releaser, None
        futures.wait(pending)
        if releaser is not None:  # a turn still open re-creates it for its release
            releaser.shutdown(wait=True)


class _Lease(Generic[A]):
    """One turn of one session (sync and async context manager)."""

    __slots__ = ("_config", "_key", "_pool", "_session", "_slot", "_tokens")

    def __init__(self, pool: AgentPool[A], key: Hashable, config: dict[str, Any]) -> None:
        self._pool = pool
        self._key = key
        self._config = config
        self._slot: _Slot | None = None
        self._session: agent_session | None = None
        self._tokens: tuple[Any, ...] = ()

    def _open(self, slot: _Slot) -> None:
        self._slot = slot
        sess = self._session = _turn_session(self._key)
        sess.__enter__()
        held = _HELD.set((*_HELD.get(), self))
        fixer = self._pool._fixer
        # A bare thread the agent starts may outlive the turn and run another tenant's work
        # later: it gets no tenant (as an ``agent_session`` never reaches a bare thread),
        # only the conversation's name, for the requests it sends.
        over = () if sess.tenant is None else ((SESSION, None), (THREAD_SESSION, conversation()))
        self._tokens = (_lease_threads.enter(over=over), held,
                        fixer.enter() if fixer else None)

    def _close(self) -> None:
        slot, self._slot = self._slot, None
        if self._tokens:
            threads_token, held, fixing = self._tokens
            self._tokens = ()
            _lease_threads.leave(threads_token)
            if fixing is not None and self._pool._fixer is not None:
                self._pool._fixer.leave(fixing)
            try:
                _HELD.reset(held)
            except ValueError:
                _HELD.set(tuple(h for h in _HELD.get() if h is not self))
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None
        if slot is not None:
            self._pool._finish(slot)

    def __enter__(self) -> A:
        pool = self._pool
        digest, outside = pool._signature(self._config)
        slot = pool._acquire_sync(self._key)
        try:
            self._open(slot)
            return pool._resolve_sync(slot, digest, outside, self._config)
        except BaseException:
            self._slot = self._slot or slot
            self._close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._close()

    async def __aenter__(self) -> A:
        pool = self._pool
        digest, outside = pool._signature(self._config)
        slot = await pool._acquire_async(self._key)
        try:
            self._open(slot)
            return await pool._resolve_async(slot, digest, outside, self._config)
        except BaseException:
            self._slot = self._slot or slot
            self._close()
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self._close()
