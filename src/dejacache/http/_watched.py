"""The modules HTTP interception patches, and one import hook that tells who needs to know
when one of them is loaded.

Two parties watch these imports: interception itself (``intercept.py``: it patches a module
loaded while it holds an acquisition) and the block counter (``_arming.py``: it loads and arms
interception when a block is open and the first such module arrives). One hook serves both,
so a module is wrapped once and both hear of it, in the order they registered.

Imports nothing beyond what ``import dejacache`` already has.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from .._importhook import spec_with_callback

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EXTRA_TRANSPORTS", "LIBRARIES", "SEAM_MODULES", "WATCHED", "on_load"]

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
WATCHED = frozenset(
    {*LIBRARIES, "socket"}
    | {s.partition(":")[0] for s in EXTRA_TRANSPORTS}
    | {m for mods in SEAM_MODULES.values() for m in mods}
)

# (whether it wants to hear now, what to call with the module just loaded)
_LISTENERS: list[tuple[Callable[[], bool], Callable[[ModuleType], None]]] = []


def on_load(wanted: Callable[[], bool], then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` after a watched module is loaded while ``wanted()`` is true."""
    if all(t is not then for _, t in _LISTENERS):
        _LISTENERS.append((wanted, then))


def _loaded(module: ModuleType) -> None:
    for _, then in list(_LISTENERS):
        then(module)


class _OnImport:
    """Steps aside unless a watched module is imported while a listener wants to hear. A
    plain class with ``find_spec`` is all ``sys.meta_path`` asks for (subclassing
    ``importlib.abc.MetaPathFinder`` cost the first block ~9 ms of importlib.resources,
    tempfile and shutil)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in WATCHED or fullname in sys.modules or not any(
                wanted() for wanted, _ in _LISTENERS):
            return None
        return spec_with_callback(self, fullname, path, target, _loaded)


if not any(isinstance(f, _OnImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _OnImport())
