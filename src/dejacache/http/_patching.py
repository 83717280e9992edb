"""How every interception seam puts its wrapper in place and knows its own wrappers again."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["install", "is_ours"]


def is_ours(obj: Any) -> bool:
    """Whether ``obj`` is a wrapper dejacache installed (so it is never wrapped twice)."""
    return getattr(obj, "__dejacache_patch__", False) is True


def install(cls: type, attr: str, orig: Any, wrapper: Any) -> tuple[type, str, Any]:
    """Put ``wrapper`` in place of ``cls.attr`` (``orig``), named like it and marked as ours;
    the triple returned is what puts ``orig`` back. A wrapper kept from an earlier block is
    put back as it is."""
    if not is_ours(wrapper):
        functools.update_wrapper(wrapper, orig)
        wrapper.__dejacache_patch__ = True
    setattr(cls, attr, wrapper)
    return cls, attr, orig
