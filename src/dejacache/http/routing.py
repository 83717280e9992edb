"""Which requests automatic interception takes, and with which options.

One rule for every way a request reaches dejacache without the explicit transport: the
patched httpx/httpx2 transports (``intercept.py``), lm15's transports (``lm15.py``), and the
connection backstop of replay blocks (``socketguard.py``). Kept apart from ``intercept.py``,
which imports the other two to patch them, so neither has to import it back.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

from ..config import Effective
from ..scope import current
from .observers import watching
from .transport import Options, bypassing

__all__ = ["INTERCEPT_OPTIONS", "decide", "decide_host", "env_ignored_hosts"]

#: The options of the innermost open ``intercept()`` block here (None outside one).
INTERCEPT_OPTIONS: contextvars.ContextVar[Options | None] = contextvars.ContextVar(
    "dejacache_intercept", default=None
)
_ENV_IGNORE = "DEJACACHE_IGNORE_HOSTS"
_env_cache: tuple[str, frozenset[str]] = ("", frozenset())
_DEFAULT = Options()


def env_ignored_hosts() -> frozenset[str]:
    """The hosts ``DEJACACHE_IGNORE_HOSTS`` lets through (comma-separated), parsed once per
    value of the variable."""
    global _env_cache
    raw = os.environ.get(_ENV_IGNORE, "")
    if raw != _env_cache[0]:
        _env_cache = (raw, frozenset(h.strip() for h in raw.split(",") if h.strip()))
    return _env_cache[1]


def decide(request: Any) -> tuple[Effective, Options] | None:
    """The settings to intercept ``request`` (an httpx or httpx2 request) with, or None to
    let it through untouched."""
    return decide_host(request.url.host)


def decide_host(host: str) -> tuple[Effective, Options] | None:
    """:func:`decide` for a connection to ``host`` (a WebSocket's, ``ws/``)."""
    if bypassing():
        return None
    opts = INTERCEPT_OPTIONS.get()
    eff = current()
    if opts is None:
        if not eff.test_facing:
            if not watching():
                return None
            # A PrefixMonitor is open here: observed on its way out, never cached ("off").
            eff = eff.derive({"mode": "off"})
        opts = _DEFAULT
    if host in opts.ignore_hosts or host in env_ignored_hosts():
        return None
    return eff, opts
