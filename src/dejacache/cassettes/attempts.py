"""A connection or lookup as the network checks see it, and what a refusal says about it.

:class:`Attempt` (the host, the port, the name it was looked up under), whether it stays on
this machine (:func:`is_loopback`) and which code made it (:func:`stack_modules`,
:func:`code_path`). Apart from ``netguard.py``, the patch layer the first block of a test
process installs as a tripwire: that needs none of this until a check is shown a connection
or lookup, so a replay that opens none does not define the named tuple (~0.15 ms), read
6 KB of bytecode or import ``ipaddress``.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

__all__ = ["Attempt", "code_path", "is_loopback", "stack_modules"]

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost",
                          "ip6-loopback", ""})


def is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host is None:
        return True
    h = str(host).strip("[]").lower()
    if h in _LOCAL_NAMES or h.endswith(".localhost"):
        return True
    import ipaddress  # (a refusal's question: not loaded by a block that opens no socket)

    try:
        return ipaddress.ip_address(h.split("%")[0]).is_loopback
    except ValueError:
        return False


class Attempt(NamedTuple):
    """One connection (``kind="connect"``, ``host`` an address) or lookup (``"resolve"``).

    A named tuple, not a frozen dataclass: ~0.15 against ~0.6 ms to define, paid by the
    first connection or lookup a check is shown."""

    kind: str
    host: str
    port: Any
    #: The name ``host`` was looked up under, when this process looked it up; else ``host``.
    name: str

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.host.lower(), self.name.lower()})

    @property
    def where(self) -> str:
        shown = self.name if self.name == self.host else f"{self.name} ({self.host})"
        return f"{shown}:{self.port}" if self.port not in (None, "") else shown


# Frames that only carry a connection along; the code path starts where they end.
_PLUMBING = ("socket", "ssl", "selectors", "asyncio", "concurrent", "threading", "contextvars",
             "functools", "dejacache.cassettes.netguard", "dejacache.cassettes.attempts",
             "dejacache.http.socketguard")


def _plumbing(mod: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in _PLUMBING)


def stack_modules(depth: int = 2) -> list[tuple[str, str, int]]:
    """(module, function, line) of the calling frames, innermost first, plumbing left out."""
    out = []
    f: Any = sys._getframe(depth)
    while f is not None:
        mod = f.f_globals.get("__name__", "?")
        if not _plumbing(mod):
            out.append((mod, f.f_code.co_name, f.f_lineno))
        f = f.f_back
    return out


def code_path(frames: list[tuple[str, str, int]], limit: int = 6) -> str:
    """``http.client.connect:1 <- urllib.request.do_open:2 <- ...``: one entry per module."""
    parts: list[str] = []
    last = None
    for mod, fn, line in frames:
        if mod == last:
            continue
        last = mod
        if len(parts) == limit:
            parts.append("...")
            break
        parts.append(f"{mod}.{fn}:{line}")
    return " <- ".join(parts) or "?"
