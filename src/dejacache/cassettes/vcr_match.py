"""Matching on method + URL in recorded order, as vcrpy does (``match="vcr"``): opt-in.

vcrpy's default ``match_on`` never compares bodies, so a suite recorded with it holds bodies
older than the code that sends them today (a field dropped, a string system prompt turned into
text blocks, a character rewritten by a serializer): under dejacache's whole-request keys those
calls miss. Two opt-ins serve them the vcrpy way, the n-th call to a method + URL getting the
n-th recorded answer of that method + URL, and a call past the recorded count a miss:

* ``dejacache import --match vcr``: the imported entries are keyed by their method + URL
  (:func:`target_key`) and marked ``"match": "vcr"``; a call whose whole request finds no
  recording takes the next unused one of its method + URL. Entries recorded later (a call past
  the count, a re-recording) are normal ones: re-recording upgrades a cassette to body
  matching.
* ``cassette(..., match="vcr")`` (and the pytest marker's ``match="vcr"``): every entry of the
  file is matched that way, before its whole request is looked at.

"URL" is the URL as dejacache keys it everywhere: the endpoint name (which carries the
provider), path and query, without the host, so a loopback server on a fresh port or a proxy
still matches. Each entry keeps the request it was recorded with, so the calls that were served
with a body other than the one recorded are named once per cassette, field by field
(:meth:`VcrMatch.warning`), and a miss is reported with the nearest recording as usual.

The HTTP transport says which call is being looked up (:func:`calling`), because a store's
``get`` sees only the key: the matcher acts only when the key it is asked for is that call's.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Final

import orjson

from ..errors import ConfigurationError, DejacacheWarning
from ..keys import digest
from ..stores._base import Record

__all__ = [
    "MATCHES",
    "VCR",
    "VcrMatch",
    "calling",
    "check_match",
    "rekey_entries",
    "stale_fields",
    "target_key",
    "warn_stale",
]

VCR: Final = "vcr"
#: ``match=`` values: ``"request"`` (the whole canonical request, the default) or ``"vcr"``.
MATCHES: Final = ("request", VCR)
# Appended to the call name in the key's seed: a method + URL key never equals a whole-request
# key, so a recording keyed one way is never served the other way by accident.
_SEED: Final = "#vcr"
_MAX_NAMED: Final = 12

# (key, namespace, call name, canonical request) of the HTTP call being looked up in this
# context (task or thread; a worker thread started by ``asyncio.to_thread`` copies it).
_CALL: contextvars.ContextVar[tuple[str, str, str, bytes] | None] = contextvars.ContextVar(
    "dejacache_vcr_call", default=None)


def check_match(match: str, where: str = "match") -> str:
    """``match`` if it is one of :data:`MATCHES`, else a ``ConfigurationError``."""
    if match not in MATCHES:
        raise ConfigurationError(f"{where} must be one of {', '.join(map(repr, MATCHES))}, "
                                 f"not {match!r}")
    return match


def calling(key: str, namespace: str, name: str, canonical: bytes) -> None:
    """The HTTP call about to be looked up under ``key`` (one tuple set per call)."""
    _CALL.set((key, namespace, name, canonical))


def target_key(namespace: str, name: str, request: Any) -> str | None:
    """The method + URL key of a canonical request tree (None: not an HTTP request)."""
    if not isinstance(request, dict):
        return None
    method, path = request.get("method"), request.get("path")
    if not isinstance(method, str) or not isinstance(path, str):
        return None
    part = {"method": method.upper(), "path": path, "query": request.get("query")}
    return digest(namespace, name + _SEED, orjson.dumps(part, option=orjson.OPT_SORT_KEYS))


def rekey_entries(entries: Iterable[dict[str, Any]], expand: Callable[[Any], Any]
                  ) -> list[dict[str, Any]]:
    """Copies of HTTP ``entries`` keyed by method + URL and marked ``"match": "vcr"``
    (``expand`` resolves a packed request); others unchanged. For ``import --match vcr``."""
    out = []
    for e in entries:
        req = expand(e.get("request"))
        k = target_key(str(e.get("namespace", "")), str(e.get("name", "")), req) \
            if e.get("kind") == "http" else None
        out.append(e if k is None else dict(e, key=k, match=VCR))
    return out


def stale_fields(recorded: Any, now: Any) -> list[str]:
    """The fields ``now`` differs from ``recorded`` in, one verb each: ``body.n removed``,
    ``body.tool_choice added``, ``body.system changed``."""
    from .._core.diff import field_diff  # a stale VCR match only: not with the first block

    out = []
    for line in field_diff(recorded, now):
        path, _, rest = line.partition(": ")
        verb = ("removed" if rest.startswith("removed (was") else
                "added" if rest.startswith("added ") else "changed")
        out.append(f"{path} {verb}")
    return out


class _Served:
    """What one cassette's vcr matching served (a plain class: a dataclass costs ~1 ms to
    define, in a module every first cassette block loads)."""

    __slots__ = ("calls", "names", "stale")

    def __init__(self) -> None:
        self.names: collections.Counter[str] = collections.Counter()
        self.stale: dict[str, None] = {}  # ordered set
        self.calls = 0


class VcrMatch:
    """Method + URL matching for one cassette (see the module docstring). ``tape`` is the
    cassette's :class:`~.tape.Tape`, ``redact`` what the file would hold for a tree (a miss
    report and a diff never show what the file may not hold); ``match="vcr"`` matches every
    entry that way. The cassette calls under its lock."""

    __slots__ = ("_by_target", "_imported", "_redact", "_served", "tape", "wide")

    def __init__(self, tape: Any, redact: Callable[[Any], Any], match: str = "request") -> None:
        self.tape = tape
        self.wide = check_match(match) == VCR
        self._redact = redact
        self._by_target: dict[str, collections.deque[int]] | None = None
        self._imported: bool | None = None  # whether the file holds --match vcr entries
        self._served = _Served()

    # ---------------------------------------------------------------- lookups

    def _call(self, key: str) -> tuple[str, Any, str, str] | None:
        """(target key, request tree, name, namespace) of the HTTP call looked up as ``key``."""
        call = _CALL.get()
        if call is None or call[0] != key:
            return None  # not an HTTP call, or not the one the transport announced
        _, namespace, name, canonical = call
        try:
            request = orjson.loads(canonical)
        except orjson.JSONDecodeError:
            return None
        target = target_key(namespace, name, request)
        return None if target is None else (target, request, name, namespace)

    def after_miss(self, key: str, here: Callable[[], int],
                   record: Callable[..., Record]) -> Record | None:
        """The next unused ``import --match vcr`` recording of the call looked up as ``key``,
        which found no recording of its whole request (None: there is none left)."""
        tape = self.tape
        if tape.raw is None or tape.full is None:
            return None  # (a miss has parsed the whole file: see Tape.take)
        if self._imported is None:  # once per block: most files hold none
            self._imported = any(e.get("match") == VCR for e in tape.full["entries"])
        call = self._call(key) if self._imported else None
        if call is None:
            return None
        found = tape.take(call[0], here)
        if found is None:
            return None
        return self._serve(key, call, found[0], found[1], record)

    def first(self, key: str, record: Callable[..., Record]) -> Record | None:
        """``match="vcr"`` on the block: the first unused recording of the call's method + URL
        in file order, whatever its body (None: not an HTTP call, or none left; the whole
        request is looked up next, and finds only what this left unused)."""
        tape = self.tape
        if tape.raw is None:
            return None
        call = self._call(key)
        if call is None:
            return None
        q = self._targets().get(call[0])
        while q:
            e = tape.entry(q.popleft())
            if e.used:
                continue
            e.used = True
            tape._uses += 1  # the tape counts uses: its unused-steps cache is keyed by them
            return self._serve(key, call, e, None, record)
        return None

    def _targets(self) -> dict[str, collections.deque[int]]:
        """Every recorded entry's position by method + URL, in file order (built once)."""
        if self._by_target is None:
            tape = self.tape
            by: dict[str, collections.deque[int]] = collections.defaultdict(collections.deque)
            for i, e in enumerate(tape.parse_all()["entries"]):
                if e.get("kind", "call") != "http":
                    continue
                k = target_key(str(e.get("namespace", "")), str(e.get("name", "")),
                               _head(tape, e.get("request")))
                if k is not None:
                    by[k].append(i)
            self._by_target = dict(by)
        return self._by_target

    def _serve(self, key: str, call: tuple[str, Any, str, str], e: Any, view: Any,
               record: Callable[..., Record]) -> Record:
        """The record of entry ``e`` for the call looked up as ``key``, noting how its
        recorded request differs from the one sent now."""
        rec = record(e, view)
        recorded = self.tape.expand(self.tape.doc(e).get("request"))
        s = self._served
        s.calls += 1
        s.names[call[2]] += 1
        now = call[1]
        if isinstance(recorded, dict) and "headers" not in recorded and isinstance(now, dict):
            # Recorded (imported) before request headers were keyed: compared without them,
            # as vcrpy never compared them either.
            now = {k: v for k, v in now.items() if k not in ("headers", "identity")}
        for f in stale_fields(recorded, self._redact(now)):
            s.stale.setdefault(f)
        if rec.kind == "error":
            return rec
        from ..codec import blob_from_tree, blob_payload

        # The value's checksum is bound to the key it is read under: the call's, not the
        # entry's (a method + URL key, or another body's).
        tree, plain = blob_payload(rec.value)
        return dataclasses.replace(rec, value=blob_from_tree(tree, plain, key=key))

    # ---------------------------------------------------------------- the report

    @property
    def served(self) -> int:
        """Calls this block answered by method + URL."""
        return self._served.calls

    @property
    def stale(self) -> list[str]:
        """The fields the requests sent now differ from the recorded ones in (in the order
        first met)."""
        return list(self._served.stale)

    def warning(self, path: Any, rerecord_hint: str | None) -> str | None:
        """The once-per-cassette warning: which calls were answered by method + URL with a
        recorded body other than the one sent now, and which fields differ (None: none)."""
        s = self._served
        if not s.stale:
            return None
        fields = list(s.stale)
        named = ", ".join(fields[:_MAX_NAMED])
        if len(fields) > _MAX_NAMED:
            named += f", and {len(fields) - _MAX_NAMED} more"
        calls = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(s.names.items()))
        return (f"dejacache: cassette {path} answered {s.calls} call(s) ({calls}) by method + "
                f"URL in recorded order (match='vcr'), and the requests sent now differ from "
                f"the recorded ones: {named}. The recorded answers were made for the old "
                f"requests; re-record to match on the whole request: "
                f"{rerecord_hint or 'DEJACACHE_MODE=record'}")


def _head(tape: Any, request: Any) -> Any:
    """A packed request's method, path and query, expanded; not its body (expanding every
    request of an agent's cassette is quadratic: each repeats the history before it)."""
    from .format import REF  # (with the first block, not with the HTTP transport)

    if isinstance(request, str) and request.startswith(REF):
        request = tape.resolve(request[len(REF):])
    if not isinstance(request, dict):
        return None
    return {k: tape.expand(request[k]) for k in ("method", "path", "query") if k in request}


def warn_stale(tape: Any) -> None:
    """At a block's exit: the once-per-cassette warning of :meth:`VcrMatch.warning`, if any
    (``tape``: the block's :class:`~.store.Cassette`)."""
    message = tape.vcr.warning(tape.path, tape.rerecord_hint)
    if message is not None:
        warnings.warn(message, DejacacheWarning, stacklevel=3)
