"""The one call path every face uses: look up, apply the mode, run once, encode, store.

``@cache``, the HTTP transports and the tool cache all come through here, so modes,
single-flight, fail-open store handling and replay-miss explanations behave the same
everywhere.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ._core.diff import nearest, short
from ._secrets import scrub_request
from ._slots import Sentinel
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
from .stores._base import Record, off_loop

if TYPE_CHECKING:
    import asyncio  # at run time imported by call_async: ~35 ms of ``import dejacache``

__all__ = [
    "DejacacheWarning",
    "MISS",
    "call_async",
    "call_sync",
    "lookup",
    "replay_miss",
    "store_value",
]

T = TypeVar("T")


MISS: Any = Sentinel("MISS")
_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def warn_once(tag: str, message: str) -> None:
    with _WARNED_LOCK:
        if tag in _WARNED:
            return
        _WARNED.add(tag)
    warnings.warn(message, DejacacheWarning, stacklevel=3)


def _unreadable(name: str, key: str, exc: SerializationError) -> None:
    what = "discarding damaged" if isinstance(exc, IntegrityError) else "cannot use"
    warn_once(f"decode:{key}", f"dejacache: {what} entry for {name}, treating it as a miss: {exc}")


def _decoder(eff: Effective, store: Any) -> Callable[..., Any]:
    """The codec's decode; its checksum-free twin for a store that checked the bytes when
    they were put and keeps them in this process's memory (``MemoryStore``)."""
    if getattr(store, "checked_on_put", False):
        checked = getattr(eff.codec, "decode_checked", None)
        if checked is not None:
            return checked  # type: ignore[no-any-return]
    return eff.codec.decode


def memory_hit(eff: Effective, name: str, key: str, rec: Record) -> Any:
    """The decoded value of ``rec``, just read from ``eff.store`` (a ``MemoryStore``, which
    checked it on put), else ``MISS``: the decorator's short path for what is not plain JSON
    (issue 12 item 4), before the general path (:func:`call_sync`), which handles everything
    else, errors included."""
    if rec.kind == "error":
        return MISS
    try:
        value = _decoder(eff, eff.store)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError:
        return MISS  # the general path looks again and reports it
    record_hit(name, rec.duration, rec.usage)
    return value


def lookup(eff: Effective, name: str, key: str) -> Any:
    """The decoded stored value, or ``MISS``. Damaged entries are deleted and miss."""
    store = eff.store
    try:
        rec = store.get(key)
    except (CassetteError, ReplayMiss):  # damage is reported as damage, never as a miss;
        raise  # a strict cassette's divergence (a ReplayMiss) fails the call
    except Exception as exc:  # a failing tier must not fail the call: treat as a miss
        warn_once(f"get:{type(store).__name__}", f"dejacache: read from {eff.source} failed "
                  f"({exc!r}); treating as a miss")
        return MISS
    if rec is None:
        return MISS
    if rec.kind == "error":  # a cassette entry recording an exception: replay it as raised
        record_hit(name, rec.duration, rec.usage)
        raise store.recorded_error(rec)  # type: ignore[attr-defined]
    try:
        value = _decoder(eff, store)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError as exc:
        _unreadable(name, key, exc)
        if isinstance(exc, IntegrityError):  # damaged for good; a refused class may be fine later
            with contextlib.suppress(Exception):
                store.delete(key)
        return MISS
    record_hit(name, rec.duration, rec.usage)
    return value


async def alookup(eff: Effective, name: str, key: str) -> Any:
    store = eff.store
    try:
        rec = await store.aget(key)
    except (CassetteError, ReplayMiss):
        raise
    except Exception as exc:
        warn_once(f"get:{type(store).__name__}", f"dejacache: read from {eff.source} failed "
                  f"({exc!r}); treating as a miss")
        return MISS
    if rec is None:
        return MISS
    if rec.kind == "error":  # a cassette entry recording an exception: replay it as raised
        record_hit(name, rec.duration, rec.usage)
        raise store.recorded_error(rec)  # type: ignore[attr-defined]
    try:
        value = _decoder(eff, store)(rec.value, key=key, namespace=eff.namespace or "")
    except SerializationError as exc:
        _unreadable(name, key, exc)
        if isinstance(exc, IntegrityError):
            with contextlib.suppress(Exception):
                await store.adelete(key)
        return MISS
    record_hit(name, rec.duration, rec.usage)
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
        request=scrub_request(canonical),
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
        warn_once(f"encode:{name}", f"dejacache: a result of {name} was returned but not "
                  f"stored: {exc}")
        return None


def store_value(eff: Effective, key: str, record: Record, ttl: float | None) -> bool:
    try:
        # False: the store knowingly kept nothing (read-only, unreachable) and has said so.
        return eff.store.put(key, record, ttl=ttl) is not False
    except Warning:  # the store's own warning, raised under -W error: not a failed write
        raise
    except Exception as exc:  # fail open: the caller still gets its result
        warn_once(f"put:{type(eff.store).__name__}", f"dejacache: write to {eff.source} failed "
                  f"({exc!r}); results are not being stored")
        return False


async def astore_value(eff: Effective, key: str, record: Record, ttl: float | None) -> bool:
    try:
        return await eff.store.aput(key, record, ttl=ttl) is not False
    except Warning:
        raise
    except Exception as exc:
        warn_once(f"put:{type(eff.store).__name__}", f"dejacache: write to {eff.source} failed "
                  f"({exc!r}); results are not being stored")
        return False


def replay_miss(eff: Effective, name: str, key: str, canonical: bytes) -> ReplayMiss:
    """A ``ReplayMiss`` explaining the call and its nearest recorded sibling."""
    try:
        target = orjson.loads(scrub_request(canonical))
    except orjson.JSONDecodeError:
        target = canonical.decode(errors="replace")
    redact = getattr(eff.store, "redact_tree", None)
    if redact is not None:  # a cassette: the report must not show what the file may not hold
        target = redact(target)
    lines = [
        f"dejacache replay miss: no recording of {name} matches this call "
        f"(mode 'replay', source {eff.source}).",
        f"  key: {key}   namespace: {eff.namespace!r}",
        f"  call: {short(target, 400)}",
    ]
    diff: list[str] = []
    try:
        cands = (
            (k, orjson.loads(r.request))
            for k, r in itertools.islice(
                eff.store.iterate(name=name, namespace=eff.namespace), 1000
            )
            if r.request
        )
        near = nearest(target, cands)
    except Exception as exc:  # explaining must never hide the miss itself
        near = None
        lines.append(f"  (could not search recorded calls: {exc!r})")
    if near is None:
        lines.append(f"  no call of {name} is recorded in this source.")
    else:
        nkey, _, diff = near
        lines.append(
            f"  nearest recorded call of {name}: key {nkey}; differences (recorded -> now):"
        )
        lines.extend(f"    {d}" for d in diff[:30])
        if len(diff) > 30:
            lines.append(f"    ... and {len(diff) - 30} more")
        if not diff and nkey == key:
            lines.append(
                "  (none: this very call is recorded, but all its recordings were already "
                "replayed; each identical call replays the next recorded answer, so the code "
                "now makes it more often than when it was recorded)")
        elif all("<secret:" in d or "<REDACTED>" in d for d in diff):
            lines.append(
                "  the calls differ only in credentials, which keys mask with a per-machine "
                "key: declare them with substitute={'<NAME>': live_value}, ignore them, or "
                "share DEJACACHE_SECRET_KEY (README, Keys)")
    hint = getattr(eff.store, "rerecord_hint", None) or eff.extra.get("rerecord_hint")
    lines.append(
        f"  to re-record: {hint}" if hint else
        "  to re-record: run again with DEJACACHE_MODE=record (or mode='record' on the block)"
    )
    miss = ReplayMiss("\n".join(lines), name=name, key=key, source=eff.source, diff=diff)
    miss.request = target
    note = getattr(eff.store, "note_miss", None)
    if note is not None:  # a cassette keeps the report: SDKs and frameworks often wrap it
        # (a strict cassette answers with the divergence to raise instead: issue 14)
        miss = note(miss) or miss
    return miss


async def areplay_miss(eff: Effective, name: str, key: str, canonical: bytes) -> ReplayMiss:
    """:func:`replay_miss` for an async caller: the nearest-call search reads the store (up to
    1000 entries), in a worker thread when the store may block (SQLite)."""
    if getattr(eff.store, "blocking", False):
        return await off_loop(replay_miss, eff, name, key, canonical)
    return replay_miss(eff, name, key, canonical)


# ---------------------------------------------------------------- single-flight (threads)

_ABANDONED = object()


class _Flight:
    __slots__ = ("event", "record", "result", "state")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.state: Any = None
        self.result: Any = None
        self.record: Record | None = None


_SF_LOCK = threading.Lock()
_INFLIGHT: dict[tuple[int, str], _Flight] = {}
# Flights finished so far. A caller whose lookup missed just before another leader stored
# and left would otherwise become a second leader and call the origin again; it looks up once
# more only when some flight finished in that window, so a plain miss costs one read.
_LANDED = [0]


def _record_error(eff: Effective, name: str, kind: str, key: str, canonical: bytes,
                  exc: Exception, duration: float) -> None:
    # Cassettes may keep exceptions the user opted in to (record_errors=...), to replay them.
    keep = getattr(eff.store, "record_error", None)
    if keep is not None:
        with contextlib.suppress(Exception):
            keep(key, name, eff.namespace or "", kind, canonical, exc, duration)


def _run_and_store(
    eff: Effective, name: str, kind: str, key: str, canonical: bytes,
    fn: Callable[[], T], ttl: float | None,
) -> tuple[T, Record | None]:
    t0 = time.perf_counter()
    try:
        with live_call():  # calls made inside are inner layers of this one (stats.py)
            value = fn()
    except Exception as exc:
        record_miss(name, stored=False, error=True)
        _record_error(eff, name, kind, key, canonical, exc, time.perf_counter() - t0)
        raise
    rec = try_encode(eff, name, kind, key, canonical, value, time.perf_counter() - t0)
    stored = rec is not None and store_value(eff, key, rec, ttl)
    record_miss(name, stored=stored)
    return value, rec


Rekey = Callable[[], tuple[str, bytes]]


def first_lookup(
    eff: Effective, name: str, key: str, canonical: bytes, rekey: Rekey | None
) -> tuple[Any, str, bytes, bool]:
    """Try the fast key, then (on a miss) the full key: ``(value|MISS, key, canonical,
    looked_up)``; ``looked_up`` is False when the full key still needs its lookup.

    ``key``/``canonical`` may come from a form that skipped stripping volatile fields (see
    ``KeyBuilder.canonical_fast``); ``rekey`` returns the full form. In record mode nothing is
    read, but the full key is what gets stored.
    """
    if rekey is None:
        return MISS, key, canonical, False
    if eff.mode != "record":
        value = lookup(eff, name, key)
        if value is not MISS:
            return value, key, canonical, True
    full_key, full_canonical = rekey()
    return MISS, full_key, full_canonical, full_key == key


async def afirst_lookup(
    eff: Effective, name: str, key: str, canonical: bytes, rekey: Rekey | None
) -> tuple[Any, str, bytes, bool]:
    if rekey is None:
        return MISS, key, canonical, False
    if eff.mode != "record":
        value = await alookup(eff, name, key)
        if value is not MISS:
            return value, key, canonical, True
    full_key, full_canonical = rekey()
    return MISS, full_key, full_canonical, full_key == key


def call_sync(
    eff: Effective,
    name: str,
    kind: str,
    key: str,
    canonical: bytes,
    fn: Callable[[], T],
    *,
    ttl: float | None = None,
    rekey: Rekey | None = None,
) -> T:
    """Serve ``fn()`` under the mode in ``eff``; identical concurrent misses run it once.

    With ``rekey``, ``key``/``canonical`` are the fast form and ``rekey()`` the full one.
    """
    if eff.extra:
        check_ambiguous(eff, name)
    mode = eff.mode
    sequenced = getattr(eff.store, "sequenced", False)
    landed = _LANDED[0]
    value, key, canonical, skip = first_lookup(eff, name, key, canonical, rekey)
    if value is not MISS:
        return value  # type: ignore[no-any-return]
    while True:
        if skip:
            skip = False  # the fast key was the full key and has just missed
        elif mode != "record":
            landed = _LANDED[0]
            value = lookup(eff, name, key)
            if value is not MISS:
                return value  # type: ignore[no-any-return]
        if mode == "replay":
            raise replay_miss(eff, name, key, canonical)
        if sequenced:  # cassettes: the n-th identical call records the n-th answer
            return _run_and_store(eff, name, kind, key, canonical, fn, ttl)[0]
        fk = (id(eff.store), key)
        with _SF_LOCK:
            flight = _INFLIGHT.get(fk)
            leader = flight is None
            if flight is None:
                flight = _INFLIGHT[fk] = _Flight()
            recheck = mode != "record" and _LANDED[0] != landed
        if not leader:
            flight.event.wait()
            if flight.state is _ABANDONED:
                continue  # the leader was interrupted: try again, maybe as the new leader
            if isinstance(flight.state, BaseException):
                raise flight.state
            assert flight.record is not None
            return eff.codec.decode(  # type: ignore[no-any-return]
                flight.record.value, key=key, namespace=eff.namespace or ""
            )
        try:
            if recheck:
                value = lookup(eff, name, key)
                if value is not MISS:
                    flight.state = _ABANDONED  # waiters look up again and hit
                    return value  # type: ignore[no-any-return]
            result, rec = _run_and_store(eff, name, kind, key, canonical, fn, ttl)
            flight.record = rec
            # Nothing stored (unencodable): waiters call for themselves rather than share
            # this caller's object.
            flight.state = True if rec is not None else _ABANDONED
            return result
        except Exception as exc:
            flight.state = exc
            raise
        except BaseException:
            flight.state = _ABANDONED
            raise
        finally:
            with _SF_LOCK:
                _INFLIGHT.pop(fk, None)
                _LANDED[0] += 1
            flight.event.set()


# ---------------------------------------------------------------- single-flight (asyncio)

_AINFLIGHT: dict[tuple[int, int, str], asyncio.Future[Any]] = {}


async def _arun_and_store(
    eff: Effective, name: str, kind: str, key: str, canonical: bytes,
    fn: Callable[[], Awaitable[T]], ttl: float | None,
) -> tuple[T, Record | None]:
    t0 = time.perf_counter()
    try:
        with live_call():
            value = await fn()
    except Exception as exc:
        record_miss(name, stored=False, error=True)
        _record_error(eff, name, kind, key, canonical, exc, time.perf_counter() - t0)
        raise
    rec = try_encode(eff, name, kind, key, canonical, value, time.perf_counter() - t0)
    stored = rec is not None and await astore_value(eff, key, rec, ttl)
    record_miss(name, stored=stored)
    return value, rec


async def call_async(
    eff: Effective,
    name: str,
    kind: str,
    key: str,
    canonical: bytes,
    fn: Callable[[], Awaitable[T]],
    *,
    ttl: float | None = None,
    rekey: Rekey | None = None,
) -> T:
    """Async twin of :func:`call_sync`. A cancelled leader hands over to a waiter."""
    if eff.extra:
        check_ambiguous(eff, name)
    mode = eff.mode
    import asyncio  # a coroutine runs here, so asyncio is loaded: a dict lookup

    sequenced = getattr(eff.store, "sequenced", False)
    loop = asyncio.get_running_loop()
    landed = _LANDED[0]
    value, key, canonical, skip = await afirst_lookup(eff, name, key, canonical, rekey)
    if value is not MISS:
        return value  # type: ignore[no-any-return]
    while True:
        if skip:
            skip = False
        elif mode != "record":
            landed = _LANDED[0]
            value = await alookup(eff, name, key)
            if value is not MISS:
                return value  # type: ignore[no-any-return]
        if mode == "replay":
            raise await areplay_miss(eff, name, key, canonical)
        if sequenced:
            return (await _arun_and_store(eff, name, kind, key, canonical, fn, ttl))[0]
        fk = (id(loop), id(eff.store), key)
        fut = _AINFLIGHT.get(fk)
        if fut is not None:
            # shield: a waiter being cancelled must not cancel the shared result
            state, payload = await asyncio.shield(fut)
            if state == "abandoned":
                continue
            if state == "error":
                raise payload
            return eff.codec.decode(  # type: ignore[no-any-return]
                payload.value, key=key, namespace=eff.namespace or ""
            )
        fut = _AINFLIGHT[fk] = loop.create_future()
        try:
            if mode != "record" and _LANDED[0] != landed:  # see _LANDED
                value = await alookup(eff, name, key)
                if value is not MISS:
                    fut.set_result(("abandoned", None))  # waiters look up again and hit
                    return value  # type: ignore[no-any-return]
            result, rec = await _arun_and_store(eff, name, kind, key, canonical, fn, ttl)
            fut.set_result(("ok", rec) if rec is not None else ("abandoned", None))
            return result
        except Exception as exc:
            fut.set_result(("error", exc))
            raise
        except BaseException:
            fut.set_result(("abandoned", None))
            raise
        finally:
            if _AINFLIGHT.get(fk) is fut:
                del _AINFLIGHT[fk]
            with _SF_LOCK:
                _LANDED[0] += 1
