"""What a :class:`~dejacache.stores.redis.RedisStore` keeps in Redis, as bytes: pure, no I/O.

An entry is one packed blob, ``b"DJR\\x01" | u32 meta length | meta JSON | value``, so a hit
is a single ``GET`` (measured in ``benchmarks/bench_redis.py``); the canonical request is
stored apart so hits do not fetch it. Bytes that are not one of ours read as None here; the
store then deletes them.

Two memos keep a warm hit cheap, each bounded by emptying it when full:

* parsed metadata by its bytes (:func:`header`): a key hit again carries the same bytes, and
  a lookup replaces ``orjson.loads`` plus the checks (~1.5 µs of a hit);
* the ``Hit`` made from an entry's bytes, by key (:class:`KnownHits`): bytes read before are
  recognised with one comparison and answer the same ``Hit`` (the store's own work on a hit
  6.1 -> 1.4 µs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..codec import checked_plain_body
from ._base import NOT_SHARED, Hit, Record

__all__ = ["KnownHits", "counter_values", "header", "pack_record", "record_with_ttl",
           "unpack_record"]

_MAGIC = b"DJR\x01"

_Meta = tuple[str, str, str, float, "dict[str, Any] | None", float]
# Metadata already parsed and checked, by its bytes; every record still gets its own
# ``usage`` dict.
_METAS: dict[bytes, _Meta | None] = {}
# Both memos are keyed by one stored record, and a write makes every key it invalidates
# unreachable (new counter values, new keys), so under writes they fill with dead keys to
# their bound before starting over: what they hold at the bound is a worker's resident memory
# for good (pymalloc keeps the arenas). At 4096 entries each, an agent server's busier worker
# grew 99.7 -> 107.2 MiB over 16 minutes of a soak, ~1.2 KB per key (4.8 MB of objects freed
# at once when they started over), then held. The hot keys a hit needs are far fewer: 1024.
_METAS_MAX = 1024
# Bytes hits checked, per key (see KnownHits): bounded by count and by the bytes they keep
# (the decoded bodies come on top, two to three times the bytes).
_KNOWN_MAX = 1024
_KNOWN_BYTES = 4 * 1024 * 1024


def pack_record(record: Record) -> bytes:
    """The bytes stored for ``record`` (its request is stored apart)."""
    meta = orjson.dumps([record.name, record.namespace, record.kind, record.duration,
                         dict(record.usage) if record.usage else None, record.created])
    return _MAGIC + len(meta).to_bytes(4, "big") + meta + record.value


def _parse_meta(meta_bytes: bytes) -> _Meta | None:
    try:
        meta = orjson.loads(meta_bytes)
    except orjson.JSONDecodeError:
        return None
    if type(meta) is not list or len(meta) != 6:
        return None
    name, namespace, kind, duration, usage, created = meta
    if not (type(name) is str and type(namespace) is str and type(kind) is str
            and type(duration) in (int, float) and type(created) in (int, float)
            and (usage is None or type(usage) is dict)):
        return None
    return name, namespace, kind, float(duration), usage, float(created)


def header(raw: bytes) -> tuple[_Meta, int] | None:
    """The parsed metadata of a packed record and where its value starts; None when the
    bytes are not one of ours."""
    if raw[:4] != _MAGIC or len(raw) < 8:
        return None
    end = 8 + int.from_bytes(raw[4:8], "big")
    if end > len(raw):
        return None
    meta_bytes = raw[8:end]  # a bytes slice parses 2x faster than a memoryview
    try:
        meta = _METAS[meta_bytes]
    except KeyError:
        meta = _parse_meta(meta_bytes)
        if len(_METAS) >= _METAS_MAX:
            _METAS.clear()
        _METAS[meta_bytes] = meta
    return None if meta is None else (meta, end)


def unpack_record(raw: bytes, request: bytes = b"") -> Record | None:
    """The record in ``raw``, or None when the bytes are not one of ours (never raises)."""
    found = header(raw)
    if found is None:
        return None
    (name, namespace, kind, duration, usage, created), end = found
    return Record(raw[end:], name, namespace, kind, request, duration,
                  None if usage is None else dict(usage), created)


def record_with_ttl(out: Any) -> tuple[Record | None, float | None, bool]:
    """(record, remaining TTL in seconds or None, malformed) from a GET + PTTL reply."""
    if out is None or out[0] is None:
        return None, None, False
    rec = unpack_record(out[0])
    if rec is None:
        return None, None, True
    pttl = int(out[1])
    return rec, (pttl / 1000.0 if pttl >= 0 else None), False


def counter_values(values: Sequence[Any]) -> list[int] | None:
    """Counter values from an ``MGET`` reply (0 for a counter never incremented); None when
    one is not a number (someone stored something else under a counter key)."""
    try:
        return [int(v) if v is not None else 0 for v in values]
    except (TypeError, ValueError):
        return None


class KnownHits:
    """The ``Hit`` last made from each key's bytes, for :meth:`RedisStore.hit_of`.

    ``entries`` maps a key to ``(bytes, Hit)``; the store's hit path reads it directly (one
    dict lookup and one comparison) and calls :meth:`decode` for bytes it has not seen.
    Only equal bytes ever match (another process may replace the entry), and the store
    :meth:`forget` s a key once it wrote or removed it.
    """

    __slots__ = ("entries", "size")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, Hit]] = {}
        self.size = 0

    def decode(self, key: str, raw: bytes) -> Hit | None:
        """The ``Hit`` in ``raw`` (remembered when its body is plain JSON checked against
        ``key``; a tagged value or a recorded error comes as its record, for the codec);
        None when the bytes are not one of ours."""
        found = header(raw)
        if found is None:
            return None
        (name, namespace, kind, duration, usage, created), end = found
        if kind != "error":
            body = checked_plain_body(raw[end:], key)
            if body is not None:
                # usage is shared by hits (read only), as Hit documents.
                hit: Hit = (body, duration, usage, None, NOT_SHARED)
                self._remember(key, raw, hit)
                return hit
        return (None, duration, usage, Record(
            raw[end:], name, namespace, kind, b"", duration,
            None if usage is None else dict(usage), created), NOT_SHARED)

    def _remember(self, key: str, raw: bytes, hit: Hit) -> None:
        if len(self.entries) >= _KNOWN_MAX or self.size >= _KNOWN_BYTES:
            self.entries.clear()  # bounded: forgetting costs the next hit a checksum
            self.size = 0
        self.entries[key] = (raw, hit)
        self.size += len(raw)

    def share(self, key: str, item: Hit, value: Any) -> None:
        """Keep ``value`` with the bytes ``item`` was made from, when ``item`` is still the
        ``Hit`` remembered for ``key`` and holds no shared value yet."""
        known = self.entries.get(key)
        if known is not None and known[1] is item and item[4] is NOT_SHARED:
            self.entries[key] = (known[0], (*item[:4], value))

    def forget(self, key: str | None = None) -> None:
        """Drop what is remembered of ``key`` (of every key when None)."""
        if key is None:
            self.entries.clear()
            self.size = 0
        else:
            self.entries.pop(key, None)
