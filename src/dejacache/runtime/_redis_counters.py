"""Generation counters in Redis (one server, Sentinel or Cluster), through the store's seam.

Keys are ``store.key("g", <resource>, <name>)``: every counter of one resource shares a
hash tag, so one call's counters (tenant and global levels) are one single-slot ``MGET``
and one write's increments one atomic Lua script, on a Cluster as on one server.

An increment counts as landed only when it is **durable as far as the topology allows**:
the script also returns how many replicas the master has, and when it has any, the same
connection sends ``WAIT <replicas> <ms>`` in the same round trip. An increment the master
acknowledged but no replica did (a master about to die takes it with it: measured, 3 of 3
failovers lost one) is reported as not landed, so the caller keeps it queued and sends it
again; increments are idempotent for invalidation (a counter only has to change), so
sending one twice costs an extra miss, never a wrong answer. ``WAIT`` asks for every replica
the master has: a failover may promote any of them.

An increment steps by a random amount (1 to ``2**20``), not by one: an increment the dying
master applied but never replicated may have been read by a process that cached an entry
under its value, and the increment sent again to the new master would then make the same
value, reviving that entry (an entry lives in another slot, on a master that did not die).
Two different histories now give the same value once in a million: the entry key also holds
the epoch, and a counter seen going backwards moves its reader to a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError
from ..stores._redis_codec import counter_values

__all__ = ["RedisCounters", "redis_counters"]

# Per names (one entity's counters): a server reading many entities keeps this many for good
# (~1 KB each with ``_folded``'s; formatting them again costs ~1 µs).
_MEMO_MAX = 1024


@functools.cache
def _moving() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(a node's redirections, those and ``TRYAGAIN``): replies of a node whose slot is
    migrating or has moved, for which a command must go elsewhere. (redis-py is imported
    here, not with the module: SQLite's counters come through this module too.)"""
    import redis

    redirected = (redis.exceptions.AskError, redis.exceptions.MovedError)
    return redirected, (*redirected, redis.exceptions.TryAgainError)

#: An increment's step is drawn from 1..STEPS (a bigint counter takes 2**43 of them).
STEPS = 1 << 20

_INCR = """
local out = {}
for i, k in ipairs(KEYS) do out[i] = redis.call('INCRBY', k, ARGV[1]) end
local info = redis.call('INFO', 'replication')
out[#KEYS + 1] = tonumber(string.match(info, 'connected_slaves:(%d+)')) or 0
return out
"""


def _step() -> int:
    return secrets.randbelow(STEPS) + 1


def counter_tag(name: str) -> str:
    """The resource a counter name belongs to (its hash tag): names are
    ``gen/<resource>/<level>/...`` (``_layout`` makes them; a test pins the two together).
    A name not made there is its own group."""
    parts = name.split("/", 2)
    return parts[1] if len(parts) == 3 and parts[0] == "gen" else name


def redis_counters(store: Any) -> RedisCounters | None:
    """Counters over ``store``'s seam (``key``/``run``/``arun``), or None for a store
    without it (SQLite keeps its own ``incr_many``/``get_counters``)."""
    if all(callable(getattr(store, a, None)) for a in ("key", "run", "arun")):
        return RedisCounters(store)
    return None


def _place(out: list[int], idx: Sequence[int], got: Any) -> bool:
    """Put one slot group's ``MGET`` reply into ``out`` at ``idx``; False when there is none
    (Redis unavailable) or it holds a non-number."""
    vals = None if got is None else counter_values(got)
    if vals is None:
        return False
    for i, v in zip(idx, vals, strict=True):
        out[i] = v
    return True


def _split(got: Any) -> tuple[list[int], bytes | None] | None:
    """(counters, entry bytes) from an MGET of the counters and then the entry."""
    if got is None:
        return None
    raw = got.pop()
    vals = counter_values(got)
    return None if vals is None else (vals, raw)


class RedisCounters:
    """``get_counters``/``incr_many`` (and async twins) with hash-tagged keys and
    replicated increments."""

    def __init__(self, store: Any) -> None:
        self.store = store
        # WAIT must give up well before the socket does (a timeout would count as Redis
        # failing): 40% of the store's read timeout, 20 ms with the default 50 ms.
        self.wait_ms = max(1, int(float(getattr(store, "timeout", 0.05)) * 400))
        # Replicas the master reported last (0 until told: a WAIT on a master without
        # replicas would sit out its whole timeout).
        self.replicas = 0
        self._memo: dict[tuple[str, ...], list[tuple[list[int], list[str]]]] = {}
        #: Whether one command may read a counter and an entry (keys of different slots):
        #: not on a Cluster (CROSSSLOT).
        self.folds = getattr(store, "kind", None) != "cluster"
        self._folded: dict[tuple[str, ...], list[str]] = {}  # names -> their keys (one group)

    def _groups(self, names: Sequence[str]) -> list[tuple[list[int], list[str]]]:
        """(indexes, keys) per hash tag, in first-seen order (one group per call in
        practice: every name of a call belongs to one resource). Remembered per names:
        a tool reads the same few sets on every call."""
        memo = self._memo
        hit = memo.get(tuple(names))
        if hit is None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            hit = memo[tuple(names)] = self._group(names)
        return hit

    def _group(self, names: Sequence[str]) -> list[tuple[list[int], list[str]]]:
        groups: dict[str, tuple[list[int], list[str]]] = {}
        key = self.store.key
        for i, n in enumerate(names):
            tag = counter_tag(n)
            idx, keys = groups.setdefault(tag, ([], []))
            idx.append(i)
            keys.append(key("g", tag, n))
        return list(groups.values())

    # -- reads

    def get_counters(self, names: Sequence[str]) -> list[int] | None:
        out = [0] * len(names)
        direct = getattr(self.store, "direct", None)
        for idx, keys in self._groups(names):
            if direct is None:
                got = self.store.run(lambda c, k=keys: c.mget(k), None)
            else:
                got = self.store.run(lambda c, k=keys: direct(
                    c, k[0], lambda n: n.mget(k), lambda n: self._split_read(c, n, k)), None)
            if not _place(out, idx, got):
                return None
        return out

    def _split_read(self, client: Any, node: Any, keys: list[str]) -> list[Any]:
        """The values of ``keys`` while their slot migrates (some keys may have moved to
        the importing node, whose ``MGET`` of them all fails meanwhile): each key read
        where it is, the moved ones after ``ASKING``. Read one by one, a call's counters
        are safe to use: each only grows, and a write's increment lands before it returns,
        so each value read after a write returned includes it."""
        pipe = node.pipeline(transaction=False)
        for k in keys:
            pipe.get(k)
        got: list[Any] = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(got):
            if isinstance(reply, Exception):
                where = self.store.redirected(client, reply)
                if where is None:
                    raise reply
                node_client, asking = where
                again = node_client.pipeline(transaction=False)
                if asking:
                    again.execute_command("ASKING")
                again.get(keys[i])
                got[i] = again.execute()[-1]
        return got

    def get_counters_with(self, names: tuple[str, ...], entry: str
                          ) -> tuple[list[int], bytes | None] | None:
        """The counters and the bytes under the Redis key ``entry``, in one ``MGET`` (one
        round trip where reading them apart took two: a ``tool_cache`` hit over one server
        went from 2.75x to ~1.5x a raw GET + loads). Only where one command may read keys
        of different slots: one server, Sentinel's master (``folds``). None when Redis
        failed (as :meth:`get_counters`)."""
        keys = self._fold_keys(names)
        if keys is None:  # counters of several resources (not made by _layout)
            vals = self.get_counters(names)
            return None if vals is None else (vals, self.store.run(lambda c: c.get(entry)))
        # execute_command: ``mget`` only repacks its arguments (~1 µs of a ~75 µs hit).
        return _split(self.store.run(lambda c: c.execute_command("MGET", *keys, entry), None))

    async def aget_counters_with(self, names: tuple[str, ...], entry: str
                                 ) -> tuple[list[int], bytes | None] | None:
        keys = self._fold_keys(names)
        if keys is None:
            vals = await self.aget_counters(names)
            return None if vals is None else (
                vals, await self.store.arun(lambda c: c.get(entry)))
        return _split(await self.store.arun(
            lambda c: c.execute_command("MGET", *keys, entry), None))

    def _fold_keys(self, names: tuple[str, ...]) -> list[str] | None:
        """The keys of ``names`` when they share one hash tag (remembered), else None."""
        keys = self._folded.get(names)
        if keys is None:
            groups = self._groups(names)
            if len(groups) != 1:
                return None
            if len(self._folded) >= _MEMO_MAX:
                self._folded.clear()
            keys = self._folded[names] = groups[0][1]
        return keys

    async def aget_counters(self, names: Sequence[str]) -> list[int] | None:
        out = [0] * len(names)
        for idx, keys in self._groups(names):
            got = await self.store.arun(lambda c, k=keys: c.mget(k), None)
            if not _place(out, idx, got):
                return None
        return out

    # -- increments

    def _landed(self, reply: Any, n: int) -> list[int] | None:
        """New values from a ``[script reply, WAIT reply?]`` pipeline reply, or None when
        the increments are not known to have reached a replica the master has."""
        if not reply:
            return None
        values = counter_values(reply[0])
        if values is None or len(values) != n + 1:
            return None
        replicas = values.pop()
        waited = len(reply) > 1
        self.replicas = replicas
        if replicas and not (waited and int(reply[1]) >= replicas):
            return None
        return values

    def _op(self, keys: list[str]) -> Any:
        wait = self.replicas > 0
        cluster = self.store.kind == "cluster"

        def op(client: Any) -> Any:
            # WAIT covers the writes of its own connection only: the script and WAIT go in
            # one pipeline (one connection, one round trip), on a Cluster to the client of
            # the node that owns the slot.
            if not cluster:
                return self._send(client, keys, wait)
            node = client.get_redis_connection(client.get_node_from_key(keys[0]))
            try:
                return self._send(node, keys, wait)
            except _moving()[1]:
                # The slot is migrating (or has moved): key by key, each where it lives.
                return self._split_incr(client, node, keys, wait)
            except Exception:
                # The slot may have moved (a failover): re-read the layout so the next
                # attempt goes to the new master (the cluster client's own commands do
                # this; this one bypassed it).
                with contextlib.suppress(Exception):
                    client.nodes_manager.initialize()
                raise

        return op

    def _send(self, node: Any, keys: list[str], wait: bool, asking: bool = False) -> Any:
        """The increment script over ``keys`` (and WAIT) in one round trip to ``node``:
        ``[script reply, WAIT reply?]``."""
        pipe = node.pipeline(transaction=False)
        if asking:
            pipe.execute_command("ASKING")
        pipe.eval(_INCR, len(keys), *keys, _step())
        if wait:
            pipe.execute_command("WAIT", self.replicas, self.wait_ms)
        out = pipe.execute()
        return out[1:] if asking else out

    def _split_incr(self, client: Any, node: Any, keys: list[str], wait: bool) -> Any:
        """``op``'s reply for ``keys`` incremented one by one, each on the node holding it
        (following ``ASK``/``MOVED``): while a slot migrates, a script over keys split
        between the two nodes fails with ``TRYAGAIN`` until the migration ends, and one
        over keys the importing node lacks too. Invalidation needs each counter to grow
        before the write returns, not all of them at one instant (each reader's entry key
        holds the values it read, one by one as much as together)."""
        values: list[int] = []
        replicas, acked = [], []
        for k in keys:
            where, asking = node, False
            for _hop in range(3):
                try:
                    reply = self._send(where, [k], wait, asking)
                    break
                except _moving()[0] as exc:
                    found = self.store.redirected(client, exc)
                    if found is None:
                        raise
                    where, asking = found
            else:
                raise ConnectionError(f"counter {k!r}: redirected more than twice")
            got = counter_values(reply[0])
            if got is None or len(got) != 2:
                return None
            values.append(got[0])
            replicas.append(got[1])
            if wait:
                acked.append(int(reply[1]))
        return [[*values, min(replicas)], *([min(acked)] if wait else [])]

    def incr_many(self, names: Sequence[str], *, probe: bool = False) -> list[int] | None:
        """Increment every counter; the new values, or None when Redis failed or the
        increments are not replicated yet (the caller sends them again). ``probe``: send
        them even while the store's breaker is open, as its recovery probe."""
        if self.store.read_only:
            return None
        run = self.store.run
        out = [0] * len(names)
        for idx, keys in self._groups(names):
            waited = self.replicas > 0
            vals = self._landed(run(self._op(keys), None, probe=probe), len(keys))
            if vals is None and not waited and self.replicas:
                # First news of a replica: send them again, waiting for it this time.
                vals = self._landed(run(self._op(keys), None, probe=probe), len(keys))
            if vals is None:
                return None
            for i, v in zip(idx, vals, strict=True):
                out[i] = v
        return out

    async def aincr_many(self, names: Sequence[str], *, probe: bool = False
                         ) -> list[int] | None:
        if self.store.read_only:
            return None
        try:
            # Writes are rare: the sync client in a thread gives every topology the same
            # replicated increment (redis.asyncio's cluster pipeline cannot route WAIT).
            return await asyncio.to_thread(self.incr_many, names, probe=probe)
        except ConfigurationError:
            pass  # only an async client
        out = [0] * len(names)
        for idx, keys in self._groups(names):
            waited = self.replicas > 0
            vals = self._landed(await self.store.arun(self._aop(keys), None, probe=probe),
                                len(keys))
            if vals is None and not waited and self.replicas:
                vals = self._landed(await self.store.arun(self._aop(keys), None, probe=probe),
                                    len(keys))
            if vals is None:
                return None
            for i, v in zip(idx, vals, strict=True):
                out[i] = v
        return out

    def _aop(self, keys: list[str]) -> Any:
        wait = self.replicas > 0 and self.store.kind != "cluster"

        async def op(client: Any) -> Any:
            if self.store.kind == "cluster":
                # Documented gap: an async-only Cluster store's increments are not WAITed.
                return [await client.eval(_INCR, len(keys), *keys, _step()), 1 << 30]
            pipe = client.pipeline(transaction=False)
            pipe.eval(_INCR, len(keys), *keys, _step())
            if wait:
                pipe.execute_command("WAIT", self.replicas, self.wait_ms)
            return await pipe.execute()

        return op
