"""Observers: code that wants to see each LLM exchange the transports handle, without taking
part in it (the prompt-prefix monitor).

An observer watches a context: :func:`watch` shows it the exchanges of requests made in that
context and in contexts that carry it (asyncio tasks, and the threads and executor tasks a
``PrefixMonitor`` carries it into), never those of unrelated threads, until :func:`unwatch`.
``handle_sync``/``handle_async`` are wrapped by :func:`watched_sync`/:func:`watched_async`;
while nothing watches the caller's context that costs two context-variable reads per request.
Otherwise, once the answer is known (served from the store, replayed, or live, streamed or
not), each observer is called once with an :class:`Exchange`: the request body as sent,
whether the provider saw it, and the provider's usage object, as soon as its prompt-side
counts are known (a stream's first usage-bearing event: some callers stop reading a stream
early and never close it, as litellm does). Observers run in the thread that reads the answer; an
observer that raises is reported as a warning, never to the caller (beside a stream, under
``-W error``, that warning waits for the stream's end: ``_deferred``).

A rewriter (:func:`rewrite`) is the one kind of watcher that takes part: before the request is
handled it may return new body bytes for it (the prompt-cache fixes of
``runtime/_cache_apply.py`` add cache controls, splicing them into the bytes the SDK wrote),
and the request is rebuilt with them (``Content-Length`` recomputed). A rewriter that raises
is reported as a warning and the request goes as it was.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol

import orjson

from ._deferred import Deferred
from ._pending import built
from .codings import Decoding, is_encoded
from .providers import detect
from .recording import Held
from .sse import SSESplitter, event_data, is_sse

__all__ = ["REWRITERS", "WATCHERS", "Exchange", "Rewriter", "rewrite", "unrewrite", "unwatch",
           "watch", "watched_async", "watched_sync", "watching"]


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    provider: str  # "anthropic", "openai", "http"
    endpoint: str  # "anthropic.messages", "openai.chat.completions", ...
    request: bytes  # the request body as sent
    status: int
    usage: dict[str, Any] | None  # the provider's usage object, nested fields kept
    context: contextvars.Context  # the caller's context when the request was made
    # Answered from dejacache's own store (replay, cache hit, or an identical call in flight):
    # the provider never saw this request, and ``usage`` is the stored answer's.
    local: bool = False
    path: str = ""  # the URL path (Gemini names the model there, not in the body)


Observer = Callable[[Exchange], None]

# The observers watching requests made in this context (a tuple: replaced, never mutated).
WATCHERS: contextvars.ContextVar[tuple[Observer, ...]] = contextvars.ContextVar(
    "dejacache_observers", default=()
)
_Token = contextvars.Token[tuple[Observer, ...]]


def watch(observer: Observer) -> _Token:
    """Show ``observer`` the exchanges of requests made in this context from now on."""
    return WATCHERS.set((*WATCHERS.get(), observer))


def unwatch(token: _Token, observer: Observer) -> None:
    """Undo the :func:`watch` that returned ``token``."""
    try:
        WATCHERS.reset(token)
    except ValueError:  # undone from another context (generator or task hand-over)
        left = list(WATCHERS.get())
        if observer in left:
            left.remove(observer)
        WATCHERS.set(tuple(left))


#: ``(provider, endpoint, body) -> new body | None``: see the module.
Rewriter = Callable[[str, str, bytes], bytes | None]
# The rewriters of requests made in this context (a tuple: replaced, never mutated).
REWRITERS: contextvars.ContextVar[tuple[Rewriter, ...]] = contextvars.ContextVar(
    "dejacache_rewriters", default=()
)


def rewrite(rewriter: Rewriter) -> contextvars.Token[tuple[Rewriter, ...]]:
    """Let ``rewriter`` change the bodies of requests made in this context from now on."""
    return REWRITERS.set((*REWRITERS.get(), rewriter))


def unrewrite(token: contextvars.Token[tuple[Rewriter, ...]], rewriter: Rewriter) -> None:
    """Undo the :func:`rewrite` that returned ``token``."""
    try:
        REWRITERS.reset(token)
    except ValueError:  # undone from another context
        left = list(REWRITERS.get())
        if rewriter in left:
            left.remove(rewriter)
        REWRITERS.set(tuple(left))


def _rewritten(lib: Any, request: Any, rewriters: tuple[Rewriter, ...]) -> Any:
    """``request`` with the body its rewriters give (the same object when none changes it)."""
    url = request.url
    provider = detect(url.host, url.path, request.headers)
    if provider.name == "http":
        return request
    try:
        body = request.content
    except lib.module.RequestNotRead:
        return request  # a streamed upload is not an LLM request body
    new = body
    endpoint = provider.endpoint(url.host, url.path)
    for rewriter in rewriters:
        try:
            new = rewriter(provider.name, endpoint, new) or new
        except Exception as exc:  # a rewriter's bug must never fail the caller's request
            from ..errors import DejacacheWarning

            warnings.warn(f"dejacache: rewriter {rewriter!r} failed: {exc!r}", DejacacheWarning,
                          stacklevel=2)
    if new is body:
        return request
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    return lib.module.Request(request.method, url, headers=headers, content=new,
                              extensions=request.extensions)


def watching() -> bool:
    """Whether an observer watches requests made here."""
    return bool(WATCHERS.get())


def _notify(ex: Exchange) -> None:
    for obs in ex.context.get(WATCHERS) or ():
        try:
            obs(ex)
        except Exception as exc:  # an observer's bug must never fail the caller's request
            from ..errors import DejacacheWarning

            warnings.warn(f"dejacache: observer {obs!r} failed: {exc!r}", DejacacheWarning,
                          stacklevel=2)


def _usage_of(data: Any, into: dict[str, Any]) -> bool:
    """Merge the usage carried by one JSON body or SSE event into ``into``; True when it holds
    prompt-side counts (then the observers can be told)."""
    if not isinstance(data, dict):
        return False
    found: Any = data.get("usage")
    kind = data.get("type")
    if kind == "message_start" and isinstance(data.get("message"), dict):
        found = data["message"].get("usage")  # Anthropic: input counts arrive first
    elif isinstance(data.get("response"), dict):
        found = data["response"].get("usage")  # Responses stream: response.completed
    elif found is None:
        found = data.get("usageMetadata")  # Gemini: in every stream event, whole in the last
    if not isinstance(found, dict):
        return False
    into.update({k: v for k, v in found.items() if v is not None})
    return any(k in found for k in ("prompt_tokens", "input_tokens", "promptTokenCount"))


class _Watch:
    """One exchange in flight: parses the answer as it passes and notifies once."""

    __slots__ = ("base", "buffer", "decoding", "done", "held", "splitter", "usage")

    def __init__(self, base: Exchange, content_type: str, encoding: str) -> None:
        self.base = base
        self.usage: dict[str, Any] = {}
        self.done = False
        self.splitter = SSESplitter() if is_sse(content_type) else None
        self.buffer: list[bytes] | None = None if self.splitter else []
        # Live answers arrive as they came: read through the recordings' own decoding
        # (``codings.py``), to the recordings' bound. One it cannot undo, or that passes
        # the bound, is not parsed: reported without usage.
        self.held = Held()  # (a whole answer is buffered to be parsed: no more than this)
        self.decoding = (Decoding(encoding, bound=self.held.bound)
                         if is_encoded(encoding) else None)

    def feed(self, chunk: bytes) -> None:
        if self.done:
            return
        if self.decoding is not None:
            chunk = self.decoding.feed(chunk)
            if self.decoding.opaque or self.decoding.past:
                self.buffer = None  # (nothing of it is parsed: let go what was held)
                return
        if self.splitter is not None:
            for ev in self.splitter.feed(chunk):
                if _usage_of(event_data(ev), self.usage):
                    self.finish()
                    return
        elif self.buffer is not None:
            if self.held.take(len(chunk)):
                self.buffer.append(chunk)
            else:
                self.buffer = None

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        if self.buffer and not (self.decoding is not None and self.decoding.opaque):
            with contextlib.suppress(orjson.JSONDecodeError):
                _usage_of(orjson.loads(b"".join(self.buffer)), self.usage)
        _notify(dataclasses.replace(self.base, usage=self.usage or None))


class _Teeing:
    """What the sync and async tees share: the observers are told beside the caller's
    stream, and a warning they raise as an error waits for its end (``_deferred``)."""

    def __init__(self, inner: Any, watch: _Watch) -> None:
        self._inner = inner
        self._watch = watch
        self._deferred = Deferred()

    def _feed(self, chunk: bytes) -> None:
        with self._deferred:
            self._watch.feed(chunk)

    def _finish(self) -> None:
        with self._deferred:
            self._watch.finish()
        self._deferred.raise_kept()


@functools.cache
def _tee_classes(module: Any) -> tuple[type, type]:
    class Tee(_Teeing, module.SyncByteStream):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._inner:
                # Most chunks come after the usage: skipped here, a chunk costs the tee
                # 0.07-0.11 us, against 0.18-0.21 us feeding each (measured, 200k chunks).
                if not self._watch.done:
                    self._feed(chunk)
                yield chunk
            self._finish()

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._finish()

    class AsyncTee(_Teeing, module.AsyncByteStream):  # type: ignore[misc]
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._inner:
                if not self._watch.done:
                    self._feed(chunk)
                yield chunk
            self._finish()

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._finish()

    return Tee, AsyncTee


def _begin(lib: Any, request: Any, response: Any, context: contextvars.Context,
           is_async: bool, local: bool) -> Any:
    url = request.url
    provider = detect(url.host, url.path, request.headers)
    if provider.name == "http":
        return response  # not an LLM API: nothing to observe
    try:
        body = request.content
    except lib.module.RequestNotRead:
        body = b""
    headers = response.headers
    base = Exchange(provider.name, provider.endpoint(url.host, url.path), body,
                    response.status_code, None, context, local, url.path)
    watch = _Watch(base, headers.get("content-type", ""), headers.get("content-encoding", ""))
    try:
        content = response.content  # an answer built from the store is already in memory
    except lib.module.ResponseNotRead:
        tee = _tee_classes(lib.module)[1 if is_async else 0]
        response.stream = tee(response.stream, watch)
        return response
    watch.decoding = None  # .content is decoded already
    watch.feed(content)
    watch.finish()
    return response


Handle = Callable[[Any, Any, Any, Any, Any], Any]


class AsyncHandle(Protocol):
    """``handle_async``: ``items``, when given, are the request's headers as
    ``request.headers.multi_items()`` lists them (a driver that built the request from
    headers it parsed already: the proxy)."""

    def __call__(self, lib: Any, eff: Any, request: Any, send: Any, opts: Any,
                 items: list[tuple[str, str]] | None = None) -> Awaitable[Any]: ...


class _Sending:
    """``send`` (the way to the provider), noting whether the handler took it: an answer it
    built without sending came from dejacache's own store."""

    __slots__ = ("send", "sent")

    def __init__(self, send: Callable[[Any], Any]) -> None:
        self.send = send
        self.sent = False

    def __call__(self, request: Any) -> Any:
        self.sent = True
        return self.send(request)


def watched_sync(handle: Handle) -> Handle:
    """Wrap the sync request handler so observers see its exchanges."""

    @functools.wraps(handle)
    def wrapper(lib: Any, eff: Any, request: Any, send: Any, opts: Any) -> Any:
        rewriters = REWRITERS.get()
        if rewriters:
            request = _rewritten(lib, request, rewriters)
        if not WATCHERS.get():
            return handle(lib, eff, request, send, opts)
        context = contextvars.copy_context()
        sending = _Sending(send)
        response = handle(lib, eff, request, sending, opts)
        return _begin(lib, request, response, context, False, not sending.sent)

    return wrapper


def watched_async(handle: AsyncHandle) -> AsyncHandle:
    """Wrap the async request handler so observers see its exchanges."""

    @functools.wraps(handle)
    async def wrapper(lib: Any, eff: Any, request: Any, send: Any, opts: Any,
                      items: list[tuple[str, str]] | None = None) -> Any:
        rewriters = REWRITERS.get()
        watched = WATCHERS.get()
        if rewriters or watched:  # they read the library's request
            request = built(request)
        if rewriters:
            new = _rewritten(lib, request, rewriters)
            if new is not request:  # a new body and length: its headers are its own
                request, items = new, None
        if not watched:
            return await handle(lib, eff, request, send, opts, items)
        context = contextvars.copy_context()
        sending = _Sending(send)
        response = await handle(lib, eff, request, sending, opts, items)
        return _begin(lib, request, response, context, True, not sending.sent)

    return wrapper
