"""``StoreStats``: what a store's ``stats()`` reports. Apart from ``_base`` because only
``stats()`` builds one, and defining the dataclass cost ~0.8 ms of every first cassette
block's imports."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["StoreStats"]


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStats:
    backend: str
    entries: int
    bytes: int
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
