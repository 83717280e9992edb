"""The call policy, as pure code: which store operations one cached call makes, in order.

Every face (``@cache`` functions and generators, the HTTP transports, the tool cache's
engine calls) follows one rule: look up unless recording; serve a hit; in replay a miss is
refused; otherwise run, store what came back, and count. :func:`call_flow` writes that rule
once, as a generator that *yields effects* (:class:`Lookup`, :data:`REKEY`,
:class:`Refuse`, :class:`Join`, :class:`Run`, :class:`Store`, :class:`Fail`) and receives
their answers, the way httpx's ``auth_flow`` yields requests. It touches no store, codec,
clock, thread or event loop: the drivers (``_engine.SyncDriver``/``AsyncDriver``, and the
generator wrappers and HTTP stream paths built on them) carry each effect out, and throw a
failed effect's exception back in where the policy has something to do about it.
"""

from __future__ import annotations

from collections.abc import Generator

from .._slots import Sentinel

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final
    from typing import NamedTuple as Row  # checked as one: see _slots.Row
else:
    from .._hints import Any
    from .._slots import Row

__all__ = [
    "FOLLOWED",
    "LEAD",
    "MISS",
    "RECHECK",
    "REKEY",
    "RETRY",
    "Facts",
    "Fail",
    "Flow",
    "Join",
    "Lookup",
    "Ran",
    "Refuse",
    "Run",
    "Store",
    "call_flow",
    "looks_up",
]

#: the answer to a :class:`Lookup` that found nothing usable
MISS: Any = Sentinel("MISS")

# Answers to a Join.
LEAD: Final = "lead"  #: this call runs; the others wait for it
RECHECK: Final = "recheck"  #: as LEAD, but a flight landed since the last lookup: look again
RETRY: Final = "retry"  #: the leader gave up (interrupted, or kept nothing): start over
FOLLOWED: Final = "followed"  #: the leader's stored answer, decoded for this caller


class Facts(Row):
    """What the policy needs to know about one call."""

    mode: str  #: "auto", "replay" or "record" ("off" never reaches the flow)
    sequenced: bool  #: the store answers the n-th identical call with the n-th recording
    rekey: bool  #: the key is a fast form; a :data:`REKEY` gives the full one on a miss
    flights: bool  #: identical concurrent misses may share one run (not for streams)
    keep_errors: bool  #: a failed run is offered to the store (cassettes may record it)


class Lookup(Row):
    """Read ``key``: answer the decoded value or :data:`MISS`."""

    key: str


#: Answer ``(full key, full canonical request)`` for a call looked up by its fast key. It
#: carries nothing, so it is a marker like :data:`MISS`: a named tuple with no fields cost
#: ~0.5M instructions to define, in a module every ``@cache`` import loads.
REKEY: Any = Sentinel("REKEY")


class Refuse(Row):
    """Replay found no recording: the driver raises the miss, explained from these facts."""

    key: str
    canonical: bytes


class Join(Row):
    """Join the flight of identical calls under ``key``: answer ``(LEAD | RECHECK | RETRY,
    None)`` or ``(FOLLOWED, value)``. The driver lands a flight it leads when the call ends."""

    key: str


class Run(Row):
    """Run the call: answer a :class:`Ran`, or throw its exception back in."""

    key: str
    canonical: bytes


class Ran(Row):
    value: Any
    duration: float  #: seconds the run took
    keep: bool = True  #: False: hand the value back unstored (the driver counted it)


class Store(Row):
    """Encode and store what the run gave, and count the miss."""

    key: str
    canonical: bytes
    value: Any
    duration: float


class Fail(Row):
    """The run raised ``error``: count it, and when ``keep``, offer it to the store."""

    key: str
    canonical: bytes
    error: Exception
    keep: bool


Effect = Lookup | Refuse | Join | Run | Store | Fail | Sentinel  # (REKEY)
Flow = Generator[Effect, Any, Any]

# The effects of every call are made as their NamedTuple constructors make them, by
# tuple.__new__, without the constructor's own Python call: five of them were ~2% of a
# memory miss (the same values: ``_new(Lookup, (key,)) == Lookup(key)``).
_new = tuple.__new__


def looks_up(facts: Facts) -> bool:
    """Whether the flow's first effect is a :class:`Lookup` of its key, whose value, found,
    is the call's value (every mode but ``record``; with ``rekey`` too, of the fast key)."""
    return facts.mode != "record"


def call_flow(facts: Facts, key: str, canonical: bytes) -> Flow:
    """The effects of one call and, returned, its value."""
    look = looks_up(facts)
    skip = False  # the key about to be looked up has just missed
    if facts.rekey:
        if look:
            value = yield _new(Lookup, (key,))
            if value is not MISS:
                return value
        full_key, canonical = yield REKEY
        skip = full_key == key
        key = full_key
    flights = facts.flights and not facts.sequenced  # cassettes: the n-th call, n-th answer
    while True:
        if look and not skip:
            value = yield _new(Lookup, (key,))
            if value is not MISS:
                return value
        skip = False
        if facts.mode == "replay":
            yield Refuse(key, canonical)
            raise AssertionError("a driver answered Refuse")  # pragma: no cover
        if flights:
            turn, value = yield _new(Join, (key,))
            if turn == FOLLOWED:
                return value
            if turn == RETRY:
                continue
            if turn == RECHECK:
                value = yield _new(Lookup, (key,))
                if value is not MISS:
                    return value  # the flight lands abandoned: its waiters look up and hit
        try:
            ran = yield _new(Run, (key, canonical))
        except Exception as exc:
            yield Fail(key, canonical, exc, facts.keep_errors)
            raise
        if ran.keep:
            yield _new(Store, (key, canonical, ran.value, ran.duration))
        return ran.value
