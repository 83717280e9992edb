"""Entries older than ``max_age``: what replay does with them, and how an entry's age reads.

:class:`Ageing` applies the pure rules (``_core/ageing.py``) to the entries of one block
given a ``max_age`` as they replay, and says so once per entry; :func:`age_line` tells an
entry's age and what it was recorded with (``ageing.py`` stamps both) for ``dejacache show``
and the report. Apart from ``ageing.py`` (the settings and stamps every block and recording
needs, and :func:`~.ageing.block_ageing`, which builds an :class:`Ageing` for a block given a
``max_age``): a block without one never loads it (10 KB of bytecode).
"""

from __future__ import annotations

import warnings
from typing import Any

from .._core.ageing import (
    CLOCK_SKEW,
    RERECORD,
    age_text,
    expired,
    in_future,
    on_expired,
    recorded_at,
    span,
)
from ..errors import DejacacheWarning

__all__ = ["Ageing", "age_line", "made_with_text"]


class Ageing:
    """``max_age`` and ``on_expiry`` applied to one cassette's entries as they replay."""

    def __init__(self, path: Any, max_age: float, on_expiry: str, mode: str,
                 now: float) -> None:
        self.path = path
        self.max_age = max_age
        self.on_expiry = on_expiry
        self.mode = mode
        self.now = now  # one per block: every entry is judged against the same
        self.warned: set[tuple[str, int]] = set()
        self.served: list[str] = []  # expired entries served, described
        self.future: list[str] = []  # the same, for entries dated in the future
        #: keys whose expired entries (file index) are being re-recorded live, oldest first
        self.renewing: dict[str, list[int]] = {}

    def verdict(self, doc: dict[str, Any]) -> str | None:
        return on_expired(recorded_at(doc), self.max_age, self.now, mode=self.mode,
                          on_expiry=self.on_expiry)

    def expired(self, doc: dict[str, Any]) -> bool:
        return expired(recorded_at(doc), self.max_age, self.now)

    def renew(self, key: str, index: int | None, doc: dict[str, Any]) -> bool:
        """Whether the entry at ``index`` is to be re-recorded live instead of served."""
        if index is None or self.verdict(doc) != RERECORD:
            return False
        self.renewing.setdefault(key, []).append(index)
        return True

    def replaced(self, key: str) -> int | None:
        """The file index of the expired entry a new recording of ``key`` replaces."""
        q = self.renewing.get(key)
        return q.pop(0) if q else None

    def check(self, doc: dict[str, Any], step: int | None) -> None:
        """Note ``doc``, about to be served, if it is expired (said once, at the block's
        exit: :meth:`warn`)."""
        if self.verdict(doc) is None:
            return
        ident = (str(doc.get("key", "")), int(doc.get("occurrence", 0)))
        if ident in self.warned:
            return
        self.warned.add(ident)
        where = f"entry {step}" if step is not None else "an entry"
        born = recorded_at(doc)
        said = f"{where} ({doc.get('name', '?')}, occurrence {ident[1]})"
        if in_future(born, self.now):
            self.future.append(f"{said} is dated {age_text(born, self.now)} in the future "
                               f"({doc.get('recorded_at')})")
        else:
            self.served.append(f"{said} was recorded {age_text(born, self.now)} ago "
                               f"({doc.get('recorded_at')})")

    def warn(self) -> None:
        """One ``DejacacheWarning`` for the expired entries the block served. Given at exit,
        after the save: under ``-W error`` it fails the test, never a call or the file."""
        if not self.served and not self.future:
            return
        fix = ("they were served because replay never makes a live call"
               if self.on_expiry == RERECORD else
               "re-record them (DEJACACHE_MODE=record), or pass on_expiry='rerecord' to "
               "re-record expired entries in auto mode")
        said = []
        if self.served:
            said.append(f"{_some(self.served)}: older than max_age {span(self.max_age)}")
        if self.future:
            said.append(f"{_some(self.future)}: a date later than this machine's clock (by "
                        f"more than the {span(CLOCK_SKEW)} allowed for skew) is a wrong clock "
                        "or a hand edit, and is treated as expired")
        warnings.warn(f"dejacache: cassette {self.path}: {'; '.join(said)}; {fix}",
                      DejacacheWarning, stacklevel=3)


def _some(described: list[str]) -> str:
    more = f"; and {len(described) - 5} more" if len(described) > 5 else ""
    return "; ".join(described[:5]) + more


def made_with_text(entry: dict[str, Any]) -> str:
    """``recorded_with`` as one phrase (``openai 1.54.0, model gpt-4o-mini (answered by
    gpt-4o-mini-2024-07-18)``); empty when nothing is known."""
    w = entry.get("recorded_with")
    if not isinstance(w, dict):
        return ""
    parts = [str(w["sdk"])] if w.get("sdk") else []
    if w.get("model"):
        parts.append(f"model {w['model']}")
    if w.get("answered_by"):
        parts.append(f"answered by {w['answered_by']}" if w.get("model") else
                     f"model {w['answered_by']}")
    return ", ".join(parts)


def age_line(entry: dict[str, Any], now: float, max_age: float | None = None) -> str:
    """When and with what an entry was recorded, for ``dejacache show`` and the report:
    ``recorded 45d ago (2026-10-14T09:00:00Z) with openai 1.54.0, model gpt-4o-mini; older
    than max_age 30d``, or that its age is unknown (recorded before dejacache kept the
    time)."""
    born = recorded_at(entry)
    note = ""  # what max_age makes of it: after the SDK and model, which it is not about
    if born is None:
        text = "age unknown (recorded before dejacache kept the time; never expires)"
    elif in_future(born, now):
        text = (f"dated {age_text(born, now)} in the future ({entry.get('recorded_at')}), a "
                "wrong clock or a hand edit")
        if max_age is not None:
            note = f"; treated as expired under max_age {span(max_age)}"
    else:
        text = f"recorded {age_text(born, now)} ago ({entry.get('recorded_at')})"
        if max_age is not None and expired(born, max_age, now):
            note = f"; older than max_age {span(max_age)}"
    made = made_with_text(entry)
    return (f"{text} with {made}" if made else text) + note
