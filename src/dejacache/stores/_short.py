"""Which subclasses of a store keep its short hit path (``hit``)."""

from __future__ import annotations

__all__ = ["keeps_short_path"]


def keeps_short_path(cls: type, base: type) -> bool:
    """Whether ``cls`` reads and writes the way ``base`` does. A subclass with its own
    ``get``, ``put`` or ``hit`` (a test double, a wrapper that fails on purpose) has not
    promised that ``hit`` agrees with ``get``, nor that what ``put`` kept was checked: its
    hits take the general, checked path."""
    return all(getattr(cls, name) is getattr(base, name) for name in ("get", "put", "hit"))
