"""Safe value encoding: orjson plus type tags, no pickle unless opted in (and then signed).

Blob layout (every store holds these bytes)::

    b"DJ" | version (1 byte) | kind (1 byte: J plain JSON, T tagged JSON, P pickle)
          | check (8 bytes xxh3_64 over key + kind + payload; 32 bytes HMAC-SHA256 for P)
          | payload

The check binds a blob to its key, so flipped bytes, another app's data or a value copied
under another key fail to decode (``IntegrityError``) and are treated as misses.

Values that are plain JSON (the common LLM response dict) decode with one ``orjson.loads``.
Other types round-trip through tags: tuples, bytes, sets, datetimes, UUID, Decimal, Path,
Enum, dataclasses and pydantic models, NaN and infinities (orjson would write ``null``), big
integers and dicts with non-string keys. Classes are rebuilt only when their module is already
imported by the user's code or explicitly allowed, and only if they are dataclasses, Enums or
pydantic-style models: a tag can never name an arbitrary callable.
"""

from __future__ import annotations

from _operator import _compare_digest as compare_digest  # hmac's, without OpenSSL (below)
from collections.abc import Iterable

import orjson
import xxhash

from ._lazy import served
from .errors import IntegrityError, SerializationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from ._codec_protocol import Codec
    from ._pickle_codec import PickleCodec
    from ._tags import Resolver, from_tree, to_tree

# Import time: the type tags (``_tags.py``, with its own lazy base64, decimal and pathlib)
# are imported by the first value encoded or tagged value decoded: a hit on plain JSON needs
# neither. ``compare_digest`` is the constant-time comparison hmac itself uses when it is
# built without OpenSSL; hits call it.

__all__ = [
    "CODEC_VERSION",
    "Codec",
    "JsonCodec",
    "PickleCodec",
    "blob_from_tree",
    "blob_ok",
    "blob_payload",
    "from_tree",
    "plain_body",
    "to_tree",
]

CODEC_VERSION = 1
#: The head of every blob (module docstring): its magic, then version and kind bytes.
MAGIC = b"DJ"
HEAD = 4  # magic + version + kind

# The type tags' public functions, kept in ``_tags.py`` (see the note above), the opt-in
# PickleCodec, in ``_pickle_codec.py`` (only a process that configures it loads it), and the
# ``Codec`` protocol, in ``_codec_protocol.py`` (a runtime-checkable protocol loads ``typing``;
# only ``configure(codec=...)`` checks one).
__getattr__ = served(__name__, {"from_tree": "dejacache._tags", "to_tree": "dejacache._tags",
                                 "PickleCodec": "dejacache._pickle_codec",
                                 "Codec": "dejacache._codec_protocol"})


def _check(key: str, kind: bytes, payload: bytes | memoryview) -> bytes:
    # The kind byte is covered too: a flipped J/T would serve tags as data (or vice versa).
    h = xxhash.xxh3_64(key.encode())
    h.update(kind)
    h.update(payload)
    return h.digest()


class JsonCodec:
    """The default codec: orjson with type tags and a per-key checksum. Never pickle."""

    name = "json"
    #: A ``J`` blob (see :func:`plain_body`) decodes to exactly ``orjson.loads`` of its body.
    #: ``MemoryStore`` hits then skip the header checks; a subclass that
    #: decodes its own way has not promised this.
    plain_payloads = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if (cls.decode is not JsonCodec.decode
                or cls.decode_checked is not JsonCodec.decode_checked):
            cls.plain_payloads = False

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self._allow = tuple(allow)
        self._resolve: Resolver | None = None  # with the first tagged value decoded

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes:
        from ._tags import to_tree, why_deep  # (a recording's: a hit never encodes)

        try:
            tree, plain = to_tree(value)
            payload = orjson.dumps(tree)
        except SerializationError as exc:
            raise SerializationError(str(exc), key=key) from None
        except RecursionError:
            raise SerializationError(f"cannot encode value: {why_deep(value)}",
                                     key=key) from None
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            if "ecursion" in str(exc):  # orjson's own 254-level limit
                raise SerializationError(f"cannot encode value: {why_deep(value)}",
                                         key=key) from None
            raise SerializationError(f"cannot encode value: {exc}", key=key) from None
        kind = b"J" if plain else b"T"
        return MAGIC + bytes((CODEC_VERSION,)) + kind + _check(key, kind, payload) + payload

    def decode_checked(self, data: bytes, *, key: str = "", namespace: str = "") -> Any:
        """:meth:`decode` of bytes whose checksum was already verified (:func:`blob_ok`) and
        that have not left this process's memory since (``MemoryStore``): the checksum
        guards disks and networks, and was 0.8 of a 6.5 µs 2 KB hit."""
        body = plain_body(data)
        if body is not None:
            try:
                return orjson.loads(body)
            except orjson.JSONDecodeError:
                pass
        # Tagged, another version, or not a blob at all: decode says what is wrong.
        return self.decode(data, key=key, namespace=namespace)

    def decode(self, data: bytes, *, key: str = "", namespace: str = "") -> Any:
        if data[:2] != MAGIC or len(data) < HEAD + 8:
            raise IntegrityError("stored bytes are not a dejacache value", key=key)
        kind = data[3:4]
        if kind == b"P":
            raise IntegrityError(
                "stored value is pickled; refusing it (configure PickleCodec to opt in)", key=key
            )
        if data[2] != CODEC_VERSION:
            raise IntegrityError(f"unsupported codec version {data[2]}", key=key)
        if kind != b"J" and kind != b"T":
            raise IntegrityError(f"unknown value kind {kind!r}", key=key)
        payload = memoryview(data)[HEAD + 8 :]
        if not compare_digest(_check(key, kind, payload), data[HEAD : HEAD + 8]):
            raise IntegrityError("checksum mismatch: stored bytes are damaged", key=key)
        try:
            tree = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(f"stored JSON is invalid: {exc}", key=key) from None
        if kind == b"J":
            return tree
        return self._revived(tree, key)

    def _revived(self, tree: Any, key: str) -> Any:
        """The value a tagged tree stands for (SDK models, tuples, datetimes...)."""
        resolve = self._resolve
        if resolve is None:
            resolve = self._resolve = _resolver(self._allow)
        try:
            return resolve.revive(tree)
        except SerializationError as exc:
            raise SerializationError(str(exc), key=key) from None
        except Exception as exc:  # malformed tags, unknown zones, a validator that now refuses
            raise SerializationError(
                f"cannot rebuild stored value: {type(exc).__name__}: {exc}", key=key
            ) from None


def _resolver(allow: tuple[str, ...]) -> Resolver:
    from ._tags import Resolver  # (once per codec, with its first tagged value: 21 KB of
    # bytecode a plain-JSON hit never reads)

    return Resolver(allow)


def blob_ok(data: bytes, key: str) -> bool | None:
    """Whether a :class:`JsonCodec` blob's checksum matches ``key``; None for bytes in any
    other format (a pickle, another codec's), which only their codec can judge."""
    if data[:2] != MAGIC or len(data) < HEAD + 8:
        return None
    kind = data[3:4]
    if kind != b"J" and kind != b"T":
        return None
    return compare_digest(_check(key, kind, memoryview(data)[HEAD + 8 :]),
                               data[HEAD : HEAD + 8])


def plain_body(data: bytes) -> memoryview | None:
    """The JSON body of a plain (``J``, no type tags) :class:`JsonCodec` blob of this codec
    version, for which ``orjson.loads`` is the whole decode; None for any other bytes. The
    checksum is not looked at: callers check it once (:func:`blob_ok`) and keep the bytes."""
    # The head's magic, version and kind compared at once (~40 -> ~20 opcodes a hit).
    if data[:4] != _PLAIN_HEAD or len(data) < HEAD + 8:
        return None
    return memoryview(data)[HEAD + 8 :]


_PLAIN_HEAD = MAGIC + bytes((CODEC_VERSION,)) + b"J"
_TAGGED_HEAD = MAGIC + bytes((CODEC_VERSION,)) + b"T"


def checked_plain_body(data: bytes, key: str) -> memoryview | None:
    """:func:`plain_body` of bytes read from outside this process (a SQLite file), once
    their checksum matches ``key``; None for anything else, damaged bytes included, which
    :meth:`JsonCodec.decode` then reads and reports. The decode of a hit without the
    header's branches: 0.6 of the 1 µs it spent around ``orjson.loads``."""
    if data[:4] != _PLAIN_HEAD:
        return None
    body = memoryview(data)[HEAD + 8 :]
    return body if _check(key, b"J", body) == data[HEAD : HEAD + 8] else None


def blob_payload(data: bytes) -> tuple[Any, bool]:
    """The JSON tree inside a :class:`JsonCodec` blob and whether it is plain (no tags).

    Cassettes store this tree inline so files stay human-readable; :func:`blob_from_tree`
    rebuilds the exact blob (checksum bound to the key) on load.
    """
    if data[:2] != MAGIC or data[3:4] not in (b"J", b"T"):
        raise IntegrityError("not a JSON codec blob (pickled values cannot go in a cassette)")
    return orjson.loads(memoryview(data)[HEAD + 8 :]), data[3:4] == b"J"


def blob_from_tree(tree: Any, plain: bool, *, key: str) -> bytes:
    """Inverse of :func:`blob_payload`."""
    payload = orjson.dumps(tree)
    if plain:
        return _PLAIN_HEAD + _check(key, b"J", payload) + payload
    return _TAGGED_HEAD + _check(key, b"T", payload) + payload
