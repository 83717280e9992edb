"""Message-level sharing for the SQLite store's ``request`` column.

An agent's n-th request repeats the messages before it, so rows that each keep their whole
request grow the file quadratically (10k calls of a 20 KB conversation: 1.03x the raw JSON).
:func:`pack` cuts a canonical JSON request into a *skeleton* and *blobs*: every list item that
is an object or array of at least ``MIN_ITEM`` bytes (a chat message, a tool schema), every
string of at least ``MIN_STRING`` bytes and every flat list of at least ``MIN_STRING`` bytes (an
embedding) becomes one blob, its compact sorted JSON, stored once under the hash of those
bytes; the skeleton holds the string ``"@ref:<hash>"`` in its place. The same content hash and
marker as cassettes (``cassettes/format.py``), but flat: a blob is never cut further, so a
blob is one self-contained JSON value and its check is one hash over the bytes read.

Because skeleton and blobs are both ``orjson`` compact sorted dumps, the request comes back by
splicing blob bytes over the markers (:func:`splice`), with no parse and no re-dump. ``pack``
proves that on every request before it is stored (and stores it whole when not): a request
that is not in that canonical form, or that holds ``@ref:`` text of its own, is never cut.

Pure functions: the store (``stores/sqlite.py``) does the I/O and the reference counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

import orjson
import xxhash

__all__ = ["HASH_LEN", "MIN_ITEM", "MIN_STRING", "PACK_OVER", "Packed", "blob_hash", "pack",
           "refs", "splice"]

HASH_LEN: Final = 24  # 96 bits of xxh3-128, as cassettes: out of reach of collisions
# Below this a request is stored whole. A row under ~4 KB fits in its B-tree leaf page, so a
# put writes one page; cut into blobs it dirties ~5 (the blobs' pages, their hash index, the
# counts) and took 75 us instead of 27 at 2 KB (measured interleaved). The growth sharing
# exists for, n requests resending n messages, starts once requests are long, so storing the
# first few KB of a conversation whole changes little in the file.
PACK_OVER: Final = 4096
# A chat message of ~100 bytes or more repeats in every later request of the conversation.
MIN_ITEM: Final = 96
MIN_STRING: Final = 256
_MARK: Final = b'"@ref:'
_TEXT: Final = "@ref:"
_SORT: Final = orjson.OPT_SORT_KEYS


def blob_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)[:HASH_LEN]


@dataclasses.dataclass(frozen=True, slots=True)
class Packed:
    skeleton: bytes  # the request with blobs replaced by "@ref:<hash>" strings
    blobs: dict[str, bytes]  # hash -> compact sorted JSON of that part


def pack(request: bytes) -> Packed | None:
    """``request`` as a skeleton and its blobs, or None when it is better stored whole (short,
    not JSON, not in canonical form, nothing worth sharing, or holding ``@ref:`` itself)."""
    if len(request) < PACK_OVER or b"@ref:" in request:
        return None
    try:
        tree = orjson.loads(request)
    except orjson.JSONDecodeError:
        return None
    blobs: dict[str, bytes] = {}
    try:
        skeleton = orjson.dumps(_walk(tree, blobs), option=_SORT)
        # The proof that reading it back gives these very bytes (key order, number format,
        # escapes: anything not canonical shows up here, and the request is stored whole).
        if not blobs or splice(skeleton, lambda h: blobs[h.decode()]) != request:
            return None
    except (orjson.JSONEncodeError, KeyError, ValueError):  # ValueError: bad ASCII too
        return None
    return Packed(skeleton, blobs)


def _share(data: bytes, blobs: dict[str, bytes]) -> str:
    h = blob_hash(data)
    blobs[h] = data
    return _TEXT + h


def _walk(node: Any, blobs: dict[str, bytes]) -> Any:
    t = type(node)
    if t is dict:
        return {k: _walk(v, blobs) for k, v in node.items()}
    if t is list:
        flat = True
        out: list[Any] = []
        for v in node:
            tv = type(v)
            if tv is dict or tv is list:
                flat = False
                data = orjson.dumps(v, option=_SORT)
                # A whole message or schema, never cut further: it repeats as a whole.
                out.append(_share(data, blobs) if len(data) >= MIN_ITEM else v)
            else:
                out.append(v)
        if flat:
            if len(node) >= 8:  # cheap pre-check before dumping a short list
                data = orjson.dumps(node, option=_SORT)
                if len(data) >= MIN_STRING:
                    return _share(data, blobs)
            return [_walk(v, blobs) for v in node]
        return [_walk(v, blobs) if type(v) is str else v for v in out]
    if t is str and len(node) >= MIN_STRING:
        return _share(orjson.dumps(node), blobs)
    return node


def refs(skeleton: bytes) -> set[str]:
    """The distinct blob hashes a skeleton uses."""
    return {p[:HASH_LEN].decode("ascii", "replace") for p in skeleton.split(_MARK)[1:]}


def splice(skeleton: bytes, resolve: Callable[[bytes], bytes]) -> bytes:
    """The request: each ``"@ref:<hash>"`` replaced by ``resolve(hash)`` (the hash as ASCII
    bytes), the blob's JSON. Runs once per stored request a miss report reads: kept to a
    split, two slices per reference and a join."""
    parts = skeleton.split(_MARK)
    if len(parts) == 1:
        return skeleton
    out = [parts[0]]
    append = out.append
    for p in parts[1:]:
        if p[HASH_LEN:HASH_LEN + 1] != b'"':  # '"' closes the marker
            raise ValueError("malformed blob reference in a stored request")
        append(resolve(p[:HASH_LEN]))
        append(p[HASH_LEN + 1:])
    return b"".join(out)
