"""What a test-facing block switches on, paid for only when there is something to switch on.

Every ``scope``/``cassette`` block intercepts the SDKs' HTTP stacks and watches the socket
layer (``intercept.py``, ``socketguard.py``). Loading that machinery cost the first block of a
process 30-90 ms of imports (the transports, the providers, routing, the socket guard), paid
even by a block whose calls are all ``@cache`` functions and whose process never imported an
HTTP client. So a block only counts itself here; the machinery is loaded and armed when a
module it patches is in the process: when the block opens if one is already imported, else
the moment one is imported while a block is open (``_watched``'s import hook), before the
importing code can make a call. The watched modules are the HTTP libraries, the transports
and seams ``intercept.py`` patches, and ``socket``. ``socket`` alone (every pytest process
has it: its plugins import asyncio) does not load the machinery: a tripwire on the socket
layer (``cassettes/netguard.py``) loads and arms it at the first connection or lookup made
while a block is open, and the replay backstop then judges that one too. A suite of
``@cache`` tests that opens no connection so never loads the HTTP machinery (~15 ms of a
one-test run with a cassette).

Imports nothing beyond what ``import dejacache`` already has.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

from ..scope import BLOCK_HOOKS
from ._watched import WATCHED, on_load

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from ..cassettes.attempts import Attempt

__all__ = ["on_block"]

_LOCK = threading.RLock()
_OPEN = 0  # test-facing blocks open now
_ARMED = False  # whether intercept.py holds one acquisition per open block
_WIRED = False  # whether the tripwire is set
_LIBRARIES = WATCHED - {"socket"}


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
        _tripwire(False)  # only now: the guard armed above watches every connection


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
        if _OPEN == 0:
            _tripwire(False)
        wanted = delta > 0 and any(_loaded_here(name) for name in _LIBRARIES)
        if delta > 0 and not wanted and _loaded_here("socket"):
            _tripwire(True)
    if wanted:
        _arm()


def _tripwire(on: bool) -> None:
    """Set (``on``) or lift the tripwire. Under our lock."""
    global _WIRED
    if on == _WIRED:
        return
    from ..cassettes import netguard  # the socket layer is in the process already

    if on:
        netguard.add_check(_tripped, first=True)
    else:
        netguard.remove_check(_tripped)
    _WIRED = on


def _tripped(attempt: Attempt) -> None:
    """A connection or lookup while a block is open and only ``socket`` was loaded: arm,
    then show this attempt to the checks armed now (the replay backstop among them)."""
    from ..cassettes import netguard

    with _LOCK:
        wanted = _OPEN > 0
    if wanted:
        # The tripwire stays set until the guard is armed: a connection another thread
        # makes meanwhile trips it too, and waits here for the import.
        _arm()
        netguard.run_checks(attempt)


def _loaded(module: ModuleType) -> None:
    """A watched module finished loading: arm for the open blocks (``socket``: set the
    tripwire), then let interception patch it (it does so only while it holds an
    acquisition)."""
    if module.__name__ == "socket":
        with _LOCK:
            if _OPEN > 0 and not _ARMED:
                _tripwire(True)
    elif _OPEN > 0 and not _ARMED:
        _arm()
    if _ARMED:
        _machinery().loaded(module)


if on_block not in BLOCK_HOOKS:
    BLOCK_HOOKS.append(on_block)
on_load(lambda: _OPEN > 0, _loaded)
