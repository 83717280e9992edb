"""The circuit breaker's state machine, driven by a fake clock (no sockets, no sleeps)."""

from __future__ import annotations

import threading

import pytest

from dejacache.stores._breaker import CircuitBreaker, Decision, State


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(threshold: int = 3, budget: float = 0.025, cooldown: float = 1.0
         ) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    return CircuitBreaker(threshold=threshold, budget=budget, cooldown=cooldown,
                          clock=clock), clock


def test_closed_breaker_allows_calls() -> None:
    b, _ = make()
    assert b.state is State.CLOSED
    assert b.allow() is Decision.CALL
    assert b.success() is False


def test_opens_after_threshold_consecutive_fast_failures() -> None:
    b, _ = make(threshold=3)
    assert b.failure(0.0001) is False
    assert b.failure(0.0001) is False
    assert b.state is State.CLOSED
    assert b.failure(0.0001) is True
    assert b.state is State.OPEN
    assert b.allow() is Decision.SKIP
    assert b.trips == 1


def test_a_success_resets_the_consecutive_count() -> None:
    b, _ = make(threshold=3)
    b.failure()
    b.failure()
    b.success()
    b.failure()
    b.failure()
    assert b.state is State.CLOSED
    assert b.failures == 2


def test_one_slow_failure_spends_the_time_budget() -> None:
    # A silent server costs a whole read timeout per call: one is enough to open.
    b, _ = make(threshold=3, budget=0.025)
    assert b.failure(0.05) is True
    assert b.state is State.OPEN


def test_small_costs_add_up_to_the_budget() -> None:
    b, _ = make(threshold=100, budget=0.025)
    for _ in range(4):
        assert b.failure(0.006) is False
    assert b.failure(0.006) is True


def test_cooldown_elects_exactly_one_probe() -> None:
    b, clock = make(cooldown=1.0)
    b.failure(1.0)
    clock.now += 0.5
    assert b.allow() is Decision.SKIP
    clock.now += 0.6
    assert b.allow() is Decision.PROBE
    assert b.state is State.HALF_OPEN
    # Everyone else keeps skipping while the probe is out.
    assert b.allow() is Decision.SKIP
    assert b.allow() is Decision.SKIP


def test_probe_success_closes() -> None:
    b, clock = make()
    b.failure(1.0)
    clock.now += 2
    assert b.allow() is Decision.PROBE
    assert b.success() is True
    assert b.state is State.CLOSED
    assert b.failures == 0
    assert b.allow() is Decision.CALL


def test_probe_failure_reopens_for_another_cooldown() -> None:
    b, clock = make(cooldown=1.0)
    b.failure(1.0)
    clock.now += 1.5
    assert b.allow() is Decision.PROBE
    assert b.failure(0.05) is False  # already counted as a trip
    assert b.state is State.OPEN
    clock.now += 0.9
    assert b.allow() is Decision.SKIP
    clock.now += 0.2
    assert b.allow() is Decision.PROBE
    assert b.trips == 1


def test_a_lost_probe_is_replaced_after_a_cooldown() -> None:
    b, clock = make(cooldown=1.0)
    b.failure(1.0)
    clock.now += 1.0
    assert b.allow() is Decision.PROBE  # this prober never reports back
    clock.now += 0.5
    assert b.allow() is Decision.SKIP
    clock.now += 0.6
    assert b.allow() is Decision.PROBE


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold"):
        CircuitBreaker(threshold=0)


def test_concurrent_callers_elect_one_probe() -> None:
    b, clock = make()
    b.failure(1.0)
    clock.now += 5
    results: list[Decision] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        d = b.allow()
        with lock:
            results.append(d)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(Decision.PROBE) == 1
    assert results.count(Decision.SKIP) == 7


def test_repr_names_the_state() -> None:
    b, _ = make()
    assert "closed" in repr(b)


def test_healthy_means_closed_with_nothing_failed_since_the_last_success() -> None:
    """The Redis hit path reads ``healthy`` instead of calling allow() and success()."""
    b, clock = make(threshold=2)
    assert b.healthy is True
    b.failure(0.0001)
    assert b.state is State.CLOSED and b.healthy is False
    assert b.success() is False and b.healthy is True
    b.failure(0.0001)
    b.failure(0.0001)
    assert b.state is State.OPEN and b.healthy is False
    clock.now += 1.0
    assert b.allow() is Decision.PROBE
    assert b.state is State.HALF_OPEN and b.healthy is False
    assert b.success() is True and b.healthy is True
