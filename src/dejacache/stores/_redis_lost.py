"""Writes a :class:`~dejacache.stores.redis.RedisStore` answered without Redis confirming
them, so that the value each one replaced is never read again.

A ``put`` or ``delete`` skipped by an open breaker, or that failed, returns all the same
(fail open), and Redis keeps the entry it was meant to replace or remove. Served after
Redis answers again, that entry is a stale read: a write the caller was told went through
did not happen. So the store remembers each such key here; until an ``UNLINK`` of it has
landed, this process reads it as a miss, and the breaker's recovery probe sends those
``UNLINK`` calls (in batches) before it closes the breaker, so other processes stop
seeing the old entries within a cooldown of Redis answering again. A later write of the
key that lands settles it too. ``UNLINK`` rather than the lost value: written late, the
value could replace a newer one another process wrote meanwhile; a miss is always safe.

Bounded: past ``MAX_KEYS`` lost writes (a long outage under heavy traffic) this process
can no longer name every stale entry, and reads no entry of Redis again until ``clear()``
has emptied it (logged once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BATCH", "MAX_KEYS", "LostWrites"]

# ~100 bytes a key: 100,000 keys hold ~10 MB, an hour of outage at ~30 missed writes a second.
MAX_KEYS = 100_000
BATCH = 1000  # UNLINKs per pipeline: one round trip, a few ms of server time


class LostWrites:
    """The keys whose last write did not reach Redis (``keys``, in the order lost), and
    the calls that settle them. ``keys`` is read without the lock (an empty dict is the
    hit path's one check); changes take it."""

    __slots__ = ("_entry", "_lock", "_request", "every", "keys")

    def __init__(self, entry: str, request: str) -> None:
        self._entry, self._request = entry, request
        self.keys: dict[str, None] = {}
        #: Past MAX_KEYS: which entries are stale is no longer known, so none is read.
        self.every = False
        self._lock = threading.Lock()

    def lost(self, key: str) -> bool:
        """The write of ``key`` did not reach Redis; True when that was one too many to
        keep (from now on no entry is read: :attr:`every`)."""
        with self._lock:
            if len(self.keys) < MAX_KEYS or key in self.keys:
                self.keys[key] = None
                return False
            was, self.every = self.every, True
            return not was

    def landed(self, key: str) -> None:
        """A write of ``key`` reached Redis after the lost one."""
        if self.keys:
            with self._lock:
                if not self.every:  # (then ``keys`` stays full: the readers' one check)
                    self.keys.pop(key, None)

    def cleared(self) -> None:
        """Redis holds no entry of this store any more (``clear()`` of everything)."""
        with self._lock:
            self.keys.clear()
            self.every = False

    def unsure(self, key: str) -> bool:
        """Whether the entry Redis holds for ``key`` may be one a lost write replaced."""
        return self.every or key in self.keys

    def batch(self) -> tuple[list[str], Callable[[Any], Any]] | None:
        """The oldest lost keys (up to BATCH) and ``op(client)`` unlinking their entries;
        None when there are none. Call :meth:`settled` with the keys once ``op`` ran."""
        with self._lock:
            if self.every:  # nothing to settle: not every lost key is known
                return None
            keys = list(self.keys)[:BATCH]
        if not keys:
            return None
        pairs = [(self._entry + k + "}", self._request + k + "}") for k in keys]

        def op(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for pair in pairs:  # an entry and its request share a slot (one hash tag)
                # By name, as RedisStore's writes do: an asyncio cluster pipeline's unlink()
                # is a coroutine of its own.
                pipe.execute_command("UNLINK", *pair)
            return pipe.execute()

        return keys, op

    def settled(self, keys: list[str]) -> None:
        """The entries of ``keys`` were unlinked: they read normally again."""
        with self._lock:
            if not self.every:
                for k in keys:
                    self.keys.pop(k, None)

    def settle(self, client: Any) -> bool:
        """Unlink every lost key's entry with ``client`` (a failure raises); False when
        there was nothing to do. The breaker's recovery probe: it closes once they landed."""
        did = False
        while (todo := self.batch()) is not None:
            keys, op = todo
            op(client)
            self.settled(keys)
            did = True
        return did
