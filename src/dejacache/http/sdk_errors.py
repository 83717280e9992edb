"""A replay miss the SDK lets through: no retries, no "Connection error." on top of it.

The Stainless-generated SDKs (openai, anthropic) retry any exception their transport raises
and then wrap it in ``APIConnectionError``, except their own base error, which they re-raise
untouched (openai 2.x and 3.x: ``except OpenAIError: raise``). A miss raised as an instance of
both ``ReplayMiss`` and that base error is therefore neither retried (three misses and seconds
of back-off for one call) nor reduced to a one-line connection error: the test sees the miss
itself. The SDK is recognised by the ``User-Agent`` it sends, and only when its module is
already imported (nothing is imported here). Older generations that retry every exception
still count the miss once (``Cassette.note_miss``).
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import ReplayMiss

__all__ = ["native_miss"]

# User-Agent prefix -> (module, base error class name)
_SDKS = (("OpenAI/Python", "openai", "OpenAIError"),
         ("Anthropic/Python", "anthropic", "AnthropicError"))


_MIXED: dict[tuple[type[ReplayMiss], type[Exception]], type[ReplayMiss]] = {}


def _mixed(base: type[Exception], kind: type[ReplayMiss] = ReplayMiss) -> type[ReplayMiss]:
    # ``kind``: the miss's own class, so a strict cassette's ReplayDivergence stays one.
    cls = _MIXED.get((kind, base))
    if cls is None:  # a race builds two equal classes; either serves
        name = f"{kind.__name__}[{base.__module__}.{base.__qualname__}]"
        cls = _MIXED[(kind, base)] = type(name, (kind, base), {"__module__": kind.__module__})
    return cls


def native_miss(miss: ReplayMiss, request: Any) -> ReplayMiss:
    """``miss`` as an instance of the calling SDK's base error too, when one is recognised."""
    agent = request.headers.get("user-agent", "")
    for prefix, module_name, cls_name in _SDKS:
        if agent.startswith(prefix):
            module = sys.modules.get(module_name)
            base = getattr(module, cls_name, None)
            if not (isinstance(base, type) and issubclass(base, Exception)):
                return miss
            try:
                cls = _mixed(base, type(miss))
            except TypeError:  # an incompatible layout in some future SDK: keep the plain miss
                return miss
            out = cls(str(miss), name=miss.name, key=miss.key, source=miss.source,
                      diff=miss.diff)
            out.__dict__.update(miss.__dict__)  # request; a divergence's step, expected...
            return out
    return miss
