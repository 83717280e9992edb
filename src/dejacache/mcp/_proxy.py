"""The stream pair a transport yields inside a block: every client request answered through
the engine, the server reached only for what is not recorded.

An MCP transport (``stdio_client``, ``streamable_http_client``, ``sse_client``) yields a
(read, write) pair of memory-object streams carrying JSON-RPC messages; ``ClientSession``,
``mcp.Client`` and every framework built on them speak only through that pair. Inside a block
the transport yields :func:`session_streams`' pair instead: each request the client writes
becomes one engine call (kind ``mcp``), made in the task that wrote it (the caller's block,
its place in the cassette's order, as for an HTTP request), whose live run forwards it to the
real transport and waits for the answer with the same id. So a replay answers from the
recording and starts no process and opens no connection: the real transport is entered only
when a call must go live (at once in ``record`` mode; at the first miss in ``auto``, after
the session's handshake is sent to it again).

What the client gets back is the recorded message: a result, a JSON-RPC error (the session
raises it as ``MCPError``, as it did live), a tool's ``isError`` result, and the progress
notifications that came before it, carrying the token of the request they now answer.
Server-to-client requests (sampling, elicitation) and notifications outside a request are
passed on live and not recorded: a replay cannot produce them.

Three kinds of request are answered otherwise:

* **Made by the client on its own** (``_wire.by_content``: the tool listing ``ClientSession``
  makes to validate results, pings), whose count depends on timing: past the first, each
  takes the next unused recording of its key if there is one, else the answer this session
  already got for it. Identical ones wait for each other, so gathered calls over stdio or
  streamable HTTP replay whether their recording listed the tools once or three times.
* **A ``subscriptions/listen`` stream** (2026-07-28): what is recorded is its
  acknowledgement, replayed as the stream's first frame; the events that follow are passed
  on live and do not replay, like other notifications outside a request.
* **An answer with 2026-07-28 cache hints** (``ttlMs``, ``cacheScope``) in a store that
  answers by key (a cache, not a recording) is kept no longer than the server allows, and
  a ``"private"`` one not at all (``_wire.hinted_ttl``).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc

from .._engine import MISS, AsyncDriver, Unkept, alookup, call_mode
from ..config import Effective
from ..errors import ReplayMiss
from ..http.transport import handing_on
from ..scope import current
from . import _wire
from ._callers import NOBODY, Callers, keyed

__all__ = ["MISS_MARK", "session_streams", "take_miss"]

# ``data`` of the JSON-RPC error a replay miss is answered with: the session raises it as
# MCPError, and the patched dispatcher (``_patch.py``) raises the ReplayMiss itself instead.
MISS_MARK = "dejacache.replay_miss"
_MISSES: dict[int, ReplayMiss] = {}
_MISS_LOCK = threading.Lock()
_MISS_IDS = itertools.count(1)
_MISSES_KEPT = 256  # a miss the caller never raised is dropped after this many newer ones

OpenTransport = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def _keep_miss(miss: ReplayMiss) -> int:
    with _MISS_LOCK:
        n = next(_MISS_IDS)
        _MISSES[n] = miss
        while len(_MISSES) > _MISSES_KEPT:
            del _MISSES[next(iter(_MISSES))]
        return n


def take_miss(ref: Any) -> ReplayMiss | None:
    """The ReplayMiss a miss answer refers to (once)."""
    with _MISS_LOCK:
        return _MISSES.pop(ref, None) if isinstance(ref, int) else None


class _Lost(Exception):
    """The live transport ended while a request was waiting for its answer."""


async def _engine_call(eff: Effective, name: str, key: str, canonical: bytes,
                       fn: Callable[[AsyncDriver], Any]) -> Any:
    """``call_async``, with its driver handed to ``fn``: a 2026-07-28 answer says how long
    a store may keep it, known only once it came (``ttl`` is read when it is stored). The
    one place this module enters the engine: its signature may change."""
    d = AsyncDriver(eff, name, _wire.KIND)
    return await d.call(d.flow(key, canonical), lambda: fn(d))


def _handed_on(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with HTTP interception stepping aside: the live transport's own HTTP
    requests (streamable HTTP, SSE) are this call's wire, not calls to record again, and
    the replay backstop lets their connections through. Set in each task this module starts
    (a task's context is its own), never in the caller's."""

    async def run(*args: Any, **kwargs: Any) -> Any:
        with handing_on():
            return await fn(*args, **kwargs)

    return run


class _Codec:
    """SessionMessage <-> dict, for the ``mcp`` installed (2.x types, or 1.x root models)."""

    def __init__(self) -> None:
        from mcp.shared.message import SessionMessage

        self.session_message = SessionMessage
        try:
            from mcp_types import jsonrpc_message_adapter

            self._parse: Callable[[Any], Any] = jsonrpc_message_adapter.validate_python
        except ImportError:  # mcp 1.x
            from mcp.types import JSONRPCMessage

            self._parse = JSONRPCMessage.model_validate  # type: ignore[attr-defined]

    def dump(self, item: Any) -> dict[str, Any]:
        msg = getattr(item.message, "root", item.message)
        return msg.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]

    def make(self, data: dict[str, Any], metadata: Any = None) -> Any:
        return self.session_message(self._parse(data), metadata=metadata)


class _Waiter:
    __slots__ = ("done", "notes", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: dict[str, Any] | None = None
        self.notes: list[dict[str, Any]] = []


class _Proxy:
    """One session's traffic: the client's side, the live side (when started), the engine."""

    def __init__(self, server: dict[str, Any], open_live: OpenTransport, to_client: Any,
                 tg: anyio.abc.TaskGroup, callers: Callers) -> None:
        self.server = server
        self.callers = callers  # who the session says is asking (``_callers``)
        self.open_live = open_live
        self.to_client = to_client
        self.tg = tg
        self.codec = _Codec()
        self.handshake: list[tuple[Any, dict[str, Any]]] = []
        self.waiting: dict[Any, _Waiter] = {}
        self.by_token: dict[Any, _Waiter] = {}
        self.by_subscription: dict[Any, _Waiter] = {}  # listens waiting for their ack
        # Listens answered from a recording, by request id: a server started later is sent
        # them too (they are session state, like the handshake).
        self.listens: dict[Any, Any] = {}
        self.by_content = _ByContent()
        self.live_write: Any = None
        self.extra: tuple[Any, ...] = ()
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._lock = anyio.Lock()
        self._resent = 0
        self._ended = False  # the live transport's read side has ended

    # ------------------------------------------------------------ the live side

    async def ensure_live(self, current: Any = None) -> None:
        """Start the real transport (once); a late start sends it the session's handshake
        first, and its open listens, so the server is in the state the session believes
        it is in."""
        async with self._lock:
            if self.live_write is not None:
                return
            try:
                await self.tg.start(_handed_on(self._run_live))
            except Exception as exc:
                if current is None:  # record mode's start: the caller gets the transport's error
                    raise
                raise _Lost(f"could not start or reach the MCP server {self.server} for a "
                            f"call that is not recorded: {exc!r}") from exc
            for item, data in list(self.handshake):
                if item is current:
                    continue
                if _wire.classify(data) == "request":
                    await self._exchange(item, data, resent=True)
                else:
                    await self.live_write.send(item)  # type: ignore[attr-defined]
            # Their acknowledgements reach the client, whose subscription keeps the first.
            for item in list(self.listens.values()):
                await self.live_write.send(item)  # type: ignore[attr-defined]

    async def _run_live(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # One task enters and leaves the transport: anyio's cancel scopes (its task group)
        # must be left by the task that entered them.
        try:
            async with self.open_live() as streams:
                read, self.live_write, *rest = streams
                self.extra = tuple(rest)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._read_live, read)
                    task_status.started()
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
        finally:
            self._lose_all()
            self._stopped.set()

    async def _read_live(self, read: Any) -> None:
        try:
            async for item in read:
                await self._from_server(item)
        finally:
            self._ended = True
            self._lose_all()

    def _lose_all(self) -> None:
        for w in list(self.waiting.values()):
            w.done.set()  # value None: lost
        self.waiting.clear()

    async def _from_server(self, item: Any) -> None:
        if isinstance(item, Exception):
            await self.to_client.send(item)
            return
        data = self.codec.dump(item)
        kind = _wire.classify(data)
        if kind in ("response", "error"):
            w = self.waiting.pop(data.get("id"), None)
            if w is not None:
                w.value = data
                w.done.set()
                return
        elif kind == "notification" and data["method"] == "notifications/progress":
            w = self.by_token.get(_wire.progress_token({"_meta": data.get("params") or {}}))
            if w is not None:
                w.notes.append(data)
        elif kind == "notification" and data["method"] == _wire.ACKNOWLEDGED:
            sub = _wire.subscription_of(data)
            w = self.by_subscription.pop(sub, None)
            if w is not None:  # the listen's answer: the client gets it as a replay gets it
                self.waiting.pop(sub, None)  # the stream's end is passed on when it comes
                w.value = {"acknowledged": data.get("params") or {}}
                w.done.set()
                return
        await self.to_client.send(item)

    async def _exchange(self, item: Any, data: dict[str, Any], resent: bool = False
                        ) -> dict[str, Any]:
        """Send one request live and wait for its answer: ``{"result"|"error", ...}``, or
        ``{"acknowledged": ...}`` for a listen."""
        w = _Waiter()
        rid = data["id"]
        if resent:  # a handshake request sent again: its answer is the session's already
            self._resent += 1
            rid = f"dejacache-handshake-{self._resent}"
            # Its metadata too: the HTTP headers a 2026-07-28 request must carry.
            item = self.codec.make({**data, "id": rid}, item.metadata)
        token = _wire.progress_token(data.get("params"))
        self.waiting[rid] = w
        if token is not None:
            self.by_token[token] = w
        if data["method"] == _wire.LISTEN:
            self.by_subscription[rid] = w
        try:
            await self.live_write.send(item)
            if not self._ended:  # else no answer can come: lost
                await w.done.wait()
        finally:
            self.waiting.pop(rid, None)
            self.by_subscription.pop(rid, None)
            if token is not None:
                self.by_token.pop(token, None)
        return self._answer_of(w, data)

    def _answer_of(self, w: _Waiter, data: dict[str, Any]) -> dict[str, Any]:
        if w.value is None:
            raise _Lost(f"the MCP server {self.server} closed the connection before "
                        f"answering {data['method']}")
        if "acknowledged" in w.value:
            return {"acknowledged": _wire.recorded_ack(w.value["acknowledged"])}
        value: dict[str, Any] = ({"error": w.value["error"]} if "error" in w.value
                                 else {"result": w.value.get("result", {})})
        if w.notes:
            value["notifications"] = _wire.recorded_notifications(
                [{"method": n["method"], "params": n.get("params") or {}} for n in w.notes])
        return value

    async def stop(self) -> None:
        self._stop.set()
        if self.live_write is not None:
            await self._stopped.wait()

    # ------------------------------------------------------------ the client's side

    async def from_client(self, item: Any) -> None:
        """One message the session wrote, handled in the task that wrote it: a request is
        answered before this returns, so the call is the caller's own (its block, its place
        in the cassette's order), as an HTTP request is."""
        data = self.codec.dump(item)
        kind = _wire.classify(data)
        if kind in ("request", "notification") and data["method"] in _wire.HANDSHAKE:
            self.handshake.append((item, data))
        elif kind == "notification" and data["method"] == "notifications/cancelled":
            self.listens.pop((data.get("params") or {}).get("requestId"), None)
        # The live transport may make its HTTP requests in this task's context (mcp's
        # context streams): they are this call's wire, not calls to record again.
        with handing_on():
            if kind == "request":
                await self._answer(item, data)
            elif self.live_write is not None:  # replayed calls need no cancel, no answer
                with contextlib.suppress(anyio.ClosedResourceError,
                                         anyio.BrokenResourceError):
                    await self.live_write.send(item)

    async def _answer(self, item: Any, data: dict[str, Any]) -> None:
        eff = current()
        if not _wire.recording(eff):  # a call made outside every block: live, not recorded
            try:
                await self.ensure_live(item)
                await self.live_write.send(item)
            except Exception as exc:
                await self._reply(data["id"], _failed(exc))
            return
        call = _Call(self, item, data, eff)
        try:
            value = await call.answer()
        except Unkept as u:
            value = u.value
        except ReplayMiss as miss:
            if call.identity is not None:
                miss = call.identity.explain(miss)
            value = {"error": {"code": -32603, "message": str(miss),
                               "data": {MISS_MARK: _keep_miss(miss)}}}
        except Exception as exc:  # the server could not be started, or went away
            value = _failed(exc)
        if "acknowledged" in value:
            if not call.ran:
                self.listens[data["id"]] = item
            await self._send(_wire.replayed_ack(value["acknowledged"], data["id"]))
            return  # the stream stays open: its end is the live server's, or the session's
        if not call.ran:
            for note in _wire.replayed_notifications(value.get("notifications"),
                                                     _wire.progress_token(data.get("params"))):
                await self._send(note)
        await self._reply(data["id"], value)

    async def _reply(self, rid: Any, value: dict[str, Any]) -> None:
        if "error" in value:
            msg = {"jsonrpc": "2.0", "id": rid, "error": value["error"]}
        else:
            msg = {"jsonrpc": "2.0", "id": rid, "result": value.get("result", {})}
        await self._send(msg)

    async def _send(self, msg: dict[str, Any]) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.to_client.send(self.codec.make(msg))


class _Call:
    """One client request inside a block, answered through the engine: the recording (or
    store) answers, or the live server does (``live``), and what a store may keep of it."""

    __slots__ = ("canonical", "data", "eff", "given", "identity", "item", "key", "name",
                 "proxy", "ran")

    def __init__(self, proxy: _Proxy, item: Any, data: dict[str, Any],
                 eff: Effective) -> None:
        self.proxy, self.item, self.data, self.eff = proxy, item, data, eff
        self.name = _wire.call_name(data["method"])
        self.key, self.canonical, self.identity = keyed(
            eff, proxy.server, proxy.callers.items, data["method"], data.get("params"))
        self.ran = False
        self.given: dict[str, Any] | None = None  # the live answer, when it is stored otherwise

    async def answer(self) -> dict[str, Any]:
        eff = self.eff
        unordered = getattr(eff.store, "unordered", None)
        if unordered is not None:  # a cassette: the session's own requests come when they do
            unordered(_UNORDERED)
        # (a block that replays part of a run sends some calls live: ``cassettes/partial``)
        mode = call_mode(eff, self.name, _wire.KIND) if eff.features.partial else eff.mode
        if mode != "record" and _wire.by_content(self.data["method"], self.data.get("params")):
            return await self.proxy.by_content.answer(eff, self.name, self.key, self.engine)
        return await self.engine()

    async def engine(self) -> dict[str, Any]:
        value: dict[str, Any] = await _engine_call(self.eff, self.name, self.key,
                                                   self.canonical, self.live)
        return value if self.given is None else self.given  # the caller's, as it came

    async def live(self, driver: AsyncDriver) -> dict[str, Any]:
        self.ran = True
        proxy = self.proxy
        await proxy.ensure_live(self.item)
        value = await proxy._exchange(self.item, self.data)
        if not self.eff.features.sequenced:
            if "error" in value:  # outside a cassette, an error is handed back, never kept
                raise Unkept(value)  # (the next call may succeed)
            driver.ttl = _wire.hinted_ttl(self.data.get("params"), value)  # None: no hint
            if driver.ttl == 0:
                raise Unkept(value, error=False)  # (an answer not to keep, not an error)
        return self.stored(value)

    def stored(self, value: dict[str, Any]) -> dict[str, Any]:
        """What a store keeps of a live answer (result, error, listing, progress, an
        acknowledgement): without the session's own credentials wherever it quotes them
        (``Callers.unechoed``, HTTP's one rule); the caller gets it as it came
        (:attr:`given`). Live calls only, a replay or hit never: a ``get_ticket`` answer
        looked through for a stdio launch's ``GITHUB_TOKEN`` cost 4.6 us (6 us when found
        and replaced; 21 us for 100 KB of text), beside a recorded stdio call's 3.3 to
        5.3 ms median, the same with or without the token within the box's noise; a
        session without credentials, 0.06 us."""
        kept = self.proxy.callers.unechoed(value)
        if kept is not value:
            self.given = value
        return kept


_UNORDERED = _wire.unordered_names()


class _ByContent:
    """The answers one session got for the requests it makes on its own (``by_content``):
    past the first, each takes the next unused recording of its key, else the answer
    already given; identical ones wait for each other, so two cannot race for one
    recording."""

    __slots__ = ("_answered", "_locks")

    def __init__(self) -> None:
        self._answered: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, anyio.Lock] = {}

    async def answer(self, eff: Effective, name: str, key: str,
                     engine: Callable[[], Any]) -> dict[str, Any]:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        async with lock:
            given = self._answered.get(key)
            if given is None:
                value: dict[str, Any] = await engine()
            else:
                found = await alookup(eff, name, key)
                value = given if found is MISS else found
            if "result" in value:
                self._answered[key] = value
            return value


def _failed(exc: Exception) -> dict[str, Any]:
    return {"error": {"code": -32000, "message": f"dejacache: {exc}"}}


class _ClientWrites:
    """The write half the session gets (the ``WriteStream`` protocol: ``send``, ``aclose``,
    async context manager). ``send`` hands the message to the proxy in the sender's task."""

    def __init__(self, proxy: _Proxy) -> None:
        self._proxy = proxy
        self._closed = False

    async def send(self, item: Any, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._proxy.from_client(item)

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _ClientWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closed = True


@contextlib.asynccontextmanager
async def session_streams(eff: Effective, server: dict[str, Any], open_live: OpenTransport,
                          extra: tuple[Any, ...] = (), callers: Callers | None = None,
                          ) -> AsyncIterator[tuple[Any, ...]]:
    """The (read, write) pair a transport yields inside a block (plus ``extra``, what the
    transport yields after the pair when it is not started: mcp 1.x's session-id getter).
    ``callers``: who the session says is asking (``_callers.callers_of``).
    ``eff``: the block the transport was opened in (``record`` starts the server now)."""
    to_client, client_reads = anyio.create_memory_object_stream[Any](0)
    failed: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            proxy = _Proxy(server, open_live, to_client, tg, callers or NOBODY)
            if eff.mode == "record":  # everything goes live: start now, as the transport would
                try:
                    with handing_on():
                        await proxy.ensure_live()
                except Exception as exc:  # raised below as the transport raises it, unwrapped
                    failed = exc
            if failed is None:
                writes = _ClientWrites(proxy)
                try:
                    yield (client_reads, writes, *(proxy.extra or extra))
                finally:
                    writes.close()
                    await proxy.stop()
                    tg.cancel_scope.cancel()
    finally:
        # Closed on every way out (a session that raised too): an unclosed stream is a
        # ResourceWarning when it is collected, in whatever code runs then.
        to_client.close()
        client_reads.close()
    if failed is not None:
        raise failed
