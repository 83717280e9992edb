"""Automatic interception: the SDKs' own clients, recorded and replayed inside blocks.

While at least one dejacache block is open (``scope(...)``, ``cassette(...)``,
``intercept()``), the public transport classes of httpx and httpx2
(``HTTPTransport.handle_request``, ``AsyncHTTPTransport.handle_async_request``) are wrapped so
requests go through the same functions as the explicit :class:`~dejacache.http.Transport`.
The originals are put back when the last block closes. Nothing private is touched: every
client, including the ones the OpenAI and Anthropic SDKs build for themselves, ends in one of
these two methods.

Who gets intercepted: a request made where ``scope.current()`` is a test-facing block (a bare
worker thread counts: it is routed to the single open block, or refused when several are
open), or inside ``intercept()``, which also intercepts under plain ``configure()`` settings.
Outside blocks calls pass through untouched, even while another thread holds a block open.

Blocks opened by ``scope()``/``cassette()`` patch the libraries the process has already
imported (import your SDK before entering the block, as imports at the top of a module do),
and stay silent when there are none. ``intercept()`` asks for interception explicitly: it
imports whichever libraries are installed and raises ``ConfigurationError`` when neither is.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from .. import scope as _scope
from ..config import Effective
from ..errors import ConfigurationError
from ._libs import Lib, available, imported, lib_of
from .transport import Options, bypassing, handle_async, handle_sync

__all__ = ["active", "intercept", "patched_libraries"]

P = ParamSpec("P")
T = TypeVar("T")

_LOCK = threading.RLock()
_COUNT = 0
# library name or extra transport spec -> [(class, attribute, original function)]
_PATCHED: dict[str, list[tuple[type, str, Any]]] = {}
_OPTIONS: contextvars.ContextVar[Options | None] = contextvars.ContextVar(
    "dejacache_intercept", default=None
)
_ENV_IGNORE = "DEJACACHE_IGNORE_HOSTS"
_env_cache: tuple[str, frozenset[str]] = ("", frozenset())


def _env_ignored() -> frozenset[str]:
    global _env_cache
    raw = os.environ.get(_ENV_IGNORE, "")
    if raw != _env_cache[0]:
        _env_cache = (raw, frozenset(h.strip() for h in raw.split(",") if h.strip()))
    return _env_cache[1]


def _decide(request: Any) -> tuple[Effective, Options] | None:
    """The settings to intercept ``request`` with, or None to let it through untouched."""
    if bypassing():
        return None
    opts = _OPTIONS.get()
    eff = _scope.current()
    if opts is None:
        if not eff.test_facing:
            return None
        opts = _DEFAULT
    host = request.url.host
    if host in opts.ignore_hosts or host in _env_ignored():
        return None
    return eff, opts


_DEFAULT = Options()


# Network transports that SDKs ship outside httpx/httpx2 (aiohttp-backed: litellm's async
# default, the SDKs' opt-in DefaultAioHttpClient). Each implements the public transport method
# itself; patched when its module is already imported.
EXTRA_TRANSPORTS = (
    "litellm.llms.custom_httpx.aiohttp_transport:LiteLLMAiohttpTransport",
    "openai._vendor.httpx_aiohttp.transport:AiohttpTransport",
    "anthropic._vendor.httpx_aiohttp.transport:AiohttpTransport",
)


def _wrap(cls: type, attr: str, is_async: bool, lib: Lib | None) -> tuple[type, str, Any]:
    orig = cls.__dict__[attr]
    wrapper: Any
    if is_async:
        async def wrapper(self: Any, request: Any) -> Any:
            decided = _decide(request)
            if decided is None:
                return await orig(self, request)
            eff, opts = decided
            return await handle_async(lib or lib_of(request), eff, request,
                                      lambda r: orig(self, r), opts)
    else:
        def wrapper(self: Any, request: Any) -> Any:
            decided = _decide(request)
            if decided is None:
                return orig(self, request)
            eff, opts = decided
            return handle_sync(lib or lib_of(request), eff, request,
                               lambda r: orig(self, r), opts)
    functools.update_wrapper(wrapper, orig)
    setattr(cls, attr, wrapper)
    return cls, attr, orig


def _patch(lib: Lib) -> None:
    if lib.name in _PATCHED:
        return
    _PATCHED[lib.name] = [
        _wrap(lib.module.HTTPTransport, "handle_request", False, lib),
        _wrap(lib.module.AsyncHTTPTransport, "handle_async_request", True, lib),
    ]


def _patch_extras() -> None:
    for spec in EXTRA_TRANSPORTS:
        if spec in _PATCHED:
            continue
        module, _, qual = spec.partition(":")
        mod = sys.modules.get(module)
        cls = getattr(mod, qual, None) if mod is not None else None
        if isinstance(cls, type) and "handle_async_request" in cls.__dict__:
            _PATCHED[spec] = [_wrap(cls, "handle_async_request", True, None)]


def _unpatch_all() -> None:
    for entries in _PATCHED.values():
        for cls, attr, orig in entries:
            setattr(cls, attr, orig)
    _PATCHED.clear()


def acquire(libs: Iterable[Lib]) -> None:
    """One more open block: make sure ``libs`` are patched (refcounted, thread-safe)."""
    global _COUNT
    with _LOCK:
        _COUNT += 1
        for lib in libs:
            _patch(lib)
        _patch_extras()


def release() -> None:
    global _COUNT
    with _LOCK:
        _COUNT -= 1
        if _COUNT <= 0:
            _COUNT = 0
            _unpatch_all()


def active() -> int:
    """How many blocks currently hold the patches (0: nothing is patched)."""
    return _COUNT


def patched_libraries() -> list[str]:
    with _LOCK:
        return sorted(_PATCHED)


def _on_block(delta: int) -> None:
    # Called by scope.enter/leave for every test-facing block.
    if delta > 0:
        acquire(imported())
    else:
        release()


if _on_block not in _scope.BLOCK_HOOKS:
    _scope.BLOCK_HOOKS.append(_on_block)


class intercept:
    """Intercept httpx/httpx2 traffic for a block (context manager, async or not, or decorator).

    ``ignore_hosts`` lets calls to those hosts through untouched; ``realtime`` replays streams
    at their recorded pace. Calls use the settings in force (an enclosing ``scope``/
    ``cassette``, else ``configure()``), so inside ``intercept()`` alone the default store in
    ``auto`` mode caches SDK calls.
    """

    def __init__(self, *, ignore_hosts: Iterable[str] = (), realtime: bool = False) -> None:
        self.options = Options(realtime=realtime, ignore_hosts=frozenset(ignore_hosts))
        self._tokens: list[contextvars.Token[Options | None]] = []

    def __enter__(self) -> intercept:
        libs = available()
        if not libs:
            raise ConfigurationError(
                "dejacache.intercept() found neither httpx nor httpx2 to intercept: "
                "pip install 'dejacache[httpx2]' (or 'dejacache[httpx]')"
            )
        acquire(libs)
        self._tokens.append(_OPTIONS.set(self.options))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._tokens.pop()
        try:
            _OPTIONS.reset(token)
        except ValueError:  # exited from another context (generator/task hand-over)
            _OPTIONS.set(None)
        release()

    async def __aenter__(self) -> intercept:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        return _scope.decorate_with_block(self, fn)
