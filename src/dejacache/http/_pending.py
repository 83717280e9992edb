"""A request a driver has not built as the HTTP library's object yet: what ``handle_async``
keys it by (method, URL, body; the driver hands the headers over as ``items``), and the
library's request, built the first time something needs one (sending it, an answer or a
transport error that carries it, an observer).

The proxy answers most calls from a cassette: building an ``httpx2.Request`` it never sends
was ~10% of the instructions of a replayed call (58k of 564k per call, counted under
callgrind), for headers it had parsed already.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Pending", "built"]


class Pending:
    """``method`` (upper case), ``url`` (the library's ``URL``) and ``content`` of the request
    ``build()`` makes; :func:`built` gives that request, made once."""

    __slots__ = ("_build", "_request", "content", "method", "url")

    def __init__(self, method: str, url: Any, content: bytes, build: Callable[[], Any]) -> None:
        self.method = method
        self.url = url
        self.content = content
        self._build = build
        self._request: Any = None

    async def aread(self) -> bytes:
        return self.content

    def request(self) -> Any:
        if self._request is None:
            self._request = self._build()
        return self._request


def built(request: Any) -> Any:
    """``request`` as the HTTP library's request object (itself when it is one)."""
    return request.request() if type(request) is Pending else request
