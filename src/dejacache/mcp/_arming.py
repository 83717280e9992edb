"""MCP recording held by the open blocks, loaded only once ``mcp`` is in the process.

Every test-facing block records and replays the ``mcp`` package's transports (``_patch.py``).
This module counts the blocks that hold the patches and takes the lock around every change to
them. ``dejacache._blockwatch`` loads it and hands it the open blocks when a block opens with
``mcp`` imported, or when an ``mcp`` module is imported while a block is open, before the
importing code can open a session: a block in a process without ``mcp`` loads neither this nor
the patching (~16 KB of bytecode). ``_patch`` decides which of those modules it patches.
"""

from __future__ import annotations

import threading
from types import ModuleType

from .._blockwatch import on_load
from . import _patch

__all__ = ["active", "on_block"]

_LOCK = threading.RLock()
_COUNT = 0  # test-facing blocks open now


def on_block(delta: int) -> None:
    """Called by ``dejacache._blockwatch`` with +1/-1 for every test-facing block."""
    global _COUNT
    with _LOCK:
        _COUNT = max(0, _COUNT + delta)
        if delta > 0:
            _patch.patch_imported()
        elif _COUNT == 0:
            _patch.unpatch_all()


def active() -> int:
    """How many blocks hold the MCP patches (0: nothing is patched)."""
    return _COUNT


def _loaded(module: ModuleType) -> None:
    with _LOCK:
        if _COUNT > 0:
            _patch.loaded(module)


on_load("mcp", lambda: _COUNT > 0, _loaded)  # patch an ``mcp`` module imported inside a block
