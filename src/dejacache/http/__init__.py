"""HTTP-level record/replay for the official SDKs (httpx and httpx2, sync and async, SSE).

Two layers: an explicit transport (:func:`http_client`, :class:`Transport`) usable in
production code, and automatic interception (:class:`intercept`, also switched on by every
``scope``/``cassette`` block) that patches the public transport classes while a block is open.
"""

from __future__ import annotations

from .intercept import intercept
from .transport import AsyncTransport, Transport, async_http_client, http_client

__all__ = ["AsyncTransport", "Transport", "async_http_client", "http_client", "intercept"]
