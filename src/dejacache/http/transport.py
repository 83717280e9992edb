"""The explicit seam: transports that record and replay through dejacache, then call the next.

``OpenAI(http_client=dejacache.http_client())`` (or ``Anthropic(...)``, or any httpx/httpx2
client) sends every request through :class:`Transport`, which keys it, applies the mode in
force (``scope.current()``: a block, ``configure()``, or the environment) and either answers
from the store or calls ``next_transport`` and stores what came back. Automatic interception
(``intercept.py``) runs the same functions from patched transport classes.

Whole bodies go through ``_engine.call_sync``/``call_async`` (modes, single-flight, fail-open
stores); one larger than the recording bound is handed on as it arrives and not stored
(``_passing.py``). Server-sent event streams are handed to the caller as they arrive and stored
once the answer is complete (``recording.py``): a stream abandoned half-way is not a complete
answer.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, NamedTuple

from .._core.flow import Fail, Store
from .._engine import AsyncDriver, SyncDriver, Unkept, call_async, call_sync, encode_record
from .._secrets import key_loaded, secret_key
from ..cassettes.ageing import sending
from ..cassettes.vcr_match import calling
from ..config import Effective
from ..errors import ConfigurationError, ReplayMiss
from ..scope import current
from ..stats import record_miss
from ..stores._base import Record, off_loop
from . import observers
from ._libs import LIBRARIES, Lib, lib_named, lib_of
from ._passing import Passing, aread_bounded, passed_on, read_bounded
from ._pending import built
from .aliases import AliasTable, table_for
from .bodies import credentials_in
from .codings import Past, decoded
from .exchange import (
    body_bytes,
    error_value,
    opaque_value,
    replay_headers,
    response_value,
    storable,
)
from .headers import credential_values, spelled_names
from .identities import identities_for, scope_of
from .keying import Identity, keyed
from .providers import Provider, detect
from .recording import Recorder, awire_chunks, bound_in_force, recording_classes, wire_chunks
from .sdk_errors import native_miss
from .sse import is_stream, replay_async, replay_sync

__all__ = [
    "AsyncTransport",
    "Options",
    "Replayed",
    "Transport",
    "async_http_client",
    "handle_async",
    "handle_sync",
    "http_client",
]

KIND = "http"


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """Per-seam settings. ``realtime`` replays streams at their recorded pace; ``volatile``
    adds to the volatile items in force for requests through this seam; ``headers`` False
    keys no request header (what importers write: vcrpy never matched them, and a cassette
    moved over keeps that rule)."""

    realtime: bool = False
    ignore_hosts: frozenset[str] = frozenset()
    volatile: tuple[str | re.Pattern[str], ...] = ()
    headers: bool = True
    #: A replayed whole answer comes back as :class:`Replayed` (a driver that writes the
    #: answer's bytes itself: the proxy), not as a library response it would take apart.
    replayed: bool = False


class Replayed(NamedTuple):
    """A whole answer replayed from the store, as data (``Options.replayed``): the status,
    the headers a replay hands back (``exchange.replay_headers``) and the body's bytes."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


# Set while we hand a request to the next transport, so a patched transport underneath
# (automatic interception under an explicit client) does not record the same call twice,
# and the replay backstop (socketguard.py) lets the connection it opens through.
_BYPASS: contextvars.ContextVar[bool] = contextvars.ContextVar("dejacache_http_bypass",
                                                               default=False)


def bypassing() -> bool:
    return _BYPASS.get()


def handing_on() -> contextlib.AbstractContextManager[None]:
    """Around a request let through on purpose (an ignored host, caching off)."""
    return _bypass()


@contextlib.contextmanager
def _bypass() -> Iterator[None]:
    token = _BYPASS.set(True)
    try:
        yield
    finally:
        _BYPASS.reset(token)


# The value of a live answer handed on as it arrives, past the recording bound
# (``_passing.py``): only the call that went live holds it (``_Call.live``).
_PASSED: dict[str, Any] = {}


@dataclasses.dataclass(slots=True)
class _Call:
    lib: Lib
    eff: Effective
    provider: Provider
    name: str
    key: str
    canonical: bytes
    stream: bool
    aliases: AliasTable | None
    realtime: bool
    replayed: bool
    # What the server answered when this call went live (a response, or the transport error
    # it raised): the caller gets it untouched, whatever of it the store keeps.
    live: Any = None
    # (key, canonical) with the URL's ids as they are, when aliasing changed the URL: how
    # the call was keyed before URLs were aliased. Looked up first, so those recordings
    # still replay (an exact match: never a wrong answer); new ones are kept under ``key``.
    raw: tuple[str, bytes] | None = None
    identity: Identity | None = None
    # The request's credentials (``headers.credential_values``), found when it goes live:
    # what the stored answer, or error, must not quote (``exchange.unechoed``).
    credentials: list[str] = dataclasses.field(default_factory=list)

    @property
    def sequenced(self) -> bool:
        return self.eff.features.sequenced

    @property
    def first(self) -> tuple[str, bytes]:
        """The form looked up first (the engine's "fast" key; ``rekey`` gives the full)."""
        return self.raw or (self.key, self.canonical)

    @property
    def rekey(self) -> Callable[[], tuple[str, bytes]] | None:
        return None if self.raw is None else self._keyed

    def _keyed(self) -> tuple[str, bytes]:
        return self.key, self.canonical


def _as_sent(headers: Any) -> list[tuple[str, str]]:
    """A response's headers with each name as the server spelled it (``spelled_names``)."""
    return spelled_names(headers.raw, headers.multi_items())


def _folded(items: list[tuple[str, str]]) -> dict[str, str]:
    """A request's headers by lower-cased name, repeats joined with ``", "`` (as the
    libraries' ``Headers.get`` joins them): asked several times per request, where each of
    the libraries' lookups scans and decodes every header (a fifth of keying a request)."""
    out: dict[str, str] = {}
    for k, v in items:
        low = k.lower()
        out[low] = f"{out[low]}, {v}" if low in out else v
    return out


# Escapes of a path's delimiters (``/``, ``?``, ``#``) and of ``%`` itself. ``url.path``
# decodes them as httpx does, so ``/projects/group%2Frepo`` (one segment: GitLab's project
# id) and ``/projects/group/repo`` (two resources apart) would share a key, as would ``%25zz``
# and ``%zz``. The keyed path keeps them escaped; a path without one is keyed as ever.
_DELIMITER_ESCAPE = re.compile(r"(%(?:2[Ff]|3[Ff]|23|25))")


def _keyed_path(url: Any, path: str) -> str:
    """The path as the key holds it: ``path`` (``url.path``, decoded) unless the raw path
    escapes a delimiter, then decoded around those escapes, each kept upper-cased."""
    raw = url.raw_path
    if b"%" not in raw:
        return path
    text = raw.split(b"?", 1)[0].decode("latin-1")
    pieces = _DELIMITER_ESCAPE.split(text)
    if len(pieces) == 1:
        return path
    # (imported here: ``from urllib.parse import ...`` on every call went through
    # urllib.parse's module ``__getattr__`` for ``__path__``, an exception per request)
    from urllib.parse import unquote

    # split() with a group alternates text and escape: even indexes are text
    return "".join(p.upper() if i % 2 else unquote(p) for i, p in enumerate(pieces))


def _prepare(lib: Lib, eff: Effective, request: Any, body: bytes, opts: Options,
             items: list[tuple[str, str]] | None = None) -> _Call:
    """The call ``request`` makes. ``items``: its headers as ``multi_items()`` gives them,
    from a driver that has them already (decoding them again was ~15 us of the proxy's
    replayed call; the proxy's tests pin that both give the same key)."""
    url = request.url
    host = url.host
    path = url.path
    if items is None:
        items = request.headers.multi_items()
        spelled = spelled_names(request.headers.raw, items)
    else:
        spelled = items
    headers = _folded(items)
    provider = detect(host, path, headers)
    name = provider.endpoint(host, path)
    aliases = table_for(eff)
    extra = (*eff.volatile, *opts.volatile) if opts.volatile else eff.volatile
    # (no query, no parse: ``params`` parses the query anew on every call)
    args = (request.method, _keyed_path(url, path),
            url.params.multi_items() if url.query else [], body,
            headers.get("content-type", ""), provider, aliases, extra, eff.key_substitute)
    k = keyed(eff, name, args, spelled if opts.headers else None)
    calling(k.key, eff.namespace or "", name, k.canonical)  # for cassettes' match="vcr"
    sending(k.key, headers.get("user-agent", ""))  # the SDK a new recording names
    realtime = opts.realtime or eff.realtime
    call = _Call(lib, eff, provider, name, k.key, k.canonical, k.stream, aliases, realtime,
                 opts.replayed)
    call.identity = k.identity
    call.raw = k.older
    return call


def _sending(call: _Call, request: Any) -> Any:
    """``request`` goes live: the credentials its answer, or the error sending it raises
    (h11's "Illegal header value b'KEY\\n'"), may quote are found (``exchange.unechoed``)."""
    url = request.url
    headers = request.headers
    call.credentials = credential_values(
        headers.multi_items(), url.params.multi_items() if url.query else (),
        credentials_in(request.content, headers.get("content-type", "")))
    return request


def _received(call: _Call, resp: Any) -> Any:
    """A live answer came: the cookies it sets are echoes from now on (``identities.py``)."""
    if "set-cookie" in resp.headers:
        table = identities_for(call.eff)
        if table is not None:
            table.set_cookies(scope_of(call.provider.name, call.name),
                              resp.headers.multi_items())
    return resp


def _explained(call: _Call, miss: ReplayMiss) -> ReplayMiss:
    return call.identity.explain(miss) if call.identity is not None else miss


def _skip(eff: Effective, request: Any, opts: Options) -> bool:
    return eff.namespace is None or eff.mode == "off" or (
        bool(opts.ignore_hosts) and request.url.host in opts.ignore_hosts
    )


# ---------------------------------------------------------------- responses from values


@functools.cache
def _stream_classes(lib: Lib) -> tuple[type, type]:
    m = lib.module

    class ReplayStream(m.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, events: list[list[Any]], realtime: bool) -> None:
            self._events = events
            self._realtime = realtime

        def __iter__(self) -> Iterator[bytes]:
            return replay_sync(self._events, self._realtime)

    class AsyncReplayStream(m.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, events: list[list[Any]], realtime: bool) -> None:
            self._events = events
            self._realtime = realtime

        def __aiter__(self) -> AsyncIterator[bytes]:
            return replay_async(self._events, self._realtime)

    return ReplayStream, AsyncReplayStream


def _raise_recorded(lib: Lib, err: dict[str, Any], request: Any) -> None:
    m = lib.module
    cls = getattr(m, str(err.get("type", "")), None)
    # Only the library's own transport errors are rebuilt: a stored name never picks a class
    # outside that family.
    if not (isinstance(cls, type) and issubclass(cls, m.TransportError)):
        cls = m.TransportError
    raise cls(str(err.get("message", "")), request=request)


def _respond(call: _Call, request: Any, value: dict[str, Any], *, is_async: bool) -> Any:
    """The answer for the caller: the live one when this call went live, else ``value``.
    ``request`` may be ``_pending.Pending``: a :class:`Replayed` answer never builds it."""
    if call.aliases is not None:
        if call.live is None:
            _same_object(call, request.url.path, value)
        call.aliases.replayed(value)  # (a live answer's ids were learned as it was read)
    live = call.live
    if isinstance(live, BaseException):
        raise live
    if live is not None:
        return live
    err = value.get("error")
    if err is not None:
        _raise_recorded(call.lib, err, built(request))
    events = value.get("events")
    if events is None and call.replayed and not observers.WATCHERS.get():
        # Observers are handed library responses: only unobserved answers skip them.
        return Replayed(value["status"], replay_headers(value["headers"]), body_bytes(value))
    request = built(request)
    m = call.lib.module
    headers = replay_headers(value["headers"])
    if events is not None:
        cls = _stream_classes(call.lib)[1 if is_async else 0]
        return m.Response(
            value["status"], headers=headers, stream=cls(events, call.realtime),
            request=request,
        )
    body = body_bytes(value)
    if any(k == "content-encoding" for k, _ in headers):
        # Kept as it came (``codings.py``): decoded by the caller as it reads it, as live.
        return m.Response(value["status"], headers=[*headers, ("content-length", str(len(body)))],
                          stream=m.ByteStream(body), request=request)
    return m.Response(value["status"], headers=headers, content=body, request=request)


def _same_object(call: _Call, path: str, value: dict[str, Any]) -> None:
    """A recorded answer about the object the URL names (``GET /v1/responses/{id}``) carries
    the id that object had when recorded; after its creation was re-recorded, the URL carries
    the new one. Both are keyed alike, so the client polling by either keeps hitting."""
    named = call.provider.url_id(path)
    body = value.get("json")
    if named is not None and type(body) is dict:
        own = body.get("id")
        if type(own) is str and own != named and call.aliases is not None:
            call.aliases.alias_as(own, named)


def _clean_headers(headers: Any) -> list[tuple[str, str]]:
    # We hand on decoded bytes, so the encoding and length of the wire body no longer apply.
    return [
        (k, v) for k, v in headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]


def _handed_headers(resp: Any, as_sent: bool) -> Any:
    """The headers a stream is handed on with: as they came, with its bytes as they came
    (``recording.wire_chunks``), so the caller decodes it as it would have; without the
    wire's when those bytes are the decoded content."""
    return resp.headers if as_sent else _clean_headers(resp.headers)


def _extensions(resp: Any) -> dict[str, Any]:
    # The connection itself went back to the pool when the body was read.
    return {k: v for k, v in resp.extensions.items() if k != "network_stream"}


def _read_whole(call: _Call, resp: Any, raw: bytes | None, *, is_async: bool) -> dict[str, Any]:
    """The stored value of a whole (non-stream) answer read as ``raw`` wire bytes
    (``_passing.read_bounded``), or ``_PASSED`` (not to be stored) when they decode past the
    recording bound; the caller gets those bytes and every header as they came (its client
    decodes them as it would). ``raw`` None, when the transport handed the
    answer over read already (``Response(content=...)`` from a ``MockTransport`` handler:
    ``iter_raw`` raised ``StreamConsumed`` on it, and recording through one failed): the
    caller gets the decoded content, without the headers of the wire encoding."""
    m = call.lib.module
    if raw is None:
        body = resp.content
        call.live = m.Response(resp.status_code, headers=_clean_headers(resp.headers),
                               stream=m.ByteStream(body), extensions=_extensions(resp))
        return _kept(call, response_value(resp.status_code, _as_sent(resp.headers),
                                          resp.headers.get("content-type", ""), call.provider,
                                          body=body, credentials=call.credentials))
    call.live = m.Response(resp.status_code, headers=resp.headers, stream=m.ByteStream(raw),
                           extensions=_extensions(resp))
    # Stored decoded when every coding is undone; else as it came (``codings.py``); not at
    # all when decoded it passes the recording bound (a decompression bomb).
    encoding = resp.headers.get("content-encoding", "")
    body = decoded(encoding, raw, bound=bound_in_force())
    if isinstance(body, Past):  # handed on as any answer past the bound (``_passing.py``)
        call.live = passed_on(call, call.lib, resp, Passing([raw], None, body.bound),
                              resp.headers, is_async=is_async)
        return _PASSED
    if body is None:
        return _kept(call, opaque_value(resp.status_code, _as_sent(resp.headers), call.provider,
                                        raw, encoding, credentials=call.credentials))
    return _kept(call, response_value(resp.status_code, _as_sent(resp.headers),
                                      resp.headers.get("content-type", ""), call.provider,
                                      body=body, credentials=call.credentials))


def _past_bound(call: _Call, resp: Any, passing: Passing, rec: Recorder | None, *,
                is_async: bool) -> Any:
    """The caller's answer to a live ``resp`` read up to the recording bound and no further
    (``_passing.py``): not stored; said by the stream recorder ``rec`` when one read it."""
    headers = resp.headers if rec is None else _handed_headers(resp, rec.as_sent)
    return passed_on(call, call.lib, resp, passing, headers, is_async=is_async,
                     said=rec is not None)


def _kept(call: _Call, value: dict[str, Any]) -> dict[str, Any]:
    """A live answer as stored: tagged with the call it answers, before the store keeps it."""
    return value if call.aliases is None else call.aliases.keep(call.key, value)


def _read_events(call: _Call, resp: Any, rec: Recorder, chunks: list[bytes], *,
                 is_async: bool) -> dict[str, Any]:
    """The stored value of a stream read whole (an SSE answer to a call that did not ask for
    a stream); the caller gets its bytes as they came (``recording.wire_chunks``)."""
    m = call.lib.module
    rec.end()
    if rec.dropped:  # its decoded tail passed the bound: handed on, said at its end
        call.live = _past_bound(call, resp, Passing(chunks, None, rec.bound, rec.deferred), rec,
                                is_async=is_async)
        return _PASSED
    call.live = m.Response(resp.status_code, headers=_handed_headers(resp, rec.as_sent),
                           stream=m.ByteStream(b"".join(chunks)), extensions=_extensions(resp))
    return rec.value()


class _Keeping:
    """How an HTTP exchange is kept: only storable answers (``exchange.storable``), a record
    that cannot be encoded is an error, a transport error is stored as the answer (a cassette
    replays failures in order), anything else the run raised is the caller's alone."""

    __slots__ = ()
    exchange: _Call
    t0: float

    def record(self, s: Store) -> Record | None:
        call = self.exchange
        if not storable(s.value, call.sequenced):
            return None
        return encode_record(call.eff, call.name, KIND, s.key, s.canonical, s.value, s.duration)

    def counted(self, s: Store, stored: bool) -> None:
        record_miss(self.exchange.name, stored=stored, error="error" in s.value)

    def fail(self, f: Fail) -> Store | None:
        if self.exchange.lib.transport_error(f.error):
            return Store(f.key, f.canonical, error_value(f.error, self.exchange.credentials),
                         time.perf_counter() - self.t0)
        return None


class _StreamSync(_Keeping, SyncDriver):
    __slots__ = ("exchange",)

    def __init__(self, call: _Call) -> None:
        super().__init__(call.eff, call.name, KIND, None, call.rekey)
        self.exchange = call

    def later(self, value: dict[str, Any], duration: float) -> None:
        """Store a stream read to its end."""
        self.store(Store(self.exchange.key, self.exchange.canonical, value, duration))


class _StreamAsync(_Keeping, AsyncDriver):
    __slots__ = ("exchange",)

    def __init__(self, call: _Call) -> None:
        super().__init__(call.eff, call.name, KIND, None, call.rekey)
        self.exchange = call

    async def later(self, value: dict[str, Any], duration: float) -> None:
        await self.store(Store(self.exchange.key, self.exchange.canonical, value, duration))


def _is_stream_answer(resp: Any) -> bool:
    return is_stream(resp.headers.get("content-type", "")) and resp.status_code < 400


# ---------------------------------------------------------------- sync flow


def _live_sync(call: _Call, request: Any, send: Callable[[Any], Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        with _bypass():
            resp = _received(call, send(_sending(call, request)))
        value, handed = _PASSED, None
        try:
            if _is_stream_answer(resp):
                rec = Recorder(call, resp, t0)
                chunks: list[bytes] = []
                source = wire_chunks(resp)
                for chunk in source:
                    chunks.append(chunk)
                    rec.feed(chunk)
                    if rec.dropped:
                        handed = Passing(chunks, source, rec.bound, rec.deferred)
                        call.live = _past_bound(call, resp, handed, rec, is_async=False)
                        break
                else:
                    value = _read_events(call, resp, rec, chunks, is_async=False)
            else:
                raw = read_bounded(resp)
                if isinstance(raw, Passing):
                    handed = raw
                    call.live = _past_bound(call, resp, raw, None, is_async=False)
                else:
                    value = _read_whole(call, resp, raw, is_async=False)
        finally:
            if handed is None:
                resp.close()  # (else the caller's answer closes it)
        if value is _PASSED:
            raise Unkept(value, error=False)  # (a whole answer, handed on: not an error)
    except Exception as exc:
        if not (call.sequenced and call.lib.transport_error(exc)):
            raise
        call.live = exc
        # a cassette keeps failures in order, to replay them
        value = error_value(exc, call.credentials)
    if not storable(value, call.sequenced):
        raise Unkept(value)  # (a transient failure, runtime cache)
    return value


def _stream_sync(call: _Call, request: Any, send: Callable[[Any], Any]) -> Any:
    d = _StreamSync(call)
    flow = d.flow(*call.first, flights=False)  # each caller reads its own stream
    run, value = d.advance(flow)
    if run is None:
        return _respond(call, request, value, is_async=False)
    try:
        with _bypass():
            resp = _received(call, send(_sending(call, request)))
    except Exception as exc:
        d.advance(flow, exc=exc)  # a transport error is kept; the flow raises it again
        raise  # pragma: no cover
    if not _is_stream_answer(resp):
        try:
            raw = read_bounded(resp)
        except BaseException:
            resp.close()
            raise
        if isinstance(raw, Passing):
            d.advance(flow, d.ran(None, keep=False))
            record_miss(call.name, stored=False)
            return _past_bound(call, resp, raw, None, is_async=False)
        try:
            value = _read_whole(call, resp, raw, is_async=False)
        finally:
            resp.close()
        if value is _PASSED:  # decoded past the bound: handed on, not kept
            d.advance(flow, d.ran(None, keep=False))
            record_miss(call.name, stored=False)
            return call.live
        d.advance(flow, d.ran(value))
        return _respond(call, request, value, is_async=False)
    stream = recording_classes(call.lib)[0](Recorder(call, resp, d.t0).track(), d.later)
    d.advance(flow, d.ran(None, keep=False))  # stored once read to its end
    return call.lib.module.Response(
        resp.status_code, headers=_handed_headers(resp, not resp.is_stream_consumed),
        stream=stream,
        request=request, extensions=resp.extensions,
    )


@observers.watched_sync  # the prefix monitor sees every answer (runtime/prefix.py)
def handle_sync(
    lib: Lib, eff: Effective, request: Any, send: Callable[[Any], Any], opts: Options
) -> Any:
    """Answer one request under ``eff``: from the store, or through ``send`` (recorded)."""
    if _skip(eff, request, opts):
        with _bypass():
            return send(request)
    call = _prepare(lib, eff, request, request.read(), opts)
    try:
        if call.stream:
            return _stream_sync(call, request, send)
        while True:
            try:
                value = call_sync(eff, call.name, KIND, *call.first,
                                  lambda: _live_sync(call, request, send), rekey=call.rekey)
            except Unkept as u:
                value = u.value
            if value is not _PASSED:
                break
            if call.live is not None:
                return call.live
            # (the flight it waited on was handed on, not kept: it goes live itself)
    except ReplayMiss as miss:
        raise native_miss(_explained(call, miss)) from None
    return _respond(call, request, value, is_async=False)


# ---------------------------------------------------------------- async flow


async def _live_async(
    call: _Call, request: Any, send: Callable[[Any], Awaitable[Any]]
) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        token = _BYPASS.set(True)
        try:
            resp = _received(call, await send(_sending(call, request)))
        finally:
            _BYPASS.reset(token)
        value, handed = _PASSED, None
        try:
            if _is_stream_answer(resp):
                rec = Recorder(call, resp, t0)
                chunks: list[bytes] = []
                source = awire_chunks(resp)
                async for chunk in source:
                    chunks.append(chunk)
                    rec.feed(chunk)
                    if rec.dropped:
                        handed = Passing(chunks, source, rec.bound, rec.deferred)
                        call.live = _past_bound(call, resp, handed, rec, is_async=True)
                        break
                else:
                    value = _read_events(call, resp, rec, chunks, is_async=True)
            else:
                raw = await aread_bounded(resp)
                if isinstance(raw, Passing):
                    handed = raw
                    call.live = _past_bound(call, resp, raw, None, is_async=True)
                else:
                    value = _read_whole(call, resp, raw, is_async=True)
        finally:
            if handed is None:
                await resp.aclose()
        if value is _PASSED:
            raise Unkept(value, error=False)  # (a whole answer, handed on: not an error)
    except Exception as exc:
        if not (call.sequenced and call.lib.transport_error(exc)):
            raise
        call.live = exc
        value = error_value(exc, call.credentials)
    if not storable(value, call.sequenced):
        raise Unkept(value)  # (a transient failure, runtime cache)
    return value


async def _stream_async(
    call: _Call, request: Any, send: Callable[[Any], Awaitable[Any]]
) -> Any:
    d = _StreamAsync(call)
    flow = d.flow(*call.first, flights=False)
    run, value = await d.advance(flow)
    if run is None:
        return _respond(call, request, value, is_async=True)
    token = _BYPASS.set(True)
    try:
        resp = _received(call, await send(_sending(call, request)))
    except Exception as exc:
        await d.advance(flow, exc=exc)
        raise  # pragma: no cover
    finally:
        _BYPASS.reset(token)
    if not _is_stream_answer(resp):
        try:
            raw = await aread_bounded(resp)
        except BaseException:
            await resp.aclose()
            raise
        if isinstance(raw, Passing):
            await d.advance(flow, d.ran(None, keep=False))
            record_miss(call.name, stored=False)
            return _past_bound(call, resp, raw, None, is_async=True)
        try:
            value = _read_whole(call, resp, raw, is_async=True)
        finally:
            await resp.aclose()
        if value is _PASSED:  # decoded past the bound: handed on, not kept
            await d.advance(flow, d.ran(None, keep=False))
            record_miss(call.name, stored=False)
            return call.live
        await d.advance(flow, d.ran(value))
        return _respond(call, request, value, is_async=True)
    stream = recording_classes(call.lib)[1](Recorder(call, resp, d.t0).track(), d.later)
    await d.advance(flow, d.ran(None, keep=False))
    return call.lib.module.Response(
        resp.status_code, headers=_handed_headers(resp, not resp.is_stream_consumed),
        stream=stream,
        request=request, extensions=resp.extensions,
    )


@observers.watched_async
async def handle_async(
    lib: Lib, eff: Effective, request: Any, send: Callable[[Any], Awaitable[Any]], opts: Options,
    items: list[tuple[str, str]] | None = None,
) -> Any:
    """Answer one request under ``eff`` (:func:`handle_sync`'s twin). ``request`` may be a
    ``_pending.Pending`` (with its headers as ``items``): it is built only when it is sent,
    or carried by what the caller gets (a stream, a recorded transport error)."""
    if _skip(eff, request, opts):
        with _bypass():
            return await send(built(request))
    if not key_loaded():
        # Keys and stored requests mask credentials with a key whose first use reads (or
        # creates) a file: loaded in a worker thread, never on the event loop.
        await off_loop(secret_key)
    call = _prepare(lib, eff, request, await request.aread(), opts, items)
    try:
        if call.stream:
            return await _stream_async(call, built(request), send)
        while True:
            try:
                value = await call_async(eff, call.name, KIND, *call.first,
                                         lambda: _live_async(call, built(request), send),
                                         rekey=call.rekey)
            except Unkept as u:
                value = u.value
            if value is not _PASSED:
                break
            if call.live is not None:
                return call.live
            # (as in handle_sync)
    except ReplayMiss as miss:
        raise native_miss(_explained(call, miss)) from None
    return _respond(call, request, value, is_async=True)


# ---------------------------------------------------------------- the public seam


def _pick_lib(library: str | None, next_transport: Any) -> Lib:
    if next_transport is not None:
        return lib_of(next_transport)
    names = (library,) if library else LIBRARIES
    for name in names:
        lib = lib_named(name)
        if lib is not None:
            return lib
    wanted = library or "httpx2 or httpx"
    raise ConfigurationError(
        f"dejacache's HTTP transport needs {wanted}: pip install 'dejacache[httpx2]' "
        "(or 'dejacache[httpx]')"
    )


class Transport:
    """A sync transport (httpx or httpx2) that records and replays, then calls the next one.

    ``next_transport`` defaults to the library's ``HTTPTransport()``; the library is taken
    from it, else ``library=`` ("httpx2" or "httpx"), else httpx2 when installed.
    """

    def __init__(
        self,
        next_transport: Any = None,
        *,
        library: str | None = None,
        realtime: bool = False,
        ignore_hosts: Iterable[str] = (),
    ) -> None:
        self.lib = _pick_lib(library, next_transport)
        self.next_transport = (
            next_transport if next_transport is not None else self.lib.module.HTTPTransport()
        )
        self.options = Options(realtime=realtime, ignore_hosts=frozenset(ignore_hosts))

    def handle_request(self, request: Any) -> Any:
        return handle_sync(self.lib, current(), request, self.next_transport.handle_request,
                           self.options)

    def close(self) -> None:
        self.next_transport.close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTransport:
    """Async twin of :class:`Transport` (``next_transport`` defaults to
    ``AsyncHTTPTransport()``)."""

    def __init__(
        self,
        next_transport: Any = None,
        *,
        library: str | None = None,
        realtime: bool = False,
        ignore_hosts: Iterable[str] = (),
    ) -> None:
        self.lib = _pick_lib(library, next_transport)
        self.next_transport = (
            next_transport if next_transport is not None
            else self.lib.module.AsyncHTTPTransport()
        )
        self.options = Options(realtime=realtime, ignore_hosts=frozenset(ignore_hosts))

    async def handle_async_request(self, request: Any) -> Any:
        return await handle_async(self.lib, current(), request,
                                  self.next_transport.handle_async_request, self.options)

    async def aclose(self) -> None:
        await self.next_transport.aclose()

    async def __aenter__(self) -> AsyncTransport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def http_client(
    next_transport: Any = None,
    *,
    library: str | None = None,
    realtime: bool = False,
    ignore_hosts: Iterable[str] = (),
    **client_kwargs: Any,
) -> Any:
    """An ``httpx2.Client`` (or ``httpx.Client``) whose calls go through dejacache.

    ``OpenAI(http_client=dejacache.http_client())``. Extra keyword arguments go to the
    client; redirects are followed by default, as the SDKs' own clients do.
    """
    t = Transport(next_transport, library=library, realtime=realtime, ignore_hosts=ignore_hosts)
    client_kwargs.setdefault("follow_redirects", True)
    return t.lib.module.Client(transport=t, **client_kwargs)


def async_http_client(
    next_transport: Any = None,
    *,
    library: str | None = None,
    realtime: bool = False,
    ignore_hosts: Iterable[str] = (),
    **client_kwargs: Any,
) -> Any:
    """Async twin of :func:`http_client`: ``AsyncOpenAI(http_client=...)``."""
    t = AsyncTransport(next_transport, library=library, realtime=realtime,
                       ignore_hosts=ignore_hosts)
    client_kwargs.setdefault("follow_redirects", True)
    return t.lib.module.AsyncClient(transport=t, **client_kwargs)
