"""The ``websockets`` package's clients, recorded and replayed inside blocks.

Patched while a block is open (``http/intercept.py`` drives this seam as it drives the HTTP
ones), and only public names:

* ``websockets.asyncio.client.connect``: its ``__init__`` (to keep the arguments it was
  given) and ``__await__`` (the awaitable ``connect(...)`` is; ``async with`` and
  ``async for`` go through it). Subclasses (the openai SDK's) inherit both.
  ``_asyncio.py`` does the work.
* ``websockets.sync.client.reconnect`` (websockets 17: ``connect()`` makes one and calls
  its ``connect`` method): ``__init__`` and ``connect``, so a ``connect`` imported before
  the block opened is covered too. Without that class, the module's ``connect`` function
  (then a name imported earlier keeps the original, and a replay's backstop refuses its
  connection). ``_threads.py`` does the work.
* ``websockets.legacy.client.Connect``: ``__init__`` and ``__await__``, as for asyncio
  (``_legacy.py``); only when the caller imported the legacy API itself (importing it warns).

Outside blocks, and for hosts a block lets through, every call is the original. This module
imports nothing of ``websockets``: the work modules load it when a connection is made.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Callable, Generator
from typing import Any

from .._blockwatch import SEAM_MODULES
from ..http._patching import install, is_ours
from ..http.routing import decide_host
from ._captured import ARGS

__all__ = ["MODULES", "patch"]

MODULES = SEAM_MODULES["via_websockets"]


def patch(module: Any) -> list[tuple[Any, str, Any]]:
    name = module.__name__
    if name == "websockets.asyncio.client":
        return _patch_class(getattr(module, "connect", None), _await_asyncio)
    if name == "websockets.legacy.client":
        return _patch_class(getattr(module, "Connect", None), _await_legacy)
    if name == "websockets.sync.client":
        cls = getattr(module, "reconnect", None)
        if isinstance(cls, type) and "connect" in cls.__dict__:
            return _patch_class(cls, _sync_method, "connect")
        orig = getattr(module, "connect", None)
        if orig is None or is_ours(orig):
            return []
        return [install(module, "connect", orig, _sync_connect(orig))]
    return []


def _patch_class(cls: Any, make: Callable[[Any], Any], attr: str = "__await__"
                 ) -> list[tuple[Any, str, Any]]:
    if not isinstance(cls, type):
        return []
    done = []
    init, opens = cls.__dict__.get("__init__"), cls.__dict__.get(attr)
    if init is not None and not is_ours(init):
        done.append(install(cls, "__init__", init, _keeping_args(init)))
    if opens is not None and not is_ours(opens):
        done.append(install(cls, attr, opens, make(opens)))
    return done


@functools.cache
def _keeping_args(orig: Any) -> Any:
    def __init__(self: Any, uri: Any = None, *args: Any, **kwargs: Any) -> None:
        orig(self, uri, *args, **kwargs)
        setattr(self, ARGS, (uri, kwargs))

    return __init__


def _decided(uri: str) -> Any:
    try:
        host = urllib.parse.urlsplit(uri).hostname or ""
    except ValueError:
        return None
    found = decide_host(host)
    if found is None or found[0].mode == "off" or found[0].namespace is None:
        return None
    return found


@functools.cache
def _await_asyncio(orig: Any) -> Any:
    def __await__(self: Any) -> Generator[Any, None, Any]:
        found = _decided(str(getattr(self, "uri", "")))
        if found is None or not hasattr(self, ARGS):
            return orig(self)  # type: ignore[no-any-return]
        from ._asyncio import connect_in_block

        return connect_in_block(self, orig, *found).__await__()

    return __await__


@functools.cache
def _await_legacy(orig: Any) -> Any:
    def __await__(self: Any) -> Generator[Any, None, Any]:
        args = getattr(self, ARGS, None)
        found = _decided(str(args[0])) if args is not None else None
        if found is None:
            return orig(self)  # type: ignore[no-any-return]
        from ._legacy import connect_in_block

        return connect_in_block(self, orig, *found).__await__()

    return __await__


@functools.cache
def _sync_method(orig: Any) -> Any:
    def connect(self: Any) -> Any:
        args: tuple[Any, dict[str, Any]] | None = getattr(self, ARGS, None)
        if args is None or args[1].get("sock") is not None:
            return orig(self)
        found = _decided(str(self.uri))
        if found is None:
            return orig(self)
        from ._threads import connect_in_block

        return connect_in_block(str(self.uri), args[1], lambda: orig(self), *found)

    return connect


@functools.cache
def _sync_connect(orig: Any) -> Any:
    def connect(uri: str, *args: Any, **kwargs: Any) -> Any:
        found = _decided(uri)
        if found is None or args or kwargs.get("sock") is not None:
            return orig(uri, *args, **kwargs)
        from ._threads import connect_in_block, live_by_function

        live = live_by_function(orig, uri, kwargs)
        return connect_in_block(uri, kwargs, live, *found)

    return connect
