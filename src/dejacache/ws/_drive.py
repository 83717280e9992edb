"""The drivers of a WebSocket session: its calls made through the engine, and the messages
its client is owed, handed out in order.

:class:`AsyncSession` (and :class:`SyncSession`, its twin for threads) is the seam every
client library's adapter calls, and the one a proxy's ``ws://`` route calls: ``open()`` the
handshake, ``send()`` each message the client sends, ``receive()`` what the server says,
``close()``. Inside a block:

* **open** looks the handshake up. Replayed: its recorded answer (a refusal or a connection
  failure are answers too, raised as they were) and the server's first messages. Otherwise
  the live side is opened (``open_live``) and what it answers is recorded.
* **send** stores the window the previous call left open, then looks the message up.
  Replayed: its window's messages are queued for ``receive()``, at their recorded pace when
  the block asks for it (``realtime``). Missed in ``replay`` mode: ``ReplayMiss``, naming
  the nearest recorded message and the fields that differ. Otherwise the message goes live
  and a new window records what the server sends until the client's next message (a session
  replayed so far is first brought live: its handshake made and its earlier messages sent
  again, whose answers are not passed on).
* **close** stores the open window and closes the live side; a session still open when its
  block exits has its window stored then (``scope.settle``).

A client message over ``max_message`` bytes (``_message.MAX_MESSAGE``, 64 MiB, by the rule
of every message bound, ``larger_than``) ends the recording, not the session: the open
window is stored (it is whole), and that message and every later one go to the live side
(brought live first if the session was replayed so far; in ``replay`` mode, ``ReplayMiss``)
without being keyed, kept or stored, with one ``DejacacheWarning`` naming the bound and
what raises it (``configure(max_ws_message=)``, read when the session starts). Every
in-process client goes by this rule (aiohttp's, and websockets' through their unbounded
endpoint); the proxy's clients never get here with one: its endpoint, a server bounding
what it accepts, refuses it first (1009). A message a websockets client sends in fragments
is bounded as they come: past the bound it is sent as a ``Streamed`` one, its fragments
handed to the live side as they arrive, never held whole (``_wire.Endpoint.spill_past``).

Each call is made in the task or thread that sends, as an HTTP request is: it is that
caller's step in the cassette's order.

The rules are written once, as flows that yield effects (advance a call's engine flow,
open the live side, send to it, store a window) and receive their answers, the way
``_core/flow.py`` writes the call policy; :class:`AsyncSession` and :class:`SyncSession`
only carry the effects out, awaiting or blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from .._core.flow import MISS, Flow, Store
from .._engine import NOT_LOOKED, AsyncDriver, CallSite, SyncDriver, store_value, try_encode
from ..config import Effective, settings_object
from ..errors import DejacacheWarning, ReplayMiss
from ..http._blocks import PerBlock
from ..http.exchange import unechoed
from ..http.headers import credential_values
from ..http.transport import handing_on
from ..scope import track, untrack
from ..stores._base import Record
from . import _message
from ._keys import MessageKey, Route, message_key, route
from ._message import (
    Answer,
    Closed,
    Handshake,
    Message,
    Refused,
    Streamed,
    larger_than,
    onward,
    too_big,
)
from ._session import SessionState, answer_of, error_of, handshake_value, model_in_query

__all__ = ["AsyncLive", "AsyncSession", "SyncLive", "SyncSession", "rebuilt_error"]

KIND = "ws"
_clock = time.perf_counter
Item = Message | Closed
T = TypeVar("T")


class AsyncLive(Protocol):
    """The live side of a session (an adapter opens it with its own library)."""

    answer: Answer

    async def send(self, m: Message) -> None: ...

    async def recv(self) -> Item:
        """The server's next message, or ``Closed`` once the connection has ended."""

    async def close(self, code: int, reason: str) -> None: ...


class SyncLive(Protocol):
    answer: Answer

    def send(self, m: Message) -> None: ...

    def recv(self) -> Item: ...

    def close(self, code: int, reason: str) -> None: ...


# Failures to reach the server that a recording keeps as the handshake's answer (the
# library's own exceptions otherwise go through unrecorded).
_RECORDED = (OSError, TimeoutError)
_ERRORS: dict[str, type[BaseException]] = {
    c.__name__: c for c in (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError,
                            ConnectionError, TimeoutError, OSError)}


def rebuilt_error(err: dict[str, Any]) -> BaseException:
    """The connection failure a recorded handshake answer stands for (same class for the
    standard ones, ``OSError`` otherwise; its errno and message)."""
    cls = _ERRORS.get(str(err.get("type", "")), OSError)
    errno = err.get("errno")
    message = str(err.get("message", ""))
    if type(errno) is int and issubclass(cls, OSError):
        return cls(errno, message)
    return cls(message)


class _Ordinals:
    """Per block: how many sessions each handshake key has had (the ``n`` of their keys)."""

    __slots__ = ("_lock", "_next")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[str, int] = {}

    def take(self, key: str) -> int:
        with self._lock:
            n = self._next.get(key, 0)
            self._next[key] = n + 1
            return n

    def seen(self, key: str, n: int) -> None:
        with self._lock:
            self._next[key] = max(self._next.get(key, 0), n + 1)


_ORDINALS: PerBlock[_Ordinals] = PerBlock(_Ordinals)


class _Keep:
    """What a session's calls keep: everything in a cassette (a refusal, a failure), only
    established sessions in a cache (the next connection may succeed)."""

    __slots__ = ()
    eff: Effective
    name: str
    kind: str

    def record(self, s: Store) -> Record | None:
        v = s.value
        if not self.eff.features.sequenced and ("error" in v or v.get("status", 101) != 101):
            return None
        return try_encode(self.eff, self.name, self.kind, s.key, s.canonical, v, s.duration)


class _AsyncCall(_Keep, AsyncDriver):
    __slots__ = ("canonical", "flow_", "key")

    def __init__(self, eff: Effective, name: str, key: str, canonical: bytes) -> None:
        super().__init__(eff, name, KIND)
        self.key, self.canonical = key, canonical
        self.flow_: Flow = self.flow(key, canonical, flights=False)

    async def later(self, value: dict[str, Any]) -> None:
        await self.store(Store(self.key, self.canonical, value, _clock() - self.t0))


class _SyncCall(_Keep, SyncDriver):
    __slots__ = ("canonical", "flow_", "key")

    def __init__(self, eff: Effective, name: str, key: str, canonical: bytes) -> None:
        super().__init__(eff, name, KIND)
        self.key, self.canonical = key, canonical
        self.flow_ = self.flow(key, canonical, flights=False)

    def later(self, value: dict[str, Any]) -> None:
        self.store(Store(self.key, self.canonical, value, _clock() - self.t0))


# The effects a session's flow yields; a driver carries each out and sends back its answer
# (or throws its exception in), as the engine's drivers do for ``call_flow``. A client
# message's ``MessageKey`` (``_keys.py``) is one too: look the message up, through the
# session's ``CallSite`` (a replayed message's only effect).
class _Advance(NamedTuple):
    """Advance ``call``'s engine flow (with ``ran``, the answer to its last effect: a Run's,
    or the lookup ``CallSite`` made): ``(run, value)``."""

    call: Any
    ran: Any = None


class _Send(NamedTuple):
    """Send ``message`` to the live side."""

    message: Message


class _Later(NamedTuple):
    """Store ``value`` as the answer of ``call``, whose window just closed."""

    call: Any
    value: dict[str, Any]


class _CloseLive(NamedTuple):
    """Close the live side (its errors are not the caller's: the session is ending)."""

    live: Any
    code: int
    reason: str


#: What raises the message bound of an in-process session (for the warning past it).
_RAISE_WITH = "dejacache.configure(max_ws_message=...)"
_OPEN = "open live"  #: open the live side: the live connection
_READER = "start reader"  #: start reading the live side


class _Session:
    """What the async and sync sessions share: the route, the state, the call whose window
    is open, and the session's rules, written once as flows of effects
    (:meth:`_open_flow`, :meth:`_send_flow`, :meth:`_close_flow`) that the two drivers carry
    out (``AsyncSession._run``, ``SyncSession._run``)."""

    Call: type = _SyncCall  # the engine driver of one call (``_AsyncCall`` for asyncio)

    def __init__(self, eff: Effective, hs: Handshake, *, realtime: bool,
                 volatile: Sequence[Any], max_message: int | None = None) -> None:
        self.eff = eff
        # Read once, at the session's start: ``configure(max_ws_message=)``, else the default
        # (read here, not bound at import: a test sets a small one). A bound given (the
        # proxy's ``--max-message``) is raised where it was given.
        self.raise_with = "" if max_message is not None else _RAISE_WITH
        if max_message is None:
            max_message = settings_object().max_ws_message or _message.MAX_MESSAGE
        self.max_message = max_message
        # No message of this length or less (characters or bytes) can pass it: only a longer
        # one is put to ``larger_than``. Calling it for every message cost 1.2M instructions
        # of a 612-message voice session's replay (151.4M -> 152.6M, callgrind); this check,
        # 0.1M (151.7M without it, 151.8M with it).
        self.surely_within = self.max_message // 4
        self.unrecorded = False  # a message passed the bound: nothing more is recorded
        self.handshake = hs
        self.route: Route = route(eff, hs, tuple(volatile))
        r = self.route
        self.state = SessionState(r.provider, r.name, realtime or eff.realtime,
                                  model_in_query(r.query))
        self.session_id = f"{r.keyed.key}#0"
        # Every client message's call has the same name and facts: its lookup is made
        # through this, and only a message that does not hit builds its call.
        self.site = CallSite(eff, r.name)
        self.live: Any = None
        self.open_call: tuple[Any, dict[str, Any] | None] | None = None
        # A late live start: how many of the server's first messages answer the history
        # sent again (as many as the recording had for it), not passed on.
        self.muted = 0
        self.finished = False
        self.credentials: list[str] | None = None  # (``_unechoed``: found once, when live)
        self.lock = threading.Lock()  # the state, between the caller and the live reader

    @property
    def name(self) -> str:
        return self.route.name

    # ------------------------------------------------------------ the flows

    def _open_flow(self) -> Generator[Any, Any, Answer]:
        """The handshake: recorded (its answer, and the server's first messages queued), or
        made live (its answer kept when the client's first message closes its window)."""
        k = self.route.keyed
        call = self.Call(self.eff, self.name, k.key, k.canonical)
        run, value = yield _Advance(call)
        if run is None:
            answer = self._replayed(value)
            self._wake()
            return answer
        try:
            self.live = yield _OPEN
        except Refused as refused:  # a refusal is the recorded answer
            yield _Advance(call, call.ran(self._unechoed(handshake_value(refused.answer, 0))))
            return refused.answer
        except _RECORDED as exc:  # so is a connection failure, raised again on replay
            yield _Advance(call, call.ran(self._unechoed(error_of(exc))))
            raise
        n = self._ordinal(None)
        yield _Advance(call, call.ran(None, keep=False))  # stored when its window closes
        with self.lock:
            self.open_call = (call, handshake_value(self.live.answer, n))
            self.state.open_window(_clock())
        track(self)
        yield _READER
        opened: Answer = self.live.answer
        return opened

    def _send_flow(self, m: Message) -> Generator[Any, Any, None]:
        """One client message: the open window stored, then the message answered from the
        recording or sent live (a session replayed so far is brought live first)."""
        if self.unrecorded or (len(m.data) > self.surely_within
                               and larger_than(m, self.max_message)) or type(m) is Streamed:
            yield from self._unrecorded_flow(m)
            return
        tree = self.state.sent(m)
        found = self._window_value(reopen=True)
        if found is not None:
            yield _Later(*found)
        mk = message_key(self.eff, self.route, self.session_id, m, tree)
        value = yield mk  # its lookup (``CallSite.first``): a hit is the call's value
        if value is MISS or value is NOT_LOOKED:
            call = self.Call(self.eff, self.name, mk.key, mk.canonical)
            if value is MISS:  # the flow carries on from that lookup's answer
                call.looked(call.flow_)
            run, value = yield _Advance(call, None if value is NOT_LOOKED else value)
        else:
            run = None
        if run is None:
            with self.lock:
                if self.state.play(value, _clock()):  # (most windows name no ids: no call)
                    self._replayed_ids(value)
            self._wake()
            return
        if self.live is None:
            # Live from here: the handshake made and the earlier messages sent again; their
            # answers (as many as the recording had) are not passed on.
            self.live = yield _OPEN
            with self.lock:
                self.muted = self.state.replayed
            for earlier in self.state.history[:-1]:
                yield _Send(earlier)
            yield _READER
        with self.lock:
            self.open_call = (call, None)
            if self.state.window is None:  # (a late live start: none was open)
                self.state.open_window(_clock())
        try:
            yield _Send(m)
        finally:
            yield _Advance(call, call.ran(None, keep=False))
        track(self)

    def _unrecorded_flow(self, m: Message) -> Generator[Any, Any, None]:
        """A message over ``max_message``, or one after it: sent live, never keyed or held
        (see the module docstring). Warned after it is sent, so that under ``-W error`` the
        server still has it."""
        first = not self.unrecorded
        if first:
            self.unrecorded = True
            found = self._window_value()  # the window before it, whole
            if found is not None:
                yield _Later(*found)
        if self.live is None:
            if self.eff.mode == "replay":
                raise ReplayMiss(f"{self.name}: {self._over()}, so no recording can answer "
                                 f"it{self._raise_hint()}", name=self.name,
                                 source=self.eff.source)
            self.live = yield _OPEN
            with self.lock:
                self.muted = self.state.replayed
            for earlier in self.state.history:
                yield _Send(earlier)
            yield _READER
        yield _Send(m)
        if first:
            warnings.warn(f"{self._over()} in the WebSocket session {self.name} "
                          f"({self.eff.source}): it reached the server, as will the rest of "
                          "the session, which is not recorded from it on (a replay misses "
                          f"there){self._raise_hint()}", DejacacheWarning, stacklevel=2)

    def _over(self) -> str:
        return too_big("the client's", self.max_message, "")

    def _raise_hint(self) -> str:
        return f"; raise it with {self.raise_with}" if self.raise_with else ""

    def _close_flow(self, code: int, reason: str) -> Generator[Any, Any, None]:
        """The client closes: the open window stored, the live side closed (1001 when the
        client's end carried no code a close frame may: ``onward``)."""
        found = self._window_value()
        if found is not None:
            yield _Later(*found)
        self.finished = True
        untrack(self)
        with self.lock:
            self.state.pending.clear()
            self.state.ended = True
        self._wake()
        live, self.live = self.live, None
        if live is not None:
            yield _CloseLive(live, onward(code), reason)

    # ------------------------------------------------------------ shared steps

    def _ordinal(self, value: dict[str, Any] | None) -> int:
        """The session's place among the block's sessions with its handshake (``value``:
        the recorded handshake answer that holds it; None: a new session)."""
        key = self.route.keyed.key
        table = _ORDINALS.get(self.eff)
        if value is not None:  # replayed: the recorded place
            n = value.get("session", 0)
            n = n if type(n) is int else 0
            if table is not None:
                table.seen(key, n)
        else:
            n = table.take(key) if table is not None else 0
        self.session_id = f"{key}#{n}"
        return n

    def _replayed(self, value: dict[str, Any]) -> Answer:
        err = value.get("error")
        if isinstance(err, dict):
            raise rebuilt_error(err)
        answer = answer_of(value)
        if answer.status == 101:
            self._ordinal(value)
            if self.state.play(value, _clock()):
                self._replayed_ids(value)
        return answer

    # The ids of a window are aliased by the call that got them (``http/aliases.py``): a
    # live window's are tagged with its call's key as it is stored, a replayed one's take the
    # tag stored with them. Numbered by the order the block learned them, two sessions
    # replayed in another interleaving than recorded swapped numbers, and a session reading
    # back its second item by id was served the recording made for its first.
    def _replayed_ids(self, value: dict[str, Any]) -> None:
        if self.route.aliases is not None:
            self.route.aliases.replayed(value)

    def _window_value(self, reopen: bool = False) -> tuple[Any, dict[str, Any]] | None:
        """The open call and the value to store for it (None: no window open). ``reopen``
        (a client message about to go live): the next window opens in the same step, so a
        server message the live reader hears while the message is keyed and the window
        stored is kept; with no window open it reached the client and no recording (the
        sync Realtime client's 5th event went missing in ~1 recording in 7 under load)."""
        if self.open_call is None and self.state.window is None and self.live is None:
            # A replay (the usual case): nothing open, nothing to open. Only the sender
            # sets these, so no lock is needed to see it.
            return None
        with self.lock:
            opened, self.open_call = self.open_call, None
            w = self.state.take_window()
            if reopen and self.live is not None:
                self.state.open_window(_clock())
        if opened is None or (w is not None and w.cut):
            # A window a message over the size bound cut is not the server's whole answer:
            # unstored, its call misses on replay rather than replaying a shorter session.
            return None
        call, base = opened
        value = dict(base or {})
        if w is not None:
            value.update(w.value(self.state.provider, self.state.model))
        value = self._unechoed(value)
        if self.route.aliases is not None:
            self.route.aliases.keep(call.key, value)
        return call, value

    def _unechoed(self, value: dict[str, Any]) -> dict[str, Any]:
        """A live answer as stored: without the handshake's credentials, which a server
        refusing them may quote (an error event, a close reason, a refused handshake's body:
        ``exchange.unechoed``). A frame has no status saying it is an error, so every live
        window of a session that sent credentials is looked through; replayed windows never
        are."""
        if self.credentials is None:
            hs = self.handshake
            self.credentials = credential_values(hs.headers, self.route.query)
        return unechoed(value, self.credentials)

    def _heard(self, item: Item) -> None:
        with self.lock:
            if self.muted and not isinstance(item, Closed):
                self.muted -= 1
                return
            self.state.heard(item, _clock())

    def _no_live(self) -> ReplayMiss:
        return ReplayMiss(f"{self.name}: this session has no live side to send "
                          f"{self.handshake.url} to", name=self.name, source=self.eff.source)

    def _wake(self) -> None:
        raise NotImplementedError

    # The block exits with this session open (``scope.settle``): its window is stored now,
    # from the exiting thread, as what the session had said by then.
    def abandon(self, why: str) -> None:
        found = self._window_value()
        self.finished = True
        if found is None:
            return
        call, value = found
        rec = call.record(Store(call.key, call.canonical, value, _clock() - call.t0))
        if rec is not None:
            store_value(self.eff, call.key, rec, None)


# ---------------------------------------------------------------- asyncio


class AsyncSession(_Session):
    """One session driven from an event loop (see the module docstring). ``open_live``:
    how to open the live side (None: there is none, and a call that must go live fails)."""

    Call = _AsyncCall

    def __init__(self, eff: Effective, hs: Handshake,
                 open_live: Callable[[], Awaitable[AsyncLive]] | None, *,
                 realtime: bool = False, volatile: Sequence[Any] = (),
                 max_message: int | None = None) -> None:
        super().__init__(eff, hs, realtime=realtime, volatile=volatile,
                         max_message=max_message)
        self.open_live = open_live
        self._reader: asyncio.Task[None] | None = None
        # Made here, outside any loop: since Python 3.10 they bind to the loop that first
        # waits on them.
        self._changed = asyncio.Event()
        self._send_lock = asyncio.Lock()

    async def open(self) -> Answer:
        """The handshake's answer (recorded or live); a connection failure is raised."""
        return await self._run(self._open_flow())

    async def send(self, m: Message) -> None:
        """Answer one message the client sent (see the module docstring)."""
        # The lock's own acquire and release, not ``async with``: an uncontended turn took
        # ~0.2 µs against ~0.6 through ``__aenter__`` and ``__aexit__``.
        lock = self._send_lock
        await lock.acquire()
        try:
            await self._run(self._send_flow(m))
        finally:
            lock.release()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """The client closes: the open window is stored, the live side closed."""
        async with self._send_lock:
            await self._run(self._close_flow(code, reason))
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _run(self, flow: Generator[Any, Any, T]) -> T:
        answer: Any = None
        exc: Exception | None = None
        while True:
            try:
                effect = flow.send(answer) if exc is None else flow.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            answer, exc = None, None
            try:
                if type(effect) is MessageKey:  # a replayed message's only effect: no ``_do``
                    answer = await self.site.afirst(effect.key)
                elif type(effect) is _Advance:
                    call = effect.call
                    answer = await call.advance(call.flow_, effect.ran)
                else:
                    answer = await self._do(effect)
            except Exception as e:
                exc = e

    async def _do(self, effect: Any) -> Any:
        if isinstance(effect, _Send):
            return await self.live.send(effect.message)
        if isinstance(effect, _Later):
            return await effect.call.later(effect.value)
        if isinstance(effect, _CloseLive):
            with contextlib.suppress(Exception):
                await effect.live.close(effect.code, effect.reason)
            return None
        if effect == _OPEN:
            if self.open_live is None:
                raise self._no_live()
            with handing_on():  # the live connection is this call's wire, not another call
                return await self.open_live()
        if self._reader is None and self.live is not None:  # _READER
            self._reader = asyncio.get_running_loop().create_task(self._read_live())
        return None

    async def _read_live(self) -> None:
        live = self.live
        assert live is not None
        while True:
            try:
                item = await live.recv()
            except asyncio.CancelledError:
                raise
            except Exception:  # the library failed where it would have said closed
                item = Closed(1006, "")
            self._heard(item)
            self._wake()
            if isinstance(item, Closed):
                return

    def _wake(self) -> None:
        self._changed.set()

    def due(self) -> list[Item]:
        """The messages owed and due now, without waiting (a feed hands them on at once:
        one write of many frames, where one await per message cost more than the replay's
        own work)."""
        out: list[Item] = []
        now = _clock()
        with self.lock:
            pending = self.state.pending
            while pending and (pending[0][0] is None or pending[0][0] <= now):
                item = pending.popleft()[1]
                out.append(item)
                if isinstance(item, Closed):
                    break
        return out

    async def receive(self) -> Item:
        """The next message the client is owed (``Closed`` at the end), when it is due."""
        changed = self._changed
        state = self.state
        while True:
            with self.lock:
                head = state.pending[0] if state.pending else None
                if head is None and state.ended:
                    return Closed(1000, "")  # closed by the client: nothing more comes
            if head is not None:
                due, item = head
                wait = due - _clock() if due is not None else 0.0
                if wait <= 0:
                    with self.lock:
                        state.pending.popleft()
                    return item
                await asyncio.sleep(wait)
                continue
            changed.clear()
            await changed.wait()


# ---------------------------------------------------------------- threads


class SyncSession(_Session):
    """:class:`AsyncSession` for a client that blocks (a thread reads the live side)."""

    Call = _SyncCall

    def __init__(self, eff: Effective, hs: Handshake, open_live: Callable[[], SyncLive] | None,
                 *, realtime: bool = False, volatile: Sequence[Any] = (),
                 max_message: int | None = None) -> None:
        super().__init__(eff, hs, realtime=realtime, volatile=volatile,
                         max_message=max_message)
        self.open_live = open_live
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition(self.lock)
        self._send_lock = threading.RLock()

    def open(self) -> Answer:
        return self._run(self._open_flow())

    def send(self, m: Message) -> None:
        with self._send_lock:
            self._run(self._send_flow(m))

    def close(self, code: int = 1000, reason: str = "") -> None:
        with self._send_lock:
            self._run(self._close_flow(code, reason))

    def _run(self, flow: Generator[Any, Any, T]) -> T:
        answer: Any = None
        exc: Exception | None = None
        while True:
            try:
                effect = flow.send(answer) if exc is None else flow.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            answer, exc = None, None
            try:
                answer = self._do(effect)
            except Exception as e:
                exc = e

    def _do(self, effect: Any) -> Any:
        if type(effect) is MessageKey:
            return self.site.first(effect.key)
        if isinstance(effect, _Advance):
            return effect.call.advance(effect.call.flow_, effect.ran)
        if isinstance(effect, _Send):
            return self.live.send(effect.message)
        if isinstance(effect, _Later):
            return effect.call.later(effect.value)
        if isinstance(effect, _CloseLive):
            with contextlib.suppress(Exception):
                effect.live.close(effect.code, effect.reason)
            return None
        if effect == _OPEN:
            if self.open_live is None:
                raise self._no_live()
            with handing_on():
                return self.open_live()
        if self._reader is None and self.live is not None:  # _READER
            self._reader = threading.Thread(target=self._read_live, daemon=True,
                                            name="dejacache-ws-live")
            self._reader.start()
        return None

    def _read_live(self) -> None:
        live = self.live
        assert live is not None
        while True:
            try:
                item = live.recv()
            except Exception:
                item = Closed(1006, "")
            self._heard(item)
            self._wake()
            if isinstance(item, Closed):
                return

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def receive(self, timeout: float | None = None) -> Item | None:
        """The next message the client is owed, when due (None: ``timeout`` passed)."""
        state = self.state
        end = None if timeout is None else _clock() + timeout
        with self._changed:
            while True:
                if state.pending:
                    due, item = state.pending[0]
                    wait = due - _clock() if due is not None else 0.0
                    if wait <= 0:
                        state.pending.popleft()
                        return item
                elif state.ended:
                    return Closed(1000, "")  # closed by the client: nothing more comes
                else:
                    wait = None
                left = None if end is None else end - _clock()
                if left is not None and left <= 0:
                    return None
                if wait is None or (left is not None and left < wait):
                    wait = left
                self._changed.wait(wait)
