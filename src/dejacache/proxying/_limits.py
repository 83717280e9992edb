"""What the proxy holds at once, across its connections: connections open, and bytes of
request bodies held (arriving, waiting their turn, or being answered). Each is a
:class:`Budget` the server owns and its connections draw on; over it, a new connection or
request is answered ``503`` with ``Retry-After`` (the server's state, not the request's
fault), never queued: a queue is memory and file descriptors too.

The per-request limits (a body's size, a head's, a request's pace) are the parser's and the
connection's; without these two, a thousand clients each within them (uploading 200 MiB, or
opening sockets and sending nothing) still held it all at once. A WebSocket message's bound,
``MAX_MESSAGE``, is the WebSocket sessions' own (``ws/_message.py`` says why 64 MiB); the
bytes one live answer's recording may hold, ``MAX_RECORDED_STREAM``, the recorder's own
(``http/recording.py`` says why 64 MiB).
"""

from __future__ import annotations

from ..http.recording import MAX_RECORDED_STREAM
from ..ws._message import MAX_MESSAGE

__all__ = ["MAX_BUFFERED", "MAX_CONNECTIONS", "MAX_MESSAGE", "MAX_RECORDED_STREAM", "Budget"]

# Connections open at once. Each live one holds two file descriptors (the client's and, in
# the pool, the upstream's), and the usual soft limit is 1,024 per process (``ulimit -n``):
# 256 leaves half of it for cassettes, stores and the command the proxy runs. A client keeps
# about one per call it has in flight (an SDK's keep-alive pool), so 256 is that many calls
# at once: more than a test suite's workers make, and far from a flood.
MAX_CONNECTIONS = 256
# Bytes of request bodies held at once: four bodies of the largest size a request may have
# (256 MiB), so a few large uploads proceed together while a flood of them is refused. The
# process holds more than this for them (the joined body, its parsed JSON while keyed), so
# the bound is on the multiplier, not the byte.
MAX_BUFFERED = 4 * 256 * 1024 * 1024


class Budget:
    """A count many holders draw on, never above ``limit``: :meth:`take` says whether ``n``
    more fit (and takes them), :meth:`give` returns them. Pure: the holders release what
    they took on every path (answered, refused, gone, failed, timed out)."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, n: int) -> bool:
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n
