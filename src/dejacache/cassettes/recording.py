"""What a cassette block does with a call it does not replay from the file.

The bodies of :class:`~.store.Cassette`'s ``put``, ``record_error``, ``note_miss`` and
``iterate``: a live answer or a kept exception appended (and a call that outlived its block
named instead), a replay miss noted, the file listed for a miss report; and the other half of
a kept exception, :func:`rebuild_exception`, next to the entry shape ``record_error`` writes.
A replay hit on a plain answer runs none of it, so ``store.py`` imports this module in those
methods: loaded by the first recording, miss, listing or replayed exception (10 KB of
bytecode a replay-only block no longer reads).

The functions work on the cassette's own parts (its lock, tape, order and writer) as the
methods did: they are those methods' bodies, kept apart from the read path.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from ..codec import blob_payload
from ..errors import CassetteError, DejacacheWarning, ReplayMiss, SerializationError
from ..stores._base import Record
from .ageing import stamp_entry
from .tape import Entry

if TYPE_CHECKING:
    from .store import Cassette

__all__ = ["iterate", "note_miss", "put", "rebuild_exception", "record_error"]


def put(c: Cassette, key: str, record: Record) -> bool:
    """``Cassette.put``: the live answer of a call, as a new entry."""
    if c.live_tape is not None:  # a live call of a partial block: never the original
        kept = c.live_tape.put(key, record)
        c.counters.recorded += kept
        return kept
    try:
        tree, plain = blob_payload(record.value)
    except SerializationError as exc:
        raise CassetteError(f"cannot store {record.name}: {exc}", path=c.path) from None
    doc: dict[str, Any] = {"response": tree}
    if not plain:
        doc["tagged"] = True
    if record.usage:
        doc["usage"] = dict(record.usage)
    return _append(c, key, record.name, record.namespace, record.kind, record.request,
                   record.duration, doc)


def record_error(c: Cassette, key: str, name: str, namespace: str, kind: str,
                 canonical: bytes, exc: BaseException, duration: float) -> bool:
    """``Cassette.record_error``: keep an exception raised by the live call, if the block
    opted in to its type (read back by :func:`rebuild_exception`)."""
    if c.live_tape is not None:
        return c.live_tape.record_error(key, name, namespace, kind, canonical, exc, duration)
    if not c.record_errors or not isinstance(exc, c.record_errors):
        return False
    t = type(exc)
    args = list(exc.args)
    try:
        orjson.dumps(args)
    except TypeError:
        args = [str(exc)]
    err = {"type": f"{t.__module__}:{t.__qualname__}", "message": str(exc), "args": args}
    return _append(c, key, name, namespace, kind, canonical, duration, {"error": err})


def rebuild_exception(err: dict[str, Any]) -> BaseException:
    """Same type (when its module is imported) and message as the recorded exception."""
    type_name = str(err.get("type", ""))
    message = str(err.get("message", ""))
    args = err.get("args") or [message]
    module, _, qual = type_name.partition(":")
    cls: Any = sys.modules.get(module)
    for part in qual.split("."):
        cls = getattr(cls, part, None) if cls is not None else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return CassetteError(f"recorded exception {type_name}: {message}")
    try:
        exc = cls(*args)
    except Exception:
        exc = cls.__new__(cls)
        exc.args = (message,)
    return exc


def _append(c: Cassette, key: str, name: str, namespace: str, kind: str, request: bytes,
            duration: float, doc: dict[str, Any]) -> bool:
    """Add a recording; False when the tape was already saved (the call is named)."""
    c._load()
    try:
        req_tree = orjson.loads(request) if request else None
    except orjson.JSONDecodeError:
        req_tree = request.decode(errors="replace")
    with c._lock:
        if c._sealed:
            _warn_late(c, name, req_tree)
            return False
        stamp_entry(doc, key, name, kind, req_tree)
        if c.ageing is not None and (old := c.ageing.replaced(key)) is not None:
            c._writer.replaced.add(old)
        doc, red_request = c._writer.add(
            doc, key=key, name=name, namespace=namespace, kind=kind, request=req_tree,
            duration=duration, redactor=c.redactor)
        c.counters.recorded += 1
        c._order.note_new(doc, name, kind, key, red_request, c.mode != "record")
        return True


def note_miss(c: Cassette, miss: ReplayMiss) -> ReplayMiss | None:
    """``Cassette.note_miss``: see its docstring."""
    with c._lock:
        if c._sealed:
            return _late_miss(c, miss)
        again = c._miss_divergence.get(miss.key)
        if again is not None:
            return again
        if any(m.key == miss.key for m in c.misses):
            return None
        c.misses.append(miss)
        c.counters.missed += 1
        exc = c._order.note_miss(miss, c.mode != "record")
        if exc is None or not c.strict:
            return None
        c._miss_divergence[miss.key] = exc
        c.misses[-1] = exc  # what a failing test's report leads with (pytest plugin)
        return exc


def _late_call(c: Cassette, name: str, request: Any) -> str:
    shown = orjson.dumps(c.redactor.tree(request)).decode(errors="replace")
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return (f"dejacache: {name} was called after its cassette block exited "
            f"(a task or thread that outlived the block), with {shown}")


def _warn_late(c: Cassette, name: str, request: Any) -> None:
    warnings.warn(f"{_late_call(c, name, request)}; the caller got the live answer, "
                  f"but it was not recorded in {c.path}. Wait for the task inside "
                  "the block to record it.", DejacacheWarning, stacklevel=5)


def _late_miss(c: Cassette, miss: ReplayMiss) -> ReplayMiss:
    late = ReplayMiss(f"{_late_call(c, miss.name, miss.request)}; the block replays "
                      f"{c.path}, so the call is refused rather than run live. Wait for "
                      "the task inside the block.", name=miss.name, key=miss.key,
                      source=str(c.path))
    late.request = miss.request
    return late


def iterate(c: Cassette, name: str | None, namespace: str | None
            ) -> Iterator[tuple[str, Record]]:
    """``Cassette.iterate``: the file's entries and this run's, as records without values."""
    tape = c._tape
    with c._lock:
        items: list[Entry | dict[str, Any]] = [*tape.all_entries(), *c._new]
    for item in items:  # parsed one by one: a miss report looks at the first 1000 only
        if isinstance(item, Entry):
            with c._lock:
                doc = tape.doc(item)
        else:
            doc = item
        if name is not None and doc.get("name") != name:
            continue
        if namespace is not None and doc.get("namespace", "") != namespace:
            continue
        req = tape.expand(doc.get("request"))
        yield str(doc.get("key", "")), Record(
            value=b"", name=str(doc.get("name", "")), namespace=str(doc.get("namespace", "")),
            kind=str(doc.get("kind", "call")), request=orjson.dumps(req),
            duration=float(doc.get("duration", 0.0)), usage=doc.get("usage") or None,
        )
