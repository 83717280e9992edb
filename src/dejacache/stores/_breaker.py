"""A circuit breaker for network tiers: pure state, an injectable clock, no I/O.

States::

    closed ──(N consecutive failures, or failures costing ≥ budget seconds)──► open
    open ──(cooldown elapsed; one caller is elected to probe)──► half-open
    half-open ──probe succeeds──► closed        half-open ──probe fails──► open

Two trip conditions because outages come in two shapes: a refused connection fails in
microseconds (count them), a silent server (paused, partitioned) costs a whole read timeout
per call (one is already too many, so a time budget trips the breaker after the first).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

__all__ = ["CircuitBreaker", "Decision", "State"]


class State(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Decision(enum.Enum):
    CALL = "call"  # go ahead
    SKIP = "skip"  # do not touch the backend; answer as if it missed
    PROBE = "probe"  # this caller is elected to check whether the backend is back


class CircuitBreaker:
    """Decides whether a backend call may go ahead. Thread-safe.

    ``threshold`` consecutive failures, or consecutive failures whose summed cost reaches
    ``budget`` seconds, open the breaker. While open every call is skipped; after
    ``cooldown`` seconds exactly one caller gets :attr:`Decision.PROBE`. A probe that never
    reports back (its thread died) is forgotten after another ``cooldown``.
    """

    def __init__(
        self,
        *,
        threshold: int = 3,
        budget: float = 0.025,
        cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.budget = budget
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self._state = State.CLOSED
        self._failures = 0
        self._spent = 0.0
        self._since = 0.0  # when the breaker opened, or when the current probe started
        self.trips = 0  # how many times it opened (for stats)
        # Closed with no failure since the last success: a call may go ahead and its
        # success changes nothing, so a hot path reads this one attribute and skips both
        # ``allow()`` and ``success()`` (the Redis hit path).
        self.healthy = True

    @property
    def state(self) -> State:
        return self._state

    @property
    def failures(self) -> int:
        return self._failures

    def allow(self) -> Decision:
        # Hot path: a healthy backend takes no lock (reading one attribute is atomic).
        if self._state is State.CLOSED:
            return Decision.CALL
        with self._lock:
            return self._decide()

    def _decide(self) -> Decision:
        if self._state is State.CLOSED:  # closed by another thread since the check above
            return Decision.CALL
        if self._clock() - self._since < self.cooldown:
            return Decision.SKIP
        # Open and cooled down, or half-open with a probe that never reported: elect this
        # caller; everyone else keeps skipping until it reports.
        self._state = State.HALF_OPEN
        self.healthy = False
        self._since = self._clock()
        return Decision.PROBE

    def success(self) -> bool:
        """Record a successful call. True when this closed an open breaker."""
        if self._state is State.CLOSED and self._failures == 0:
            return False
        with self._lock:
            was_closed = self._state is State.CLOSED
            self._state = State.CLOSED
            self._failures = 0
            self._spent = 0.0
            self.healthy = True
            return not was_closed

    def failure(self, cost: float = 0.0) -> bool:
        """Record a failed call that took ``cost`` seconds. True when this opened it."""
        with self._lock:
            self.healthy = False
            now = self._clock()
            if self._state is not State.CLOSED:
                # A failed probe (or a straggler from before the trip): wait another cooldown.
                self._state = State.OPEN
                self._since = now
                return False
            self._failures += 1
            self._spent += max(cost, 0.0)
            if self._failures >= self.threshold or self._spent >= self.budget:
                self._state = State.OPEN
                self._since = now
                self.trips += 1
                return True
            return False

    def __repr__(self) -> str:
        return (f"CircuitBreaker(state={self._state.value}, failures={self._failures}, "
                f"threshold={self.threshold}, budget={self.budget}, cooldown={self.cooldown})")
