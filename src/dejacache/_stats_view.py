"""The snapshot :func:`dejacache.stats` returns: :class:`Stats` and its :class:`CallStats`.

Apart from ``stats`` so that importing the decorator does not create two dataclasses (~1.3 ms)
for a function few processes call; ``dejacache.stats`` loads this module
the first time either class is read. Both name ``dejacache.stats`` as their module, where
they have always been found (pickles, reprs of the classes, documentation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ._slots import add_slots

__all__ = ["CallStats", "Stats"]


@dataclasses.dataclass(slots=True)
class CallStats:
    __module__ = "dejacache.stats"

    hits: int = 0
    misses: int = 0
    stores: int = 0
    errors: int = 0
    time_saved: float = 0.0
    tokens_saved: int = 0

    add = add_slots

    def __repr__(self) -> str:
        # Seconds to 0.1 ms: the raw float (0.014215138000508887) is noise in a log line.
        return (f"CallStats(hits={self.hits}, misses={self.misses}, stores={self.stores}, "
                f"errors={self.errors}, time_saved={round(self.time_saved, 4)}, "
                f"tokens_saved={self.tokens_saved})")


@dataclasses.dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot. ``total``: each call counted once, at the outermost cached layer (its
    ``time_saved``/``tokens_saved`` include hits at every layer). ``by_name``: every layer
    by call name. ``nested``: hits and misses that happened while an outer cached call was
    running live (e.g. the HTTP request inside a decorated function)."""

    __module__ = "dejacache.stats"

    total: CallStats
    by_name: Mapping[str, CallStats]
    nested: CallStats = dataclasses.field(default_factory=CallStats)

    @property
    def hit_rate(self) -> float:
        n = self.total.hits + self.total.misses
        return self.total.hits / n if n else 0.0
