"""dspy's native engine (lm15): its HTTP/1.1 transports, recorded and replayed like httpx's.

dspy >= 3.4 sends its calls through lm15 by default (``dspy.LM(..., engine="auto")``), a
client on raw sockets that never touches httpx: recordings stayed empty and replays went
live. lm15's transports are part of its public API
(``lm15.transports.StdlibTransport`` / ``StdlibAsyncTransport``, vendored by dspy as
``dspy._vendor.lm15.transports``), and every lm15 provider ends in their one method,
``stream(TransportRequest)``. While a block is open that method is wrapped (by
``intercept.py``, as the aiohttp transports are, also when the module is imported inside the
block). The request is restated as an httpx/httpx2 request and goes through the same
``handle_sync``/``handle_async`` as every other transport, so:

- it gets the key the same request through httpx gets (the canonical form comes from one
  function), and the same secret handling (request headers are never keyed or stored);
- streams are recorded while lm15 reads them, and replayed event by event;
- transport failures are recorded and replayed as failures, raised as lm15's own classes
  (``ReadTimeout`` stays a ``ReadTimeout``), so dspy's error handling sees what it would live.

lm15 decodes any content encoding itself, so the wire's ``Content-Encoding`` and length
headers are dropped before the body is handed to httpx (which would decode it again).

Needs httpx or httpx2 (dejacache's HTTP machinery speaks them; litellm, dspy's other engine,
brings httpx). Without either a call goes through untouched, with a ``DejacacheWarning``; a
replay block then refuses its connection (``socketguard.py``).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any

from .._blockwatch import SEAM_MODULES
from ..errors import DejacacheWarning, ReplayMiss
from ._libs import Lib, available, imported
from ._patching import install, is_ours
from .routing import decide
from .transport import handing_on, handle_async, handle_sync

__all__ = ["MODULES", "patch"]

# The modules that define lm15's public transports: the lm15 package, and dspy's copy of it.
MODULES = SEAM_MODULES["lm15"]
# Class name -> whether its ``stream`` is async.
_CLASSES = (("StdlibTransport", False), ("StdlibAsyncTransport", True))
# Headers that describe the wire body, which lm15 has already decoded.
_WIRE = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def patch(module: Any) -> list[tuple[type, str, Any]]:
    """Wrap ``stream`` of ``module``'s transports; (class, attribute, original) for each.

    Warns when a transport or its ``stream`` is missing (an lm15 that changed its API): its
    calls would otherwise go unrecorded without a word.
    """
    done: list[tuple[type, str, Any]] = []
    for qual, is_async in _CLASSES:
        cls = getattr(module, qual, None)
        orig = cls.__dict__.get("stream") if isinstance(cls, type) else None
        if orig is None or not callable(orig):
            warnings.warn(
                f"dejacache found {module.__name__} but no {qual}.stream() in it to intercept: "
                f"calls through this lm15 are neither recorded nor replayed (dejacache knows "
                f"lm15's transports as dspy 3.4 ships them). Use dspy.LM(..., "
                f"engine='litellm') meanwhile.",
                DejacacheWarning, stacklevel=2,
            )
            continue
        if is_ours(orig):
            continue
        wrapper: Any = _async_stream(module, orig) if is_async else _sync_stream(module, orig)
        assert isinstance(cls, type)
        done.append(install(cls, "stream", orig, wrapper))
    return done


# ---------------------------------------------------------------- shared pieces


def _lib(module: Any) -> Lib | None:
    libs = imported() or available()
    if libs:
        return libs[0]
    warnings.warn(
        f"dejacache cannot intercept {module.__name__} without httpx or httpx2: this call "
        "goes live and is not recorded. pip install 'dejacache[httpx]'.",
        DejacacheWarning, stacklevel=4,
    )
    return None


def _decide(lib: Lib, request: Any) -> tuple[Any, Any] | None:
    """The httpx request and the interception decision, or None to let it through."""
    hreq = lib.module.Request(request.method, request.url, headers=list(request.headers),
                              content=request.body)
    decided = decide(hreq)
    return None if decided is None else (hreq, decided)


def _lib_error(lib: Lib, exc: BaseException, request: Any) -> BaseException:
    """lm15's transport error as the library's class of the same name (so it is recorded)."""
    m = lib.module
    cls = getattr(m, type(exc).__name__, None)
    if not (isinstance(cls, type) and issubclass(cls, m.TransportError)):
        cls = m.TransportError
    out: BaseException = cls(str(exc), request=request)
    return out


def _lm15_error(module: Any, exc: BaseException) -> BaseException:
    """The library's transport error (live or replayed) as lm15's nearest class."""
    base = module.TransportError
    for klass in type(exc).__mro__:
        cls = getattr(module, klass.__name__, None)
        if isinstance(cls, type) and issubclass(cls, base):
            out: BaseException = cls(str(exc))
            return out
    out = base(str(exc))
    return out


@contextlib.contextmanager
def _as_lm15(module: Any, lib: Lib) -> Iterator[None]:
    """Raise the library's transport errors (live or replayed) as lm15's; a replay miss and
    anything else as they are."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, ReplayMiss) or not lib.transport_error(exc):
            raise
        raise _lm15_error(module, exc) from exc


@functools.cache
def _live_classes(lib: Lib, module: Any) -> tuple[type, type]:
    """The library's sync and async byte streams over a live lm15 response: lm15's failures
    mid-body become the library's, which the recorder and the cassette know."""

    class LiveStream(lib.module.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, live: Any, request: Any) -> None:
            self._live = live
            self._request = request

        def __iter__(self) -> Iterator[bytes]:
            try:
                yield from self._live
            except module.TransportError as exc:
                raise _lib_error(lib, exc, self._request) from exc

        def close(self) -> None:
            self._live.close()

    class AsyncLiveStream(lib.module.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, live: Any, request: Any) -> None:
            self._live = live
            self._request = request

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._live:
                    yield chunk
            except module.TransportError as exc:
                raise _lib_error(lib, exc, self._request) from exc

        async def aclose(self) -> None:
            await self._live.aclose()

    return LiveStream, AsyncLiveStream


def _headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in _WIRE]


def _response_kwargs(resp: Any) -> dict[str, Any]:
    return {
        "status": resp.status_code,
        "reason": resp.reason_phrase,
        "headers": list(resp.headers.multi_items()),
        "http_version": resp.http_version,
    }


# ---------------------------------------------------------------- sync


def _sync_stream(module: Any, orig: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    def stream(self: Any, request: Any) -> Any:
        found = _lib(module)
        if found is None:  # not handed on: a replay block's backstop refuses it
            return orig(self, request)
        decided = _decide(found, request)
        if decided is None:
            with handing_on():  # let through on purpose: the replay backstop allows it
                return orig(self, request)
        lib = found
        hreq, (eff, opts) = decided

        def send(req: Any) -> Any:  # ``req`` is ``hreq``: lm15 sends its own request
            try:
                live = orig(self, request)
            except module.TransportError as exc:
                raise _lib_error(lib, exc, req) from exc
            return lib.module.Response(live.status, headers=_headers(live.headers),
                                       stream=_live_classes(lib, module)[0](live, req),
                                       request=req)

        with _as_lm15(module, lib):
            resp = handle_sync(lib, eff, hreq, send, opts)

        def chunks() -> Iterator[bytes]:
            with _as_lm15(module, lib):
                yield from resp.iter_bytes()

        return module.TransportResponse(**_response_kwargs(resp), chunks=chunks(),
                                        release=lambda _consumed: resp.close())

    return stream


# ---------------------------------------------------------------- async


class _StreamCM:
    """What lm15's async ``stream()`` returns: awaited, or used as ``async with``."""

    def __init__(self, open_: Callable[[], Awaitable[Any]]) -> None:
        self._open = open_
        self._response: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._open().__await__()

    async def __aenter__(self) -> Any:
        self._response = await self._open()
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            await self._response.aclose()


def _async_stream(module: Any, orig: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    async def open_(self: Any, request: Any) -> Any:
        found = _lib(module)
        if found is None:
            return await orig(self, request)
        decided = _decide(found, request)
        if decided is None:
            with handing_on():
                return await orig(self, request)
        lib = found
        hreq, (eff, opts) = decided

        async def send(req: Any) -> Any:
            try:
                live = await orig(self, request)
            except module.TransportError as exc:
                raise _lib_error(lib, exc, req) from exc
            return lib.module.Response(live.status, headers=_headers(live.headers),
                                       stream=_live_classes(lib, module)[1](live, req),
                                       request=req)

        with _as_lm15(module, lib):
            resp = await handle_async(lib, eff, hreq, send, opts)

        async def chunks() -> AsyncIterator[bytes]:
            with _as_lm15(module, lib):
                async for chunk in resp.aiter_bytes():
                    yield chunk

        async def release(_consumed: bool) -> None:
            await resp.aclose()

        return module.AsyncTransportResponse(**_response_kwargs(resp), chunks=chunks(),
                                             release=release)

    def stream(self: Any, request: Any) -> _StreamCM:
        return _StreamCM(lambda: open_(self, request))

    return stream
