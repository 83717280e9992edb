"""One request through the proxy: restated as an httpx request for its upstream (built only
when it is sent: ``http/_pending.py``), answered by the same exchange as every in-process
transport (``http/transport.py``'s ``handle_async``), and written back to the client.

Nothing here decides anything an in-process call would not: the key, volatility, secrets,
id aliasing, streams, errors, strict order, partial replay and ageing are the exchange's
and the session's cassette's. What is the proxy's own:

- the request it restates drops what belongs to the connection to the proxy (hop-by-hop
  headers, ``Host``, framing, the proxy's own ``x-dejacache-*`` headers); the rest is sent
  on, and keyed, as the client sent it;
- an AWS request is signed again with the proxy's credentials on its way out (``_aws.py``);
- the answer goes back with ``Content-Length``, or, for a stream, one chunk per piece as
  it arrives (live) or per recorded event (replay); a whole answer larger than the
  recording bound (``--max-recorded-stream``), which the exchange hands on unrecorded
  (``http/_passing.py``), goes back as it arrives too, never held whole: with the
  upstream's ``Content-Length`` when it sent one, else in chunks;
- what the exchange raises becomes an answer in the upstream's own error shape
  (``Provider.error_answer``): a replay miss (404, so no SDK retries it) whose message is
  the miss report, an upstream that failed (502), a proxy that cannot send (502).
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import orjson

from .._core.spellings import spellings
from .._secrets import mask_text, placeholder
from ..cassettes.placeholder_keys import carries_placeholder, proxy_refusal
from ..errors import ConfigurationError, ReplayDivergence, ReplayMiss
from ..http._libs import Lib
from ..http._passing import Passing, ahanded, aread_bounded
from ..http._pending import Pending, built
from ..http.headers import credential_values
from ..http.providers import Provider, all_providers, detect
from ..http.sse import is_stream
from ..http.transport import Replayed, handle_async
from ._aws import Resigner, signed_scope
from ._http1 import LAST_CHUNK, Request, chunk, head_bytes
from ._sessions import Session
from .upstreams import Upstream, keyed_headers

__all__ = ["FORWARDED", "Forwarder", "Out", "error_bytes", "json_bytes"]

#: Set on every request the proxy sends on (after it is keyed): one that comes back to a
#: proxy is a loop (an upstream URL pointing at the proxy itself), refused at once.
FORWARDED = "x-dejacache-forwarded"

# Belong to the client's connection to the proxy, not to the request it sends on.
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "host", "content-length",
                  "expect"})
# Framing of the upstream's answer: the proxy frames what it sends itself.
_HOP_ANSWER = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                         "content-length", "te", "trailer", "upgrade"})
# A model may take minutes to answer, and a stream may pause that long between events.
_TIMEOUTS = {"connect": 30.0, "read": 600.0, "write": 60.0, "pool": 60.0}
# What a refusal tells a Stainless-generated SDK (openai, anthropic): do not retry.
_NO_RETRY = [("x-should-retry", "false")]
_URLS_KEPT = 1024
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "QUERY")


class Out:
    """The client's side of its connection: writes that wait while the client is slow to
    read (back-pressure), fail once it is gone, or a hard close."""

    __slots__ = ("_drained", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused

    async def write(self, data: bytes) -> None:
        if self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self.transport.write(data)
        if self._drained is not None:
            await self._drained

    def pause(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume(self, lost: BaseException | None = None) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            if lost is not None:
                drained.set_exception(lost)
            else:
                drained.set_result(None)

    def abort(self) -> None:
        """End the connection without finishing the answer: the client sees a failure,
        never a truncated answer it could take for a whole one."""
        if not self.transport.is_closing():
            self.transport.abort()


def json_bytes(status: int, data: Any, headers: list[tuple[str, str]] | None = None) -> bytes:
    body = orjson.dumps(data)
    return head_bytes(status, [("content-type", "application/json"),
                               ("content-length", str(len(body))), *(headers or [])]) + body


def error_bytes(provider: Provider, status: int, kind: str, message: str) -> bytes:
    """An error answer in ``provider``'s own shape."""
    extra, body = provider.error_answer(status, kind, message)
    return json_bytes(status, body, [*_NO_RETRY, ("x-dejacache", kind), *extra.items()])


class Forwarder:
    """Sends requests on (one connection pool per proxy) and answers them."""

    def __init__(self, lib: Lib) -> None:
        self.lib = lib
        self.transport = lib.module.AsyncHTTPTransport()
        self.resigner = Resigner()
        self._urls: dict[str, Any] = {}
        self._named = {p.name: p for p in all_providers()}
        # The methods the library sends ``Content-Length: 0`` for when the body is empty
        # (httpx2 adds QUERY to httpx's POST, PUT and PATCH): asked once, of the library.
        self._empty_length = frozenset(
            m for m in _METHODS
            if lib.module.Request(m, "http://127.0.0.1/", content=b"").headers.get(
                "content-length") == "0")

    async def aclose(self) -> None:
        await self.transport.aclose()

    def _url(self, text: str) -> Any:
        # An SDK calls the same few endpoints: parsing each URL again was a fifth of a
        # replayed call's time in the proxy.
        url = self._urls.get(text)
        if url is None:
            if len(self._urls) >= _URLS_KEPT:
                self._urls.clear()
            url = self._urls[text] = self.lib.module.URL(text)
        return url

    def restate(self, req: Request, upstream: Upstream, rest: str
                ) -> tuple[Pending, list[tuple[str, str]]]:
        """The request to send ``upstream``, as the client would have sent it there: the
        headers an httpx client sends for ``content=req.body`` (``Host`` first, the length
        last), made here, since the client's own framing headers are the proxy's. With it,
        its headers for keying, names as the client spelled them: ``X-AuthToken`` is a
        credential by its capitals, which ``x-authtoken`` has lost (keys lower-case names
        themselves). Pending: the library's request is built only when one is needed (a hit
        answered from a cassette never needs it)."""
        connection = {t.strip().lower() for t in (req.get("connection") or "").split(",")}
        headers: list[tuple[str, str]] = []
        ascii_only = True
        for k, v in req.headers:
            low = k.lower()
            if low not in _HOP and low not in connection and not low.startswith("x-dejacache-"):
                headers.append((k, v))
                ascii_only = ascii_only and v.isascii()
        scope = signed_scope(headers)
        url = self._url(upstream.base(scope[0] if scope else None) + rest)
        m = self.lib.module
        body = req.body
        method = req.method.upper()
        # ``Request(content=...)`` adds the same headers, but scans and rebuilds the header
        # list five times to do it: 17 us of the 20 a restated request cost (measured).
        front = [("Host", url.netloc.decode("ascii"))] if url.host else []
        back = []
        if body:
            back.append(("Content-Length", str(len(body))))
        elif method in self._empty_length:
            front.append(("Content-Length", "0"))
        headers = front + headers + back
        sent: Sequence[tuple[str, Any]] = headers
        if not ascii_only:
            sent, headers = _non_ascii(headers)
        headers = keyed_headers(upstream, headers)  # (``sent`` holds no name of ours)

        def build() -> Any:
            hreq = m.Request(method, url, headers=sent, stream=m.ByteStream(body),
                             extensions={"timeout": _TIMEOUTS})
            hreq.read()  # its content, as a request made with ``content=`` has it
            return hreq

        return Pending(method, url, body, build), headers

    def _sender(self) -> Callable[[Any], Awaitable[Any]]:
        send = self.transport.handle_async_request

        async def send_signed(hreq: Any) -> Any:
            # Going live: in the request's own task from here on. It began outside one
            # (``_connection.start``), and the HTTP library's locks and sniffio ask
            # ``current_task()``: one pass of the loop, then the task is the current one.
            await asyncio.sleep(0)
            if carries_placeholder(hreq):
                raise ConfigurationError(proxy_refusal(
                    "call", str(hreq.url), str(hreq.url.host), hreq.headers.items()))
            hreq.headers[FORWARDED] = "1"
            scope = signed_scope(hreq.headers.multi_items())
            if scope is None:
                return await send(hreq)
            await asyncio.to_thread(self.resigner.credentials)  # may read files or the network
            headers = self.resigner.sign(hreq.method, str(hreq.url), hreq.headers.multi_items(),
                                         hreq.content, *scope)
            return await send(self.lib.module.Request(hreq.method, hreq.url, headers=headers,
                                                      content=hreq.content,
                                                      extensions=hreq.extensions))

        return send_signed

    def provider_for(self, hreq: Any, upstream: Upstream) -> Provider:
        """Whose error shape the client reads: the provider the request goes to, else the
        one the upstream is named after."""
        hreq = built(hreq)
        url = hreq.url
        found = detect(url.host, url.path, hreq.headers)
        if found.name == "http":
            return self._named.get(upstream.name, found)
        return found

    async def answer(self, session: Session, upstream: Upstream, req: Request, rest: str,
                     out: Out) -> None:
        """Answer ``req`` (routed to ``upstream`` with path ``rest``) under ``session``."""
        try:
            hreq, items = self.restate(req, upstream, rest)
        except ConfigurationError as exc:
            await out.write(error_bytes(self._named.get(upstream.name, self._named["http"]),
                                        502, "dejacache_proxy_error", str(exc)))
            return
        try:
            resp = await handle_async(self.lib, session.eff, hreq, self._sender(),
                                      session.options, items)
        except ReplayMiss as miss:
            kind = ("dejacache_replay_divergence" if isinstance(miss, ReplayDivergence)
                    else "dejacache_replay_miss")
            await out.write(error_bytes(self.provider_for(hreq, upstream), 404, kind,
                                        hidden(f"{type(miss).__name__}: {miss}", items, hreq.url)))
            return
        except Exception as exc:
            await out.write(self._failure(hreq, upstream, exc, items))
            return
        if isinstance(resp, Replayed):
            await out.write(_whole(resp.status, resp.headers, resp.body,
                                   req.method == "HEAD"))
            return
        await self._relay(resp, out, req.method == "HEAD")

    def _failure(self, hreq: Any, upstream: Upstream, exc: Exception,
                 items: list[tuple[str, str]]) -> bytes:
        """The answer to a request the exchange failed; logged when it is the proxy's own
        failure. Neither holds the request's credentials (:func:`hidden`)."""
        provider = self.provider_for(hreq, upstream)
        if self.lib.transport_error(exc) or isinstance(exc, ConfigurationError):
            # The upstream could not be reached, or the proxy could not send to it (a live
            # call's failure, or one a cassette recorded and replays).
            return error_bytes(provider, 502, "dejacache_upstream_error", hidden(
                f"dejacache proxy: upstream {upstream.name} ({upstream.url}) failed: "
                f"{type(exc).__name__}: {exc}", items, hreq.url))
        trace = "".join(traceback.format_exception(exc))
        print(hidden(f"dejacache proxy: error answering {hreq.method} {hreq.url}:\n{trace}",
                     items, hreq.url), file=sys.stderr, end="")
        return error_bytes(provider, 500, "dejacache_proxy_error", hidden(
            f"dejacache proxy failed: {type(exc).__name__}: {exc}", items, hreq.url))

    async def _relay(self, resp: Any, out: Out, head_only: bool) -> None:
        status = resp.status_code
        # The bytes the upstream sent: read as latin-1, they are written back as they came
        # (``multi_items`` reads UTF-8 first, which ``head_bytes`` would write as latin-1).
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers.raw]
        try:
            if head_only or status in (204, 304) or status < 200:
                await out.write(_whole(status, headers, b"", True))
                return
            if resp.is_stream_consumed:  # a replayed whole body, decoded already
                body = resp.content
            elif is_stream(resp.headers.get("content-type")):
                await self._stream(resp.aiter_raw(), status, headers, None, out)
                return
            else:
                # Whole when it fits the recording bound (as recorded, with its length);
                # else as it arrives: the exchange held that much of it at most, so does
                # the proxy (the answer to a request not recorded, ``--mode off``, too).
                read = await aread_bounded(resp)
                if isinstance(read, Passing):
                    await self._stream(ahanded(read), status, headers,
                                       resp.headers.get("content-length"), out)
                    return
                body = read if read is not None else resp.content
            await out.write(_whole(status, headers, body, False))
        finally:
            await resp.aclose()

    async def _stream(self, parts: AsyncIterator[bytes], status: int,
                      headers: list[tuple[str, str]], length: str | None, out: Out) -> None:
        """The answer written as ``parts`` arrive, each once the client took the last (its
        writes wait while it is slow to read): its bytes as they came, framed by
        ``length`` (the upstream's ``Content-Length``: those are the bytes it counted) or
        else in chunks."""
        framed = length if length is not None and length.isdigit() else None
        kept = [(k, v) for k, v in headers if k.lower() not in _HOP_ANSWER]
        kept.append(("content-length", framed) if framed else ("transfer-encoding", "chunked"))
        await out.write(head_bytes(status, kept))
        try:
            async for part in parts:
                if part:
                    await out.write(part if framed else chunk(part))
        except Exception as exc:  # the upstream failed half-way: so does the answer
            if not self.lib.transport_error(exc):
                raise
            out.abort()
            return
        if not framed:
            await out.write(LAST_CHUNK)


def hidden(text: str, headers: Sequence[tuple[str, str]], url: Any = None) -> str:
    """``text`` (a log line, an error message) without the credentials of the request whose
    ``headers`` (and httpx ``url``) it is about: the values of its credential headers
    (``Authorization``, ``x-api-key``, ``api-key``...) and credential query parameters
    (``?key=``), by the rule keys and cassettes use (``credential_values``), wherever they
    appear in any spelling (``_core.spellings``), then every secret-shaped string and
    credential URL parameter (``mask_text``).
    An exception's message may quote a header, the URL it was sent to or the key alone
    (an upstream refusing it), and the proxy's log and answers are read by people who hold
    no key."""
    query = url.params.multi_items() if url is not None and url.query else ()
    found = credential_values(headers, query)
    if found:
        text = spellings(tuple(found)).replaced(text)
    return mask_text(text, placeholder)


def _non_ascii(headers: list[tuple[str, str]]
               ) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """Headers with a value beyond ASCII: what is sent (each value the bytes the client sent,
    which the HTTP library would refuse to encode as text) and what is keyed (the value as
    the HTTP library reads received bytes: UTF-8 when they are, else latin-1, so a header
    keys alike from the proxy and from an in-process client)."""
    sent: list[tuple[str, Any]] = []
    keyed = []
    for k, v in headers:
        if v.isascii():
            sent.append((k, v))
            keyed.append((k, v))
            continue
        raw = v.encode("latin-1")  # the parser read each byte as one character
        sent.append((k, raw))
        try:
            keyed.append((k, raw.decode("utf-8")))
        except UnicodeDecodeError:
            keyed.append((k, v))
    return sent, keyed


def _whole(status: int, headers: list[tuple[str, str]], body: bytes, head_only: bool) -> bytes:
    """A whole answer, framed by the proxy: one write, header names lower-cased; the
    upstream's framing among them is dropped. A ``HEAD`` answer, a 1xx, 204 or 304 has no
    body."""
    kept = [(low, v) for k, v in headers if (low := k.lower()) not in _HOP_ANSWER]
    if head_only or status in (204, 304) or status < 200:
        return head_bytes(status, kept)
    kept.append(("content-length", str(len(body))))
    return head_bytes(status, kept) + body
