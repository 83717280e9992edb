"""``KeyParts``: what went into a key, as ``dejacache.explain`` reports it. Apart from
``keys`` because only ``explain`` builds one, and defining the frozen slotted dataclass cost
~0.55 ms of every first cassette block's imports."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["KeyParts"]


@dataclasses.dataclass(frozen=True, slots=True)
class KeyParts:
    """What went into a key, for debugging misses (``dejacache.explain``)."""

    key: str
    version: int
    namespace: str
    name: str
    arguments: dict[str, Any]
    canonical: str
    #: Attributes of the method's instance the key leaves out (``"self.client"``): not data
    #: (a client, a lock, a callable), so instances differing only there share answers.
    left_out: tuple[str, ...] = ()
