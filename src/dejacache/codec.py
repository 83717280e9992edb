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

import dataclasses
import datetime as _dt
import enum
import importlib
import os
import sys
import uuid
from _operator import _compare_digest as compare_digest  # hmac's, without OpenSSL (below)
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import orjson
import xxhash

from ._frozen import FrozenDict, FrozenList, thaw
from .errors import ConfigurationError, IntegrityError, SerializationError

# Import time: base64, decimal, pathlib (with urllib.parse and ipaddress)
# and hashlib/hmac (OpenSSL's _hashlib) cost ~10 ms together and serve only tagged values and
# PickleCodec, so they are imported where those are handled. A value of a type they define
# exists only once its module is loaded, so the encoder need not import them to recognise
# one. datetime, uuid, dataclasses and enum stay: orjson imports them anyway.
# ``compare_digest`` is the constant-time comparison hmac itself uses when it is built
# without OpenSSL; hits call it.

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
_MAGIC = b"DJ"
_HEAD = 4  # magic + version + kind
_T = "\x00"  # tag keys start with NUL, which user dict keys are escaped away from
_DECIMAL_BITS = 2000


@runtime_checkable
class Codec(Protocol):
    """Turns values into bytes bound to a key, and back."""

    name: str

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes: ...

    def decode(self, data: bytes, *, key: str = "", namespace: str = "") -> Any: ...


def _qualname(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class _Tree:
    """Converts values to JSON trees, noting whether any tag was needed."""

    __slots__ = ("plain",)

    def __init__(self) -> None:
        self.plain = True

    def conv(self, v: Any) -> Any:
        t = type(v)
        if v is None or t is str or t is bool:
            return v
        if t is float:
            if v - v == 0.0:
                return v
            self.plain = False  # NaN/inf: orjson would silently write null
            return {_T + "float": repr(v)}
        if t is int:
            if -(2**63) <= v < 2**64:
                return v
            self.plain = False
            # Hex above 2000 bits: decimal text of 2**100000 raises ValueError (CPython's
            # digit limit, which users may lower to 640 digits); hex has no limit.
            return {_T + "int": str(v) if v.bit_length() <= _DECIMAL_BITS else hex(v)}
        if t is FrozenDict or t is FrozenList:  # a frozen result stores as what it reads as
            v = thaw(v)
            t = type(v)
        if t is dict:
            if all(type(k) is str and not k.startswith(_T) for k in v):
                return {k: self.conv(x) for k, x in v.items()}
            self.plain = False
            return {_T + "map": [[self.conv(k), self.conv(x)] for k, x in v.items()]}
        if t is list:
            return [self.conv(x) for x in v]
        self.plain = False
        if t is tuple:
            return {_T + "tuple": [self.conv(x) for x in v]}
        if t is bytes or t is bytearray:
            import base64

            return {_T + t.__name__: base64.b64encode(v).decode()}
        if t is set or t is frozenset:
            return {_T + t.__name__: [self.conv(x) for x in v]}
        if isinstance(v, enum.Enum):
            return {_T + "enum": [_qualname(t), self.conv(v.value)]}
        if t is _dt.datetime:
            tz = v.tzinfo
            # zoneinfo is not imported here (import time): no ZoneInfo exists before it is.
            zi = sys.modules.get("zoneinfo")
            if zi is not None and isinstance(tz, zi.ZoneInfo) and tz.key:
                # A named zone, not just today's offset: arithmetic across DST must still work.
                return {_T + "zdatetime": [v.replace(tzinfo=None).isoformat(), tz.key, v.fold]}
            return {_T + "datetime": v.isoformat()}
        if t is _dt.date:
            return {_T + "date": v.isoformat()}
        if t is _dt.time:
            return {_T + "time": v.isoformat()}
        if t is _dt.timedelta:
            return {_T + "timedelta": [v.days, v.seconds, v.microseconds]}
        if t is uuid.UUID:
            return {_T + "uuid": str(v)}
        if t.__module__ == "decimal":  # Decimal's, from _decimal and _pydecimal too
            import decimal

            if t is decimal.Decimal:
                return {_T + "decimal": str(v)}
        pl = sys.modules.get("pathlib")
        if pl is not None and isinstance(v, pl.PurePath):
            return {_T + "path": [type(v).__name__, str(v)]}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = {f.name: self.conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
            return {_T + "dataclass": [_qualname(t), fields]}
        if hasattr(t, "model_validate") and hasattr(v, "model_dump"):
            try:
                data = v.model_dump(mode="json", round_trip=True)
            except TypeError:
                data = v.model_dump()
            return {_T + "model": [_qualname(t), data]}
        if isinstance(v, dict):  # dict subclasses (OrderedDict, ...) come back as dicts
            return self.conv(dict(v))
        if isinstance(v, list):
            return self.conv(list(v))
        raise SerializationError(
            f"cannot encode a value of type {t.__module__}.{t.__qualname__}: dejacache stores "
            "JSON data, tuples, bytes, sets, datetimes, UUID, Decimal, Path, Enum, dataclasses "
            "and pydantic models (use PickleCodec(secret=...) to opt in to pickle)"
        )


def _why_deep(value: Any) -> str:
    """Why a value overflowed the stack: it contains itself, or it is simply too deep.
    Iterative, so it works on the very values that broke the recursive encoder."""
    on_path: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(value, 1, False)]
    deepest = seen = 0
    while stack and seen < 1_000_000:
        node, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            continue
        if not isinstance(node, (dict, list, tuple, set, frozenset)):
            continue
        if id(node) in on_path:
            return "it contains itself (a cycle)"
        seen += 1
        deepest = max(deepest, depth)
        on_path.add(id(node))
        stack.append((node, depth, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1, False) for c in children)
    return f"it is nested {deepest} levels deep (the limit is 254)"


def to_tree(value: Any) -> tuple[Any, bool]:
    """``(json_tree, plain)``: ``plain`` is True when no type tag was needed."""
    tr = _Tree()
    tree = tr.conv(value)
    return tree, tr.plain


class _Resolver:
    """Finds classes named by tags, without importing anything the user did not allow."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.allow = set(allow)

    def __call__(self, name: str, kind: str) -> Any:
        module, _, qual = name.partition(":")
        mod = sys.modules.get(module)
        if mod is None:
            allowed = module in self.allow or name in self.allow or any(
                module.startswith(a + ".") for a in self.allow
            )
            if not allowed:
                raise SerializationError(
                    f"refusing to rebuild {name}: module {module!r} is not imported; import it "
                    "first or allow it with configure(codec_allow=[...])"
                )
            mod = importlib.import_module(module)
        obj: Any = mod
        for part in qual.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise SerializationError(f"cannot rebuild {name}: no such class")
        ok = isinstance(obj, type) and (
            (kind == "dataclass" and dataclasses.is_dataclass(obj))
            or (kind == "enum" and issubclass(obj, enum.Enum))
            or (kind == "model" and hasattr(obj, "model_validate"))
        )
        if not ok:
            raise SerializationError(f"refusing to rebuild {name}: not a {kind} class")
        return obj


def _path_class(name: str) -> Any:
    """The class a ``path`` tag names (concrete paths come back as this system's ``Path``)."""
    import pathlib

    if name in ("PurePosixPath", "PureWindowsPath", "PurePath"):
        return getattr(pathlib, name)
    return pathlib.Path


def _revive(tree: Any, resolve: _Resolver) -> Any:
    t = type(tree)
    if t is list:
        return [_revive(x, resolve) for x in tree]
    if t is not dict:
        return tree
    if len(tree) == 1:
        (tag, arg), = tree.items()
        if tag[:1] == _T:
            tag = tag[1:]
            if tag == "tuple":
                return tuple(_revive(x, resolve) for x in arg)
            if tag == "bytes":
                import base64

                return base64.b64decode(arg)
            if tag == "bytearray":
                import base64

                return bytearray(base64.b64decode(arg))
            if tag == "set":
                return {_revive(x, resolve) for x in arg}
            if tag == "frozenset":
                return frozenset(_revive(x, resolve) for x in arg)
            if tag == "map":
                return {_revive(k, resolve): _revive(v, resolve) for k, v in arg}
            if tag == "int":
                return int(arg, 16) if arg[:2] == "0x" or arg[:3] == "-0x" else int(arg)
            if tag == "float":
                return float(arg)
            if tag == "datetime":
                return _dt.datetime.fromisoformat(arg)
            if tag == "zdatetime":
                import zoneinfo

                return _dt.datetime.fromisoformat(arg[0]).replace(
                    tzinfo=zoneinfo.ZoneInfo(arg[1]), fold=arg[2]
                )
            if tag == "date":
                return _dt.date.fromisoformat(arg)
            if tag == "time":
                return _dt.time.fromisoformat(arg)
            if tag == "timedelta":
                return _dt.timedelta(days=arg[0], seconds=arg[1], microseconds=arg[2])
            if tag == "uuid":
                return uuid.UUID(arg)
            if tag == "decimal":
                import decimal

                return decimal.Decimal(arg)
            if tag == "path":
                return _path_class(arg[0])(arg[1])
            if tag == "enum":
                return resolve(arg[0], "enum")(_revive(arg[1], resolve))
            if tag == "dataclass":
                cls = resolve(arg[0], "dataclass")
                values = {k: _revive(v, resolve) for k, v in arg[1].items()}
                init = {f.name for f in dataclasses.fields(cls) if f.init}
                obj = cls(**{k: v for k, v in values.items() if k in init})
                for k, v in values.items():
                    if k not in init:
                        object.__setattr__(obj, k, v)
                return obj
            if tag == "model":
                return resolve(arg[0], "model").model_validate(arg[1])
            raise SerializationError(f"unknown type tag {tag!r}")
    return {k: _revive(v, resolve) for k, v in tree.items()}


def from_tree(tree: Any, *, allow: Iterable[str] = ()) -> Any:
    """Inverse of :func:`to_tree`."""
    return _revive(tree, _Resolver(allow))


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
        self._resolve = _Resolver(allow)

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes:
        try:
            tree, plain = to_tree(value)
            payload = orjson.dumps(tree)
        except SerializationError as exc:
            raise SerializationError(str(exc), key=key) from None
        except RecursionError:
            raise SerializationError(f"cannot encode value: {_why_deep(value)}",
                                     key=key) from None
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            if "ecursion" in str(exc):  # orjson's own 254-level limit
                raise SerializationError(f"cannot encode value: {_why_deep(value)}",
                                         key=key) from None
            raise SerializationError(f"cannot encode value: {exc}", key=key) from None
        kind = b"J" if plain else b"T"
        return _MAGIC + bytes((CODEC_VERSION,)) + kind + _check(key, kind, payload) + payload

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
        if data[:2] != _MAGIC or len(data) < _HEAD + 8:
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
        payload = memoryview(data)[_HEAD + 8 :]
        if not compare_digest(_check(key, kind, payload), data[_HEAD : _HEAD + 8]):
            raise IntegrityError("checksum mismatch: stored bytes are damaged", key=key)
        try:
            tree = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise IntegrityError(f"stored JSON is invalid: {exc}", key=key) from None
        if kind == b"J":
            return tree
        try:
            return _revive(tree, self._resolve)
        except SerializationError as exc:
            raise SerializationError(str(exc), key=key) from None
        except Exception as exc:  # malformed tags, unknown zones, a validator that now refuses
            raise SerializationError(
                f"cannot rebuild stored value: {type(exc).__name__}: {exc}", key=key
            ) from None


def blob_ok(data: bytes, key: str) -> bool | None:
    """Whether a :class:`JsonCodec` blob's checksum matches ``key``; None for bytes in any
    other format (a pickle, another codec's), which only their codec can judge."""
    if data[:2] != _MAGIC or len(data) < _HEAD + 8:
        return None
    kind = data[3:4]
    if kind != b"J" and kind != b"T":
        return None
    return compare_digest(_check(key, kind, memoryview(data)[_HEAD + 8 :]),
                               data[_HEAD : _HEAD + 8])


def plain_body(data: bytes) -> memoryview | None:
    """The JSON body of a plain (``J``, no type tags) :class:`JsonCodec` blob of this codec
    version, for which ``orjson.loads`` is the whole decode; None for any other bytes. The
    checksum is not looked at: callers check it once (:func:`blob_ok`) and keep the bytes."""
    # The head's magic, version and kind compared at once (~40 -> ~20 opcodes a hit).
    if data[:4] != _PLAIN_HEAD or len(data) < _HEAD + 8:
        return None
    return memoryview(data)[_HEAD + 8 :]


_PLAIN_HEAD = _MAGIC + bytes((CODEC_VERSION,)) + b"J"
_TAGGED_HEAD = _MAGIC + bytes((CODEC_VERSION,)) + b"T"


def checked_plain_body(data: bytes, key: str) -> memoryview | None:
    """:func:`plain_body` of bytes read from outside this process (a SQLite file), once
    their checksum matches ``key``; None for anything else, damaged bytes included, which
    :meth:`JsonCodec.decode` then reads and reports. The decode of a hit without the
    header's branches: 0.6 of the 1 µs it spent around ``orjson.loads``."""
    if data[:4] != _PLAIN_HEAD:
        return None
    body = memoryview(data)[_HEAD + 8 :]
    return body if _check(key, b"J", body) == data[_HEAD : _HEAD + 8] else None


def blob_payload(data: bytes) -> tuple[Any, bool]:
    """The JSON tree inside a :class:`JsonCodec` blob and whether it is plain (no tags).

    Cassettes store this tree inline so files stay human-readable; :func:`blob_from_tree`
    rebuilds the exact blob (checksum bound to the key) on load.
    """
    if data[:2] != _MAGIC or data[3:4] not in (b"J", b"T"):
        raise IntegrityError("not a JSON codec blob (pickled values cannot go in a cassette)")
    return orjson.loads(memoryview(data)[_HEAD + 8 :]), data[3:4] == b"J"


def blob_from_tree(tree: Any, plain: bool, *, key: str) -> bytes:
    """Inverse of :func:`blob_payload`."""
    payload = orjson.dumps(tree)
    if plain:
        return _PLAIN_HEAD + _check(key, b"J", payload) + payload
    return _TAGGED_HEAD + _check(key, b"T", payload) + payload


class PickleCodec:
    """Opt-in pickle for values JSON cannot hold, HMAC-SHA256-signed over key, namespace
    and schema version; unsigned or mis-signed blobs are refused before unpickling.

    ``secret`` (bytes or str) may also come from ``DEJACACHE_PICKLE_SECRET``.
    """

    name = "pickle"

    def __init__(self, secret: bytes | str | None = None) -> None:
        secret = secret if secret is not None else os.environ.get("DEJACACHE_PICKLE_SECRET")
        if not secret:
            raise ConfigurationError(
                "PickleCodec needs a secret (argument or DEJACACHE_PICKLE_SECRET): unsigned "
                "pickle in a shared cache is remote code execution"
            )
        self._secret = secret.encode() if isinstance(secret, str) else bytes(secret)

    def _sign(self, key: str, namespace: str, payload: bytes | memoryview) -> bytes:
        import hashlib
        import hmac

        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        mac.update(f"dejacache-pickle/{CODEC_VERSION}\x00{namespace}\x00{key}\x00".encode())
        mac.update(payload)
        return mac.digest()

    def encode(self, value: Any, *, key: str = "", namespace: str = "") -> bytes:
        try:
            import pickle  # opt-in only: not paid by ``import dejacache``

            payload = pickle.dumps(value, protocol=5)
        except Exception as exc:
            raise SerializationError(f"cannot pickle value: {exc}", key=key) from None
        head = _MAGIC + bytes((CODEC_VERSION,)) + b"P"
        return head + self._sign(key, namespace, payload) + payload

    def decode(self, data: bytes, *, key: str = "", namespace: str = "") -> Any:
        if data[:2] != _MAGIC or data[3:4] != b"P" or len(data) < _HEAD + 32:
            raise IntegrityError("stored value is not a signed pickle; refused", key=key)
        if data[2] != CODEC_VERSION:
            raise IntegrityError(f"unsupported codec version {data[2]}", key=key)
        payload = memoryview(data)[_HEAD + 32 :]
        if not compare_digest(self._sign(key, namespace, payload), data[_HEAD : _HEAD + 32]):
            raise IntegrityError("pickle signature mismatch; refused", key=key)
        import pickle

        return pickle.loads(payload)
