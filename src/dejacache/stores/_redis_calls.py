"""Every Redis call of a :class:`~dejacache.stores.redis.RedisStore` behind its circuit
breaker: what a failure is, what it costs, and what the caller gets instead.

A call ends one of three ways:

* it succeeds (``ok``: an open breaker closes);
* the server **replies with an error about the data** (``WRONGTYPE``, ``OOM``...): Redis
  is up, the call has no useful result; the caller gets its ``on_reply`` answer (a read
  then deletes the entry: another app's data under our key);
* it **fails**: a refused or timed-out connection, or a topology error (``CLUSTERDOWN``,
  ``TRYAGAIN``, ``MASTERDOWN``, ``READONLY``, ``CROSSSLOT``, ``MOVED`` reaching a plain
  client...; logged once per kind with what to do). The failure and what it cost are
  booked on the :class:`~._breaker.CircuitBreaker`, and the caller gets its ``default``
  (``fail_open=False``: ``StoreUnavailable`` instead).

While the breaker is open calls are skipped (counted in ``skipped``), and a background
thread probes Redis once each cooldown, so an open breaker costs callers ~0 even while a
silent Redis makes the probe wait out a whole timeout.

Every failure of every path, sync or async, the store's inlined hit paths and the probe
included, reaches the breaker through :meth:`RedisCalls.failed`, which works out what the
call cost from when it started. That is the one place where a measure of how late the
caller's event loop ran during the wait would be taken into account, so that a loop busy
elsewhere is not booked as Redis failing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ..errors import StoreUnavailable
from ._breaker import CircuitBreaker, Decision
from ._loop_deadline import within
from ._redis_clients import RedisClients
from ._redis_topology import topology_advice

__all__ = ["FAILURES", "RedisCalls", "doubtful"]

log = logging.getLogger("dejacache.redis")

# RedisClusterException is not a RedisError: the cluster client raises it when it cannot
# read the cluster's layout (every seed node down) or finds no node for a slot.
FAILURES: tuple[type[BaseException], ...] = (redis.RedisError, OSError,
                                             redis.exceptions.RedisClusterException)
_AS_DEFAULT: Any = object()


class RedisCalls:
    """Runs ``op(client)`` for a store behind ``breaker`` (:meth:`do`, :meth:`ado`), and
    books what its own fast paths ran (:meth:`replied`)."""

    def __init__(self, clients: RedisClients, breaker: CircuitBreaker, *, fail_open: bool,
                 probe_key: str) -> None:
        self.clients = clients
        self.breaker = breaker
        self.fail_open = fail_open
        self.skipped = 0  # calls answered without Redis because the breaker was open
        self.booked = 0  # failures booked on the breaker
        self._probe_key = probe_key  # a key a cluster probe reads (any key will do)
        self._warned: set[str] = set()
        #: ``settle(client)``: work that must land before the breaker closes again (the
        #: store's lost writes, ``_lost``); True when it made a round trip, which
        #: then is the probe.
        self.settle: Callable[[Any], bool] | None = None

    # ---------------------------------------------------------------- decisions

    def may_call(self) -> bool:
        """Whether a call may go ahead now; False: skip Redis (a probe may start)."""
        decision = self.breaker.allow()
        if decision is Decision.CALL:
            return True
        if not self.fail_open:
            raise StoreUnavailable("Redis failed recently; skipping it",
                                   backend=self.clients.url)
        if decision is Decision.PROBE:
            if not self.clients.has_sync:
                return True  # no sync client to probe with: this call is the probe
            threading.Thread(target=self.probe, name="dejacache-redis-probe",
                             daemon=True).start()
        self.skipped += 1
        return False

    def probe(self) -> None:
        """Check whether Redis is back (a success closes the breaker)."""
        t0 = time.perf_counter()
        try:
            # A cluster is probed with a read the slots route (PING goes to one node
            # only, which says nothing about CLUSTERDOWN).
            client = self.clients.sync()
            if self.settle is not None and self.settle(client):
                pass  # it reached Redis: that was the probe
            elif self.clients.kind == "cluster":
                client.exists(self._probe_key)
            else:
                client.ping()
        except FAILURES as exc:
            if not self._topology_failed(exc, t0):
                self.failed(exc, t0)
        else:
            self.ok()

    def ok(self) -> None:
        if self.breaker.success():
            log.warning("dejacache: Redis at %s is reachable again; using it", self.clients.url)

    def failed(self, exc: BaseException, t0: float) -> None:
        """Book a failed call that started at ``t0`` (``time.perf_counter``)."""
        url = self.clients.url
        if not self.fail_open:
            raise StoreUnavailable(f"Redis did not answer ({exc})", backend=url) from exc
        self.booked += 1
        if self.breaker.failure(time.perf_counter() - t0):
            log.warning("dejacache: Redis at %s is failing (%s: %s); skipping it for %.3gs, "
                        "then probing", url, type(exc).__name__, exc, self.breaker.cooldown)

    def _topology_failed(self, exc: BaseException, t0: float) -> bool:
        """Book ``exc`` as a failure when it is a topology error (warned about once per
        kind, with what to do); False when it is not one."""
        found = topology_advice(exc)
        if found is None:
            return False
        code, advice = found
        url = self.clients.url
        if code not in self._warned:
            self._warned.add(code)
            log.warning("dejacache: Redis at %s %s; counted as a failure (calls skip Redis "
                        "while it lasts)", url, advice)
        if not self.fail_open:
            raise StoreUnavailable(f"Redis at {url} {advice}", backend=url) from exc
        self.failed(exc, t0)
        return True

    def replied(self, exc: BaseException, t0: float) -> bool:
        """Book a call that raised ``exc``; True when the server replied with an error
        about the data (up, but no useful result), False when Redis failed."""
        if isinstance(exc, redis.ResponseError) and not self._topology_failed(exc, t0):
            self.ok()
            log.debug("dejacache: Redis error reply: %r", exc)
            return True
        if not isinstance(exc, redis.ResponseError) and not self._topology_failed(exc, t0):
            self.failed(exc, t0)
        return False

    # ---------------------------------------------------------------- drivers

    def do(self, op: Callable[[Any], Any], default: Any, on_reply: Any = _AS_DEFAULT, *,
           probe: bool = False, since: float | None = None) -> Any:
        """``op(client)`` with the sync client behind the breaker: ``default`` when it is
        skipped or fails, ``on_reply`` (``default`` unless given) on an error reply.
        ``probe=True`` goes ahead while the breaker is open, as its recovery probe.
        ``since``: a first attempt that started then failed in a way worth confirming
        (:func:`doubtful`) in a fast path of the store's; this is the confirmation."""
        if since is None and not probe and not self.may_call():
            return default
        t0 = time.perf_counter() if since is None else since
        confirm = since is None
        while True:
            try:
                out = op(self.clients.sync())
            except FAILURES as exc:
                if confirm and doubtful(exc):
                    confirm = False
                    continue
                if self.replied(exc, t0) and on_reply is not _AS_DEFAULT:
                    return on_reply
                return default
            self.ok()
            return out

    async def ado(self, op: Callable[[Any], Any], default: Any,
                  on_reply: Any = _AS_DEFAULT, *, probe: bool = False,
                  since: float | None = None) -> Any:
        """Async twin of :meth:`do`; ``op`` works with either client (it is the same
        redis-py call; only the async one returns an awaitable)."""
        client = self.clients.for_loop()
        if client is None:  # only a sync client: run it off the event loop
            return await asyncio.to_thread(self.do, op, default, on_reply, probe=probe,
                                           since=since)
        if since is None and not probe and not self.may_call():
            return default
        t0 = time.perf_counter() if since is None else since
        confirm = since is None
        while True:
            deadline = self.clients.deadline
            try:
                out = await (op(client) if deadline is None else within(op(client), deadline))
            except FAILURES as exc:
                if confirm and doubtful(exc):
                    confirm = False
                    continue
                if self.replied(exc, t0) and on_reply is not _AS_DEFAULT:
                    return on_reply
                return default
            self.ok()
            return out


def doubtful(exc: BaseException) -> bool:
    """Whether a failed call is tried once more before it counts as Redis failing: a
    timeout or a lost connection says little on its own (a reply that came late on a
    saturated machine, a pooled connection the server had closed), while the same failure
    twice in a row is evidence. Refusals, error replies and topology errors are answers."""
    return (isinstance(exc, (redis.TimeoutError, TimeoutError))
            or (isinstance(exc, (redis.ConnectionError, OSError))
                and not isinstance(exc, ConnectionRefusedError)
                and "refused" not in str(exc).lower()))
