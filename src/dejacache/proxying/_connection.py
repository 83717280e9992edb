"""One client connection to the proxy: bytes in (``_http1.RequestParser``), one request at
a time answered by a task the server starts for it, the next one after it.

An ``asyncio.Protocol`` rather than asyncio's streams: per request, the stream reader and
writer cost the proxy about as much CPU as a minimal server spends answering from memory
(measured with a Node client against the proxy's status endpoint: ~130 µs of proxy CPU per
call on streams), and the proxy is measured against such a server. The request's task is the
only task a request costs (started in its session's context: ``_sessions.Session.begin``).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import traceback
from typing import Any, Protocol

from ._forward import Out
from ._http1 import CONTINUE, Request, RequestParser
from ._websocket import Upgraded, wants_websocket

__all__ = ["Connection", "Handler"]

# Requests a client may pipeline before the proxy stops reading from it.
_QUEUED = 16


class Handler(Protocol):
    """What answers a connection's requests (``_server.ProxyServer``)."""

    stopping: bool

    def answer(self, req: Request, out: Out) -> asyncio.Task[Any]: ...

    def refusal(self, status: int, message: str, *, close: bool = False) -> bytes: ...


class Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, max_body: int) -> None:
        self.handler = handler
        self.parser = RequestParser(max_body)
        self.queue: collections.deque[Request] = collections.deque()
        self.task: asyncio.Task[Any] | None = None  # the request being answered
        self.keep = True  # the request being answered leaves the connection open
        self.out: Out | None = None
        self.upgraded: Upgraded | None = None  # a WebSocket now: its bytes are not HTTP
        self._reading = True

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.out = Out(transport)

    def data_received(self, data: bytes) -> None:
        if self.upgraded is not None:
            self.upgraded.feed(data)
            return
        self.queue.extend(self.parser.feed(data))
        if self.parser.failed is not None and self._reading:
            self._reading = False  # nothing after a request it cannot read is read
            self.transport.pause_reading()
        if self.parser.continue_wanted:
            self.parser.continue_wanted = False
            self.transport.write(CONTINUE)
        if len(self.queue) > _QUEUED and self._reading:
            self._reading = False
            self.transport.pause_reading()
        self._next()

    def _next(self) -> None:
        if self.task is not None or self.transport.is_closing():
            return
        if not self.queue:
            failed = self.parser.failed
            if failed is not None:  # the requests before it answered: now the refusal
                self.transport.write(self.handler.refusal(failed.status, str(failed),
                                                          close=True))
                self.transport.close()
            return
        if self.handler.stopping:
            self.transport.close()
            return
        req = self.queue.popleft()
        self.keep = req.keep_alive
        if wants_websocket(req):  # the connection is the WebSocket's from here on
            self.keep = False
            self.out = self.upgraded = Upgraded(self.transport)
        assert self.out is not None
        self.task = self.handler.answer(req, self.out)
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.task = None
        if not task.cancelled():
            exc = task.exception()
            if exc is not None and not isinstance(exc, ConnectionError):
                print("dejacache proxy: error answering a request:", file=sys.stderr)
                traceback.print_exception(exc, file=sys.stderr)
                self.transport.close()
                return
        if not self.keep or (self.handler.stopping and not self.queue):
            self.transport.close()
            return
        if not self._reading and len(self.queue) <= _QUEUED and self.parser.failed is None:
            self._reading = True
            self.transport.resume_reading()
        self._next()

    def close_if_idle(self) -> None:
        """Close now when no request is being answered or has begun to arrive (a WebSocket
        is told the proxy is going away)."""
        if self.upgraded is not None:
            self.upgraded.going_away()
            return
        if self.task is None and not self.queue and self.parser.idle:
            self.transport.close()

    def pause_writing(self) -> None:
        assert self.out is not None
        self.out.pause()

    def resume_writing(self) -> None:
        assert self.out is not None
        self.out.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upgraded is not None:
            self.upgraded.lost()
        self.queue.clear()
        if self.out is not None:  # a write waiting for the client to read fails now
            self.out.resume(ConnectionResetError("the client closed the connection"))
