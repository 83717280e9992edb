"""Canonical, stable call keys.

A key is ``xxh3_128(canonical JSON of the bound arguments)`` seeded by the key schema version,
the namespace and the call name, so it is stable across processes, machines and Python
versions. Canonical JSON means: sorted keys, compact, arguments bound through the function's
signature (positional and keyword spellings agree), ignored and volatile fields removed.

Equal means equal as data: tuples and lists agree, as do sets and frozensets, dict subclasses
and dicts, an Enum member and its value. Two documented corners, kept for speed (the canonical
bytes come straight from one ``orjson.dumps``; a pre-scan would double the cost of a 200 KB
request): a NaN or infinity *inside* a container is written as ``null`` like JSON does (one
passed directly as an argument is keyed as itself), and dict keys starting with NUL are reserved
for type tags.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import functools
import hashlib
import inspect
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson
import xxhash

from .errors import UnhashableArgument

__all__ = [
    "DEFAULT_SECRETS",
    "DEFAULT_VOLATILE",
    "KEY_SCHEMA_VERSION",
    "KeyBuilder",
    "KeyParts",
    "call_key",
    "canonical_json",
    "explain",
]

#: Bumped whenever the canonical form changes, so old entries miss instead of colliding.
KEY_SCHEMA_VERSION = 1

# Fields that differ on every run and would make every key unique (one peer puts a fresh
# OpenTelemetry trace id into each key, so nothing ever hits across runs).
DEFAULT_VOLATILE: frozenset[str] = frozenset(
    {
        "traceparent",
        "tracestate",
        "baggage",
        "trace_id",
        "span_id",
        "parent_span_id",
        # Request ids as headers only: a bare ``request_id`` argument is often real data (a
        # support request, an order), and stripping it would serve one answer to all of them.
        "x-request-id",
        "x-correlation-id",
        "x-amzn-trace-id",
        "x-b3-traceid",
        "x-b3-spanid",
        "x-b3-parentspanid",
        "x-stainless-retry-count",
        "x-stainless-timeout",
        "idempotency-key",
        "otel_trace_id",
        "otel_span_id",
        "correlation_id",
    }
)

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
_TAG = "\x00"  # tagged forms are single-key dicts whose key starts with NUL: never user data


def _spellings(name: str) -> set[str]:
    """Common spellings of a field name: ``-``/``_`` swapped, header Title-Case, UPPER,
    camelCase, and a trailing ``ID`` (``X-Request-ID``)."""
    low = name.lower()
    out: set[str] = {name}
    for base in {low, low.replace("_", "-"), low.replace("-", "_")}:
        sep = "-" if "-" in base else "_"
        parts = base.split(sep)
        title = [p[:1].upper() + p[1:] for p in parts]
        out.update({base, base.upper(), sep.join(title)})
        if parts[-1] == "id":
            out.add(sep.join([*title[:-1], "ID"]))
        if sep == "_" and len(parts) > 1:
            camel = parts[0] + "".join(title[1:])
            out.update({camel, camel[:1].upper() + camel[1:]})
            if parts[-1] == "id":
                out.add(camel[:-2] + "ID")
    return out


@functools.lru_cache(maxsize=64)
def _volatile_set(names: frozenset[str]) -> frozenset[str]:
    out: set[str] = set()
    for n in names:
        out |= _spellings(n)
    return frozenset(out)


class _Unhashable(Exception):
    def __init__(self, value_type: type, path: str = "") -> None:
        self.value_type = value_type
        self.path = path


def _model_data(obj: Any) -> Any:
    try:
        return obj.model_dump(mode="json")
    except TypeError:  # model_dump() without a mode parameter (pydantic v1 shims, SDK objects)
        return obj.model_dump()


def _tagged(value: Any, vol: frozenset[str] | None) -> Any:
    """orjson ``default=``: canonical data for types orjson does not handle itself."""
    t = type(value)
    if t is bytes or t is bytearray or t is memoryview:
        return {_TAG + "bytes": base64.b64encode(bytes(value)).decode()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _strip(data, vol) if vol else data
    hook = getattr(t, "__dejacache_key__", None)
    if hook is not None:
        return hook(value)
    if hasattr(value, "model_dump") and not isinstance(value, type):
        data = _model_data(value)
        return _strip(data, vol) if vol else data
    if isinstance(value, Decimal):
        return {_TAG + "decimal": str(value.normalize()) if value.is_finite() else str(value)}
    if isinstance(value, pathlib.PurePath):
        return {_TAG + "path": value.as_posix()}
    if isinstance(value, (set, frozenset)):
        return {_TAG + "set": [orjson.Fragment(i) for i in sorted(_item(v, vol) for v in value)]}
    if isinstance(value, enum.Enum):
        return value.value
    if t is _dt.timedelta:
        return {_TAG + "timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, tuple):  # namedtuples: their values, like any tuple
        return list(value)
    if isinstance(value, float):  # float subclasses (orjson only takes exact floats)
        return float(value)
    raise _Unhashable(t)


def _item(value: Any, vol: frozenset[str] | None) -> bytes:
    """Canonical bytes of one set member (members are sorted by these bytes)."""
    try:
        return orjson.dumps(value, default=lambda x: _tagged(x, vol), option=_OPTS)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_normalize(value, vol, "{set}"), option=orjson.OPT_SORT_KEYS)


def _has_volatile(obj: Any, vol: frozenset[str]) -> bool:
    """Whether any dict under ``obj`` has a volatile key.

    The hot part of keying a large request: ~0.15 µs a container on the 2-core VM, so ~110 µs
    for the 200 KB chat request (more than its orjson.dumps). Strings are skipped by one type
    check and a dict's direct children are inlined (15% faster than one call per container;
    an explicit stack, gc.get_referents and byte searches of the dump were all slower).
    """
    if type(obj) is dict:
        if not vol.isdisjoint(obj):
            return True
        children: Any = obj.values()
    else:
        children = obj
    for v in children:
        tv = type(v)
        if tv is str:
            continue
        if tv is dict:
            if not vol.isdisjoint(v):
                return True
            for w in v.values():
                tw = type(w)
                if (tw is dict or tw is list or tw is tuple) and _has_volatile(w, vol):
                    return True
        elif (tv is list or tv is tuple) and _has_volatile(v, vol):
            return True
    return False


# Credentials passed as arguments must never reach a stored request, a diff or a log. They
# are masked, not dropped: dropping would let ``login(user, password)`` answer for any password.
DEFAULT_SECRETS: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "password",
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-amz-security-token",
    }
)


_SECRET_SPELLINGS = _volatile_set(DEFAULT_SECRETS)
# Header-only spellings, added verbatim: run through _spellings they would also produce the
# bare ``request_id`` that DEFAULT_VOLATILE deliberately leaves in keys.
_HEADER_ONLY = frozenset({"request-id", "Request-Id", "Request-ID", "REQUEST-ID"})


def _mask(value: Any) -> str:
    """A stand-in that still tells values apart (so keys stay per credential) but cannot be
    read back: a truncated BLAKE2b of the value."""
    data = value.encode() if type(value) is str else repr(value).encode()
    return "<secret:" + hashlib.blake2b(data, digest_size=8).hexdigest() + ">"


def _strip(obj: Any, vol: frozenset[str] | None) -> Any:
    """A copy of ``obj`` without volatile keys and with secret values masked (never mutates
    the caller's data)."""
    if not vol:
        return obj
    t = type(obj)
    if t is dict:
        return {
            k: (_mask(v) if k in _SECRET_SPELLINGS else _strip(v, vol))
            for k, v in obj.items()
            if k not in vol or k in _SECRET_SPELLINGS
        }
    if t is list or t is tuple:
        return [_strip(v, vol) for v in obj]
    return obj


def _strip_path(obj: Any, path: tuple[str, ...]) -> Any:
    """A copy of ``obj`` without the field at a dotted path (lists are traversed)."""
    if not path:
        return obj
    if isinstance(obj, Mapping):
        head, rest = path[0], path[1:]
        if not rest:
            return {k: v for k, v in obj.items() if k != head}
        return {k: (_strip_path(v, rest) if k == head else v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strip_path(v, path) for v in obj]
    return obj


def _normalize(obj: Any, vol: frozenset[str] | None, path: str) -> Any:
    """Slow, fully general canonicaliser, used when orjson's fast path refuses the data.

    Produces exactly what the fast path would for every value both accept (a test holds
    the two to that), plus big integers and non-string dict keys.
    """
    t = type(obj)
    if obj is None or t is str or t is bool:
        return obj
    if t is int:
        if not (-(2**63) <= obj < 2**64):  # orjson's integer range
            return {_TAG + "int": str(obj)}
        return obj
    if t is float:
        return obj if obj - obj == 0.0 else None  # NaN/inf: null, as orjson writes them
    if isinstance(obj, Mapping):
        items = [(k, v) for k, v in obj.items() if not (vol and k in vol)]
        if all(type(k) is str for k, _ in items):
            return {k: _normalize(v, vol, f"{path}.{k}") for k, v in items}
        pairs = [
            [_normalize(k, vol, f"{path}[key]"), _normalize(v, vol, f"{path}[{k!r}]")]
            for k, v in items
        ]
        pairs.sort(key=lambda p: orjson.dumps(p[0], option=orjson.OPT_SORT_KEYS))
        return {_TAG + "dict": pairs}
    if t is list or t is tuple:
        return [_normalize(v, vol, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, (enum.Enum, _dt.date, _dt.time, UUID)) or (
        isinstance(obj, (str, int)) and not isinstance(obj, bool)
    ):
        # Types orjson writes natively: take its exact spelling.
        return _normalize(orjson.loads(orjson.dumps(obj)), vol, path)
    if isinstance(obj, list):
        return [_normalize(v, vol, f"{path}[{i}]") for i, v in enumerate(obj)]
    try:
        data = _tagged(obj, vol)
    except _Unhashable as exc:
        raise _Unhashable(exc.value_type, path) from None
    if data is obj:
        raise _Unhashable(t, path)
    if isinstance(data, dict) and len(data) == 1 and next(iter(data)) == _TAG + "set":
        return data
    return _normalize(data, vol, path)


def _nonfinite(v: Any) -> bool:
    return type(v) is float and v - v != 0.0


def canonical_json(
    arguments: Mapping[str, Any],
    *,
    volatile: frozenset[str] | None = None,
    volatile_paths: Iterable[tuple[str, ...]] = (),
    function: str = "",
) -> bytes:
    """Canonical JSON bytes of an argument mapping (sorted, compact, volatile fields removed)."""
    data: Any = arguments
    for p in volatile_paths:
        data = _strip_path(data, p)
    if volatile:
        try:
            if _has_volatile(data, volatile):
                data = _strip(data, volatile)
        except RecursionError:
            pass  # a self-containing argument: the slow path below names it
    for v in data.values():  # inline loop: ~0.15 µs for five arguments
        if type(v) is float and v - v != 0.0:
            # orjson writes NaN/inf as null: an argument ``limit=inf`` must not share None's key
            data = {k: {_TAG + "float": repr(x)} if _nonfinite(x) else x for k, x in data.items()}
            break
    try:
        return orjson.dumps(data, default=lambda v: _tagged(v, volatile), option=_OPTS)
    except (TypeError, orjson.JSONEncodeError):
        pass
    norm = {}
    for k, v in data.items():
        try:
            norm[k] = _normalize(v, volatile, k)
        except _Unhashable as exc:
            raise UnhashableArgument(exc.path or k, exc.value_type, function) from None
        except RecursionError:  # a container that contains itself has no canonical form
            raise UnhashableArgument(k, type(v), function) from None
    return orjson.dumps(norm, option=orjson.OPT_SORT_KEYS)


@functools.lru_cache(maxsize=4096)
def _seed(namespace: str, name: str) -> int:
    return xxhash.xxh3_64_intdigest(
        f"dejacache/{KEY_SCHEMA_VERSION}\x00{namespace}\x00{name}".encode()
    )


def key_substitutions(mapping: Mapping[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    """``{placeholder: live_value}`` as (live, placeholder) byte pairs for
    :func:`substitute`, JSON-escaped the way canonical JSON spells them, longest first."""
    pairs = [(orjson.dumps(live)[1:-1], orjson.dumps(ph)[1:-1])
             for ph, live in mapping.items() if live]
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def substitute(canonical: bytes, pairs: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """Replace live values by their placeholders in a canonical request, so a cassette
    recorded under one account (``substitute={"<ACCOUNT>": os.environ["ACCOUNT_ID"]}``)
    keys the same under another."""
    for live, placeholder in pairs:
        canonical = canonical.replace(live, placeholder)
    return canonical


def digest(namespace: str, name: str, canonical: bytes) -> str:
    """The key of a canonical request: 32 hex characters."""
    return xxhash.xxh3_128_hexdigest(canonical, seed=_seed(namespace, name))


@dataclasses.dataclass(frozen=True, slots=True)
class KeyParts:
    """What went into a key, for debugging misses (``dejacache.explain``)."""

    key: str
    version: int
    namespace: str
    name: str
    arguments: dict[str, Any]
    canonical: str


_EMPTY = inspect.Parameter.empty
_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD
_FAST_KINDS = (_PK, inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)


def _default_equal(value: Any, default: Any) -> bool:
    if value is default:
        return True
    if type(value) is not type(default):
        return False
    try:
        return bool(value == default)
    except Exception:  # objects with exotic __eq__ (arrays): keep them in the key
        return False


class KeyBuilder:
    """Binds a function's call arguments by name and builds canonical keys.

    Precomputes the signature once; a call with plain positional-or-keyword parameters
    binds with a zip instead of ``inspect.Signature.bind`` (measured: 2 µs per call).
    """

    __slots__ = (
        "_defaults",
        "_fast",
        "_ignore",
        "_names",
        "_pre_args",
        "_pre_kwargs",
        "_sig",
        "name",
        "paths",
        "volatile",
    )

    def __init__(
        self,
        fn: Callable[..., Any] | None,
        name: str,
        *,
        ignore: Iterable[str] = (),
        volatile: Iterable[str] | None = (),
        use_default_volatile: bool = True,
    ) -> None:
        self.name = name
        self._pre_args: tuple[Any, ...] = ()
        self._pre_kwargs: dict[str, Any] = {}
        target = fn
        if isinstance(fn, functools.partial):
            # A partial's frozen arguments are part of the call: key on them too.
            self._pre_args, self._pre_kwargs = fn.args, dict(fn.keywords)
            target = fn.func
        names_in_paths = [v for v in (volatile or ()) if "." in v]
        flat = {v for v in (volatile or ()) if "." not in v}
        base = DEFAULT_VOLATILE if use_default_volatile else frozenset()
        # Secrets are always in the walk's set: _strip masks them instead of dropping them.
        self.volatile = _volatile_set(frozenset(base | flat | DEFAULT_SECRETS)) | (
            _HEADER_ONLY if use_default_volatile else frozenset()
        )
        self.paths = [tuple(p.split(".")) for p in names_in_paths]
        self._ignore = frozenset(ignore) | {"self", "cls"}
        self._sig: inspect.Signature | None = None
        self._names: tuple[str, ...] = ()
        self._defaults: dict[str, Any] = {}
        self._fast = False
        if target is not None:
            try:
                self._sig = inspect.signature(target)
            except (TypeError, ValueError):
                self._sig = None
        if self._sig is not None:
            params = list(self._sig.parameters.values())
            # Positional-or-keyword names, in order: positional arguments zip onto these.
            self._names = tuple(p.name for p in params if p.kind is _PK)
            self._defaults = {p.name: p.default for p in params if p.default is not _EMPTY}
            # The zip fast path also covers keyword-only parameters and **kwargs (chat(**req)
            # is the common LLM wrapper shape): Signature.bind costs ~2 µs a call.
            self._fast = all(p.kind in _FAST_KINDS for p in params)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments by parameter name, ignored ones and defaults-equal ones dropped."""
        if self._pre_args or self._pre_kwargs:
            args = self._pre_args + tuple(args)
            kwargs = {**self._pre_kwargs, **kwargs}
        sig = self._sig
        if sig is None:
            bound: dict[str, Any] = {f"arg{i}": a for i, a in enumerate(args)}
            bound.update(kwargs)
        elif self._fast and len(args) <= len(self._names) and (
            not args or not kwargs or kwargs.keys().isdisjoint(self._names[: len(args)])
        ):
            bound = dict(zip(self._names, args, strict=False))
            if kwargs:
                bound.update(kwargs)
        else:
            try:
                b = sig.bind(*args, **kwargs)
            except TypeError:
                # Let the function raise its own error; key on what we were given.
                bound = {f"arg{i}": a for i, a in enumerate(args)}
                bound.update(kwargs)
            else:
                bound = {}
                for pname, value in b.arguments.items():
                    kind = sig.parameters[pname].kind
                    if kind is inspect.Parameter.VAR_KEYWORD:
                        bound.update(value)
                    elif kind is inspect.Parameter.VAR_POSITIONAL:
                        # starred so ``f(1, 2)`` and ``f(args=[2])`` via **kwargs differ
                        bound["*" + pname] = list(value)
                    else:
                        bound[pname] = value
        ignore = self._ignore
        defaults = self._defaults
        if not defaults and ignore.isdisjoint(bound):
            return bound  # nothing to drop: skip rebuilding the dict on the hot path
        return {
            k: v
            for k, v in bound.items()
            if k not in ignore and not (k in defaults and _default_equal(v, defaults[k]))
        }

    def canonical(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bytes:
        return self.canonical_bound(self.bind(args, kwargs))

    def canonical_bound(self, bound: Mapping[str, Any]) -> bytes:
        """The canonical form of already-bound arguments, volatile fields stripped."""
        return canonical_json(
            bound, volatile=self.volatile, volatile_paths=self.paths, function=self.name
        )

    def canonical_fast(self, bound: Mapping[str, Any]) -> bytes:
        """The canonical form WITHOUT the deep walk for volatile names.

        Sound as a first lookup key: stored canonicals never contain volatile fields, so this
        form can only equal a stored one when the call has none either, in which case it *is*
        the full form. The walk (≈60 ns per node: 110 µs on a 200 KB request) is then only
        paid on a miss, to compute the key to store under and look up once more.
        """
        return canonical_json(bound, volatile=None, volatile_paths=self.paths,
                              function=self.name)

    def key(self, namespace: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        return digest(namespace, self.name, self.canonical(args, kwargs))


def call_key(
    namespace: str,
    name: str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    fn: Callable[..., Any] | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str] = (),
) -> str:
    """The stable key of one call: a 32-character hex digest.

    With ``fn`` the arguments are bound through its signature, so ``f(1, b=2)`` and
    ``f(a=1, b=2)`` agree; without it positional arguments are named ``arg0``, ``arg1``...
    """
    return KeyBuilder(fn, name, ignore=ignore, volatile=volatile).key(namespace, args, kwargs or {})


def explain(
    namespace: str,
    name: str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    fn: Callable[..., Any] | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str] = (),
) -> KeyParts:
    """The parts that make a key, for debugging: version, namespace, name, canonical args."""
    kb = KeyBuilder(fn, name, ignore=ignore, volatile=volatile)
    canon = kb.canonical(args, kwargs or {})
    return KeyParts(
        key=digest(namespace, name, canon),
        version=KEY_SCHEMA_VERSION,
        namespace=namespace,
        name=name,
        arguments=orjson.loads(canon),
        canonical=canon.decode(),
    )


def env_volatile() -> tuple[str, ...]:
    """Extra volatile field names from ``DEJACACHE_VOLATILE`` (comma separated)."""
    raw = os.environ.get("DEJACACHE_VOLATILE", "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())
