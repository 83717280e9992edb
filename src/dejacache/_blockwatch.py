"""What an open test-facing block keeps live before anything needs it: the count of open
blocks, the table of the modules whose import concerns one, and one import hook.

Three parties act on those modules while a block is open: HTTP interception
(``http/intercept.py``: the SDKs' HTTP stacks, transports and seams), MCP recording
(``mcp/_arming.py``: the ``mcp`` package) and the executor's context carry (``_threads.py``:
``concurrent.futures.thread``). None has work to do until a module it patches is in the
process, and a suite of ``@cache`` tests imports none, yet loading their counters and hooks
with the first block cost it 7 modules (~2.5M instructions, ~1 ms of a one-test cassette
run). So a block only counts itself here; a party is loaded and handed the open blocks when a
block opens with one of its modules loaded, or the moment one is imported while a block is
open (the hook below), before the importing code can make a call.

``socket`` (every pytest process has it: its plugins import asyncio) does not load HTTP
interception: a tripwire on the socket layer (``cassettes/netguard.py``) loads and arms it at
the first connection or lookup made while a block is open, and the replay backstop then
judges that one too (~15 ms of a one-test run with a cassette).

Imports nothing beyond what a first block already has.
"""

from __future__ import annotations

import _thread
import sys
from collections.abc import Callable
from types import ModuleType

from .scope import BLOCK_HOOKS

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

    from .cassettes.attempts import Attempt

__all__ = ["EXECUTOR_MODULE", "EXTRA_TRANSPORTS", "LIBRARIES", "SEAM_MODULES", "blocks_open",
           "on_block", "on_load"]

LIBRARIES = ("httpx2", "httpx")
# Network transports that SDKs ship outside httpx/httpx2 (aiohttp-backed: litellm's async
# default, the SDKs' opt-in DefaultAioHttpClient): "module:class", each implementing the
# public transport method itself.
EXTRA_TRANSPORTS = (
    "litellm.llms.custom_httpx.aiohttp_transport:LiteLLMAiohttpTransport",
    "openai._vendor.httpx_aiohttp.transport:AiohttpTransport",
    "anthropic._vendor.httpx_aiohttp.transport:AiohttpTransport",
    # openai 2.x's DefaultAioHttpClient (openai[aiohttp]) uses the httpx-aiohttp package.
    "httpx_aiohttp.transport:AiohttpTransport",
    "httpx_aiohttp.httpx2.transport:AiohttpTransport",
)
# The modules that define each seam's stack (a seam restates its own request type as an
# httpx request): lm15's transports, urllib3's pools (requests, botocore), aiohttp's session,
# websockets' clients (``ws/``).
SEAM_MODULES = {
    "lm15": ("lm15.transports", "dspy._vendor.lm15.transports"),
    "via_urllib3": ("urllib3.connectionpool",),
    "via_aiohttp": ("aiohttp.client",),
    "via_websockets": ("websockets.asyncio.client", "websockets.sync.client",
                       "websockets.legacy.client"),
}
EXECUTOR_MODULE = "concurrent.futures.thread"  # where ThreadPoolExecutor is defined
_HTTP_MODULES = frozenset(
    {*LIBRARIES}
    | {s.partition(":")[0] for s in EXTRA_TRANSPORTS}
    | {m for mods in SEAM_MODULES.values() for m in mods}
)
# Module -> the party it concerns; any ``mcp.*`` module is MCP's (``_patch`` picks its own).
_PARTY_OF = {**dict.fromkeys(_HTTP_MODULES, "http"), "socket": "http",
             EXECUTOR_MODULE: "threads"}
_MACHINERY = {"http": ".http.intercept", "mcp": ".mcp._arming", "threads": "._threads"}

_LOCK = _thread.RLock()
_OPEN = 0  # test-facing blocks open now
_ARMED: dict[str, ModuleType] = {}  # party -> its machinery, holding one count per open block
_WIRED = False  # whether the tripwire is set
# (party, whether it wants to hear now, what to call with the module just loaded)
_LISTENERS: list[tuple[str, Callable[[], bool], Callable[[ModuleType], None]]] = []


def _party(name: str) -> str | None:
    return _PARTY_OF.get(name) or ("mcp" if name.startswith("mcp.") else None)


def blocks_open() -> int:
    """How many test-facing blocks are open now."""
    return _OPEN


def on_load(party: str, wanted: Callable[[], bool], then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` after a module of ``party`` (``"http"``, ``"mcp"``, ``"threads"``)
    is loaded while a block is open or ``wanted()`` is true (an explicit ``intercept``, a
    lease)."""
    if all(t is not then for _, _, t in _LISTENERS):
        _LISTENERS.append((party, wanted, then))


def _loaded_here(name: str) -> bool:
    mod = sys.modules.get(name)
    # One still executing its import is the import hook's (it is armed when it finishes).
    return mod is not None and not getattr(mod.__spec__, "_initializing", False)


def _present(party: str) -> bool:
    """Whether ``party`` has something to patch in the process now (``socket`` aside)."""
    if party == "http":
        return any(_loaded_here(name) for name in _HTTP_MODULES)
    if party == "mcp":
        return "mcp" in sys.modules
    return EXECUTOR_MODULE in sys.modules


def on_block(delta: int) -> None:
    """Called by ``scope.enter``/``leave`` with +1/-1 for every test-facing block."""
    global _OPEN
    with _LOCK:
        _OPEN = max(0, _OPEN + delta)
        for machinery in _ARMED.values():
            machinery.on_block(delta)
        if _OPEN == 0:
            _ARMED.clear()
            _tripwire(False)
            return
        wanted = [p for p in _MACHINERY if p not in _ARMED and _present(p)] if delta > 0 else []
        if delta > 0 and "http" not in _ARMED and "http" not in wanted and "socket" in sys.modules:
            _tripwire(True)
    for party in wanted:
        _arm(party)


def _arm(party: str) -> None:
    """Load ``party``'s machinery and hand it one count per open block. Imports happen
    outside our lock: one inside it could wait on a thread that is importing a watched
    module and waits on us."""
    from importlib import import_module

    machinery = import_module(_MACHINERY[party], __package__)
    if party == "threads":
        # Another thread may still be importing the executor: wait until it is whole.
        import_module(EXECUTOR_MODULE)
    with _LOCK:
        if party not in _ARMED and _OPEN > 0:
            for _ in range(_OPEN):
                machinery.on_block(+1)
            _ARMED[party] = machinery
        if party == "http":
            _tripwire(False)  # only now: the guard armed above watches every connection


def _tripwire(on: bool) -> None:
    """Set (``on``) or lift the tripwire. Under our lock."""
    global _WIRED
    if on == _WIRED:
        return
    from .cassettes import netguard  # the socket layer is in the process already

    if on:
        netguard.add_check(_tripped, first=True)
    else:
        netguard.remove_check(_tripped)
    _WIRED = on


def _tripped(attempt: Attempt) -> None:
    """A connection or lookup while a block is open and only ``socket`` was loaded: arm
    HTTP interception, then show this attempt to the checks armed now (the replay backstop
    among them)."""
    from .cassettes import netguard

    with _LOCK:
        wanted = _OPEN > 0
    if wanted:
        # The tripwire stays set until the guard is armed: a connection another thread
        # makes meanwhile trips it too, and waits here for the import.
        _arm("http")
        netguard.run_checks(attempt)


def _loaded(module: ModuleType) -> None:
    """A watched module finished loading: arm its party for the open blocks (``socket``:
    set the tripwire), then tell the party's listeners."""
    party = _party(module.__name__)
    if module.__name__ == "socket":
        with _LOCK:
            if _OPEN > 0 and "http" not in _ARMED:
                _tripwire(True)
    elif party is not None and _OPEN > 0 and party not in _ARMED:
        _arm(party)
    for of, _, then in list(_LISTENERS):
        if of == party:
            then(module)


class _OnImport:
    """Steps aside unless a watched module is imported while a block is open or its party's
    listener wants to hear. A plain class with ``find_spec`` is all ``sys.meta_path`` asks
    for (subclassing ``importlib.abc.MetaPathFinder`` cost the first block ~9 ms of
    importlib.resources, tempfile and shutil)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        party = _party(fullname)
        if party is None or fullname in sys.modules or not (_OPEN or any(
                wanted() for of, wanted, _ in _LISTENERS if of == party)):
            return None
        from ._importhook import spec_with_callback  # only when a watched module is imported

        return spec_with_callback(self, fullname, path, target, _loaded)


if on_block not in BLOCK_HOOKS:
    BLOCK_HOOKS.append(on_block)
if not any(isinstance(f, _OnImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _OnImport())
