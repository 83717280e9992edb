"""One client connection to the proxy: bytes in (``_http1.RequestParser``), one request at
a time answered by the coroutine the server gives for it, the next one after it.

An ``asyncio.Protocol`` rather than asyncio's streams: per request, the stream reader and
writer cost the proxy about as much CPU as a minimal server spends answering from memory
(measured with a Node client against the proxy's status endpoint: ~130 µs of proxy CPU per
call on streams), and the proxy is measured against such a server.

A request's coroutine is started at once, in ``data_received`` (:func:`start`), and runs in
a task only from the point where it first waits: a replayed answer never waits, and is
written before the bytes that asked for it return to the event loop. A task per request cost
three passes of the loop where the minimal server takes one (~40 us of the proxy's CPU per
replayed call of ~450, measured in-process with a raw-socket client); a request that goes
live, streams, upgrades or waits for a slow client continues in its task as before.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import sys
import traceback
from collections.abc import Coroutine, Generator
from typing import Any, Protocol

from .._secrets import PLACEHOLDER, mask_text
from ._forward import Out
from ._http1 import CONTINUE, Request, RequestParser
from ._limits import Budget
from ._websocket import Upgraded, wants_websocket

__all__ = ["IDLE_TIMEOUT", "READ_TIMEOUT", "WRITE_TIMEOUT", "Connection", "Handler", "start"]

# Requests a client may pipeline before the proxy stops reading from it.
_QUEUED = 16
# After a refusal, what the client still sends is read and dropped for up to this long, then
# the connection closes: a socket closed with bytes unread sends a reset, which can reach the
# client before the refusal does (a 413 for an upload still being sent was seen as
# "connection reset by peer").
_LINGER = 2.0
# The defaults of ``Connection``'s timeouts (see there). Idle: the proxy's clients close
# their own idle sockets sooner (undici, under openai-node, after 4 s; httpx after 5 s), so
# the client, not the proxy, ends a pooled connection: a proxy closing at about the same
# moment races a request the client is sending on it, which then fails (the load benchmark's
# turns failed so on connections uvicorn closed after its 5 s: docs/benchmarks.md). nginx
# and aiohttp keep 75 s.
READ_TIMEOUT = 30.0
IDLE_TIMEOUT = 75.0
# Write: nginx's ``send_timeout`` (60 s between two writes that make progress).
WRITE_TIMEOUT = 60.0

try:  # the bytes a socket holds that its peer has not taken (Linux: SIOCOUTQ)
    import fcntl
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ if sys.platform == "linux" else None
except ImportError:  # pragma: no cover (Windows)
    _OUTQ = None


class Handler(Protocol):
    """What answers a connection's requests (``_server.ProxyServer``)."""

    stopping: bool

    def answer(self, req: Request, out: Out) -> asyncio.Future[Any] | None: ...

    def refusal(self, status: int, message: str, *, close: bool = False) -> bytes: ...


class _Rest(Coroutine[Any, Any, Any]):
    """The rest of a coroutine :func:`start` began, as the coroutine of the task that goes
    on with it: the task's first step gets what the coroutine waits on, every later one is
    the coroutine's own. A cancel that comes before that first step reaches the coroutine
    where it waits, as it would have in a task of its own."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro, self.first = coro, [first]

    def send(self, value: Any) -> Any:
        if self.first:
            return self.first.pop()
        return self.coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any:
        self.first.clear()
        if val is None and tb is None:
            return self.coro.throw(typ)
        return self.coro.throw(typ, val, tb)  # pragma: no cover (asyncio throws one value)

    def close(self) -> None:
        self.first.clear()
        self.coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("run by its task, never awaited")


def start(coro: Coroutine[Any, Any, Any], ctx: contextvars.Context | None = None
          ) -> asyncio.Future[Any] | None:
    """Run ``coro`` in ``ctx`` now, up to where it first waits: None when it finished
    without waiting, else the task that goes on with it (a future already failed when it
    raised). The same steps a task would run, in the same context; what differs is only
    ``asyncio.current_task()``, the caller's until it first waits (None in a protocol's
    callback): what needs its own task (the HTTP library sending a live request: its locks
    and sniffio ask) waits once first (``_forward``)."""
    ctx = ctx if ctx is not None else contextvars.copy_context()
    try:
        first = ctx.run(coro.send, None)
    except StopIteration:
        return None
    except (KeyboardInterrupt, SystemExit):  # as a task's step lets them through
        raise
    except BaseException as exc:
        # The loop is asked for only here and below: on Python 3.11 each
        # ``get_running_loop()`` is a ``getpid`` system call (its fork check), and a replayed
        # answer, finished above, made two of its four system calls that way (strace -c).
        failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if isinstance(exc, asyncio.CancelledError):
            failed.cancel()
        else:
            failed.set_exception(exc)
        return failed
    return asyncio.get_running_loop().create_task(_Rest(coro, first), context=ctx)


class Connection(asyncio.Protocol):
    """``read_timeout``: how long a request that has begun to arrive may take to arrive, in
    seconds: its head in full, and each pause in its body. A client that sends part of a
    request and waits (a truncated body, a head without its blank line, one byte a minute)
    would otherwise hold its connection and buffer for ever; it gets a 408 and a close.

    ``idle_timeout``: how long a connection may sit with nothing asked and nothing being
    answered (since it opened, or since its last answer was written) before it is closed,
    quietly: nothing was asked, so nothing is refused. Without it, clients that leave
    sockets open (a pool, a crashed process's half-open sockets, a port scanner) held one
    file descriptor each for ever. A WebSocket, and an answer however long it takes, are
    never cut by it.

    ``write_timeout``: how long writing to the client may make no progress (its socket
    buffer full, and nothing of what waits behind it taken) before the connection is
    aborted. A client that stops reading mid-answer (a hung process, a breakpoint, a
    half-open socket) otherwise held its connection, its session's request in flight and
    the upstream stream feeding it for ever. The answer's coroutine fails where it waits
    (``ConnectionAbortedError``), as it would had the client gone, so a cut stream is not
    recorded and its upstream connection is closed. A slow reader is never cut: progress is
    what the client took since the last look (:func:`_unsent`), so a stalled client is cut
    between one and two timeouts after it last read.

    One timer serves all three, armed for the earliest deadline the connection's state has
    (:meth:`_deadline`), and left armed when that state moves on: when it fires early it is
    armed again for the new deadline. Arming one and cancelling it on every keep-alive call
    cost ~1.8 us (and leaves the cancelled handle in the loop's heap); noting the time and
    comparing it with the armed one's costs ~0.2 us (timeit, Python 3.11).

    ``buffered``: the bytes of request bodies the proxy may hold at once, across its
    connections (``_limits.py``). A request's share is given back when its answer is done
    (written, failed, or its task ended after the client left), and a request dropped
    unanswered (queued when its client left, refused, timed out) gives back its own."""

    def __init__(self, handler: Handler, max_body: int, read_timeout: float = READ_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT, write_timeout: float = WRITE_TIMEOUT,
                 buffered: Budget | None = None) -> None:
        self.handler = handler
        self.parser = RequestParser(max_body, buffered)
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self._timer: asyncio.TimerHandle | None = None  # see the class docstring
        self._head_since = 0.0  # when the head now arriving began (loop time; 0: none)
        self._last = 0.0  # when bytes of the request now arriving last came
        self._idle_since = 0.0  # when nothing was left to answer (loop time)
        self._stalled_since = 0.0  # writing paused, and nothing taken since then (0: not)
        self._unsent = 0  # what the client had not taken then (:func:`_unsent`)
        self._lingering = False  # refused: what arrives is dropped until the close
        self.queue: collections.deque[Request] = collections.deque()
        self.task: asyncio.Future[Any] | None = None  # the request being answered
        self._held = 0  # what its body holds of the budget (``Request.held``)
        self.keep = True  # the request being answered leaves the connection open
        self.out: Out | None = None
        self.upgraded: Upgraded | None = None  # a WebSocket now: its bytes are not HTTP
        self._reading = True

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.out = Out(transport)
        # Kept: on Python 3.11 each ``get_running_loop()`` is a system call (see ``start``).
        self._loop = asyncio.get_running_loop()
        self._rest()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        if self.upgraded is not None:
            self.upgraded.feed(data)
            return
        done = self.parser.feed(data)
        self.queue.extend(done)
        if self._head_since or not self.parser.idle:  # a request is (or was) arriving
            self._watch(restart=bool(done))
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

    def _watch(self, restart: bool = False) -> None:
        """Note that bytes of a request arrived; have the timer refuse it when it stops
        arriving (``restart``: a new head may have begun with them)."""
        parser = self.parser
        if parser.idle or parser.failed is not None:
            self._head_since = 0.0
            return
        now = self._last = self._loop.time()  # (only for a partial request)
        if not parser.in_head:
            self._head_since = 0.0
        elif restart or not self._head_since:
            self._head_since = now
        self._arm()

    def _rest(self) -> None:
        """Note that nothing is left to answer: the idle time starts now."""
        now = self._idle_since = self._loop.time()
        timer = self._timer
        if timer is None or timer.when() > now + self.idle_timeout:
            self._arm()

    def _arm(self, deadline: float | None = None) -> None:
        """Have the timer fire by ``deadline``, else by the one the connection's state now
        has (a stalled write's deadline is passed in: :meth:`_expire` arms it again)."""
        if deadline is None:
            deadline = self._deadline()
        timer = self._timer
        if deadline is None or (timer is not None and timer.when() <= deadline):
            return
        if timer is not None:
            timer.cancel()
        self._timer = self._loop.call_at(deadline, self._expire)

    def _deadline(self) -> float | None:
        """When the connection's present state times out; None when it cannot (a request
        being answered, a WebSocket, a refusal already on its way)."""
        if self._lingering or self.upgraded is not None or self.parser.failed is not None:
            return None
        if not self.parser.idle:  # a request arriving
            if self._head_since:  # a head: whole within the timeout, however it trickles in
                return self._head_since + self.read_timeout
            return self._last + self.read_timeout  # a body: no pause as long as the timeout
        if self.task is None and not self.queue:
            return self._idle_since + self.idle_timeout
        return None

    def _expire(self) -> None:
        self._timer = None
        if self._stalled_since:  # first: a close waits for the buffer to be sent
            if self._write_expired():
                return
            self._arm(self._stalled_since + self.write_timeout)
        deadline = self._deadline()
        if deadline is None or self.transport.is_closing():
            return
        now = self._loop.time()
        if not self.parser.idle and not self._reading:
            # The proxy stopped reading, not the client: time restarts.
            self._head_since = self._head_since and now
            self._last = now
            self._arm()
            return
        if now < deadline:
            self._arm()
            return
        if self.parser.idle:  # nothing asked, nothing to answer: no refusal to send
            self.transport.close()
            return
        what = "head" if self._head_since else "body"
        self.parser.fail(408, f"the request's {what} did not arrive within "
                              f"{self.read_timeout:g} s")
        self._reading = False
        self.transport.pause_reading()
        self._next()

    def _write_expired(self) -> bool:
        """Whether writing made no progress for the write timeout: then the connection is
        aborted, and the answer's coroutine fails where it waits."""
        now = self._loop.time()
        unsent = _unsent(self.transport)
        if unsent < self._unsent:  # the client took some: time restarts
            self._stalled_since, self._unsent = now, unsent
            return False
        if now < self._stalled_since + self.write_timeout:
            return False
        assert self.out is not None
        self.out.resume(ConnectionAbortedError(
            f"the client read nothing of its answer for {self.write_timeout:g} s"))
        self.transport.abort()  # nothing more can be sent: no close waiting on the buffer
        return True

    def _next(self) -> None:
        # A loop, not a recursion: requests answered at once (see the module docstring)
        # follow one another here, pipelined ones included.
        while self.task is None and not self._lingering and not self.transport.is_closing():
            if not self.queue:
                failed = self.parser.failed
                if failed is not None:  # the requests before it answered: now the refusal
                    self.transport.write(self.handler.refusal(failed.status, str(failed),
                                                              close=True))
                    self._linger()
                elif self.parser.idle:
                    self._rest()
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
            task = self.handler.answer(req, self.out)
            if task is not None and not task.done():
                self.task, self._held = task, req.held
                task.add_done_callback(self._done)
                return
            if req.held:
                self.parser.budget.give(req.held)
            if not self._answered(task):
                return

    def turn_away(self, message: str) -> None:
        """Answer a connection the proxy cannot take now with a 503 before anything is read
        from it, then close it (:meth:`_linger`: what the client sends meanwhile, its body
        included, is dropped unread)."""
        self.transport.write(self.handler.refusal(503, message, close=True))
        self._linger()

    def _linger(self) -> None:
        """End the connection after a refusal: the refusal and the end of what the proxy
        sends first, then what the client still sends is dropped until it closes, or for
        :data:`_LINGER` seconds (see there)."""
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if not self._reading:
            self._reading = True
            self.transport.resume_reading()
        self._loop.call_later(_LINGER, self.transport.close)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self.task = None
        if self._held:
            self.parser.budget.give(self._held)
            self._held = 0
        if self._answered(task):
            self._next()

    def _answered(self, task: asyncio.Future[Any] | None) -> bool:
        """After a request's answer (``task`` None: written at once): whether the next
        request may be answered."""
        if task is not None and not task.cancelled():
            exc = task.exception()
            if exc is not None and not isinstance(exc, ConnectionError):
                trace = "".join(traceback.format_exception(exc))
                # (no request at hand: its secret-shaped strings and URL keys, at least)
                print(mask_text(f"dejacache proxy: error answering a request:\n{trace}",
                                lambda _: PLACEHOLDER), file=sys.stderr, end="")
                self.transport.close()
                return False
        if not self.keep or (self.handler.stopping and not self.queue):
            self.transport.close()
            return False
        if not self._reading and len(self.queue) <= _QUEUED and self.parser.failed is None:
            self._reading = True
            self.transport.resume_reading()
        return True

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
        self._stalled_since = self._loop.time()
        self._unsent = _unsent(self.transport)
        self._arm(self._stalled_since + self.write_timeout)

    def resume_writing(self) -> None:
        assert self.out is not None
        self._stalled_since = 0.0  # (the timer, left armed, finds nothing due)
        self.out.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.upgraded is not None:
            self.upgraded.lost()
        budget = self.parser.budget
        for req in self.queue:  # never to be answered: their bodies are let go
            budget.give(req.held)
        self.queue.clear()
        self.parser.drop()
        if self.out is not None:  # a write waiting for the client to read fails now
            self.out.resume(ConnectionResetError("the client closed the connection"))


def _unsent(transport: asyncio.WriteTransport) -> int:
    """What was written to ``transport``'s peer and not yet taken by it: the transport's
    buffer, and (on Linux) its socket's send queue. The buffer alone moves only once a third
    of the socket's buffer is free, and the kernel grew that buffer to ~3 MiB on loopback
    (measured): a client reading 4 KiB every 0.2 s (a third in ~50 s) left it unchanged
    for longer than a short timeout, and was cut."""
    unsent = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if _OUTQ is not None and sock is not None:
        try:
            queued = fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0")
        except OSError:  # pragma: no cover (closed meanwhile)
            return unsent
        unsent += int.from_bytes(queued, sys.byteorder, signed=True)
    return unsent
