"""What a test-facing block switches on, paid for only when there is something to switch on.

Every ``scope``/``cassette`` block intercepts the SDKs' HTTP stacks and watches the socket
layer (``intercept.py``, ``socketguard.py``). Loading that machinery cost the first block of a
process 30-90 ms of imports (the transports, the providers, routing, the socket guard), paid
even by a block whose calls are all ``@cache`` functions and whose process never imported an
HTTP client. So a block only counts itself here; the machinery is loaded and armed when a
module it patches is in the process: when the block opens if one is already imported, else
the moment one is imported while a block is open (``_watched``'s import hook), before the
importing code can make a call. The watched modules are the HTTP libraries, the transports
and seams ``intercept.py`` patches, and ``socket`` (no connection can be made without it, so
the replay backstop is armed no later than the first connection could be).

Imports nothing beyond what ``import dejacache`` already has.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

from ..scope import BLOCK_HOOKS
from ._watched import WATCHED, on_load

__all__ = ["on_block"]

_LOCK = threading.RLock()
_OPEN = 0  # test-facing blocks open now
_ARMED = False  # whether intercept.py holds one acquisition per open block


def _loaded_here(name: str) -> bool:
    mod = sys.modules.get(name)
    # One still executing its import is the import hook's (it is armed when it finishes).
    return mod is not None and not getattr(mod.__spec__, "_initializing", False)


def _machinery() -> ModuleType:
    # By module name: ``dejacache.http.intercept`` as an attribute is the public class.
    from importlib import import_module

    return import_module(".intercept", __package__)


def _arm() -> None:
    """Load interception (outside our lock: an import inside it could wait on a thread that
    is importing a watched module and waits on us) and acquire it for every open block."""
    global _ARMED
    machinery = _machinery()
    with _LOCK:
        if not _ARMED and _OPEN > 0:
            for _ in range(_OPEN):
                machinery.on_block(+1)
            _ARMED = True


def on_block(delta: int) -> None:
    """Called by ``scope.enter``/``leave`` with +1/-1 for every test-facing block."""
    global _OPEN, _ARMED
    with _LOCK:
        _OPEN = max(0, _OPEN + delta)
        if _ARMED:
            _machinery().on_block(delta)
            if _OPEN == 0:
                _ARMED = False
            return
        wanted = delta > 0 and any(_loaded_here(name) for name in WATCHED)
    if wanted:
        _arm()


def _loaded(module: ModuleType) -> None:
    """A watched module finished loading: arm for the open blocks, then let interception
    patch it (it does so only while it holds an acquisition)."""
    if _OPEN > 0 and not _ARMED:
        _arm()
    if _ARMED:
        _machinery().loaded(module)


if on_block not in BLOCK_HOOKS:
    BLOCK_HOOKS.append(on_block)
on_load(lambda: _OPEN > 0, _loaded)
