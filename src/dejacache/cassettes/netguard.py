"""Socket-level guards: connections refused with ``NetworkBlocked`` instead of going live.

One patch layer over the public ``socket.socket.connect``/``connect_ex`` and
``socket.getaddrinfo``, installed while at least one check is registered (and put back when
the last one goes). Every connection or lookup on an AF_INET/AF_INET6 socket is shown to the
registered checks as an :class:`~.attempts.Attempt` (``attempts.py``, loaded with the
first one); a check refuses it by raising ``NetworkBlocked``. Two checks use it:

- :class:`NetworkGuard`, the pytest plugin's guards: the CI guard (for one replaying test,
  only loopback and hosts allowed by name are reachable) and pytest-recording's
  ``--block-network`` (``_pytest_network.py``: connections only, loopback too, hosts
  allowed by regular expression).
- the replay backstop (``http/socketguard.py``): inside a replay block, a connection that
  did not come through HTTP interception is refused, naming the host and the code path.

Lookups are also remembered (address -> host name, bounded), so a refused connection to an
address names the host the caller asked for.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import NetworkBlocked

if TYPE_CHECKING:
    from .attempts import Attempt

__all__ = ["NetworkGuard", "add_check", "allowed_hosts", "remove_check", "run_checks"]

_INET = (socket.AF_INET, socket.AF_INET6)
_STATE = threading.RLock()
_CHECKS: list[Callable[[Attempt], None]] = []
# (the originals, our replacements) while installed.
_SAVED: tuple[tuple[Any, Any, Any], tuple[Any, Any, Any]] | None = None
_GUARDS: list[NetworkGuard] = []
# address -> the host name it was looked up under (the last 512 lookups while installed).
_NAMES: dict[str, str] = {}
_NAMES_MAX = 512


def _attempt(kind: str, host: Any, port: Any) -> Attempt:
    from .attempts import Attempt  # (with the first connection or lookup a check is shown)

    h = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
    return Attempt(kind, h, port, _NAMES.get(h, h))


def run_checks(attempt: Attempt) -> None:
    """Show ``attempt`` to every check in force (one armed while it was being made)."""
    for check in list(_CHECKS):
        check(attempt)



def _refuse_or_pass(sock: socket.socket, address: Any) -> None:
    try:
        run_checks(_attempt("connect", address[0], address[1]))
    except NetworkBlocked:
        # The socket can never be used now, and callers close theirs on OSError only
        # (socket.create_connection): closed here, it is not left to the garbage collector.
        sock.close()
        raise


def _remember(host: Any, infos: Any) -> None:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not isinstance(host, str) or not host:
        return
    try:
        for info in infos:
            addr = info[4][0]
            if isinstance(addr, str) and addr != host:
                if len(_NAMES) >= _NAMES_MAX:
                    _NAMES.pop(next(iter(_NAMES)), None)
                _NAMES[addr] = host
    except (TypeError, IndexError, StopIteration, RuntimeError):
        pass  # an odd result from a patched resolver: naming is best effort


def _install() -> None:
    global _SAVED
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(sock: socket.socket, address: Any) -> None:
        if _CHECKS and sock.family in _INET:
            _refuse_or_pass(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        if _CHECKS and sock.family in _INET:
            _refuse_or_pass(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if _CHECKS:
            run_checks(_attempt("resolve", host, port))
        infos = real_getaddrinfo(host, port, *args, **kwargs)
        _remember(host, infos)
        return infos

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo
    _SAVED = ((real_connect, real_connect_ex, real_getaddrinfo),
              (connect, connect_ex, getaddrinfo))


def _uninstall() -> None:
    global _SAVED
    if _SAVED is None:
        return
    (real_connect, real_connect_ex, real_getaddrinfo), ours = _SAVED
    # Put back only what is still ours: a patch someone made on top of ours stays in place.
    if socket.socket.connect is ours[0]:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
    if socket.socket.connect_ex is ours[1]:
        socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]
    if socket.getaddrinfo is ours[2]:
        socket.getaddrinfo = real_getaddrinfo
    _SAVED = None
    _NAMES.clear()


def add_check(check: Callable[[Attempt], None], *, first: bool = False) -> None:
    """Show every connection and lookup to ``check`` until :func:`remove_check`; ``first``
    puts it ahead of the others (the CI guard's message names the cassette and the command
    that re-records it, so it speaks first)."""
    with _STATE:
        if _SAVED is None:
            _install()
        if first:
            _CHECKS.insert(0, check)
        else:
            _CHECKS.append(check)


def remove_check(check: Callable[[Attempt], None]) -> None:
    with _STATE:
        for i in range(len(_CHECKS) - 1, -1, -1):
            if _CHECKS[i] is check or _CHECKS[i] == check:
                del _CHECKS[i]
                break
        if not _CHECKS:
            _uninstall()


def allowed_hosts() -> frozenset[str]:
    """Hosts the guards in force allow by name (``allow_hosts``): the backstop allows them too."""
    with _STATE:
        return frozenset(h for g in _GUARDS for h in g.allow)


class NetworkGuard:
    """Context manager; ``explain`` returns the message tail (cassette, how to re-record).

    ``allow`` are host names or addresses allowed as written; ``patterns`` regular
    expressions matched (``re.match``) against the address and the name it was looked up
    under. ``loopback=False`` makes loopback reachable only when allowed, and ``lookups=False``
    lets every lookup through (pytest-recording's ``--block-network`` checks connections only:
    a name may be allowed by the address it resolves to). ``refusal`` is the error raised.
    """

    def __init__(self, explain: Callable[[str], str], allow: Iterable[str] = (), *,
                 patterns: Iterable[str] = (), loopback: bool = True, lookups: bool = True,
                 refusal: type[NetworkBlocked] = NetworkBlocked, lead: str = "") -> None:
        self.explain = explain
        self.allow = {a.lower() for a in allow}
        self.patterns = [re.compile(p) for p in patterns]
        self.loopback = loopback
        self.lookups = lookups
        self.refusal = refusal
        self.lead = lead
        self._entered = False

    def allows(self, attempt: Attempt) -> bool:
        if (self.loopback and attempt.loopback) or not attempt.names.isdisjoint(self.allow):
            return True
        return any(p.match(n) for p in self.patterns for n in (attempt.host, attempt.name))

    def _check(self, attempt: Attempt) -> None:
        if (attempt.kind == "resolve" and not self.lookups) or self.allows(attempt):
            return
        where = f"{attempt.name}:{attempt.port}" if attempt.port not in (None, "") \
            else attempt.name
        from .attempts import code_path, stack_modules  # (a refusal's message only)

        path = code_path(stack_modules(3))
        reach = "only loopback is reachable while tests replay" if self.loopback else \
            "no host is reachable but those allowed"
        raise self.refusal(
            f"{self.lead}dejacache blocked a connection to {where}: {reach} "
            f"(code path: {path}). {self.explain(where)}",
            source=where, host=attempt.name, code_path=path,
        )

    def __enter__(self) -> NetworkGuard:
        with _STATE:
            if not self._entered:
                self._entered = True
                _GUARDS.append(self)
                add_check(self._check, first=True)
        return self

    def __exit__(self, *exc: object) -> None:
        with _STATE:
            if self._entered:
                self._entered = False
                _GUARDS.remove(self)
                remove_check(self._check)
