"""The two HTTP libraries we speak, httpx and httpx2, behind one small descriptor.

Both expose the same public surface (``Client``, ``HTTPTransport``, ``Response``,
``SyncByteStream``, the ``TransportError`` family), so every other module works against a
:class:`Lib` and never imports either library at module import time. A third, :func:`plain`
(``_plain.py``), has the part of that surface the exchange reads: the transports that are not
httpx (urllib3, aiohttp) use it when the process has imported neither library.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import threading
from typing import Any

from .._blockwatch import LIBRARIES

__all__ = ["LIBRARIES", "Lib", "any_transport_error", "available", "imported", "lib_named",
           "lib_of", "plain", "restating", "register"]


_LOCK = threading.Lock()
_CACHE: dict[str, Lib] = {}


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Lib:
    name: str
    module: Any

    def transport_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.module.TransportError)


def lib_named(name: str) -> Lib | None:
    """The library called ``name``, imported on first use; None when it is not installed."""
    lib = _CACHE.get(name)
    if lib is not None:
        return lib
    if name not in LIBRARIES:
        raise ValueError(f"unknown HTTP library {name!r}; expected one of {LIBRARIES}")
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    with _LOCK:
        return _CACHE.setdefault(name, Lib(name, module))


def register(name: str, module: Any) -> Lib:
    """The descriptor for a module just loaded (no import machinery involved)."""
    with _LOCK:
        return _CACHE.setdefault(name, Lib(name, module))


def lib_of(obj: Any) -> Lib:
    """The library an object (request, transport) comes from."""
    top = type(obj).__module__.partition(".")[0]
    lib = lib_named(top) if top in LIBRARIES else None
    if lib is None:
        raise TypeError(
            f"{type(obj).__module__}.{type(obj).__qualname__} is not an httpx or httpx2 object"
        )
    return lib


def imported() -> list[Lib]:
    """Libraries the process has already imported (costs nothing to look at)."""
    out = []
    for name in LIBRARIES:
        mod = sys.modules.get(name)
        # A module still executing its import belongs to the import hook in intercept.py;
        # importing it here would wait on that thread's import lock.
        if mod is not None and not getattr(mod.__spec__, "_initializing", False):
            lib = lib_named(name)
            if lib is not None:
                out.append(lib)
    return out


def plain() -> Lib:
    """dejacache's own request/response model (loaded on first use)."""
    lib = _CACHE.get("plain")
    if lib is None:
        from . import _plain

        lib = register("plain", _plain)
    return lib


def restating() -> Lib:
    """The model a transport that is not httpx restates its requests in: a library the
    process has imported (no import paid for it), else :func:`plain`. Keys are the same
    either way (``_plain.py``)."""
    libs = imported()
    return libs[0] if libs else plain()


def any_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the transport error of a model in use here."""
    libs = imported()
    own = _CACHE.get("plain")
    if own is not None:
        libs.append(own)
    return any(lib.transport_error(exc) for lib in libs)


def available() -> list[Lib]:
    """Libraries that are installed, importing them if needed."""
    import importlib.util  # intercept() only: not with the first block (import time)

    out = []
    for name in LIBRARIES:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            lib = lib_named(name)
            if lib is not None:
                out.append(lib)
    return out
