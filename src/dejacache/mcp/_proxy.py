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
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc

from .._engine import call_async
from ..config import Effective
from ..errors import ReplayMiss
from ..http.transport import handing_on
from ..scope import current
from . import _wire

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


class _Unstored(Exception):
    """A live JSON-RPC error outside a cassette: handed back, never cached by a runtime
    store (the next call may succeed)."""

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__("not stored")
        self.value = value


class _Lost(Exception):
    """The live transport ended while a request was waiting for its answer."""


async def _engine_call(eff: Effective, name: str, key: str, canonical: bytes,
                       fn: Callable[[], Any]) -> Any:
    # The one place this module enters the engine: its signature may change.
    return await call_async(eff, name, _wire.KIND, key, canonical, fn)


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

    def make(self, data: dict[str, Any]) -> Any:
        return self.session_message(self._parse(data))


class _Waiter:
    __slots__ = ("done", "notes", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: dict[str, Any] | None = None
        self.notes: list[dict[str, Any]] = []


class _Proxy:
    """One session's traffic: the client's side, the live side (when started), the engine."""

    def __init__(self, server: dict[str, Any], open_live: OpenTransport, to_client: Any,
                 tg: anyio.abc.TaskGroup) -> None:
        self.server = server
        self.open_live = open_live
        self.to_client = to_client
        self.tg = tg
        self.codec = _Codec()
        self.handshake: list[tuple[Any, dict[str, Any]]] = []
        self.waiting: dict[Any, _Waiter] = {}
        self.by_token: dict[Any, _Waiter] = {}
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
        first, so the server is in the state the session believes it is in."""
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
        await self.to_client.send(item)

    async def _exchange(self, item: Any, data: dict[str, Any], resent: bool = False
                        ) -> dict[str, Any]:
        """Send one request live and wait for its answer: ``{"result"|"error", ...}``."""
        w = _Waiter()
        rid = data["id"]
        if resent:  # a handshake request sent again: its answer is the session's already
            self._resent += 1
            rid = f"dejacache-handshake-{self._resent}"
            item = self.codec.make({**data, "id": rid})
        token = _wire.progress_token(data.get("params"))
        self.waiting[rid] = w
        if token is not None:
            self.by_token[token] = w
        try:
            await self.live_write.send(item)
            if not self._ended:  # else no answer can come: lost
                await w.done.wait()
        finally:
            self.waiting.pop(rid, None)
            if token is not None:
                self.by_token.pop(token, None)
        if w.value is None:
            raise _Lost(f"the MCP server {self.server} closed the connection before "
                        f"answering {data['method']}")
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
        method = data["method"]
        params = data.get("params")
        key, canonical = _wire.canonical(
            eff.namespace or "", self.server, method, params, eff.volatile,
            eff.key_substitute)
        sequenced = eff.features.sequenced
        ran = False

        async def live() -> dict[str, Any]:
            nonlocal ran
            ran = True
            await self.ensure_live(item)
            value = await self._exchange(item, data)
            if "error" in value and not sequenced:
                raise _Unstored(value)
            return value

        try:
            value = await _engine_call(eff, _wire.call_name(method), key, canonical, live)
        except _Unstored as u:
            value = u.value
        except ReplayMiss as miss:
            value = {"error": {"code": -32603, "message": str(miss),
                               "data": {MISS_MARK: _keep_miss(miss)}}}
        except Exception as exc:  # the server could not be started, or went away
            value = _failed(exc)
        if not ran:
            for note in _wire.replayed_notifications(value.get("notifications"),
                                                     _wire.progress_token(params)):
                await self.to_client.send(self.codec.make(note))
        await self._reply(data["id"], value)

    async def _reply(self, rid: Any, value: dict[str, Any]) -> None:
        if "error" in value:
            msg = {"jsonrpc": "2.0", "id": rid, "error": value["error"]}
        else:
            msg = {"jsonrpc": "2.0", "id": rid, "result": value.get("result", {})}
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.to_client.send(self.codec.make(msg))


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
                          extra: tuple[Any, ...] = ()) -> AsyncIterator[tuple[Any, ...]]:
    """The (read, write) pair a transport yields inside a block (plus ``extra``, what the
    transport yields after the pair when it is not started: mcp 1.x's session-id getter).
    ``eff``: the block the transport was opened in (``record`` starts the server now)."""
    to_client, client_reads = anyio.create_memory_object_stream[Any](0)
    failed: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            proxy = _Proxy(server, open_live, to_client, tg)
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
