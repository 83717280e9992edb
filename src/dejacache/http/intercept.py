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
Outside blocks calls pass through untouched, even while another thread holds a block open;
inside an open ``PrefixMonitor`` they pass through as well, in mode ``off``, so its observers
see them (``observe``).

Blocks opened by ``scope()``/``cassette()`` patch the libraries the process has already
imported, and an import hook patches one imported while a block is open (an SDK imported
lazily inside the block): httpx and httpx2, and every module of ``EXTRA_TRANSPORTS`` (dspy
imports litellm inside the block, and litellm's aiohttp transport with it; that
transport went unpatched, so async calls recorded nothing and replays went live), and
lm15's transports, dspy's default engine (``lm15.py``), urllib3's connection pools, under
``requests`` and botocore (``via_urllib3.py``), and ``aiohttp.ClientSession``
(``via_aiohttp.py``), with the WebSocket clients of ``websockets`` and aiohttp
(``ws/via_websockets.py``, ``ws/via_aiohttp.py``). Behind
them all, replay blocks refuse connections that escape interception anyway
(``socketguard.py``). Blocks never import httpx themselves (that would cost @cache-only
users 130 ms and break ``httpx2.alias_httpx()`` called later), and stay silent when there is
nothing to patch. ``intercept()`` asks for interception explicitly: it imports whichever of
httpx and httpx2 are installed and raises ``ConfigurationError`` when no client it intercepts
(those two, urllib3, aiohttp) is.
"""

from __future__ import annotations

import contextvars
import functools
import re
import sys
import threading
from collections.abc import Iterable
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

from .._blockwatch import EXTRA_TRANSPORTS, on_load
from .._core.volatile import BlockPaths
from ..config import volatile_items
from ..errors import ConfigurationError
from ..scope import Block, reset_own
from ..ws import via_websockets as _via_websockets
from . import lm15 as _lm15
from . import socketguard
from . import via_aiohttp as _via_aiohttp
from . import via_urllib3 as _via_urllib3
from ._libs import LIBRARIES, Lib, available, imported, lib_of, register
from ._patching import install, is_ours
from .routing import INTERCEPT_OPTIONS, decide
from .transport import Options, handing_on, handle_async, handle_sync

__all__ = ["active", "intercept", "observe", "patched_libraries"]

P = ParamSpec("P")
T = TypeVar("T")

_LOCK = threading.RLock()
_COUNT = 0
# library name or extra transport spec -> [(class, attribute, original function)]
_PATCHED: dict[str, list[tuple[type, str, Any]]] = {}


# Modules with ``MODULES`` (the modules that define a stack's seam) and ``patch(module)``.
# WebSocket clients too (``ws/``): their sessions are recorded on the same block.
_SEAMS = (_lm15, _via_urllib3, _via_aiohttp, _via_websockets)


def _wrap(
    cls: type, attr: str, is_async: bool, lib: Lib | None
) -> tuple[type, str, Any] | None:
    orig = cls.__dict__[attr]
    if is_ours(orig):
        return None  # already ours (``import httpx`` aliased to httpx2 names the same class)
    return install(cls, attr, orig, _wrapper(orig, is_async, lib))


# One wrapper per original, kept: a block opened per request patches again each time.
@functools.cache
def _wrapper(orig: Any, is_async: bool, lib: Lib | None) -> Any:
    wrapper: Any
    if is_async:
        async def wrapper(self: Any, request: Any) -> Any:
            decided = decide(request)
            if decided is None:
                with handing_on():  # let through on purpose: the replay backstop allows it
                    return await orig(self, request)
            eff, opts = decided
            return await handle_async(lib or lib_of(request), eff, request,
                                      lambda r: orig(self, r), opts)
    else:
        def wrapper(self: Any, request: Any) -> Any:
            decided = decide(request)
            if decided is None:
                with handing_on():
                    return orig(self, request)
            eff, opts = decided
            return handle_sync(lib or lib_of(request), eff, request,
                               lambda r: orig(self, r), opts)
    return wrapper


def _patch(lib: Lib) -> None:
    if lib.name in _PATCHED:
        return
    done = [
        _wrap(lib.module.HTTPTransport, "handle_request", False, lib),
        _wrap(lib.module.AsyncHTTPTransport, "handle_async_request", True, lib),
    ]
    _PATCHED[lib.name] = [d for d in done if d is not None]


def _patch_extras(loaded: str | None = None) -> None:
    for spec in EXTRA_TRANSPORTS:
        if spec in _PATCHED:
            continue
        module, _, qual = spec.partition(":")
        mod = sys.modules.get(module)
        cls = getattr(mod, qual, None) if mod is not None else None
        if isinstance(cls, type) and "handle_async_request" in cls.__dict__:
            done = _wrap(cls, "handle_async_request", True, None)
            _PATCHED[spec] = [done] if done is not None else []
    # Stacks that speak their own request type, each restated as an httpx request by its
    # module (lm15.py: dspy's native engine; via_urllib3.py: urllib3, requests, botocore;
    # via_aiohttp.py: aiohttp.ClientSession). A module another thread is still importing is
    # left to the import hook (``loaded``).
    for seam in _SEAMS:
        for name in seam.MODULES:
            mod = sys.modules.get(name)
            if name in _PATCHED or mod is None or (
                    name != loaded and getattr(mod.__spec__, "_initializing", False)):
                continue
            _PATCHED[name] = seam.patch(mod)


def _unpatch_all() -> None:
    for entries in _PATCHED.values():
        for cls, attr, orig in entries:
            setattr(cls, attr, orig)
    _PATCHED.clear()


def acquire(libs: Iterable[Lib], *, guard: bool = True) -> None:
    """One more open block: make sure ``libs`` are patched (refcounted, thread-safe);
    ``guard``: and watch connections (the replay backstop)."""
    global _COUNT
    with _LOCK:
        _COUNT += 1
        for lib in libs:
            _patch(lib)
        _patch_extras()
    if guard:
        socketguard.acquire()


def release(*, guard: bool = True) -> None:
    global _COUNT
    if guard:
        socketguard.release()
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


def on_block(delta: int) -> None:
    """One test-facing block opened (+1) or closed (-1), passed on by ``_blockwatch``
    once interception is armed."""
    if delta > 0:
        acquire(imported())
    else:
        release()


def observe(delta: int) -> None:
    """A ``PrefixMonitor`` opened (+1) or closed (-1): the transports stay patched while one
    is open, so the requests made inside it reach its observers. Nothing is replayed or
    stored for it, so it needs no replay backstop."""
    if delta > 0:
        acquire(imported(), guard=False)
    else:
        release(guard=False)


def loaded(module: ModuleType) -> None:
    """Patch the library or transport module that was just loaded (if a block holds
    interception): called by ``_blockwatch``'s import hook."""
    name = module.__name__
    with _LOCK:
        if _COUNT > 0:
            if name in LIBRARIES:
                _patch(register(name, module))
            else:
                _patch_extras(name)


on_load("http", lambda: _COUNT > 0, loaded)  # patch a module imported while interception is held


def _installed(*names: str) -> bool:
    import importlib.util  # intercept() only

    for name in names:
        try:
            if name in sys.modules or importlib.util.find_spec(name) is not None:
                return True
        except ValueError:
            continue
    return False


class intercept(Block["intercept"]):
    """Intercept httpx/httpx2 traffic for a block (context manager, async or not, or decorator).

    ``ignore_hosts`` lets calls to those hosts through untouched; ``realtime`` replays streams
    at their recorded pace. Calls use the settings in force (an enclosing ``scope``/
    ``cassette``, else ``configure()``), so inside ``intercept()`` alone the default store in
    ``auto`` mode caches SDK calls.
    """

    def __init__(self, *, ignore_hosts: Iterable[str] = (), realtime: bool = False,
                 volatile: Iterable[str | re.Pattern[str]] = ()) -> None:
        self.options = Options(realtime=realtime, ignore_hosts=frozenset(ignore_hosts),
                               volatile=volatile_items(volatile))
        self._paths = BlockPaths(self.options.volatile, "intercept(volatile=...)")
        self._tokens: list[contextvars.Token[Options | None]] = []

    def __enter__(self) -> intercept:
        libs = available()
        if not libs and not _installed("urllib3", "aiohttp"):
            raise ConfigurationError(
                "dejacache.intercept() found no HTTP client to intercept (httpx, httpx2, "
                "requests/urllib3, aiohttp): install the one your code calls")
        acquire(libs)
        self._tokens.append(INTERCEPT_OPTIONS.set(self.options))
        self._paths.enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        reset_own(self._tokens)  # (one object may be open in several tasks/threads at once)
        release()
        self._paths.exit()

