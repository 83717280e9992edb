"""urllib3 (and so ``requests`` and botocore): its connection pools, recorded and replayed.

``HTTPConnectionPool.urlopen`` is a public method of a public class, and every request urllib3
sends ends there: ``PoolManager``/``ProxyManager.urlopen`` and ``urllib3.request()``,
``requests``' ``HTTPAdapter.send``, and botocore's ``URLLib3Session.send`` (boto3, and every
AWS SDK call) all call it on a pool (``HTTPSConnectionPool`` inherits it). While a block is
open that method is wrapped (by ``intercept.py``, also when urllib3 is first imported inside
the block), so one seam covers all three libraries.

As for lm15 (``lm15.py``), the request is restated as an httpx-shaped request and answered by
the same ``handle_sync`` as every other transport (keys, volatility, secrets, id aliasing,
stream splitting, strict order and stats are shared), and the answer comes back as urllib3's
own ``HTTPResponse``:

- the body is a lazy reader over the recorded (or live) chunks, so ``preload_content=False``,
  ``stream()``, ``read(amt)``, ``release_conn()`` and ``requests``' ``stream=True`` /
  ``iter_content`` behave as they do live; a replayed event stream comes back event by event
  (``stream(None)`` yields one recorded chunk at a time, as a chunked live answer does);
- a request that fails is recorded as the transport failure it is and raised again as
  urllib3's own exception (``NewConnectionError``, ``ReadTimeoutError``, ``ProtocolError``,
  wrapped in ``MaxRetryError`` when the caller's ``Retry`` gave up), so ``requests`` and
  botocore turn it into their own errors (``requests.ConnectionError``,
  ``EndpointConnectionError``) exactly as live; 4xx/5xx answers are answers.

What a call records is its outcome *after* urllib3's own retries and same-host redirects
(nested calls are handed on untouched), so a replay neither sleeps for back-off nor repeats
attempts; ``PoolManager`` redirects across hosts are separate calls, recorded one by one.

Fidelity limits, each a non-answer rather than a wrong one: a replayed body is the decoded
body (``read(decode_content=False)`` gives the decoded bytes, and ``Content-Encoding`` is gone);
``Set-Cookie`` is a credential and is never stored, so a replayed ``requests`` response has no
cookies; a live one still gets them (its ``http.client`` response is handed on as the
``original_response`` that ``requests`` reads them from).

Needs nothing beyond urllib3: the request is restated in httpx's or httpx2's model when the
process has imported one, else in dejacache's own (``_plain.py``), keyed alike.
"""

from __future__ import annotations

import functools
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .._blockwatch import SEAM_MODULES
from ..cassettes import placeholder_keys
from ..errors import DejacacheWarning
from ._libs import Lib, any_transport_error, restating
from ._patching import install, is_ours
from .routing import decide
from .transport import bypassing, handing_on, handle_sync

__all__ = ["MODULES", "patch"]

MODULES = SEAM_MODULES["via_urllib3"]

# The live urllib3 response travels back through handle_sync in the httpx response's
# extensions (which it copies onto the answer it hands back).
_EXT = "dejacache.urllib3_response"
# Read size for a live body that is not chunked (read1: whatever has arrived, up to this).
_CHUNK = 65536
# How many attempts a ``Retry`` that never gives up is granted when a replayed failure has to
# be re-derived (a recording made through another transport names no urllib3 class).
_MAX_ATTEMPTS = 64

# A recorded failure's message starts with urllib3's own class names, so the replay raises
# the same class, wrapped the same way: "[urllib3 MaxRetryError NewConnectionError] ...".
_TAG = re.compile(r"\[urllib3 (?:(MaxRetryError) )?(\w+)\] (.*)\Z", re.DOTALL)

# urllib3 failure -> the httpx/httpx2 class it is recorded as (first match wins).
_TO_LIB = (
    ("NewConnectionError", "ConnectError"),
    ("ConnectTimeoutError", "ConnectTimeout"),
    ("ReadTimeoutError", "ReadTimeout"),
    ("TimeoutError", "TimeoutException"),
    ("SSLError", "ConnectError"),
    ("ProxyError", "ProxyError"),
    ("ProtocolError", "ReadError"),
)
# httpx/httpx2 class -> urllib3's, for a failure recorded without the tag.
_FROM_LIB = {
    "ConnectError": "NewConnectionError",
    "ConnectTimeout": "ConnectTimeoutError",
    "ReadTimeout": "ReadTimeoutError",
    "WriteTimeout": "ReadTimeoutError",
    "PoolTimeout": "ReadTimeoutError",
    "TimeoutException": "ReadTimeoutError",
    "ProxyError": "ProxyError",
}
# Failures that are the request's outcome (recorded); anything else (a closed or exhausted
# pool, a bad URL) is the caller's own state and propagates untouched.
_RECORDED = ("MaxRetryError", "TimeoutError", "ProtocolError", "SSLError", "ProxyError",
             "NewConnectionError")


def patch(module: Any) -> list[tuple[type, str, Any]]:
    """Wrap ``HTTPConnectionPool.urlopen`` of ``module`` (urllib3.connectionpool)."""
    cls = getattr(module, "HTTPConnectionPool", None)
    orig = cls.__dict__.get("urlopen") if isinstance(cls, type) else None
    if orig is None or not callable(orig):
        warnings.warn(
            f"dejacache found {module.__name__} but no HTTPConnectionPool.urlopen() in it to "
            "intercept: requests, urllib3 and botocore calls are neither recorded nor replayed "
            "(dejacache knows urllib3 2.x).",
            DejacacheWarning, stacklevel=2,
        )
        return []
    if is_ours(orig):
        return []
    assert isinstance(cls, type)
    return [install(cls, "urlopen", orig, _urlopen(orig))]


# ---------------------------------------------------------------- the request


def _unstated(method: str, url: str, exc: BaseException) -> None:
    warnings.warn(
        f"dejacache could not restate {method} {url} as a request ({exc}): it goes "
        "through urllib3 untouched and is not recorded (a replay block refuses it).",
        DejacacheWarning, stacklevel=4,
    )


def _full_url(pool: Any, url: str) -> str:
    if not url.startswith("/"):
        return url  # absolute already (a proxy's pool)
    host = pool.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    port = f":{pool.port}" if pool.port else ""
    return f"{pool.scheme}://{host}{port}{url}"


def _body(body: Any, kw: dict[str, Any]) -> tuple[bytes, Any]:
    """(the bytes the key is made of, what to send on): a file or iterator body is read
    once and sent on as those bytes (with nothing left to rewind)."""
    if body is None:
        return b"", None
    if isinstance(body, bytes):
        return body, body
    if isinstance(body, str):
        return body.encode("utf-8"), body  # what urllib3 sends a str as
    read = getattr(body, "read", None)
    parts: Any = [read()] if callable(read) else list(body)
    data = b"".join(p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in parts)
    kw.pop("body_pos", None)
    return data, data


def _headers(pool: Any, headers: Any) -> list[tuple[Any, Any]]:
    source = headers if headers is not None else pool.headers
    return list(source.items()) if source else []


# ---------------------------------------------------------------- failures


def _exceptions() -> Any:
    return sys.modules["urllib3.exceptions"]


def _is_recorded(exc: BaseException) -> bool:
    ux = _exceptions()
    return isinstance(exc, tuple(getattr(ux, n) for n in _RECORDED))


def _lib_error(lib: Lib, exc: BaseException, request: Any) -> BaseException:
    """urllib3's failure as the library's transport error (recorded), tagged with urllib3's
    class names; the original rides along for the caller of a live call."""
    ux = _exceptions()
    outer, reason = "", exc
    if isinstance(exc, ux.MaxRetryError) and exc.reason is not None:
        outer, reason = "MaxRetryError ", exc.reason
    name = "TransportError"
    for ours, theirs in _TO_LIB:
        if isinstance(reason, getattr(ux, ours)):
            name = theirs
            break
    cls = getattr(lib.module, name, lib.module.TransportError)
    out: BaseException = cls(f"[urllib3 {outer}{type(reason).__name__}] {reason}",
                             request=request)
    out.dejacache_native = exc  # type: ignore[attr-defined]
    return out


def _build(name: str, message: str, pool: Any, url: str) -> BaseException:
    """urllib3's class ``name`` carrying ``message`` as its text (its own constructors would
    rebuild the text from parts a recording does not keep)."""
    ux = _exceptions()
    cls: Any = getattr(ux, name, None)
    if not (isinstance(cls, type) and issubclass(cls, ux.HTTPError)):
        cls = ux.ProtocolError
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    if isinstance(exc, ux.PoolError):
        exc.pool = pool
    if isinstance(exc, ux.RequestError):
        exc.url = url
    if isinstance(exc, ux.NewConnectionError):
        exc.conn = None
    if isinstance(exc, ux.ProxyError):
        exc.original_error = None
    out: BaseException = exc
    return out


def _given_up(pool: Any, method: str, url: str, retries: Any, redirect: bool,
              reason: BaseException) -> BaseException:
    """What urlopen raises once ``retries`` are spent on ``reason``: urllib3's own rule."""
    ux = _exceptions()
    retry_cls = sys.modules["urllib3.util.retry"].Retry
    if not isinstance(retries, retry_cls):
        retries = retry_cls.from_int(retries, redirect=redirect, default=pool.retries)
    try:
        for _ in range(_MAX_ATTEMPTS):
            retries = retries.increment(method, url, error=reason, _pool=pool)
    except Exception as exc:  # the raw error (retries off) or MaxRetryError
        return exc
    out: BaseException = ux.MaxRetryError(pool, url, reason)
    return out


def _native_error(exc: BaseException, pool: Any, method: str, url: str, retries: Any,
                  redirect: bool) -> BaseException:
    """The library's error (live or replayed) as urllib3's."""
    live = getattr(exc, "dejacache_native", None)
    if isinstance(live, BaseException):
        return live
    text = str(exc)
    tagged = _TAG.match(text)
    if tagged is not None:
        outer, name, message = tagged.groups()
        reason = _build(name, message, pool, url)
        if outer:
            wrapped: BaseException = _exceptions().MaxRetryError(pool, url, reason)
            return wrapped
        return reason
    reason = _build(_FROM_LIB.get(type(exc).__name__, "ProtocolError"), text, pool, url)
    return _given_up(pool, method, url, retries, redirect, reason)


# ---------------------------------------------------------------- live bodies


@functools.cache
def _live_class(lib: Lib) -> type:
    """The library's byte stream over a live urllib3 response (raw bytes, as they come)."""

    class LiveStream(lib.module.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, live: Any, request: Any) -> None:
            self._live = live
            self._request = request

        def __iter__(self) -> Iterator[bytes]:
            live = self._live
            try:
                if live.chunked or not hasattr(live, "read1"):
                    yield from live.stream(None if live.chunked else _CHUNK,
                                           decode_content=False)
                    return
                while chunk := live.read1(_CHUNK, decode_content=False):
                    yield chunk
            except Exception as exc:
                if not _is_recorded(exc):
                    raise
                raise _lib_error(lib, exc, self._request) from exc

        def close(self) -> None:
            live = self._live
            if not live.closed:
                live.close()  # abandoned before the end: the connection cannot be reused
            live.release_conn()

    return LiveStream


class _Chunks:
    """The file-like body urllib3's ``HTTPResponse`` reads: the answer's chunks, pulled one
    at a time (``read1``) or as many as ``read(amt)`` asks for."""

    def __init__(self, chunks: Iterator[bytes], on_close: Callable[[], None]) -> None:
        self._chunks = chunks
        self._buf = b""
        self._done = False
        self._on_close = on_close

    def _next(self) -> bool:
        for chunk in self._chunks:
            if chunk:
                self._buf += chunk
                return True
        self.close()
        return False

    def read(self, amt: int | None = None) -> bytes:
        if amt is None or amt < 0:
            while not self._done and self._next():
                pass
            out, self._buf = self._buf, b""
            return out
        while len(self._buf) < amt and not self._done and self._next():
            pass
        out, self._buf = self._buf[:amt], self._buf[amt:]
        return out

    def read1(self, amt: int = -1) -> bytes:
        if not self._buf and not self._done:
            self._next()
        if amt is None or amt < 0:
            amt = len(self._buf)
        out, self._buf = self._buf[:amt], self._buf[amt:]
        return out

    @property
    def closed(self) -> bool:
        return self._done and not self._buf

    def isclosed(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._on_close()


@functools.cache
def _response_class(base: type) -> type:
    class Response(base):  # type: ignore[misc]
        """urllib3's response over recorded chunks: ``stream()`` hands them on one at a
        time (each at most ``amt`` bytes), as urllib3 reads a chunked live answer, instead of
        gathering ``amt`` bytes first: botocore streams with ``amt=65536``, and an eventstream
        or server-sent events gathered that way reach the caller all at once."""

        def stream(self, amt: int | None = 2**16,
                   decode_content: bool | None = None) -> Iterator[bytes]:
            if amt == 0:
                return
            if not hasattr(self, "read1"):
                yield from super().stream(amt, decode_content)
                return
            while data := self.read1(amt, decode_content=decode_content):
                yield data

    Response.__name__ = Response.__qualname__ = base.__name__
    return Response


def _native_response(module: Any, hresp: Any, kw: dict[str, Any], method: str, url: str,
                     native_error: Callable[[BaseException], BaseException]) -> Any:
    """urllib3's ``HTTPResponse`` for the library's answer (replayed or live)."""
    live = hresp.extensions.get(_EXT)
    raw = hresp.iter_raw() if not hresp.is_stream_consumed else iter((hresp.content,))

    def chunks() -> Iterator[bytes]:
        try:
            yield from raw
        except Exception as exc:
            if not _is_recorded(exc) and not _is_lib_error(exc):
                raise
            raise native_error(exc) from None

    headers = module.HTTPHeaderDict()
    for k, v in hresp.headers.multi_items():
        headers.add(k, v)
    cls = _response_class(module.HTTPResponse)
    return cls(
        body=_Chunks(chunks(), hresp.close), headers=headers, status=hresp.status_code,
        version=getattr(live, "version", 11),
        version_string=getattr(live, "version_string", "HTTP/1.1"),
        reason=getattr(live, "reason", None) or hresp.reason_phrase,
        preload_content=kw.get("preload_content", True),
        decode_content=kw.get("decode_content", True),
        # requests reads a live answer's cookies from the http.client response.
        original_response=getattr(live, "_original_response", None),
        msg=getattr(live, "msg", None),
        retries=getattr(live, "retries", None),
        enforce_content_length=kw.get("enforce_content_length", True),
        request_method=method, request_url=url,
    )


def _is_lib_error(exc: BaseException) -> bool:
    return any_transport_error(exc)


# ---------------------------------------------------------------- the wrapper


@functools.cache  # kept: a block opened per request patches again, as cheaply as it can
def _urlopen(orig: Callable[..., Any]) -> Callable[..., Any]:
    def urlopen(self: Any, method: str, url: str, body: Any = None, headers: Any = None,
                retries: Any = None, redirect: bool = True, assert_same_host: bool = True,
                **kw: Any) -> Any:
        if bypassing() or (assert_same_host and not self.is_same_host(url)):
            # A retry or redirect inside a call we hold, or urllib3's own HostChangedError.
            return orig(self, method, url, body, headers, retries, redirect,
                        assert_same_host, **kw)
        lib = restating()
        data, to_send = _body(body, kw)
        try:
            hreq = lib.module.Request(method, _full_url(self, url),
                                      headers=_headers(self, headers), content=data)
        except Exception as exc:  # a URL or header httpx refuses: not ours to answer
            _unstated(method, url, exc)
            return orig(self, method, url, to_send, headers, retries, redirect,
                        assert_same_host, **kw)
        decided = decide(hreq)
        if decided is None:
            with handing_on():  # let through on purpose: the replay backstop allows it
                return orig(self, method, url, to_send, headers, retries, redirect,
                            assert_same_host, **kw)
        eff, opts = decided
        module = sys.modules["urllib3"]

        def send(req: Any) -> Any:
            placeholder_keys.check(req)  # (what the httpx transports get: none sent live)
            sent = {**kw, "preload_content": False, "decode_content": False,
                    "release_conn": False}
            try:
                live = orig(self, method, url, to_send, headers, retries, redirect,
                            assert_same_host, **sent)
            except Exception as exc:
                if not _is_recorded(exc):
                    raise
                raise _lib_error(lib, exc, req) from exc
            return lib.module.Response(
                live.status, headers=list(live.headers.items()),
                stream=_live_class(lib)(live, req), request=req, extensions={_EXT: live},
            )

        def native_error(exc: BaseException) -> BaseException:
            return _native_error(exc, self, method, url, retries, redirect)

        try:
            hresp = handle_sync(lib, eff, hreq, send, opts)
        except Exception as exc:
            if not lib.transport_error(exc):
                raise
            err = native_error(exc)
        else:
            return _native_response(module, hresp, kw, method, url, native_error)
        raise err

    return urlopen
