"""MCP: an agent's MCP servers recorded and replayed at the session layer, and the runtime
cache of their read-only tools.

Recording needs nothing but a block: inside ``scope()`` or ``cassette()`` the ``mcp``
package's transports are recorded and replayed (``_patch.py``, ``_proxy.py``).
:func:`mcp_tool_cache` wraps a session so ``call_tool`` results are cached by the tools' own
annotations (``_cache.py``). ``mcp`` itself is imported only when used
(``pip install 'dejacache[mcp]'``).
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._cache import CachedSession, mcp_tool_cache

__all__ = ["CachedSession", "mcp_tool_cache"]

__getattr__, __dir__ = attach(__name__, {"CachedSession": "._cache",
                                         "mcp_tool_cache": "._cache"})
