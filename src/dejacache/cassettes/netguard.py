"""Refuse connections to anything but loopback while a test replays (the CI guard).

Patches the public ``socket.socket.connect``/``connect_ex`` and ``socket.getaddrinfo`` for
the duration of one test. A refused connection raises ``NetworkBlocked`` naming the host and
the cassette, instead of a timeout or a silently recorded live call.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import NetworkBlocked

__all__ = ["NetworkGuard"]

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                          "ip6-loopback", ""})
_STATE = threading.Lock()


def _is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host is None:
        return True
    h = str(host).strip("[]").lower()
    if h in _LOCAL_NAMES or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h.split("%")[0]).is_loopback
    except ValueError:
        return False


class NetworkGuard:
    """Context manager; ``explain`` returns the message tail (cassette, how to re-record)."""

    def __init__(self, explain: Callable[[str], str], allow: Iterable[str] = ()) -> None:
        self.explain = explain
        self.allow = {a.lower() for a in allow}
        self._saved: tuple[Any, Any, Any] | None = None

    def _check(self, host: Any, port: Any) -> None:
        name = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
        if _is_loopback(host) or name.lower() in self.allow:
            return
        where = f"{name}:{port}" if port not in (None, "") else name
        raise NetworkBlocked(
            f"dejacache blocked a connection to {where}: only loopback is reachable while "
            f"tests replay. {self.explain(where)}",
            source=where,
        )

    def __enter__(self) -> NetworkGuard:
        guard = self
        with _STATE:
            real_connect = socket.socket.connect
            real_connect_ex = socket.socket.connect_ex
            real_getaddrinfo = socket.getaddrinfo
            self._saved = (real_connect, real_connect_ex, real_getaddrinfo)

            def connect(sock: socket.socket, address: Any) -> None:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    guard._check(address[0], address[1])
                real_connect(sock, address)

            def connect_ex(sock: socket.socket, address: Any) -> int:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    guard._check(address[0], address[1])
                return real_connect_ex(sock, address)

            def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
                guard._check(host, port)
                return real_getaddrinfo(host, port, *args, **kwargs)

            socket.socket.connect = connect  # type: ignore[method-assign,assignment]
            socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
            socket.getaddrinfo = getaddrinfo
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            return
        with _STATE:
            real_connect, real_connect_ex, real_getaddrinfo = self._saved
            socket.socket.connect = real_connect  # type: ignore[method-assign]
            socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]
            socket.getaddrinfo = real_getaddrinfo
            self._saved = None
