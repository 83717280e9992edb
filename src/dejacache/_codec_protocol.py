"""The ``Codec`` protocol (``dejacache.Codec``, ``dejacache.codec.Codec``).

Apart from ``codec.py`` because a runtime-checkable protocol is built with ``typing``, which a
replay hit does not load; ``configure(codec=...)`` is what checks one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Codec"]


@runtime_checkable
class Codec(Protocol):
    """Turns values into bytes bound to a key, and back."""

    name: str

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes: ...

    def decode(self, data: bytes, *, key: str = "", namespace: str = "") -> Any: ...
