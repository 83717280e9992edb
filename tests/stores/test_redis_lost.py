"""``LostWrites``: the keys whose write did not reach Redis, read as misses until settled
(no sockets: a recording client stands in for redis-py's pipeline)."""

from __future__ import annotations

from typing import Any

import pytest

from dejacache.stores import _redis_lost
from dejacache.stores._redis_lost import LostWrites


class Pipeline:
    def __init__(self, sent: list[tuple[str, ...]], fail: bool) -> None:
        self.sent, self.fail, self.queued = sent, fail, []

    def execute_command(self, *args: str) -> None:
        self.queued.append(args)

    def execute(self) -> list[int]:
        if self.fail:
            raise ConnectionError("refused")
        self.sent.extend(self.queued)
        return [1] * len(self.queued)


class Client:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, ...]] = []
        self.fail = fail

    def pipeline(self, transaction: bool = True) -> Pipeline:
        assert transaction is False
        return Pipeline(self.sent, self.fail)


def lost(*keys: str) -> LostWrites:
    out = LostWrites("p:e:{", "p:r:{")
    for k in keys:
        out.lost(k)
    return out


def test_a_lost_key_is_unsure_until_settled_or_written_again() -> None:
    w = lost("a", "b")
    assert w.unsure("a") and w.unsure("b") and not w.unsure("c")
    w.landed("b")  # a later write of b reached Redis
    assert not w.unsure("b")
    client = Client()
    assert w.settle(client) is True
    assert client.sent == [("UNLINK", "p:e:{a}", "p:r:{a}")]  # the entry and its request
    assert not w.unsure("a") and w.keys == {}
    assert w.settle(client) is False  # nothing left: the probe PINGs instead


def test_a_failed_settle_keeps_every_key() -> None:
    w = lost("a")
    with pytest.raises(ConnectionError):
        w.settle(Client(fail=True))
    assert w.unsure("a")


def test_settles_in_batches_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_redis_lost, "BATCH", 2)
    w = lost("a", "b", "c")
    todo = w.batch()
    assert todo is not None and todo[0] == ["a", "b"]
    client = Client()
    w.settle(client)
    assert [c[1] for c in client.sent] == ["p:e:{a}", "p:e:{b}", "p:e:{c}"]


def test_past_the_bound_no_entry_is_trusted_until_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_redis_lost, "MAX_KEYS", 2)
    w = lost("a", "b")
    assert w.lost("a") is False  # known already: still within the bound
    assert w.lost("c") is True  # one too many: said once
    assert w.lost("d") is False
    assert w.every and w.unsure("zzz")  # which entries are stale is no longer known
    client: Any = Client()
    assert w.settle(client) is False and client.sent == []  # and cannot be settled
    w.landed("a")
    w.landed("b")
    assert w.unsure("a") and w.keys  # nor forgotten key by key
    w.cleared()
    assert not w.unsure("a") and not w.every and w.keys == {}
