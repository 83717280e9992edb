"""The legacy ``websockets.legacy.client.connect`` (``Connect``) inside a block: its
``WebSocketClientProtocol`` made as ``Connect`` makes it, on the in-memory transport of
``_asyncio.py``, its own handshake answered by the session; the live side, when one is
needed, is the caller's own ``Connect`` object awaited. Only patched once the caller has
imported the legacy API (importing it warns that it is deprecated)."""

from __future__ import annotations

import functools
from typing import Any

from ..config import Effective
from ..http.transport import Options
from ._asyncio import Live, answering, awaited, in_memory
from ._captured import ARGS
from ._message import Answer, Refused
from ._wire import Armed

__all__ = ["connect_in_block"]

# What ``Connect`` hands its protocol factory (the rest of its arguments are the socket's).
_PROTOCOL_ARGS = ("logger", "origin", "extensions", "subprotocols", "extra_headers",
                  "user_agent_header", "ping_interval", "ping_timeout", "close_timeout",
                  "max_size", "max_queue", "read_limit", "write_limit")


async def _live(connect: Any, orig_await: Any) -> Live:
    from websockets.legacy.exceptions import InvalidStatusCode

    try:
        proto = await awaited(connect, orig_await)
    except InvalidStatusCode as exc:
        headers = list(exc.headers.raw_items())
        raise Refused(Answer(exc.status_code, headers)) from exc
    answer = Answer(101, list(proto.response_headers.raw_items()), proto.subprotocol)
    return Live(proto, answer)


def _protocol(uri: str, kw: dict[str, Any]) -> Any:
    from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
    from websockets.legacy.client import WebSocketClientProtocol
    from websockets.uri import parse_uri

    ws_uri = parse_uri(uri)
    args = {k: kw[k] for k in _PROTOCOL_ARGS if k in kw}
    if kw.get("compression", "deflate") == "deflate":
        args["extensions"] = enable_client_permessage_deflate(kw.get("extensions"))
    args.setdefault("close_timeout", 10)
    cls = _armed(answering(kw.get("create_protocol") or WebSocketClientProtocol))
    return cls(host=ws_uri.host, port=ws_uri.port, secure=ws_uri.secure, **args)


@functools.cache
def _armed(base: type) -> type:
    """``base`` (a legacy protocol), :class:`~._wire.Armed`: a recorded refusal of the
    client's library replays with its code and reason, whatever this client's bound."""

    class Faulting(Armed, base):  # type: ignore[misc]
        def fail_connection(self, code: int = 1006, reason: str = "") -> None:
            super().fail_connection(*self.armed(code, reason))

    Faulting.__name__ = Faulting.__qualname__ = base.__name__
    Faulting.__module__ = base.__module__
    return Faulting


async def connect_in_block(connect: Any, orig_await: Any, eff: Effective,
                           opts: Options) -> Any:
    from websockets.uri import parse_uri

    uri, kw = getattr(connect, ARGS)
    proto = _protocol(uri, kw)
    ws_uri = parse_uri(uri)
    await in_memory(proto, ws_uri,
                    lambda: proto.handshake(ws_uri, origin=proto.origin,
                                            available_extensions=proto.available_extensions,
                                            available_subprotocols=proto.available_subprotocols,
                                            extra_headers=proto.extra_headers),
                    lambda: _live(connect, orig_await), eff, opts)
    connect.protocol = proto  # what ``Connect.__aexit__`` closes
    return proto
