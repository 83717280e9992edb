"""Where a patched ``connect.__init__`` keeps the arguments its object was given: the seam
(``via_websockets.py``) writes them, the adapters (``_asyncio.py``, ``_legacy.py``) read
them to make the client connection that object would have made."""

from __future__ import annotations

__all__ = ["ARGS"]

#: The attribute holding ``(uri, keyword arguments)``.
ARGS = "_dejacache_ws_args"
