"""Live server-sent event streams, recorded while the caller reads them.

The caller gets every chunk as it arrives, its bytes as they came (its own decoder undoes
their ``Content-Encoding``); the recorder decodes a copy (``codings.py``), cuts it into events
and asks the provider (``Provider.stage``) where each one leaves the answer. A stream is
stored once, when the answer is complete:

- at the provider's end marker (``message_stop``, ``data: [DONE]``, ``response.completed``)
  or at the end of the body;
- and before the caller sees the event that *finishes* the answer (Anthropic
  ``message_delta``, an OpenAI chunk with a ``finish_reason``): the recorder first reads ahead
  to the end marker, for at most ``READ_AHEAD_TIMEOUT`` seconds. litellm stops reading at
  that event and never closes the response; when the end marker is in a later socket
  read than the finishing event, as it is whenever the server writes one event at a time, its
  streams were never stored. Events before that point are never held back.

A stream whose coding cannot be undone is stored whole, as it came, with its header, never
as the events it decoded to: one that cannot be as it arrives (data that is not what its
coding says, ``br`` without brotli installed) is read to its end before the chunk that
failed is handed on (the caller's own decoder may fail on it too, and stop reading); one cut
short (a coding that never reached its end) is found so at its end.

A stream the caller closes or drops before that point, or that is still unfinished when its
block (a cassette or a scope) exits, is not stored and says so with a ``DejacacheWarning``
naming the call (endpoint and model) and where it would have gone (``scope.settle``). A
stream that fails (the server hangs up) is not stored either; the caller gets the failure
itself. What is stored holds none of the request's credentials, wherever an event quotes one
(a mid-stream error event quoting the key: ``exchange.unechoed``); the caller's chunks are
not touched. Events are looked at whole, so a key cut across two socket reads is found.

A stream whose recording would hold more than its bound (``MAX_RECORDED_STREAM`` unless
``configure(max_recorded_stream=)``, the project file or the proxy's flag says otherwise; an
upstream streaming for hours, a keep-alive stream that never ends) stops being recorded
there: what was held is freed, the caller still gets every chunk as it comes, and the call is
not stored (a stream cut short must never replay as the whole answer: a miss next time is
safe), with one ``DejacacheWarning`` naming the call, the bound and how to raise it.

No warning said beside the caller's stream stops it: under ``-W error`` one raised while the
caller reads (that bound, a store's complaint while the answer is stored) is kept and raised
once the caller has every chunk, at the end of the stream or at its close (``_deferred``).

Cost per event: one cheap string check (``Provider.stage``); per chunk, one addition and one
comparison for the bound (~0.05 us: ``feed`` took 2.81 us an event of a 200-event OpenAI
stream before the bound, 2.86 with it); for an encoded stream, decoding the recorder's copy
too (~0.7 us an OpenAI chunk of ~200 bytes under gzip: the caller's decoder undoes it again,
which dejacache did for it before). Per stream that stops at the finishing event with the
end marker still on the wire: one short-lived reader thread (sync) or task (async; under
trio the read-ahead runs inline, bounded only by the client's timeout).

One mechanism for every transport: httpx and httpx2, sync and async, and the aiohttp-backed
transports (litellm's, the SDKs' ``DefaultAioHttpClient``), which hand back httpx responses.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..config import Effective, settings_object
from ..errors import DejacacheWarning
from ..scope import track, untrack
from ..stats import record_miss
from ._deferred import Deferred
from ._libs import Lib
from .aliases import AliasTable
from .codings import Decoding, is_encoded
from .exchange import opaque_value, response_value
from .headers import spelled_names
from .providers import Provider
from .providers._base import END, FINISHING
from .sse import splitter_for

if TYPE_CHECKING:
    import asyncio

__all__ = ["MAX_RECORDED_STREAM", "READ_AHEAD_TIMEOUT", "Held", "Recorder", "bound_in_force",
           "past_bound", "recording_bound", "recording_classes", "wire_chunks"]

# How long the event that finishes an answer may wait for the end marker behind it. Real
# providers send both within milliseconds; a server that stalls in between costs the caller
# this much once. The reader then goes on by itself and stores the answer when the end
# marker comes, even if the caller has stopped reading or closed the stream.
READ_AHEAD_TIMEOUT = 2.0

# Bytes one live answer's recording may hold: a stream's events, and its wire bytes while
# they may have to be kept as they came; a whole answer's wire bytes (``_passing.py``).
# A 16,000-token OpenAI chat completion streamed is 16,003 events and 3.4 MB of SSE (~210
# bytes a chunk); with ``top_logprobs=20`` a chunk is ~1.7 kB, 26 MB (both measured on
# chunks built as the API sends them). 64 MiB holds either with room, and bounds a stream
# that never ends, or a file download.
# ``configure(max_recorded_stream=)`` or the project file's ``max_recorded_stream`` set it
# in-process (:func:`_configured_bound`); the proxy's ``--max-recorded-stream`` for its
# requests (``recording_bound``).
MAX_RECORDED_STREAM = 64 * 1024 * 1024
# The bound for the recordings started in this context, when not the configured one.
_BOUND: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "dejacache_recorded_stream_bound", default=None)


def _configured_bound() -> int:
    """The bound ``configure()`` or the project file set, else ``MAX_RECORDED_STREAM``:
    worked out with the settings in force (``config.Settings.effective``), once per
    ``configure()``; a hit never reads it."""
    s = settings_object()
    if s.stream_bound is None:
        s.effective()
    return s.stream_bound or MAX_RECORDED_STREAM


def bound_in_force() -> int:
    """The bytes a live answer's recording started now may hold: the context's (the proxy's
    ``--max-recorded-stream``), else the configured one."""
    return _BOUND.get() or _configured_bound()


def recording_bound(limit: int) -> None:
    """Bound the recordings of live answers started in the current context (the proxy's
    requests: ``--max-recorded-stream``) to ``limit`` bytes each."""
    _BOUND.set(limit)


class Held:
    """The bytes a live answer's recording holds, against the bound in force: the one rule
    for a stream (:class:`Recorder`) and a whole answer (``_passing.py``)."""

    __slots__ = ("bound", "held")

    def __init__(self) -> None:
        self.held = 0
        self.bound = bound_in_force()

    def take(self, n: int) -> bool:
        """Count ``n`` more bytes held; False once they pass the bound."""
        self.held += n
        return self.held <= self.bound


class CallInfo(Protocol):
    """What the recorder needs to know about the call (``transport._Call``)."""

    @property
    def provider(self) -> Provider: ...
    @property
    def name(self) -> str: ...
    @property
    def eff(self) -> Effective: ...
    @property
    def canonical(self) -> bytes: ...
    @property
    def aliases(self) -> AliasTable | None: ...
    @property
    def key(self) -> str: ...
    @property
    def credentials(self) -> list[str]: ...


StoreSync = Callable[[dict[str, Any], float], None]
StoreAsync = Callable[[dict[str, Any], float], Awaitable[None]]


def wire_chunks(live: Any) -> Iterator[bytes]:
    """A live answer's bytes as they came (the caller's own decoder reads them), or its
    decoded content when the transport handed it over read already (a ``MockTransport``
    handler's ``Response(content=...)``: ``iter_raw`` raises ``StreamConsumed`` on it)."""
    return iter(live.iter_bytes() if live.is_stream_consumed else live.iter_raw())


def awire_chunks(live: Any) -> AsyncIterator[bytes]:
    chunks: AsyncIterator[bytes] = (live.aiter_bytes() if live.is_stream_consumed
                                    else live.aiter_raw()).__aiter__()
    return chunks


class Recorder(Held):
    """One live stream being recorded: its events so far, and whether it is still open.

    It is fed the bytes as they came and keeps its own decoded copy (``codings.py``): a body
    whose coding cannot be undone (data that is not what ``Content-Encoding`` says, a
    coding cut short) is kept as it came, whole, with its header. ``held`` counts the bytes
    it keeps; past ``bound`` it keeps none (``dropped``) and is not stored."""

    __slots__ = ("__weakref__", "_ended", "_lock", "as_sent", "call", "decoding", "deferred",
                 "dropped", "events", "handed", "live", "open", "splitter", "stage", "t0",
                 "wire")

    def __init__(self, call: CallInfo, live: Any, t0: float) -> None:
        super().__init__()
        self.call = call
        self.live = live
        self.t0 = t0
        self.splitter = splitter_for(live.headers.get("content-type"))
        self.events: list[list[Any]] = []
        self.stage = 0
        self.open = True  # False once stored, abandoned or failed: exactly one of those
        self._lock = threading.Lock()
        # Fed the bytes as they came (``wire_chunks``), not the decoded content.
        self.as_sent = not live.is_stream_consumed
        encoding = live.headers.get("content-encoding", "")
        self.decoding = (Decoding(encoding, bound=self.bound)
                         if self.as_sent and is_encoded(encoding) else None)
        # The wire bytes, while they may have to be kept as they came.
        self.wire: list[bytes] | None = None if self.decoding is None else []
        self._ended = False
        self.dropped = False
        self.handed = False  # a stream handed to its caller (``track``), not read whole
        # Warnings raised as errors while the caller reads: raised at the end (``_deferred``).
        self.deferred = Deferred()

    @property
    def opaque(self) -> bool:
        """Its coding could not be undone: it is kept as it came, once read to its end."""
        return self.decoding is not None and self.decoding.opaque

    @property
    def eff(self) -> Effective:
        return self.call.eff

    def track(self) -> Recorder:
        """Handed to a caller: a block exiting before it is done should say so."""
        self.handed = True
        return track(self)

    def feed(self, chunk: bytes) -> int:
        """Take in one chunk as it came; return the furthest stage any event so far has
        reached (0 once the recording is dropped: nothing more is taken in)."""
        if self.dropped:
            return 0
        if self.decoding is not None:
            self.held += len(chunk)
            if self.held > self.bound:
                self._drop()
                return 0
            self.wire.append(chunk)  # type: ignore[union-attr]
            chunk = self.decoding.feed(chunk)
            if not chunk:
                if self.decoding.past:  # its decoded copy would pass the bound
                    self._drop()
                    return 0
                return self.stage
        return self._take(chunk)

    def _drop(self) -> None:
        """Over the bound: free what is held, keep nothing more, store nothing, say so once.
        The caller's chunks are not the recorder's: they go on as they come."""
        self.dropped = True
        self.events = []
        self.wire = None
        self.decoding = None
        self.splitter = splitter_for(self.live.headers.get("content-type"))
        self.held = 0
        if self._claim():
            if self.handed:  # (a stream read whole is counted by the flow it runs in)
                record_miss(self.call.name, stored=False)
            # The caller reads on, and gets it at the end if the filters make it an error;
            # a stream read whole is handed on past the bound too (``_passing.Passing``
            # takes this recorder's ``deferred``), and raises it at its end.
            with self.deferred:
                warnings.warn(past_bound(self.call, self.bound, stream=True), DejacacheWarning,
                              stacklevel=4)

    def end(self) -> None:
        """The body has ended: the decoder's last bytes are read (and it is told whether
        every coding was whole)."""
        if self.open and not self._ended:
            self._ended = True
            if self.decoding is not None:
                tail = self.decoding.finish()
                if self.decoding.past:
                    self._drop()
                elif tail:
                    self._take(tail)

    def _take(self, chunk: bytes) -> int:
        # ``Held.take``, written out here and in ``feed``: a method call for it cost 0.04 us an
        # event more (2.90 against 2.86 us an event of a 200-event stream, measured).
        self.held += len(chunk)
        if self.held > self.bound:
            self._drop()
            return 0
        evs = self.splitter.feed(chunk)
        if evs:
            offset = round(time.perf_counter() - self.t0, 4)
            self.events.extend([offset, e] for e in evs)
            if self.stage < END:
                stage_of = self.call.provider.stage
                for e in evs:
                    s = stage_of(e)
                    if s > self.stage:
                        self.stage = s
        return self.stage

    def _claim(self) -> bool:
        with self._lock:
            if not self.open:
                return False
            self.open = False
        untrack(self)
        return True

    def value(self) -> dict[str, Any]:
        live = self.live
        if self.opaque and self._ended:
            value = opaque_value(live.status_code,
                                 spelled_names(live.headers.raw, live.headers.multi_items()),
                                 self.call.provider, b"".join(self.wire or ()),
                                 live.headers.get("content-encoding", ""),
                                 credentials=self.call.credentials)
            return value if self.call.aliases is None else self.call.aliases.keep(
                self.call.key, value)
        for e in self.splitter.flush():
            self.events.append([round(time.perf_counter() - self.t0, 4), e])
        whole = self.splitter.body()  # events that did not decode are kept as the bytes
        value = response_value(
            live.status_code, spelled_names(live.headers.raw, live.headers.multi_items()),
            live.headers.get("content-type", ""),
            self.call.provider, events=self.events if whole is None else None, body=whole,
            credentials=self.call.credentials,
        )
        if self.call.aliases is not None:
            self.call.aliases.keep(self.call.key, value)
        return value

    def complete(self, store: StoreSync) -> None:
        """Store the answer; a warning the store raises as an error waits for the end of
        the stream (``_deferred``): a stream is stored before its last events reach the
        caller."""
        if self._claim():
            with self.deferred:
                store(self.value(), time.perf_counter() - self.t0)

    async def acomplete(self, store: StoreAsync) -> None:
        if self._claim():
            with self.deferred:
                await store(self.value(), time.perf_counter() - self.t0)

    def failed(self) -> None:
        """The live stream raised: nothing to store, and the caller sees the error itself."""
        if self._claim():
            record_miss(self.call.name, stored=False, error=True)

    def abandon(self, why: str) -> None:
        """Not stored, and nobody would notice without being told: warn, naming the call."""
        if self._claim():
            record_miss(self.call.name, stored=False)
            warnings.warn(self.describe(why), DejacacheWarning, stacklevel=3)

    def describe(self, why: str) -> str:
        return (f"dejacache: the {_what(self.call)} stream {why}; it was not recorded"
                f"{_where(self.call)}. Read a stream at least to the event that ends the "
                "answer to record it.")


def past_bound(call: CallInfo, bound: int, *, stream: bool) -> str:
    """The warning for a live answer whose recording passed ``bound`` bytes: not stored."""
    what, gets = ("stream", "every event") if stream else ("answer", "every byte, as it arrives")
    return (f"dejacache: the {_what(call)} {what} ({_url(call)}) passed {bound} bytes held for "
            f"its recording; it was not recorded{_where(call)} (the caller still gets {gets})."
            " Raise the bound with dejacache.configure(max_recorded_stream=<bytes>) or "
            "max_recorded_stream in [tool.dejacache], or the proxy's --max-recorded-stream "
            "(max_recorded_stream= of dejacache.proxy()).")


def _what(call: CallInfo) -> str:
    """The call, as a person finds it: endpoint name and model."""
    body = _request(call).get("body")
    model = body.get("model") if isinstance(body, dict) else None
    return call.name + (f" (model {model!r})" if isinstance(model, str) else "")


def _url(call: CallInfo) -> str:
    """Method and path, as keyed (credential query values masked already)."""
    request = _request(call)
    return f"{request.get('method', '?')} {request.get('path', '?')}"


def _request(call: CallInfo) -> dict[str, Any]:
    try:
        request = orjson.loads(call.canonical)
    except orjson.JSONDecodeError:
        return {}
    return request if isinstance(request, dict) else {}


def _where(call: CallInfo) -> str:
    source = call.eff.source
    return f" in {source}" if source else ""


# ---------------------------------------------------------------- reading ahead


class _Ahead:
    """Chunks read past the finishing event, shared by the caller and the reader.

    When the reader is not done within ``READ_AHEAD_TIMEOUT`` the caller gets the finishing
    event anyway (``give_up``) and the reader settles the recording itself; a caller closing
    the stream meanwhile leaves the response to the reader to close (``defer_close``): the
    events already hold the whole answer, so the end marker is still worth waiting for.
    """

    __slots__ = ("chunks", "close_pending", "done", "error", "given_up", "lock")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.error: BaseException | None = None
        self.done = False
        self.given_up = False
        self.close_pending = False
        self.lock = threading.Lock()

    def finish(self) -> tuple[bool, bool]:
        """The reader is done: (settle the recording here, close the response here)."""
        with self.lock:
            self.done = True
            return self.given_up, self.close_pending

    def give_up(self) -> bool:
        """The caller stops waiting; True when the reader had finished after all."""
        with self.lock:
            if not self.done:
                self.given_up = True
            return self.done

    def defer_close(self) -> bool:
        """The caller closes the stream; True when the reader is still going and will."""
        with self.lock:
            if not self.done:
                self.close_pending = True
            return not self.done


def _orphan_failed(rec: Recorder, ahead: _Ahead) -> None:
    with rec.deferred:
        rec.abandon(f"failed after the caller stopped reading ({ahead.error!r})")


def _read_ahead(rec: Recorder, source: Iterator[bytes], ahead: _Ahead,
                store: StoreSync) -> None:
    try:
        for more in source:
            ahead.chunks.append(more)
            if rec.feed(more) >= END or rec.dropped:  # (dropped: the caller reads on)
                break
        else:
            rec.end()
    except Exception as exc:
        ahead.error = exc
    settle_here, close_here = ahead.finish()
    if settle_here:  # the caller moved on before the end marker: the recording is ours
        if ahead.error is None:
            rec.complete(store)
        else:
            _orphan_failed(rec, ahead)
    if close_here:  # the caller has closed the stream: what was kept is raised here, last
        rec.live.close()
        rec.deferred.raise_kept()


async def _aread_ahead(rec: Recorder, source: AsyncIterator[bytes], ahead: _Ahead,
                       store: StoreAsync) -> None:
    try:
        async for more in source:
            ahead.chunks.append(more)
            if rec.feed(more) >= END or rec.dropped:
                break
        else:
            rec.end()
    except BaseException as exc:  # CancelledError too: the loop is shutting down
        ahead.error = exc
    settle_here, close_here = ahead.finish()
    if settle_here:
        if ahead.error is None:
            await rec.acomplete(store)
        else:
            _orphan_failed(rec, ahead)
    if close_here:
        await rec.live.aclose()
    import asyncio  # a coroutine runs here: a dict lookup under asyncio (not at module level:
    # asyncio was ~40 ms of the first block)

    if isinstance(ahead.error, asyncio.CancelledError):
        raise ahead.error
    if close_here:  # (as in _read_ahead: a caller still reading awaits this task instead)
        rec.deferred.raise_kept()


def _opaque(rec: Recorder, rest: list[bytes]) -> None:
    """A stream whose coding cannot be undone as it arrives: a caller's own decoder fails
    on the same chunk (the data is not what its coding says; requests also fails on ``br``
    without brotli) and stops reading, so the rest (``rest``, read before that chunk is
    handed on) is taken in first and the answer is kept whole, as it came. Its pacing is
    lost; a ``br`` or ``zstd`` stream keeps it where brotli or zstandard is installed."""
    for more in rest:
        rec.feed(more)
    rec.end()


# Read-ahead tasks whose caller has stopped waiting: the event loop only keeps weak references.
_TASKS: set[asyncio.Task[None]] = set()


class _SyncRecording:
    """A sync response body that hands each chunk on while the recorder reads it (the
    library's ``SyncByteStream`` is added by :func:`recording_classes`)."""

    def __init__(self, rec: Recorder, store: StoreSync) -> None:
        self._rec = rec
        self._store = store
        self._ahead: _Ahead | None = None

    def __iter__(self) -> Iterator[bytes]:
        rec = self._rec
        source = wire_chunks(rec.live)
        try:
            for chunk in source:
                if rec.open and rec.feed(chunk):
                    if rec.stage >= END:
                        rec.complete(self._store)
                    elif rec.stage == FINISHING:
                        yield from self._read_on(chunk, source)
                        continue
                if rec.open and rec.opaque:
                    rest = list(source)  # (see _opaque)
                    _opaque(rec, rest)
                    rec.complete(self._store)
                    yield chunk
                    yield from rest
                    break
                yield chunk
        except Exception:
            rec.failed()
            raise
        rec.end()
        rec.complete(self._store)  # the end of the body: the answer is all there
        if rec.deferred.kept:  # the caller has every chunk: now what was kept is raised
            rec.live.close()
            rec.deferred.raise_kept()

    def _read_on(self, chunk: bytes, source: Iterator[bytes]) -> Iterator[bytes]:
        # Before handing over the finishing event, read on to the end marker. In a
        # thread, so a server stalling in between costs a bounded wait.
        rec = self._rec
        ahead = self._ahead = _Ahead()
        reader = threading.Thread(
            target=contextvars.copy_context().run,
            args=(_read_ahead, rec, source, ahead, self._store),
            name="dejacache-read-ahead", daemon=True,
        )
        reader.start()
        reader.join(READ_AHEAD_TIMEOUT)
        if ahead.give_up() and ahead.error is None:
            rec.complete(self._store)
        yield chunk
        reader.join()  # the caller reads on: it would have waited for these anyway
        yield from ahead.chunks
        if ahead.error is not None:
            rec.failed()
            raise ahead.error

    def close(self) -> None:
        ahead = self._ahead
        if ahead is not None and ahead.defer_close():
            return  # the reader settles the recording, then closes the response
        rec = self._rec
        with rec.deferred:  # (an error by the filters: raised once the response is released)
            rec.abandon("was closed before the end of the answer")
        rec.live.close()
        rec.deferred.raise_kept()

    def __del__(self) -> None:
        ahead = self._ahead
        if self._rec.open and (ahead is None or ahead.done):
            self._rec.abandon("was dropped before the end of the answer")


class _AsyncRecording:
    """The async twin of :class:`_SyncRecording` (with the library's ``AsyncByteStream``)."""

    def __init__(self, rec: Recorder, store: StoreAsync) -> None:
        self._rec = rec
        self._store = store
        self._ahead: _Ahead | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        rec = self._rec
        source = awire_chunks(rec.live)
        try:
            async for chunk in source:
                if rec.open and rec.feed(chunk):
                    if rec.stage >= END:
                        await rec.acomplete(self._store)
                    elif rec.stage == FINISHING:
                        async for c in self._read_on(chunk, source):
                            yield c
                        continue
                if rec.open and rec.opaque:
                    rest = [c async for c in source]  # (see _opaque)
                    _opaque(rec, rest)
                    await rec.acomplete(self._store)
                    yield chunk
                    for c in rest:
                        yield c
                    break
                yield chunk
        except Exception:
            rec.failed()
            raise
        rec.end()
        await rec.acomplete(self._store)
        if rec.deferred.kept:
            await rec.live.aclose()
            rec.deferred.raise_kept()

    async def _read_on(self, chunk: bytes,
                       source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        rec = self._rec
        ahead = self._ahead = _Ahead()
        reader = _aread_ahead(rec, source, ahead, self._store)
        import asyncio  # a coroutine runs here (see _aread_ahead)

        try:
            asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): read ahead without a bound
            await reader
            task = None
        else:
            task = asyncio.ensure_future(reader)
            # wait() never cancels the reader: a late end marker is still read and stored.
            await asyncio.wait((task,), timeout=READ_AHEAD_TIMEOUT)
            if not task.done():
                _TASKS.add(task)
                task.add_done_callback(_TASKS.discard)
        if ahead.give_up() and ahead.error is None:
            await rec.acomplete(self._store)
        yield chunk
        if task is not None:
            await task
        for c in ahead.chunks:
            yield c
        if ahead.error is not None:
            rec.failed()
            raise ahead.error

    async def aclose(self) -> None:
        ahead = self._ahead
        if ahead is not None and ahead.defer_close():
            return  # the reader settles the recording, then closes the response
        rec = self._rec
        with rec.deferred:  # (as in close)
            rec.abandon("was closed before the end of the answer")
        await rec.live.aclose()
        rec.deferred.raise_kept()

    def __del__(self) -> None:
        ahead = self._ahead
        if self._rec.open and (ahead is None or ahead.done):
            self._rec.abandon("was dropped before the end of the answer")


@functools.cache
def recording_classes(lib: Lib) -> tuple[type, type]:
    """The sync and async byte streams (for ``lib``) that hand chunks on while recording:
    the recording behaviour above on the library's own stream classes, so the library and
    the SDKs above it take them for their own."""
    m = lib.module
    return (type("RecordingStream", (_SyncRecording, m.SyncByteStream), {}),
            type("AsyncRecordingStream", (_AsyncRecording, m.AsyncByteStream), {}))
