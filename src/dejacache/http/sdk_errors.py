"""A replay miss the SDK lets through: no retries, no "Connection error." on top of it.

The Stainless-generated SDKs (openai, anthropic, and the others built the same way) retry an
exception their transport raises and then wrap it in ``APIConnectionError``, except their own
root error (``OpenAIError``, ``AnthropicError``), which they re-raise untouched (openai 2.x and
3.x: ``except OpenAIError: raise``; anthropic: ``isinstance(err, AnthropicError)``). A miss
raised as an instance of both ``ReplayMiss`` and that root error is therefore neither retried
(three misses and seconds of back-off for one call) nor reduced to a one-line connection error:
the test sees the miss itself.

The SDK is found by the code that sent the request, not by anything the request says: the
nearest caller whose module raises ``APIConnectionError`` is the SDK's client, and the root of
that class's own package is the error it lets through. The ``User-Agent`` once used for this
names the client class (``AsyncOpenAI/Python``, ``AzureOpenAI/Python``, a user's subclass), so
every client but two went unrecognised. Only a miss pays for the look (a few dozen frames).

openai 1.x has no such exemption: it retries every exception (``except Exception``) and wraps
it, so a miss there is still retried and reaches the caller as the ``__cause__`` of an
``APIConnectionError``; a cassette counts it once (``Cassette.note_miss``).
"""

from __future__ import annotations

import sys
from types import FrameType

from ..errors import ReplayMiss

__all__ = ["native_miss"]

# How far up the stack the SDK's sending frame may be: the clients measured have it 12 to 20
# frames above the transport (httpx's send, redirects and auth, the SDK's auth retry, our
# interception wrapper); past this bound the miss stays plain.
_DEPTH = 64

_MIXED: dict[tuple[type[ReplayMiss], type[Exception]], type[ReplayMiss]] = {}
_ROOTS: dict[type, type[Exception] | None] = {}


def _mixed(base: type[Exception], kind: type[ReplayMiss] = ReplayMiss) -> type[ReplayMiss]:
    # ``kind``: the miss's own class, so a strict cassette's ReplayDivergence stays one.
    cls = _MIXED.get((kind, base))
    if cls is None:  # a race builds two equal classes; either serves
        name = f"{kind.__name__}[{base.__module__}.{base.__qualname__}]"
        cls = _MIXED[(kind, base)] = type(name, (kind, base), {"__module__": kind.__module__})
    return cls


def _root(conn_error: type) -> type[Exception] | None:
    """The most general class of ``conn_error``'s own package it derives from
    (``APIConnectionError`` -> ``APIError`` -> ``OpenAIError``: ``OpenAIError``)."""
    if conn_error in _ROOTS:
        return _ROOTS[conn_error]
    package = conn_error.__module__.partition(".")[0]
    root: type[Exception] | None = None
    for cls in conn_error.__mro__:
        if cls.__module__.partition(".")[0] == package and issubclass(cls, Exception):
            root = cls
    # Never APIError or the connection error itself: the SDKs retry those.
    if root is conn_error or (root is not None and root.__name__ == "APIError"):
        root = None
    _ROOTS[conn_error] = root
    return root


def sdk_root_error(frame: FrameType | None) -> type[Exception] | None:
    """The root error of the SDK that sent the request being answered below ``frame``."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        conn = frame.f_globals.get("APIConnectionError")
        if isinstance(conn, type) and issubclass(conn, Exception):
            return _root(conn)
        frame = frame.f_back
    return None


def native_miss(miss: ReplayMiss) -> ReplayMiss:
    """``miss`` as an instance of the root error of the SDK that sent the request being
    answered (the caller's callers), when an SDK sent it."""
    base = sdk_root_error(sys._getframe(1))
    if base is None:
        return miss
    try:
        cls = _mixed(base, type(miss))
    except TypeError:  # an incompatible layout in some future SDK: keep the plain miss
        return miss
    out = cls(str(miss), name=miss.name, key=miss.key, source=miss.source, diff=miss.diff)
    out.__dict__.update(miss.__dict__)  # request; a divergence's step, expected...
    return out
