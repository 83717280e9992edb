"""A live whole answer (not a stream) larger than the recording bound: handed on, not kept.

A whole answer is read before it is stored, and stored whole. One that would hold more
than the bound the stream recorder obeys (``recording.Held``: ``MAX_RECORDED_STREAM``, the
proxy's ``--max-recorded-stream``), a 2 GB file download or an upstream that never stops
sending, is read no further than that: the bytes read so far and the rest of the body are
handed to the caller as they come (the rest read only as the caller reads it), and nothing
is stored (a body cut short kept as the whole answer would replay wrong; a miss next time
is safe), with one ``DejacacheWarning`` naming the call and the bound. Below the bound
nothing changes.

What is counted and handed on is the body as it came (``iter_raw``), its
``Content-Encoding`` and ``Content-Length`` with it: the caller's own decoder undoes the
coding once, as it would live.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..errors import DejacacheWarning
from ._deferred import Deferred
from ._libs import Lib
from .recording import CallInfo, Held, past_bound

__all__ = ["Passing", "ahanded", "aread_bounded", "handed", "passed_on", "read_bounded"]


class Passing:
    """A whole answer past the bound: the chunks read so far (the last one passed the
    bound) and the rest of its body, unread."""

    __slots__ = ("bound", "deferred", "held", "rest")

    def __init__(self, held: list[bytes], rest: Any, bound: int,
                 deferred: Deferred | None = None) -> None:
        self.held = collections.deque(held)
        self.rest = rest  # Iterator[bytes], or AsyncIterator[bytes]; None: all read
        self.bound = bound
        # Its warning, when the filters make it an error: raised once the caller has every
        # byte (at the end or at its close), never instead of the answer (``_deferred``).
        self.deferred = Deferred() if deferred is None else deferred


def read_bounded(live: Any) -> bytes | Passing | None:
    """``live``'s body as it came, whole when it fits the bound, else :class:`Passing`.
    None when the transport handed it over read already (``transport._read_whole``)."""
    if live.is_stream_consumed:
        return None
    held = Held()
    chunks: list[bytes] = []
    source = iter(live.iter_raw())
    for chunk in source:
        chunks.append(chunk)
        if not held.take(len(chunk)):
            return Passing(chunks, source, held.bound)
    return b"".join(chunks)


async def aread_bounded(live: Any) -> bytes | Passing | None:
    """:func:`read_bounded`'s async twin."""
    if live.is_stream_consumed:
        return None
    held = Held()
    chunks: list[bytes] = []
    source = live.aiter_raw().__aiter__()
    async for chunk in source:
        chunks.append(chunk)
        if not held.take(len(chunk)):
            return Passing(chunks, source, held.bound)
    return b"".join(chunks)


def handed(passing: Passing) -> Iterator[bytes]:
    """The body handed on: what was read, each chunk let go once handed, then the rest as
    the caller reads it (so the upstream is read no faster than the caller takes it)."""
    held = passing.held
    while held:
        yield held.popleft()
    rest: Iterator[bytes] | None = passing.rest
    if rest is not None:
        yield from rest
    passing.deferred.raise_kept()


async def ahanded(passing: Passing) -> AsyncIterator[bytes]:
    """:func:`handed`'s async twin."""
    held = passing.held
    while held:
        yield held.popleft()
    rest: AsyncIterator[bytes] | None = passing.rest
    if rest is not None:
        async for chunk in rest:
            yield chunk
    passing.deferred.raise_kept()


def passed_on(call: CallInfo, lib: Lib, live: Any, passing: Passing, headers: Any, *,
              is_async: bool, said: bool = False) -> Any:
    """The answer the caller gets for ``live`` past the bound: its status, ``headers`` and
    extensions, its body handed on as it comes; said once (``said``: the stream recorder
    has said it already)."""
    if not said:
        with passing.deferred:
            warnings.warn(past_bound(call, passing.bound, stream=False), DejacacheWarning,
                          stacklevel=3)
    stream = _classes(lib)[1 if is_async else 0](passing, live)
    return lib.module.Response(live.status_code, headers=headers, stream=stream,
                               extensions=live.extensions)


class _SyncPassing:
    """A library byte stream over :func:`handed`; closing it closes the live answer."""

    def __init__(self, passing: Passing, live: Any) -> None:
        self._passing = passing
        self._live = live

    def __iter__(self) -> Iterator[bytes]:
        return handed(self._passing)

    def close(self) -> None:
        self._passing.held.clear()
        self._live.close()
        self._passing.deferred.raise_kept()


class _AsyncPassing:
    """:class:`_SyncPassing`'s async twin."""

    def __init__(self, passing: Passing, live: Any) -> None:
        self._passing = passing
        self._live = live

    def __aiter__(self) -> AsyncIterator[bytes]:
        return ahanded(self._passing)

    async def aclose(self) -> None:
        self._passing.held.clear()
        await self._live.aclose()
        self._passing.deferred.raise_kept()


@functools.cache
def _classes(lib: Lib) -> tuple[type, type]:
    """The passing streams on ``lib``'s own byte stream classes (as ``recording_classes``)."""
    m = lib.module
    return (type("PassingStream", (_SyncPassing, m.SyncByteStream), {}),
            type("AsyncPassingStream", (_AsyncPassing, m.AsyncByteStream), {}))

