"""Writes a store answered without its backend taking them, so that the entry each one
was meant to replace or remove is never read again.

A ``put`` or ``delete`` that a store could not carry out still returns (Redis fails open:
the breaker skipped it, or it failed; a full disk or a read-only file drops a SQLite write
with one warning), and the backend keeps the entry it was meant to replace or remove.
Served later, that entry is a stale read: a write the caller was told went through did
not happen. So the store remembers each such key here; until its entry has been removed
(Redis: ``UNLINK``; SQLite: ``DELETE``), this process reads the key as a miss, and the
store removes them, oldest first in batches, as soon as its backend takes writes again: on
the next read of one of them, and, on Redis, from the breaker's recovery probe before the
breaker closes, so that other processes stop seeing them within a cooldown. A later write
of the key that lands settles it too. Removed rather than written late: the late value
could replace a newer one another process wrote meanwhile; a miss is always safe.

Bounded: past ``MAX_KEYS`` lost writes (a long outage under heavy traffic) this process
can no longer name every stale entry, and reads no entry again until ``clear()`` has
emptied the store.
"""

from __future__ import annotations

import threading

__all__ = ["BATCH", "MAX_KEYS", "LostWrites"]

# ~100 bytes a key: 100,000 keys hold ~10 MB, an hour of outage at ~30 missed writes a second.
MAX_KEYS = 100_000
BATCH = 1000  # removed per round trip or transaction: a few ms of the backend's time


class LostWrites:
    """The keys whose last write did not land (``keys``, in the order lost). ``keys`` is
    read without the lock (an empty dict is a read's one check); changes take it."""

    __slots__ = ("_lock", "every", "keys")

    def __init__(self) -> None:
        self.keys: dict[str, None] = {}
        #: Past MAX_KEYS: which entries are stale is no longer known, so none is read.
        self.every = False
        self._lock = threading.Lock()

    def lost(self, key: str) -> bool:
        """The write of ``key`` did not land; True when that was one too many to keep
        (from now on no entry is read: :attr:`every`)."""
        with self._lock:
            if len(self.keys) < MAX_KEYS or key in self.keys:
                self.keys[key] = None
                return False
            was, self.every = self.every, True
            return not was

    def landed(self, key: str) -> None:
        """A write of ``key`` landed after the lost one."""
        if self.keys:
            with self._lock:
                if not self.every:  # (then ``keys`` stays full: the readers' one check)
                    self.keys.pop(key, None)

    def cleared(self) -> None:
        """The backend holds no entry of this store any more (``clear()`` of everything)."""
        with self._lock:
            self.keys.clear()
            self.every = False

    def unsure(self, key: str) -> bool:
        """Whether the entry the backend holds for ``key`` may be one a lost write
        replaced."""
        return self.every or key in self.keys

    def batch(self) -> list[str] | None:
        """The oldest lost keys (up to BATCH), to remove; None when there are none, or
        when they cannot be settled (:attr:`every`). Call :meth:`settled` with them once
        their entries are gone."""
        with self._lock:
            if self.every:
                return None
            return list(self.keys)[:BATCH] or None

    def settled(self, keys: list[str]) -> None:
        """The entries of ``keys`` were removed: they read normally again."""
        with self._lock:
            if not self.every:
                for k in keys:
                    self.keys.pop(k, None)
