"""aiohttp's ``ClientSession.ws_connect``, recorded and replayed inside blocks.

Patched with ``ClientSession._request`` (``http/via_aiohttp.py`` installs both): the public
method every aiohttp WebSocket starts from. Inside a block it returns what aiohttp returns
(awaitable, and an async context manager) over a session of ``_drive.py``; ``_aiohttp.py``
does the work. Outside blocks, for hosts a block lets through, and for a relative URL, it is
the original. This module imports nothing of aiohttp.
"""

from __future__ import annotations

import functools
import urllib.parse
from typing import Any

from ..http._patching import install, is_ours
from ..http.routing import decide_host

__all__ = ["patch_ws"]


def patch_ws(cls: Any) -> list[tuple[Any, str, Any]]:
    orig = cls.__dict__.get("ws_connect") if isinstance(cls, type) else None
    if orig is None or is_ours(orig):
        return []
    return [install(cls, "ws_connect", orig, _ws_connect(orig))]


@functools.cache
def _ws_connect(orig: Any) -> Any:
    def ws_connect(self: Any, url: Any, **kwargs: Any) -> Any:
        try:
            host = urllib.parse.urlsplit(str(url)).hostname or ""
        except ValueError:
            host = ""
        found = decide_host(host) if host else None
        if found is None or found[0].mode == "off" or found[0].namespace is None:
            return orig(self, url, **kwargs)
        from ._aiohttp import Connecting, connect_in_block

        return Connecting(connect_in_block(self, orig, str(url), kwargs, *found))

    return ws_connect
