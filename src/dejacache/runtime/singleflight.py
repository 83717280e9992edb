"""Single-flight for the tool cache: the one the engine uses too (``dejacache._flights``)."""

from __future__ import annotations

from .._flights import SingleFlight

__all__ = ["SingleFlight"]
