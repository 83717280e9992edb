"""HTTP-level record/replay for the official SDKs (httpx and httpx2, sync and async, SSE).

Two layers: an explicit transport (:func:`http_client`, :class:`Transport`) usable in
production code, and automatic interception (:class:`intercept`, also switched on by every
``scope``/``cassette`` block) that patches the public transport classes while a block is open.
Each name loads its machinery on first use: a module under ``dejacache.http`` (the providers,
for one) imports this package first, and the transports cost ~30 ms of imports.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False  # typing is not loaded at interpreter start; mypy reads this as True
if TYPE_CHECKING:
    from .intercept import intercept
    from .transport import AsyncTransport, Transport, async_http_client, http_client

__all__ = ["AsyncTransport", "Transport", "async_http_client", "http_client", "intercept"]

__getattr__, __dir__ = attach(__name__, {
    "intercept": ".intercept",
    "AsyncTransport": ".transport",
    "Transport": ".transport",
    "async_http_client": ".transport",
    "http_client": ".transport",
})
