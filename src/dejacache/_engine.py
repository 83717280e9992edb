"""The one call path every face uses: look up, apply the mode, run once, encode, store.

``@cache``, the HTTP transports and the tool cache all come through here, so modes,
single-flight, fail-open store handling and replay misses (explained by ``_replay_miss``)
behave the same everywhere.
"""

from __future__ import annotations

import _thread
import contextlib
import time
from collections.abc import Awaitable, Callable

import orjson

from . import _secrets  # (its masks load with the first record: a hit needs none)
from ._core.flow import (
    FOLLOWED,
    LEAD,
    MISS,
    RECHECK,
    REKEY,
    RETRY,
    Facts,
    Fail,
    Flow,
    Join,
    Lookup,
    Ran,
    Run,
    Store,
    call_flow,
    looks_up,
)
from ._flights import ABANDONED, ERROR, OK, Flight, SingleFlight
from ._slots import Sentinel
from .codec import blob_from_tree
from .config import Effective
from .errors import (
    CassetteError,
    DejacacheWarning,
    IntegrityError,
    ReplayMiss,
    SerializationError,
)
from .scope import check_ambiguous
from .stats import live_call, record_hit, record_miss, usage_of
from .stores._base import Hit, Record

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeVar, cast

    from .stores._protocols import SequencedStore
else:
    from ._hints import Any, TypeVar, cast

__all__ = [
    "DejacacheWarning",
    "MISS",
    "NOT_LOOKED",
    "CallSite",
    "Unkept",
    "call_async",
    "call_sync",
    "looks_first",
    "lookup",
    "store_value",
]

T = TypeVar("T")


_WARNED: set[str] = set()
_WARNED_LOCK = _thread.allocate_lock()


def warn_once(tag: str, message: str) -> None:
    with _WARNED_LOCK:
        if tag in _WARNED:
            return
        _WARNED.add(tag)
    import warnings  # (not loaded at interpreter start; a call that warns is rare)

    warnings.warn(message, DejacacheWarning, stacklevel=3)


def _unreadable(name: str, key: str, exc: SerializationError) -> None:
    what = "discarding damaged" if isinstance(exc, IntegrityError) else "cannot use"
    warn_once(f"decode:{key}", f"dejacache: {what} entry for {name}, treating it as a miss: {exc}")


def _decoder(eff: Effective) -> Callable[..., Any]:
    """The codec's decode; its checksum-free twin for a store that checked the bytes when
    they were put and keeps them in this process's memory (``MemoryStore``)."""
    # The cached Features read without the property's call (a hit's every call counts).
    if (eff._features or eff.features).checked_on_put:
        checked = getattr(eff.codec, "decode_checked", None)
        if checked is not None:
            return checked  # type: ignore[no-any-return]
    return eff.codec.decode


def memory_hit(eff: Effective, name: str, key: str, rec: Record) -> Any:
    """The decoded value of ``rec``, just read from ``eff.store`` (a ``MemoryStore``, which
    checked it on put), else ``MISS``: the decorator's short path for what is not plain JSON
    (tagged values), before the general path (:func:`call_sync`), which handles everything
    else, errors included."""
    if rec.kind == "error":
        return MISS
    try:
        value = _decoder(eff)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError:
        return MISS  # the general path looks again and reports it
    record_hit(name, rec.duration, rec.usage)
    return value


def _read_failed(eff: Effective, exc: Exception) -> Any:
    # A failing tier must not fail the call: treat it as a miss.
    warn_once(f"get:{type(eff.store).__name__}", f"dejacache: read from {eff.source} failed "
              f"({exc!r}); treating as a miss")
    return MISS


def _read(eff: Effective, name: str, key: str, rec: Record | None) -> tuple[Any, bool]:
    """``(value or MISS, damaged)`` of what the store answered: damaged for good entries are
    for the caller to delete (a refused class may be fine later)."""
    if rec is None:
        return MISS, False
    store = eff.store
    if rec.kind == "error":  # a cassette entry recording an exception: replay it as raised
        record_hit(name, rec.duration, rec.usage)
        raise cast("SequencedStore", store).recorded_error(rec)
    try:
        value = _decoder(eff)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError as exc:
        _unreadable(name, key, exc)
        return MISS, isinstance(exc, IntegrityError)
    record_hit(name, rec.duration, rec.usage)
    return value, False


def lookup(eff: Effective, name: str, key: str) -> Any:
    """The decoded stored value, or ``MISS``. Damaged entries are deleted and miss.

    :func:`_read` written out: every generator hit and HTTP replay comes through here,
    and two Python calls were 6% of a generator's memory hit."""
    store = eff.store
    try:
        rec = store.get(key)
    except (CassetteError, ReplayMiss):  # damage is reported as damage, never as a miss;
        raise  # a strict cassette's divergence (a ReplayMiss) fails the call
    except Exception as exc:
        return _read_failed(eff, exc)
    if rec is None:
        return MISS
    if rec.kind == "error":  # a cassette entry recording an exception: replay it as raised
        record_hit(name, rec.duration, rec.usage)
        raise cast("SequencedStore", store).recorded_error(rec)
    try:
        value = _decoder(eff)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError as exc:
        _unreadable(name, key, exc)
        if isinstance(exc, IntegrityError):  # damaged for good; a refused class may be
            with contextlib.suppress(Exception):  # fine later
                store.delete(key)
        return MISS
    record_hit(name, rec.duration, rec.usage)
    return value


async def alookup(eff: Effective, name: str, key: str) -> Any:
    """:func:`lookup` for an async caller."""
    try:
        rec = await eff.store.aget(key)
    except (CassetteError, ReplayMiss):
        raise
    except Exception as exc:
        return _read_failed(eff, exc)
    value, damaged = _read(eff, name, key, rec)
    if damaged:
        with contextlib.suppress(Exception):
            await eff.store.adelete(key)
    return value


def encode_record(
    eff: Effective, name: str, kind: str, key: str, canonical: bytes, value: Any, duration: float
) -> Record:
    """Encode before anything is written: an unencodable value raises ``SerializationError``.

    The request is kept with secret-shaped strings masked (``_secrets.scrub_request``): the
    key has credential names masked already, but an API key pasted into a prompt has not.
    """
    blob = eff.codec.encode(value, key=key, namespace=eff.namespace or "")
    return Record(
        value=blob,
        name=name,
        namespace=eff.namespace or "",
        kind=kind,
        request=_secrets.scrub_request(canonical),
        duration=duration,
        usage=usage_of(value),
        created=time.time(),
    )


def try_encode(
    eff: Effective, name: str, kind: str, key: str, canonical: bytes, value: Any, duration: float
) -> Record | None:
    """:func:`encode_record`, or None with a warning: a result the caller paid for reaches
    the caller even when it cannot be stored (a cycle, 10,000 levels, invalid text)."""
    try:
        return encode_record(eff, name, kind, key, canonical, value, duration)
    except SerializationError as exc:
        _unstored(eff, name, str(exc))  # (first: under -W error the warning raises)
        warn_once(f"encode:{name}", f"dejacache: a result of {name} was returned but not "
                  f"stored: {exc}")
        return None


def _put_failed(eff: Effective, name: str, exc: Exception) -> bool:
    if isinstance(exc, Warning):  # the store's own warning, raised under -W error: not a
        raise exc  # failed write
    # Fail open: the caller still gets its result.
    _unstored(eff, name, repr(exc))
    warn_once(f"put:{type(eff.store).__name__}", f"dejacache: write to {eff.source} failed "
              f"({exc!r}); results are not being stored")
    return False


def _unstored(eff: Effective, name: str, reason: str) -> None:
    """Tell a store that keeps what its block ran (a cassette) of a call it could not keep:
    the block then fails when it ends. A warning alone let a recording run pass without the
    call, through the proxy with nothing shown at all (the warning went to its log)."""
    if eff.features.notes_unstored:
        eff.store.note_unstored(name, reason)  # type: ignore[attr-defined]


def store_value(eff: Effective, key: str, record: Record, ttl: float | None) -> bool:
    try:
        # False: the store knowingly kept nothing (read-only, unreachable) and has said so.
        return eff.store.put(key, record, ttl=ttl) is not False
    except Exception as exc:
        return _put_failed(eff, record.name, exc)


async def astore_value(eff: Effective, key: str, record: Record, ttl: float | None) -> bool:
    try:
        return await eff.store.aput(key, record, ttl=ttl) is not False
    except Exception as exc:
        return _put_failed(eff, record.name, exc)


# ---------------------------------------------------------------- the drivers

# One single-flight for every face: identical concurrent misses on one store run once.
_FLIGHTS: SingleFlight[Any] = SingleFlight()


def call_mode(eff: Effective, name: str, kind: str) -> str:
    """The mode of one call in a cassette that replays part of a run (``live=``,
    ``replay_until=``: ``cassettes/partial.py``): ``replay``, or ``record`` for a call
    that goes live."""
    return cast(Any, eff.store).mode_for(name, kind)  # type: ignore[no-any-return]


def _record_error(eff: Effective, name: str, kind: str, key: str, canonical: bytes,
                  exc: Exception, duration: float) -> None:
    # Cassettes may keep exceptions the user opted in to (record_errors=...), to replay them.
    if eff.features.keeps_errors:
        try:
            cast("SequencedStore", eff.store).record_error(key, name, eff.namespace or "", kind,
                                                         canonical, exc, duration)
        except Exception as failed:  # (the call's own error is on its way to the caller)
            _unstored(eff, name, repr(failed))


class Unkept(Exception):
    """Raised by a run to hand its live ``value`` back without keeping it (a face catches
    it and answers ``value``; so do the calls that joined its flight). Counted as a miss not
    stored, as an error only when ``error`` says the answer is a failure (a transient one,
    never cached), and never kept as a recorded failure: an HTTP stream past its recording
    bound is a whole answer, not stored, and neither an error nor an exception to replay."""

    def __init__(self, value: Any, *, error: bool = True) -> None:
        super().__init__("not stored")
        self.value = value
        self.error = error


RekeyFn = Callable[[], tuple[str, bytes]]
# What a driver answers from ``advance``: the Run the caller must carry out, or the value.
Step = tuple[Run | None, Any]


class Driver:
    """Carries out the effects of one call's :func:`call_flow` on the store, codec and
    statistics of ``eff``, except :class:`Run`, which ``advance`` hands back to the caller
    (a function call, a generator read item by item, an HTTP exchange). The sync and async
    drivers differ only in how they wait (:meth:`SyncDriver.do`, :meth:`AsyncDriver.do`);
    faces adjust what a store keeps (:meth:`record`) and what a failure leaves behind
    (:meth:`fail`)."""

    __slots__ = ("accept", "eff", "fkey", "flight", "kind", "landed", "name", "rekey_fn", "t0",
                 "ttl")

    #: the class keeps :meth:`record` and :meth:`counted` as they are here, so a store
    #: calls what they would call without the two calls (~5% of a memory miss)
    _plain_keep: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._plain_keep = cls.record is Driver.record and cls.counted is Driver.counted

    def __init__(self, eff: Effective, name: str, kind: str, ttl: float | None = None,
                 rekey: RekeyFn | None = None, *,
                 accept: Callable[[Any], bool] | None = None) -> None:
        if eff.ambiguous:
            check_ambiguous(eff, name)
        # ``accept``: what a hit must look like for this face (a generator's stream), else
        # it is a miss. ``flight``: the flight this call leads, landed when the call ends.
        self.eff, self.name, self.kind, self.ttl = eff, name, kind, ttl
        self.rekey_fn, self.accept = rekey, accept
        self.flight: Flight | None = None
        self.fkey: Any = None
        self.landed, self.t0 = 0, 0.0

    def flow(self, key: str, canonical: bytes, *, flights: bool = True,
             keep_errors: bool = True) -> Flow:
        eff = self.eff
        f = eff.features
        mode = eff.mode if not f.partial else call_mode(eff, self.name, self.kind)
        facts = Facts(mode, f.sequenced, self.rekey_fn is not None, flights, keep_errors)
        return call_flow(facts, key, canonical)

    def looked(self, flow: Flow) -> Flow:
        """``flow`` past its first effect, the lookup :meth:`CallSite.first` (or ``afirst``)
        made for it: the driver's next ``advance`` answers that lookup."""
        effect = next(flow)
        assert type(effect) is Lookup, effect
        return flow

    def ran(self, value: Any, *, keep: bool = True) -> Ran:
        """The answer to the :class:`Run` just handed out."""
        return Ran(value, time.perf_counter() - self.t0, keep)

    # -- what faces adjust

    def record(self, s: Store) -> Record | None:
        """The record to keep for ``s``, or None (nothing to keep, or it could not be)."""
        return try_encode(self.eff, self.name, self.kind, s.key, s.canonical, s.value,
                          s.duration)

    def counted(self, s: Store, stored: bool) -> None:
        record_miss(self.name, stored=stored)

    def fail(self, f: Fail) -> Store | None:
        """Count a failed run and keep the error where asked; a face may answer a
        :class:`Store` of what the failure should leave in the store."""
        unkept = f.error if isinstance(f.error, Unkept) else None
        record_miss(self.name, stored=False, error=unkept is None or unkept.error)
        if f.keep and unkept is None:
            _record_error(self.eff, self.name, self.kind, f.key, f.canonical, f.error,
                          time.perf_counter() - self.t0)
        return None

    # -- shared between the sync and async drivers

    def _step(self, flow: Flow, answer: Any, exc: Exception | None) -> tuple[bool, Any]:
        """``(True, step)`` when the flow returned (``(None, value)``) or asks for a run
        (``(run, None)``, its clock started), else ``(False, effect)`` for the driver; the
        flights landed so far are noted before each lookup."""
        try:
            effect = flow.send(answer) if exc is None else flow.throw(exc)
        except StopIteration as stop:
            return True, (None, stop.value)
        if isinstance(effect, Lookup):
            self.landed = _FLIGHTS.landed
        elif isinstance(effect, Run):
            self.t0 = time.perf_counter()
            return True, (effect, None)
        return False, effect

    def _found(self, value: Any) -> Any:
        accept = self.accept
        return value if accept is None or value is MISS or accept(value) else MISS

    def _mine(self, fkey: Any) -> Flight:
        """The flight this call joins ``fkey`` with, in its charge before it joins: an
        interrupt (a signal handler's ``KeyboardInterrupt``) right after the join still
        finds it in ``self.flight`` and lands it. A call that joins another's drops it."""
        self.fkey, mine = fkey, Flight()
        self.flight = mine
        return mine

    def _led(self) -> tuple[str, None]:
        # A flight that landed since this call's last lookup may have stored its answer.
        recheck = self.eff.mode != "record" and _FLIGHTS.landed != self.landed
        return (RECHECK if recheck else LEAD), None

    def _followed(self, key: str, state: str, rec: Any) -> tuple[str, Any]:
        if state == ABANDONED:  # the leader was interrupted or kept nothing: try again
            return RETRY, None
        if state == ERROR:
            raise rec
        eff = self.eff
        return FOLLOWED, eff.codec.decode(rec.value, key=key, namespace=eff.namespace or "")

    def _kept(self, s: Store, rec: Record | None, stored: bool) -> None:
        self.counted(s, stored)
        if self.flight is not None and rec is not None:
            # Nothing kept (unencodable): waiters call for themselves rather than share
            # this caller's object.
            self.flight.state, self.flight.value = OK, rec

    def _ended(self, exc: BaseException | None, land: Callable[[Any, Flight], None]) -> None:
        """The call is over: land the flight it leads (an error is every waiter's)."""
        flight = self.flight
        if flight is not None:
            if isinstance(exc, Exception):
                flight.state, flight.value = ERROR, exc
            land(self.fkey, flight)


def looks_first(eff: Effective) -> bool:
    """Whether a call under ``eff`` may take its flow's first step, the lookup of its key, in
    front of its driver (a hit is the call's value; anything else goes to the driver). Not
    when the facts differ call by call: a partial replay chooses each call's mode as it
    comes, and a call from a thread with no scope is refused by its driver. Without
    flights, a lookup's moment is nothing the flow reads later."""
    f = eff._features or eff.features
    return (not f.partial and not eff.ambiguous
            and looks_up(Facts(eff.mode, f.sequenced, False, False, True)))


#: what :meth:`CallSite.first` answers when the call's flow does not begin with a lookup
NOT_LOOKED: Any = Sentinel("NOT_LOOKED")


class CallSite:
    """What every call of one name and kind that shares no runs shares (a WebSocket
    session's client messages): the facts of their flows, found once. :meth:`first` takes a
    call's first step, the flow's lookup, with no driver or flow built: a hit's value is the
    call's value (:func:`call_flow` returns it as found); on anything else the caller builds
    the call's driver, takes its flow past that lookup (:meth:`Driver.looked`) and advances
    it with the answer (``MISS``: the flow decides what a miss does). A replayed session
    message built a driver, its facts and a flow, then stepped through them: the 60-second
    voice session's replay (612 messages) went from 1.65M to 1.48M Python opcodes without.
    A cassette's plain answer is read as its JSON (``Cassette.plain_hit``): no blob is built
    to be taken apart again (1.30M to 1.18M)."""

    __slots__ = ("eff", "looks", "name", "plain")

    def __init__(self, eff: Effective, name: str) -> None:
        self.eff, self.name = eff, name
        f = eff._features or eff.features
        self.looks = looks_first(eff)
        # A store that hands out a plain answer's JSON unbuilt (a cassette's ``plain_hit``),
        # when its one decode would be ``orjson.loads`` of it (see :func:`_decoder`).
        store = eff.store
        plain = (getattr(type(store), "plain_hits", False) is True and f.checked_on_put
                 and not f.blocking and getattr(eff.codec, "plain_payloads", False) is True)
        self.plain: Callable[[str], Hit | None] | None = (
            cast(Any, store).plain_hit if plain else None)

    def first(self, key: str) -> Any:
        """The value of a hit, ``MISS``, or ``NOT_LOOKED`` (the flow starts otherwise)."""
        if not self.looks:
            return NOT_LOOKED
        if self.plain is None:
            return lookup(self.eff, self.name, key)
        value, damaged = self._plain(key)
        if damaged:
            with contextlib.suppress(Exception):
                self.eff.store.delete(key)
        return value

    async def afirst(self, key: str) -> Any:
        """:meth:`first` for an async caller."""
        if not self.looks:
            return NOT_LOOKED
        if self.plain is None:
            return await alookup(self.eff, self.name, key)
        value, damaged = self._plain(key)
        if damaged:
            with contextlib.suppress(Exception):
                await self.eff.store.adelete(key)
        return value

    def _plain(self, key: str) -> tuple[Any, bool]:
        """:func:`lookup` through the store's ``plain_hit``: ``(value or MISS, damaged)``."""
        eff, name = self.eff, self.name
        try:
            item = self.plain(key)  # type: ignore[misc]
        except (CassetteError, ReplayMiss):
            raise
        except Exception as exc:
            return _read_failed(eff, exc), False
        if item is None:
            return MISS, False
        body = item[0]
        if body is None:
            return _read(eff, name, key, item[3])
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            # The blob ``get`` would have answered, read by the codec: it names the damage.
            blob = blob_from_tree(orjson.Fragment(body), True, key=key)
            return _read(eff, name, key, Record(blob, duration=item[1], usage=item[2]))
        record_hit(name, item[1], item[2])
        return value, False


class SyncDriver(Driver):
    __slots__ = ()

    def advance(self, flow: Flow, answer: Any = None, exc: Exception | None = None) -> Step:
        """Carry out effects until the flow asks for a :class:`Run` or returns.

        ``_step`` written out: this loop runs for every call off the short path (an HTTP
        replay, a generator's hit), where each Python call costs ~60 ns."""
        while True:
            try:
                effect = flow.send(answer) if exc is None else flow.throw(exc)
            except StopIteration as stop:
                return None, stop.value
            if type(effect) is Lookup:
                self.landed = _FLIGHTS.landed
                answer, exc = lookup(self.eff, self.name, effect.key), None
                if self.accept is not None:
                    answer = self._found(answer)
                continue
            if type(effect) is Run:
                self.t0 = time.perf_counter()
                return effect, None
            try:
                # A miss's Join and Store written out too (do, _led): ~10% of a memory miss
                # was the driver's own calls.
                if type(effect) is Join:
                    fkey = (id(self.eff.store), effect.key)
                    self.fkey, mine = fkey, Flight()  # _mine, written out
                    self.flight = mine
                    flight, leader = _FLIGHTS.join(fkey, mine)
                    if leader:
                        # A flight that landed since this call's last lookup may have
                        # stored its answer.
                        answer = (RECHECK if self.eff.mode != "record"
                                  and _FLIGHTS.landed != self.landed else LEAD), None
                    else:
                        self.flight = None
                        answer = self._followed(effect.key, *_FLIGHTS.wait(flight))
                elif type(effect) is Store:
                    if self._plain_keep:  # store, written out
                        eff, name, key = self.eff, self.name, effect.key
                        rec = try_encode(eff, name, self.kind, key, effect.canonical,
                                         effect.value, effect.duration)
                        stored = rec is not None and store_value(eff, key, rec, self.ttl)
                        record_miss(name, stored=stored)
                        if self.flight is not None and rec is not None:
                            self.flight.state, self.flight.value = OK, rec
                    else:
                        self.store(effect)
                    answer = None
                else:
                    answer = self.do(effect)
                exc = None
            except Exception as e:
                answer, exc = None, e

    def do(self, effect: Any) -> Any:
        if isinstance(effect, Lookup):
            return self._found(lookup(self.eff, self.name, effect.key))
        if isinstance(effect, Store):
            return self.store(effect)
        if isinstance(effect, Join):
            fkey = (id(self.eff.store), effect.key)
            flight, leader = _FLIGHTS.join(fkey, self._mine(fkey))
            if leader:
                return self._led()
            self.flight = None
            return self._followed(effect.key, *_FLIGHTS.wait(flight))
        if isinstance(effect, Fail):
            s = self.fail(effect)
            return None if s is None else self.store(s)
        if effect is REKEY:
            assert self.rekey_fn is not None
            return self.rekey_fn()
        from ._replay_miss import replay_miss  # (a miss's report: a hit never loads it)

        raise replay_miss(self.eff, self.name, effect.key, effect.canonical)

    def store(self, s: Store) -> None:
        if self._plain_keep:
            rec = try_encode(self.eff, self.name, self.kind, s.key, s.canonical, s.value,
                             s.duration)
            stored = rec is not None and store_value(self.eff, s.key, rec, self.ttl)
            record_miss(self.name, stored=stored)
        else:
            rec = self.record(s)
            stored = rec is not None and store_value(self.eff, s.key, rec, self.ttl)
            self.counted(s, stored)
        if self.flight is not None and rec is not None:  # _kept, written out
            self.flight.state, self.flight.value = OK, rec

    def call(self, flow: Flow, fn: Callable[[], T]) -> T:
        """Run ``flow``, calling ``fn`` for its run (``ran`` and ``_ended`` written out: a
        miss's every Python call counts)."""
        err: BaseException | None = None
        try:
            run, value = self.advance(flow)
            if run is None:
                return value  # type: ignore[no-any-return]
            try:
                with live_call():  # calls made inside are inner layers of this one
                    value = fn()
            except Exception as exc:
                self.advance(flow, exc=exc)  # counted (maybe kept); the flow raises it again
                raise  # pragma: no cover
            # Ran(value, duration), without the constructor's own call (see flow._new)
            ran = tuple.__new__(Ran, (value, time.perf_counter() - self.t0, True))
            return self.advance(flow, ran)[1]  # type: ignore[no-any-return]
        except BaseException as exc:
            err = exc
            raise
        finally:
            flight = self.flight
            if flight is not None:  # land the flight this call leads (an error is every
                if isinstance(err, Exception):  # waiter's)
                    flight.state, flight.value = ERROR, err
                _FLIGHTS.land(self.fkey, flight)


class AsyncDriver(Driver):
    __slots__ = ()

    async def advance(self, flow: Flow, answer: Any = None,
                      exc: Exception | None = None) -> Step:
        """:meth:`SyncDriver.advance`, waiting on the event loop. A lookup is handled in the
        loop, not through ``do``: a WebSocket replay makes one per client message, and the
        calls and type tests around it were ~2 µs of each."""
        while True:
            done, effect = self._step(flow, answer, exc)
            if done:
                return effect  # type: ignore[no-any-return]
            if type(effect) is Lookup:
                try:
                    answer, exc = await alookup(self.eff, self.name, effect.key), None
                    if self.accept is not None:
                        answer = self._found(answer)
                except Exception as e:
                    answer, exc = None, e
                continue
            try:
                answer, exc = await self.do(effect), None
            except Exception as e:
                answer, exc = None, e

    async def do(self, effect: Any) -> Any:
        if isinstance(effect, Lookup):
            return self._found(await alookup(self.eff, self.name, effect.key))
        if isinstance(effect, Store):
            return await self.store(effect)
        if isinstance(effect, Join):
            fkey = (id(self.eff.store), effect.key)
            flight, leader = _FLIGHTS.ajoin(fkey, self._mine(fkey))
            if leader:
                return self._led()
            self.flight = None
            return self._followed(effect.key, *await _FLIGHTS.await_landing(flight))
        if isinstance(effect, Fail):
            s = self.fail(effect)
            return None if s is None else await self.store(s)
        if effect is REKEY:
            assert self.rekey_fn is not None
            return self.rekey_fn()
        from ._replay_miss import areplay_miss  # (as in SyncDriver.do)

        raise await areplay_miss(self.eff, self.name, effect.key, effect.canonical)

    async def store(self, s: Store) -> None:
        rec = self.record(s)
        self._kept(s, rec, rec is not None
                   and await astore_value(self.eff, s.key, rec, self.ttl))

    async def call(self, flow: Flow, fn: Callable[[], Awaitable[T]]) -> T:
        """:meth:`SyncDriver.call` for a coroutine function. A cancelled leader hands over
        to a waiter."""
        err: BaseException | None = None
        try:
            run, value = await self.advance(flow)
            if run is None:
                return value  # type: ignore[no-any-return]
            try:
                with live_call():
                    value = await fn()
            except Exception as exc:
                await self.advance(flow, exc=exc)
                raise  # pragma: no cover
            return (await self.advance(flow, self.ran(value)))[1]  # type: ignore[no-any-return]
        except BaseException as exc:
            err = exc
            raise
        finally:
            self._ended(err, _FLIGHTS.aland)


def call_sync(
    eff: Effective,
    name: str,
    kind: str,
    key: str,
    canonical: bytes,
    fn: Callable[[], T],
    *,
    ttl: float | None = None,
    rekey: RekeyFn | None = None,
) -> T:
    """Serve ``fn()`` under the mode in ``eff``; identical concurrent misses run it once.

    With ``rekey``, ``key``/``canonical`` are the fast form and ``rekey()`` the full one.
    """
    d = SyncDriver(eff, name, kind, ttl, rekey)  # positional: no keywords to match
    f = eff._features or eff.features
    mode = eff.mode if not f.partial else call_mode(eff, name, kind)
    facts = tuple.__new__(Facts, (mode, f.sequenced, rekey is not None, True,
                                  True))  # Driver.flow, written out
    return d.call(call_flow(facts, key, canonical), fn)


async def call_async(
    eff: Effective,
    name: str,
    kind: str,
    key: str,
    canonical: bytes,
    fn: Callable[[], Awaitable[T]],
    *,
    ttl: float | None = None,
    rekey: RekeyFn | None = None,
) -> T:
    """Async twin of :func:`call_sync`. A cancelled leader hands over to a waiter."""
    d = AsyncDriver(eff, name, kind, ttl=ttl, rekey=rekey)
    return await d.call(d.flow(key, canonical), fn)
