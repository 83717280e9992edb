"""aiohttp.ClientSession: any session's requests, recorded and replayed like httpx's.

The work is done by a client middleware (aiohttp >= 3.12's public extension point: an
``async (ClientRequest, handler) -> ClientResponse``). It sees each request as aiohttp is
about to send it (cookies, auth and default headers applied), once per redirect hop, and
aiohttp's own redirect, cookie-jar and ``raise_for_status`` handling runs around it as live.
As for lm15 (``lm15.py``) and urllib3 (``via_urllib3.py``) the request is restated as an
httpx-shaped request (``_libs.restating``) and answered by the same ``handle_async`` as every
other transport, and the answer is handed back as aiohttp's own ``ClientResponse``:

- built by aiohttp itself: ``ClientResponse.start()`` reads the status line, headers and body
  stream from the connection it is given, here a stand-in whose ``protocol.read()`` returns
  the answer (so ``resp.cookies``, ``resp.headers``, ``resp.content`` are set by aiohttp's
  code, not ours);
- the body is an ``aiohttp.StreamReader`` fed one chunk at a time, the next only once the
  reader has taken the last (``iter_any()`` and ``iter_chunks()`` see a replayed event stream
  event by event, as a live chunked answer arrives);
- connection failures and timeouts are recorded and raised again as aiohttp's own classes
  (``ClientConnectorError`` naming the host and port, ``SocketTimeoutError``,
  ``ServerDisconnectedError``); 4xx/5xx answers are answers.

The private names, and why. Patched: ``ClientSession._request``. Middlewares are per session
or per request, and sessions outlive blocks (a tool's or an SDK's session, created before the
block opened), so nothing public reaches every session's requests: ``get``/``post``/
``request`` all call ``_request``. Its wrapper only appends the middleware to the request's
own (innermost: the user's middlewares wrap it) and changes nothing else. Read: the session's
``_middlewares``, because a per-request list replaces the session's rather than adding to it.
Everything else is public: the middleware protocol, ``ClientRequest``'s ``method``/``url``/
``headers``/``body``/``connection_key``/``request_info``/``response_class``,
``ClientResponse.start()``, ``StreamReader`` and ``http.RawResponseMessage``.

Needs nothing beyond aiohttp: the request is restated in httpx's or httpx2's model when the
process has imported one, else in dejacache's own (``_plain.py``), keyed alike.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._blockwatch import SEAM_MODULES
from ..cassettes import placeholder_keys
from ..errors import DejacacheWarning, ReplayMiss
from ..ws.via_aiohttp import patch_ws
from ._libs import Lib, any_transport_error, restating
from ._patching import install, is_ours
from .routing import decide
from .transport import bypassing, handing_on, handle_async

if TYPE_CHECKING:
    import asyncio

__all__ = ["MODULES", "patch"]

MODULES = SEAM_MODULES["via_aiohttp"]

_EXT = "dejacache.aiohttp_response"
# The body's framing on the wire, and its coding when aiohttp has undone it (``_undone``).
_FRAMING = frozenset({"content-length", "transfer-encoding"})
_WIRE = _FRAMING | {"content-encoding"}
# The codings aiohttp undoes: a Content-Encoding naming exactly one of them (its parser's
# rule, aiohttp 3.9 to 3.14). Any other (``gzip, gzip``, ``br, gzip``) it hands on as it came.
_AIOHTTP_UNDOES = frozenset({"gzip", "deflate", "br", "zstd"})
_TAG = re.compile(r"\[aiohttp (\w+)(?: (-?\d+))?\] (.*)\Z", re.DOTALL)
# aiohttp failure -> the httpx/httpx2 class it is recorded as (first match wins).
_TO_LIB = (
    ("ConnectionTimeoutError", "ConnectTimeout"),
    ("ServerTimeoutError", "ReadTimeout"),
    ("ClientConnectorError", "ConnectError"),
    ("ServerDisconnectedError", "RemoteProtocolError"),
    ("ClientPayloadError", "RemoteProtocolError"),
    ("ClientOSError", "ReadError"),
    ("ClientConnectionError", "NetworkError"),
)
# httpx/httpx2 class -> aiohttp's, for a failure recorded without the tag.
_FROM_LIB = {
    "ConnectError": "ClientConnectorError",
    "ConnectTimeout": "ConnectionTimeoutError",
    "ReadTimeout": "SocketTimeoutError",
    "WriteTimeout": "SocketTimeoutError",
    "PoolTimeout": "ConnectionTimeoutError",
    "TimeoutException": "SocketTimeoutError",
    "RemoteProtocolError": "ServerDisconnectedError",
}


def patch(module: Any) -> list[tuple[type, str, Any]]:
    """Wrap ``ClientSession._request`` of ``module`` (aiohttp.client) to add the middleware."""
    cls = getattr(module, "ClientSession", None)
    orig = cls.__dict__.get("_request") if isinstance(cls, type) else None
    if orig is None or not _takes_middlewares(orig):
        warnings.warn(
            f"dejacache found {module.__name__} but no ClientSession._request(..., "
            "middlewares=...) in it: aiohttp requests are neither recorded nor replayed "
            "(dejacache needs aiohttp >= 3.12). A replay block refuses their connections.",
            DejacacheWarning, stacklevel=2,
        )
        return []
    if is_ours(orig):
        return []
    assert isinstance(cls, type) and orig is not None
    # Its WebSockets too (``ws/``): ``ws_connect``, which this module does not answer.
    return [install(cls, "_request", orig, _request(orig)), *patch_ws(cls)]


# Kept per function: a scope entered around every request patches aiohttp each time, and
# reading the signature again cost ~0.3 ms a block.
@functools.cache
def _takes_middlewares(orig: Any) -> bool:
    import inspect  # here: aiohttp (which loads it anyway) is being patched

    return inspect.iscoroutinefunction(orig) and (
        "middlewares" in inspect.signature(orig).parameters)


@functools.cache
def _request(orig: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def request(self: Any, method: str, str_or_url: Any, **kwargs: Any) -> Any:
        if not bypassing():
            own = kwargs.get("middlewares")
            base = tuple(getattr(self, "_middlewares", ()) if own is None else own)
            kwargs["middlewares"] = (*base, functools.partial(_middleware, self))
        return await orig(self, method, str_or_url, **kwargs)

    return request


# ---------------------------------------------------------------- the middleware


async def _body(req: Any) -> bytes:
    body = req.body
    if not body:
        return b""
    as_bytes = getattr(body, "as_bytes", None)
    data = await as_bytes() if as_bytes is not None else body.decode().encode()
    return bytes(data)


async def _middleware(session: Any, req: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    if bypassing():  # a request dejacache itself hands on (an SDK's httpx-over-aiohttp)
        return await handler(req)
    lib = restating()
    try:
        hreq = lib.module.Request(req.method, str(req.url),
                                  headers=list(req.headers.items()), content=await _body(req))
    except Exception as exc:  # a URL, header or body httpx refuses: not ours to answer
        warnings.warn(
            f"dejacache could not restate {req.method} {req.url} as a request ({exc}): "
            "it goes through aiohttp untouched and is not recorded (a replay block refuses "
            "it).", DejacacheWarning, stacklevel=2,
        )
        return await handler(req)
    decided = decide(hreq)
    if decided is None:
        with handing_on():  # let through on purpose: the replay backstop allows it
            return await handler(req)
    eff, opts = decided

    async def send(r: Any) -> Any:
        placeholder_keys.check(r)  # (what the httpx transports get: none sent live)
        try:
            live = await handler(req)
        except Exception as exc:
            if not _is_recorded(exc):
                raise
            raise _lib_error(lib, exc, r) from exc
        dropped = _WIRE if _undone(session, live) else _FRAMING
        headers = [(k, v) for k, v in live.headers.items() if k.lower() not in dropped]
        return lib.module.Response(live.status, headers=headers,
                                   stream=_live_class(lib)(live, r), request=r,
                                   extensions={_EXT: live})

    try:
        hresp = await handle_async(lib, eff, hreq, send, opts)
    except Exception as exc:
        if isinstance(exc, ReplayMiss) or not lib.transport_error(exc):
            raise
        err = _native_error(exc, req)
    else:
        return await _native_response(session, req, hresp, lib)
    raise err


def _undone(session: Any, live: Any) -> bool:
    """Whether aiohttp undid the live answer's coding: then its bytes are plain, and the
    header is dropped; else it is kept, and the exchange decodes its own copy of the bytes
    by the rule every transport's answers are kept by (``codings.py``): stacked codings
    undone, or the body kept as it came. Without it, ``gzip, gzip`` bytes were stored as
    plain text and replayed mangled."""
    enc = live.headers.get("content-encoding", "")
    return (bool(enc) and enc.isascii() and enc.lower() in _AIOHTTP_UNDOES
            and bool(getattr(session, "auto_decompress", True)))


# ---------------------------------------------------------------- failures


def _aiohttp() -> Any:
    return sys.modules["aiohttp"]


def _is_recorded(exc: BaseException) -> bool:
    a = _aiohttp()
    return isinstance(exc, (a.ClientConnectionError, a.ClientPayloadError))


def _lib_error(lib: Lib, exc: BaseException, request: Any) -> BaseException:
    a = _aiohttp()
    name = "TransportError"
    for ours, theirs in _TO_LIB:
        if isinstance(exc, getattr(a, ours)):
            name = theirs
            break
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
        text = f"[aiohttp {type(exc).__name__} {exc.errno}] {exc.strerror or ''}"
    else:
        text = f"[aiohttp {type(exc).__name__}] {exc}"
    cls = getattr(lib.module, name, lib.module.TransportError)
    out: BaseException = cls(text, request=request)
    out.dejacache_native = exc  # type: ignore[attr-defined]
    return out


def _native_error(exc: BaseException, req: Any) -> BaseException:
    """The library's error (live or replayed) as aiohttp's."""
    live = getattr(exc, "dejacache_native", None)
    if isinstance(live, BaseException):
        return live
    a = _aiohttp()
    tagged = _TAG.match(str(exc))
    if tagged is not None:
        name, errno, message = tagged.groups()
    else:
        name, errno, message = _FROM_LIB.get(type(exc).__name__, "ClientOSError"), None, str(exc)
    cls = getattr(a, name, None)
    if not (isinstance(cls, type) and issubclass(cls, a.ClientError)):
        cls = a.ClientOSError
    if issubclass(cls, a.ClientConnectorCertificateError):
        cls = a.ClientConnectorSSLError
    code = int(errno) if errno is not None else None
    if issubclass(cls, a.ClientConnectorError):
        return cls(req.connection_key, OSError(code, message))  # type: ignore[no-any-return]
    if issubclass(cls, OSError) and code is not None:
        return cls(code, message)  # type: ignore[no-any-return]
    return cls(message)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- bodies


@functools.cache
def _live_class(lib: Lib) -> type:
    """The library's byte stream over a live aiohttp response (decoded, as aiohttp gives it)."""

    class LiveStream(lib.module.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, live: Any, request: Any) -> None:
            self._live = live
            self._request = request

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._live.content.iter_any():
                    yield chunk
            except Exception as exc:
                if not _is_recorded(exc):
                    raise
                raise _lib_error(lib, exc, self._request) from exc

        async def aclose(self) -> None:
            self._live.release()

    return LiveStream


class _Feed:
    """Feeds an answer's chunks to an ``aiohttp.StreamReader``, each once the reader has
    taken the one before (the reader tells its protocol to resume after every read that
    leaves it short), so chunks reach the caller one by one; stands in as that protocol."""

    connected = True
    upgraded = False

    def __init__(self) -> None:
        import asyncio  # here, on a running loop: not with the first block

        self._taken = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def pause_reading(self) -> None:
        self._taken.clear()

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._taken.set()

    async def run(self, reader: Any, hresp: Any, req: Any) -> None:
        try:
            async for chunk in _chunks(hresp):
                reader.begin_http_chunk_receiving()
                self._taken.clear()
                reader.feed_data(chunk)
                reader.end_http_chunk_receiving()
                await self._taken.wait()
            reader.feed_eof()
        except Exception as exc:
            reader.set_exception(_native_error(exc, req) if _is_lib_error(exc) else exc)
        finally:
            with contextlib.suppress(Exception):
                await hresp.aclose()


async def _chunks(hresp: Any) -> AsyncIterator[bytes]:
    if hresp.is_stream_consumed:  # a whole body, already in memory
        if hresp.content:
            yield hresp.content
        return
    async for chunk in hresp.aiter_raw():
        if chunk:
            yield chunk


def _is_lib_error(exc: BaseException) -> bool:
    return any_transport_error(exc)


class _Connection:
    """What ``ClientResponse.start()`` reads the answer from, in place of a connection."""

    def __init__(self, feed: _Feed, message: Any, reader: Any) -> None:
        self.protocol = self
        self.upgraded = False
        self._feed = feed
        self._answer = (message, reader)
        self._callbacks: list[Callable[[], None]] = []

    async def read(self) -> tuple[Any, Any]:
        return self._answer

    def add_callback(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def _stop(self) -> None:
        task = self._feed.task
        if task is not None and not task.done():
            task.cancel()
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            with contextlib.suppress(Exception):
                cb()

    def release(self) -> None:
        self._stop()

    def close(self) -> None:
        self._stop()


def _new_response(session: Any, req: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """A ``ClientResponse`` as ``ClientRequest.send()`` makes one, for a request already sent
    (only the arguments this aiohttp's constructor takes)."""
    import inspect

    cls = req.response_class
    offered = {
        "writer": None, "continue100": None, "timer": None, "request_info": req.request_info,
        "traces": [], "loop": loop, "session": session,
        "stream_writer": _SentWriter(),
    }
    params = inspect.signature(cls.__init__).parameters
    return cls(req.method, req.original_url,
               **{k: v for k, v in offered.items() if k in params})


class _SentWriter:
    output_size = 0


async def _native_response(session: Any, req: Any, hresp: Any, lib: Lib) -> Any:
    a = _aiohttp()
    import asyncio

    from multidict import CIMultiDict, CIMultiDictProxy

    live = hresp.extensions.get(_EXT)
    loop = asyncio.get_running_loop()
    if live is not None:  # the live answer's own status line and headers
        version, reason = live.version, live.reason
        pairs = list(live.headers.items())
        raw = tuple(live.raw_headers)
    else:
        version, reason = a.HttpVersion11, hresp.reason_phrase
        pairs = list(hresp.headers.multi_items())
        raw = tuple((k.encode(), v.encode()) for k, v in pairs)
    headers = CIMultiDictProxy(CIMultiDict(pairs))
    message = a.http.RawResponseMessage(version, hresp.status_code, reason, headers, raw,
                                        False, None, False, False)
    feed = _Feed()
    reader = a.StreamReader(feed, 2**16, loop=loop)
    resp = _new_response(session, req, loop)
    await resp.start(_Connection(feed, message, reader))
    if req.method == "HEAD":
        reader.feed_eof()
        await hresp.aclose()
    else:
        feed.task = loop.create_task(feed.run(reader, hresp, req))
    return resp
