"""WebSocket sessions recorded and replayed: realtime and live model APIs, any client.

Inside a block, the clients of ``websockets`` (asyncio, threads, legacy) and aiohttp's
``ClientSession.ws_connect`` (so the openai SDK's Realtime API and google-genai's Live API)
talk to the block instead of a server: the handshake is keyed like an HTTP request, each
message the client sends like a request within its session, and the server's messages that
followed it are its answer, replayed in order and, with ``realtime=True``, at their pace.
A replay opens no connection. :class:`AsyncSession` and :class:`SyncSession` are the seam
the client adapters drive, and the one a proxy's ``ws://`` routes can drive.
"""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._drive import AsyncLive, AsyncSession, SyncLive, SyncSession
    from ._message import Answer, Closed, Handshake, Message, Refused

__all__ = ["Answer", "AsyncLive", "AsyncSession", "Closed", "Handshake", "Message", "Refused",
           "SyncLive", "SyncSession"]

__getattr__, __dir__ = attach(__name__, {
    "AsyncLive": "._drive", "AsyncSession": "._drive", "SyncLive": "._drive",
    "SyncSession": "._drive", "Answer": "._message", "Closed": "._message",
    "Handshake": "._message", "Message": "._message", "Refused": "._message",
})
