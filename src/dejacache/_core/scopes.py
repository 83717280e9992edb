"""Collision-free encoding of tenant, session, resource and entity names for store keys.

Runtime entries are keyed ``rt1/<level>/<tenant>/<session>/...``. Every component is encoded
so that it never contains the separator: bytes outside ``[A-Za-z0-9_-]`` of its UTF-8 form
become ``%XX``. The encoding is injective (``decode(encode(x)) == x``) and no unicode
normalisation is applied, so two different ids (``"a/b"`` vs ``"a%2Fb"``, ``"../x"``, NUL,
NFC vs NFD spellings, very long strings) always give different key prefixes.

The tenant goes into the key *prefix* and not only into a hash: xxh3 is fast but not
collision-resistant against an adversary who picks tenant ids, while two distinct prefixes
can never name the same key.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "KEY_VERSION",
    "decode_component",
    "encode_component",
    "global_prefix",
    "session_prefix",
    "tenant_prefix",
]

#: Bumped when the runtime key layout changes, so old entries miss instead of colliding.
KEY_VERSION = "rt1"

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SAFE_RE = re.compile(r"[A-Za-z0-9_-]*")
_HEX = re.compile(r"%[0-9A-F]{2}")


@functools.lru_cache(maxsize=4096)
def encode_component(value: str) -> str:
    """``value`` with every byte outside ``[A-Za-z0-9_-]`` written as ``%XX`` (UTF-8).

    The empty string encodes to ``%`` alone, so it differs from every other encoding and
    a key never has an empty component.
    """
    if not value:
        return "%"
    if _SAFE_RE.fullmatch(value):
        return value
    raw = value.encode("utf-8", "surrogatepass")
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)


def decode_component(text: str) -> str:
    """Inverse of :func:`encode_component`."""
    if text == "%":
        return ""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "%":
            if not _HEX.fullmatch(text, i, i + 3):
                raise ValueError(f"not an encoded component: {text!r}")
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            if ord(ch) > 127 or ord(ch) not in _SAFE:
                raise ValueError(f"not an encoded component: {text!r}")
            out.append(ord(ch))
            i += 1
    return out.decode("utf-8", "surrogatepass")


def global_prefix() -> str:
    return f"{KEY_VERSION}/g"


def tenant_prefix(tenant: str) -> str:
    return f"{KEY_VERSION}/t/{encode_component(tenant)}"


def session_prefix(tenant: str, session: str) -> str:
    return f"{KEY_VERSION}/s/{encode_component(tenant)}/{encode_component(session)}"
