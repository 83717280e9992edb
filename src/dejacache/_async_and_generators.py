"""``@cache`` on coroutine functions and generators (sync and async): their wrappers.

Apart from ``decorators``, which keeps the plain function's wrapper (the hot path of a hit),
because a process that decorates only plain functions never builds one of these: ~11 KB of
bytecode every first ``@cache`` loaded. ``decorators._wrap`` imports this module when it
meets the first coroutine or generator function.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from . import _engine
from ._core.flow import Flow, Lookup
from .config import GLOBAL, Effective
from .errors import DejacacheWarning
from .scope import CURRENT, OPEN_BLOCKS, current, track, untrack
from .stats import record_miss

if TYPE_CHECKING:
    from .decorators import Face, Prep

__all__ = ["wrapper"]

D = TypeVar("D", bound="_engine.Driver")
_scoped = CURRENT.get


class _LiveGenerator:
    """A generator run live, stored when its caller has read it to the end: unless the
    block it was made in exits first, which names it then (``scope.settle``)."""

    __slots__ = ("__weakref__", "eff", "name")

    def __init__(self, eff: Effective, name: str) -> None:
        self.eff = eff
        self.name = name

    def abandon(self, why: str) -> None:
        if untrack(self):
            import warnings  # (not loaded at interpreter start; rarely needed here)

            warnings.warn(f"dejacache: the {self.name} generator {why}; it was not recorded "
                          f"in {self.eff.source}. Read a generator to its end inside its "
                          "block to record it.", DejacacheWarning, stacklevel=4)


def _is_stream(stored: Any) -> bool:
    # Anything else under a generator's key (it used to be a plain function of the same name,
    # say) is a miss, not a crash.
    return type(stored) is dict and type(stored.get("items")) is list


def _stream_flow(face: Face, prep: Prep, driver: type[D], looked: bool) -> tuple[D, Flow]:
    """The driver and flow of a generator call; ``looked``: its first lookup has been
    made (``stream_hit``) and missed, so the flow starts past it."""
    eff, key, canonical, rekey = prep
    d = driver(eff, face.call_name, face.kind, ttl=face.ttl, rekey=rekey, accept=_is_stream)
    # Generators run unshared (each caller reads its own items) and their failures are
    # not kept.
    flow = d.flow(key, canonical, flights=False, keep_errors=False)
    if looked:
        first = next(flow)
        assert type(first) is Lookup and first.key == key
    return d, flow




def _stream_hit(prep: Prep, call_name: str) -> Any:
    """The stored stream of a generator call, ``MISS``, or None when the call must go the
    driver's way from the start (recording, or refused as ambiguous). The flow's first
    effect, taken in front of it: a hit then builds no driver and no flow (a memory hit
    10.5 -> 6 µs)."""
    eff = prep[0]
    if not _engine.looks_first(eff):  # the driver decides
        return None
    stored = _engine.lookup(eff, call_name, prep[1])
    return stored if stored is _engine.MISS or _is_stream(stored) else _engine.MISS


async def _astream_hit(prep: Prep, call_name: str) -> Any:
    """:func:`_stream_hit` for an async generator."""
    eff = prep[0]
    if not _engine.looks_first(eff):
        return None
    stored = await _engine.alookup(eff, call_name, prep[1])
    return stored if stored is _engine.MISS or _is_stream(stored) else _engine.MISS


def _agen_wrapper(face: Face) -> Callable[..., Any]:
    fn, call_name = face.fn, face.call_name

    @functools.wraps(fn)
    async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        prep = face.prepare(args, kwargs)
        if prep is None:
            async for item in fn(*args, **kwargs):
                yield item
            return
        stored = await _astream_hit(prep, call_name)
        if stored is not None and stored is not _engine.MISS:
            for item in stored["items"]:
                yield item
            return
        d, flow = _stream_flow(face, prep, _engine.AsyncDriver, stored is not None)
        run, stored = await d.advance(flow, None if stored is None else _engine.MISS)
        if run is None:
            for item in stored["items"]:
                yield item
            return
        items: list[Any] = []
        live = track(_LiveGenerator(d.eff, call_name))
        agen = fn(*args, **kwargs)
        try:
            async for item in agen:
                items.append(item)
                yield item
        except Exception as exc:
            await d.advance(flow, exc=exc)  # counted; the flow raises it again
            raise  # pragma: no cover
        finally:
            await agen.aclose()  # abandoned half-way: let the generator clean up
            ours = untrack(live)
        # Only a generator that ran to the end is stored; an abandoned one never gets here,
        # and one whose block exited first was named then.
        if not ours:
            record_miss(call_name, stored=False)
        await d.advance(flow, d.ran({"items": items, "return": None}, keep=ours))

    return agen_wrapper


def _gen_wrapper(face: Face) -> Callable[..., Any]:
    fn, call_name = face.fn, face.call_name

    @functools.wraps(fn)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        prep = face.prepare(args, kwargs)
        if prep is None:
            return (yield from fn(*args, **kwargs))
        stored = _stream_hit(prep, call_name)
        if stored is not None and stored is not _engine.MISS:
            yield from stored["items"]
            return stored["return"]
        d, flow = _stream_flow(face, prep, _engine.SyncDriver, stored is not None)
        run, stored = d.advance(flow, None if stored is None else _engine.MISS)
        if run is None:
            yield from stored["items"]
            return stored["return"]
        items: list[Any] = []
        live = track(_LiveGenerator(d.eff, call_name))
        gen = fn(*args, **kwargs)
        try:
            while True:
                try:
                    item = next(gen)
                except StopIteration as stop:
                    result = stop.value
                    break
                items.append(item)
                yield item
        except Exception as exc:
            d.advance(flow, exc=exc)  # counted; the flow raises it again
            raise  # pragma: no cover
        finally:
            gen.close()  # abandoned half-way: run the generator's own cleanup now
            ours = untrack(live)
        if not ours:  # its block exited before it was read to the end, and said so
            record_miss(call_name, stored=False)
        d.advance(flow, d.ran({"items": items, "return": result}, keep=ours))
        return result

    return gen_wrapper


def _async_wrapper(face: Face) -> Callable[..., Any]:
    fn, call_name, kind, ttl = face.fn, face.call_name, face.kind, face.ttl
    slot, plan_for, try_short, general = face.slot, face.plan_for, face.try_short, face.general
    freeze = face.views.freeze if face.views is not None else None

    @functools.wraps(fn)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        eff = _scoped()
        if eff is None:
            eff = GLOBAL[0]
            if eff is None or OPEN_BLOCKS:  # as in sync_wrapper
                eff = current()
        p = slot[0]
        if p.eff is not eff:  # a new Effective: rebuilt once, not per call
            p = plan_for(eff)
        kb = p.kb
        if kb is None:
            return await fn(*args, **kwargs)
        parts = None
        if p.short:
            value, parts = try_short(p, eff, kb, args, kwargs)
            if value is not _engine.MISS:
                return value
        if parts is None:
            parts = kb.bind_key(args, kwargs, p.seed, p.subs)
        eff, key, canonical, rekey = general(p, *parts)
        value = await _engine.call_async(
            eff, call_name, kind, key, canonical, lambda: fn(*args, **kwargs), ttl=ttl,
            rekey=rekey,
        )
        return freeze(value) if freeze is not None else value

    return async_wrapper


def wrapper(face: Face, probe: Any) -> Callable[..., Any]:
    """The wrapper of ``face.fn``, a coroutine or (async) generator function (``probe``:
    what ``decorators._wrap`` inspected)."""
    if inspect.isasyncgenfunction(probe):
        return _agen_wrapper(face)
    if inspect.isgeneratorfunction(probe):
        return _gen_wrapper(face)
    return _async_wrapper(face)
