"""``NetworkGuard``'s host rules: loopback, names allowed as written, patterns, lookups.

Real sockets on loopback; the one remote address (10.255.255.1, unrouted) is only ever
shown to a guard that refuses it at ``connect()``, before anything is sent.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from dejacache.cassettes.netguard import NetworkGuard
from dejacache.errors import NetworkBlocked, NetworkDisabled


@pytest.fixture
def port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        yield srv.getsockname()[1]


def _reach(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=2):
        return True


def _explain(where: str) -> str:
    return f"(about {where})"


def test_a_sealing_guard_refuses_loopback_unless_a_pattern_matches(port: int) -> None:
    sealed = NetworkGuard(_explain, loopback=False, lookups=False, refusal=NetworkDisabled,
                          lead="Network is disabled: ")
    with sealed, pytest.raises(RuntimeError, match=r"^Network is disabled: .*127\.0\.0\.1"):
        _reach("127.0.0.1", port)
    with NetworkGuard(_explain, patterns=[r"127\.0\.0\.\d"], loopback=False, lookups=False):
        assert _reach("127.0.0.1", port)
        with pytest.raises(NetworkBlocked, match=r"10\.255\.255\.1:9"):
            _reach("10.255.255.1", 9)


def test_patterns_match_from_the_start_against_the_address_and_the_name_looked_up(
        port: int) -> None:
    with NetworkGuard(_explain, patterns=["local"], loopback=False, lookups=False):
        assert _reach("localhost", port)  # 127.0.0.1, looked up as "localhost"
    with NetworkGuard(_explain, patterns=["host"], loopback=False, lookups=False), \
            pytest.raises(NetworkBlocked):
        _reach("localhost", port)


def test_lookups_are_checked_only_when_asked() -> None:
    with NetworkGuard(_explain, lookups=False):
        assert socket.getaddrinfo("10.255.255.1", 9)  # an address: no query is sent
    with NetworkGuard(_explain), pytest.raises(NetworkBlocked):
        socket.getaddrinfo("10.255.255.1", 9)
