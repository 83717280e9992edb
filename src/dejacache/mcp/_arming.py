"""MCP recording switched on by blocks, paid for only when ``mcp`` is in the process.

Every test-facing block records and replays the ``mcp`` package's transports (``_patch.py``).
This module only counts the open blocks: the patching itself (~16 KB of bytecode, ~0.4 ms of
a first block that found no ``mcp`` to patch) is loaded when a block opens with ``mcp``
imported, or when an ``mcp`` module is imported while a block is open (the import hook
below), before the importing code can open a session. ``_patch`` decides which of those
modules it patches. Imports nothing beyond what a first block already has.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

from .._importhook import spec_with_callback
from ..scope import BLOCK_HOOKS

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["active", "on_block"]

_LOCK = threading.RLock()
_COUNT = 0  # test-facing blocks open now


def _patching() -> ModuleType:
    from . import _patch  # the patching: loaded once mcp is in the process

    return _patch


def on_block(delta: int) -> None:
    """Called by ``scope.enter``/``leave`` with +1/-1 for every test-facing block."""
    global _COUNT
    # Loaded outside our lock: an import inside it could wait on a thread that is importing
    # and waits on us.
    patch = _patching() if delta > 0 and "mcp" in sys.modules else sys.modules.get(
        f"{__package__}._patch")
    with _LOCK:
        _COUNT = max(0, _COUNT + delta)
        if patch is None:
            return
        if delta > 0:
            patch.patch_imported()
        elif _COUNT == 0:
            patch.unpatch_all()


def active() -> int:
    """How many blocks hold the MCP patches (0: nothing is patched)."""
    return _COUNT


def _loaded(module: ModuleType) -> None:
    if not _COUNT:
        return
    patch = _patching()
    with _LOCK:
        if _COUNT > 0:
            patch.loaded(module)


class _PatchOnImport:
    """An ``mcp`` module imported while a block is open is shown to ``_patch`` when loaded."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not _COUNT or not fullname.startswith("mcp.") or fullname in sys.modules:
            return None
        return spec_with_callback(self, fullname, path, target, _loaded)


if on_block not in BLOCK_HOOKS:
    BLOCK_HOOKS.append(on_block)
if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchOnImport())
