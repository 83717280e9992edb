"""How old a recording is, and what replay does with one older than ``max_age``: pure.

Every entry recorded since dejacache kept the time carries ``recorded_at`` (ISO 8601, UTC).
An entry without it (recorded before) has an unknown age: it is never expired, and the views
say "unknown" rather than guessing. ``dejacache verify``, ``dejacache show``, the HTML report
and replay all read the age through :func:`recorded_at`, and judge it by :func:`expired`,
so they agree on it.

An entry dated more than :data:`CLOCK_SKEW` after now (a clock set wrong where it was
recorded or where it replays, a hand edit) has no age anyone can trust: with a ``max_age``
it counts as expired (said as "in the future", never as fresh for ever).

What replay does with an expired entry (:func:`on_expired`):

======================  ==============  ===================================================
``on_expiry``           mode            the expired entry
======================  ==============  ===================================================
``"warn"`` (default)    any             served, with a ``DejacacheWarning`` naming it
``"rerecord"``          ``auto``        not served: the call runs live and the new
                                        recording replaces the entry in the file
``"rerecord"``          ``replay``      served with the warning: replay never sends a call
======================  ==============  ===================================================
"""

from __future__ import annotations

import datetime
import math

from ..errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["CLOCK_SKEW", "ON_EXPIRY", "age_text", "check_on_expiry", "expired", "in_future",
           "on_expired", "recorded_at", "span", "stamp"]

ON_EXPIRY: Final = ("warn", "rerecord")

#: How far after this machine's clock a ``recorded_at`` may be before it is a date in the
#: future (seconds). Machines that record and replay a cassette disagree by a little (NTP
#: keeps clocks within seconds; a resumed VM or container can lag by minutes): five
#: minutes of that is skew, not a bad date.
CLOCK_SKEW: Final = 300.0

WARN: Final = "warn"
RERECORD: Final = "rerecord"


def check_on_expiry(value: str, where: str = "on_expiry") -> str:
    v = value.strip().lower()
    if v not in ON_EXPIRY:
        raise ConfigurationError(f"unknown {where} {value!r}; expected one of "
                                 f"{', '.join(ON_EXPIRY)}")
    return v


def stamp(now: float) -> str:
    """``now`` (Unix seconds) as the ``recorded_at`` text: ISO 8601, UTC, whole seconds (a
    finer stamp would change the file's bytes for nothing)."""
    t = datetime.datetime.fromtimestamp(int(now), datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def recorded_at(entry: dict[str, Any]) -> float | None:
    """When an entry was recorded (Unix seconds), from its ``recorded_at`` field: ISO 8601
    text (a time without a zone is UTC) or Unix seconds. None: not known."""
    v = entry.get("recorded_at")
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            t = datetime.datetime.fromisoformat(v)
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.UTC)
        return t.timestamp()
    return None


def span(s: float) -> str:
    """A duration as the shortest exact text (``30d``, ``6h``, ``90s``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{int(s // size)}{unit}"
    return f"{s:g}s"


def age_text(born: float | None, now: float) -> str:
    """An age as people read it: the largest whole unit (``45d``, ``3h``, ``12m``, ``5s``);
    for a date in the future, how far ahead it is."""
    if born is None:
        return "unknown"
    age = abs(now - born) if in_future(born, now) else max(0.0, now - born)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{int(age // size)}{unit}"
    return f"{int(age)}s"


def in_future(born: float | None, now: float) -> bool:
    """Whether ``born`` is after ``now`` by more than :data:`CLOCK_SKEW`."""
    return born is not None and born - now > CLOCK_SKEW


def expired(born: float | None, max_age: float | None, now: float) -> bool:
    """Whether an entry recorded at ``born`` is past ``max_age``: older than it, or dated in
    the future (:func:`in_future`). Never without a ``max_age``, or with an unknown age."""
    if max_age is None or born is None:
        return False
    return now - born > max_age or in_future(born, now)


def on_expired(born: float | None, max_age: float | None, now: float, *, mode: str,
               on_expiry: str) -> str | None:
    """What replay does with an entry recorded at ``born``: None (serve it: fresh, no
    ``max_age``, or its age unknown), ``"warn"`` (serve it and say so) or ``"rerecord"``
    (run the call live instead; only ever in ``auto`` mode). An entry dated in the future
    is expired (:func:`expired`)."""
    if not expired(born, max_age, now):
        return None
    if on_expiry == RERECORD and mode == "auto":
        return RERECORD
    return WARN
