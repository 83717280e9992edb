"""Canonical, stable call keys.

A key is ``xxh3_128(canonical JSON of the bound arguments)`` seeded by the key schema version,
the namespace and the call name, so it is stable across processes, machines and Python
versions. Canonical JSON means: sorted keys, compact, arguments bound through the function's
signature (positional and keyword spellings agree), ignored and volatile fields removed,
credentials masked (see ``_secrets``).

Equal means equal as data: tuples and lists agree, as do sets and frozensets, dict subclasses
and dicts. What Python tells apart by type is keyed under its class (dataclasses, models,
named tuples; Enum members, except inside plain dicts and lists: see ``_Canon``), a Decimal
as written, a closure with its captured values. Different data never shares a key: NaN, the two
infinities and ``None`` differ everywhere, as do ``-0.0`` and ``0.0`` (the codec round-trips
both, and ``copysign``/``atan2`` tell them apart), ``1``, ``1.0`` and ``True``. No two calls
share a spelling: type tags are dict keys starting with NUL, so a caller's key starting with
NUL gets one more; ``*args``, positional-only names and refused calls are spelled apart by
:meth:`KeyBuilder.bind`.

One canonicaliser, two speeds: plain JSON data (the common LLM request) is written by one
``orjson.dumps`` after a walk has shown there is nothing to rewrite; anything else goes through
:func:`_Canon.norm`, which rewrites every case and is held to the same bytes by a Hypothesis
property (the two paths once disagreed, and a slow-path call dropped ``password``
from its key instead of masking it). Requests holding lists of messages or schemas are
written by parts (``_keys_segments``): a conversation that resends its history walks only
its new messages, and ``None`` is told from NaN (which orjson also writes as ``null``) by
probing the places that held ``None`` when the same bytes were first seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from uuid import UUID

import orjson
import xxhash

from . import _keys_segments as _seg
from . import _secrets
from ._core import volatile as _vol
from ._core.volatile import Masked
from ._lazy import pattern, served
from .errors import ConfigurationError, UnhashableArgument

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Final

    from ._key_parts import KeyParts
    from ._receiver import Receiver

__all__ = [
    "DEFAULT_SECRETS",
    "DEFAULT_VOLATILE",
    "KEY_SCHEMA_VERSION",
    "MAX_DEPTH",
    "KeyBuilder",
    "KeyParts",  # defined in _key_parts, served by __getattr__
    "call_key",
    "canonical_json",
    "explain",
    "kept_out",
    "telemetry_names",
]

# ``KeyParts`` is imported on first use: only ``explain`` makes one (see _key_parts).
__getattr__ = served(__name__, {"KeyParts": "dejacache._key_parts"})


#: Bumped whenever the canonical form changes, so old entries miss instead of colliding.
#: 2: NaN/inf inside containers no longer spelled ``null`` (an old ``[null]`` entry may hold
#: the answer for ``[nan]``); credentials masked with a keyed digest; more credential names.
KEY_SCHEMA_VERSION = 2

#: Deepest nesting an argument may have (orjson's own limit): deeper data is refused with
#: ``UnhashableArgument`` rather than a raw ``RecursionError``.
MAX_DEPTH = 254

# Fields that differ on every run and would make every key unique (one peer puts a fresh
# OpenTelemetry trace id into each key, so nothing ever hits across runs). Trace and span ids
# by name (``trace_id``) are not here: they are volatile only where telemetry lives
# (``_vol.TELEMETRY``, :func:`telemetry_names`), since ``fetch_trace(trace_id)`` asks about one.
DEFAULT_VOLATILE: frozenset[str] = frozenset(
    {
        "traceparent",
        "tracestate",
        "baggage",
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
    }
)

#: Credential names (normalised spellings); the one list lives in ``_secrets``. Credentials are
#: masked, not dropped: dropping would let ``login(user, password)`` answer for any password.
DEFAULT_SECRETS: frozenset[str] = _secrets.SECRET_NAMES

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
_TAG = "\x00"  # tagged forms are single-key dicts whose key starts with NUL: never user data
# Header-only spellings, added verbatim: run through _spellings they would also produce the
# bare ``request_id`` that DEFAULT_VOLATILE deliberately leaves in keys.
_HEADER_ONLY = frozenset({"request-id", "Request-Id", "Request-ID", "REQUEST-ID"})
# Types whose canonical spelling is fixed text (orjson's, or a tag from _tagged): they hold no
# names, floats or strings a rewrite would touch, so plain data may contain them.
_LEAF = frozenset({bytes, bytearray, memoryview, UUID, _dt.datetime, _dt.date, _dt.time,
                   _dt.timedelta})
# Those whose spelling is a tag (``{"\u0000bytes": ...}``). The same bytes also come from a
# dict the caller wrote with that key, which the full form escapes: data holding one is
# keyed by its full form (``_clean`` says ``_TAGGED``) and its bytes are never remembered as
# plain, by ``_NULLS`` or a list run.
_TAG_LEAF = frozenset({bytes, bytearray, memoryview, _dt.timedelta})
_SIMPLE = (_LEAF - _TAG_LEAF) | {int, bool}
# Tag leaves too, added by _late_leaf: decimal and pathlib (with urllib.parse and ipaddress)
# cost ~6 ms that ``from dejacache import cache`` paid. Neither type can be
# met before its module is loaded, so the sets grow (rebound, never mutated) the first time
# one is: a miss in _clean asks _late_leaf, the general path refreshes once per call, and a
# by-parts write that met one first falls back to the whole write, which gives the same bytes.
_LATE_DONE: set[str] = set()
_LATE_PENDING = True  # some module of _captures.LATE not added yet


def _late_leaf(t: type) -> bool:
    """Whether ``t``, not in ``_SIMPLE``, is a leaf of a module loaded after this one."""
    names = (_cap or _captures_module()).LATE.get(t.__module__)  # (_decimal's Decimal too)
    if names is None:
        return False
    _add_late(t.__module__)
    return t in _LEAF


def _add_late(module: str) -> None:
    global _LEAF, _TAG_LEAF, _LATE_PENDING
    if module in _LATE_DONE:
        return
    mod = __import__(module)  # cheap: a value of its type exists, so it is (nearly) loaded
    late = (_cap or _captures_module()).LATE
    new = {getattr(mod, n) for n in late[module]}
    _LEAF = _LEAF | new
    _TAG_LEAF = _TAG_LEAF | new
    _LATE_DONE.add(module)
    _LATE_PENDING = len(_LATE_DONE) < len(late)


def _refresh_late() -> None:
    """Adds the late leaves of every such module loaded by now (a Decimal may also come from
    ``_decimal`` or ``_pydecimal`` imported alone)."""
    for module, also in (("decimal", ("_decimal", "_pydecimal")), ("pathlib", ())):
        if module in sys.modules or any(a in sys.modules for a in also):
            _add_late(module)
# Integers above this many bits are keyed in hex: decimal text of a 100,000-bit integer
# raises ValueError (CPython's 4300-digit limit, which users may lower to 640 digits).
_DECIMAL_BITS = 2000


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
def volatile_spellings(names: frozenset[str]) -> frozenset[str]:
    """Every spelling of each volatile name (``request_id`` also drops ``requestId`` and
    ``RequestID``), memoised per set of names (a process uses a handful of sets)."""
    out: set[str] = set()
    for n in names:
        out |= _spellings(n)
    return frozenset(out)


@functools.lru_cache(maxsize=64)
def kept_out(names: frozenset[str], keep: frozenset[str]) -> frozenset[str]:
    """``names`` (volatile: left out of keys) less those ``keep`` (the names of ``!name``
    items) keys after all, matched in any spelling (``!traceId`` keeps ``trace_id``,
    ``!User-Agent`` keeps ``user-agent``). The one meaning of ``!name``, for every face
    (``@cache``, HTTP and WebSocket requests, MCP): it used to be read three ways, so
    ``!request_id``-style items were honoured by HTTP keys and ignored by ``@cache``."""
    if not keep:
        return names
    # Either test alone misses some: ``XB3Parentspanid`` is a spelling a key drops for
    # ``x-b3-parentspanid`` but splits into other words; ``user-AGENT`` is no such spelling.
    kept = frozenset().union(*map(_secrets.name_forms, keep))
    return frozenset(n for n in names if keep.isdisjoint(_spellings(n))
                     and kept.isdisjoint(_secrets.name_forms(n)))


@functools.lru_cache(maxsize=64)
def telemetry_names(everywhere: frozenset[str], keep: frozenset[str] = frozenset()
                    ) -> frozenset[str]:
    """The telemetry ids (``_vol.TELEMETRY``) in every spelling that a key drops only where
    telemetry lives: less those ``everywhere`` (the volatile names in their spellings) drops
    wherever they are, and those ``keep`` (``!name`` items, :func:`kept_out`) keys after
    all."""
    ids = frozenset(n for n in kept_out(_vol.TELEMETRY, keep) if n not in everywhere)
    return volatile_spellings(ids) - everywhere


# ------------------------------------------------------------------------------ names

# _SCOPED: a telemetry id, dropped only where the mapping holding it is telemetry. _AUTH: an
# ``auth``-like name, whose value's password is masked when it is basic credentials.
_KEEP, _DROP, _MASK, _SCOPED, _AUTH = 0, 1, 2, 3, 4
_PLAIN_MAX = 50_000  # names remembered as ordinary; beyond this they are classified each time


class _Names:
    """Which dict keys a rewrite acts on: volatile names (dropped), telemetry ids
    (``scoped``: dropped where telemetry lives, ``_Canon`` tells) and credential names
    (masked; a credential that is also volatile is still masked, never dropped).

    Ordinary names are remembered, so the walk costs one C-level ``issuperset`` per dict once
    a request's vocabulary has been seen, whatever suffix rules ``_secrets`` applies.
    """

    __slots__ = ("auth_firsts", "firsts", "lists", "plain", "scoped", "vol")

    def __init__(self, vol: frozenset[str], scoped: frozenset[str] = frozenset()) -> None:
        self.vol = vol | scoped  # never plain: a walk decides where they go
        self.scoped = scoped
        self.plain: set[str] = set()
        # First strings of lists of two found not to name a credential (``stop: ["\n",
        # "User:"]``): asked once, as names are (asked each time, the walk of a 2.6 KB chat
        # request with three such lists cost ~20% more; remembered, ~5%: 0.2 of 3.9 us).
        self.firsts: set[str] = set()
        # ... and those that are ``auth``-like names, whose value decides each time: only it
        # is asked again (asking the whole pair, a 2 KB request holding ``["auth",
        # "bearer"]`` keyed in 10.7 us instead of 9.7; asking the value, 10.0).
        self.auth_firsts: set[str] = set()
        self.lists = _seg.ListMemo()  # conversations already found plain, by their bytes

    def clean(self, d: Mapping[Any, Any]) -> bool:
        """True when no key of ``d`` is volatile, a credential or escaped (a NUL first: the
        full form escapes it, see ``_TAG``), none holds basic credentials
        (``_secrets.is_basic_auth`` under an ``auth``-like name), and all are exact str."""
        plain = self.plain
        if plain.issuperset(d):
            return True
        for k in d:
            if k in plain:
                continue
            if (type(k) is not str or k in self.vol or _secrets.is_secret_name(k)
                    or k[:1] == _TAG):
                return False
            if _secrets.is_auth_name(k):
                # Never remembered as plain: only its value says. ``"auth": "bearer"`` stays
                # on the fast path (a tool definition's setting keys as it did).
                if _secrets.is_basic_auth(d[k]):
                    return False
                continue
            if len(plain) < _PLAIN_MAX:
                plain.add(k)
        return True

    def always_plain(self, keys: Iterable[str]) -> bool:
        """Whether each of ``keys`` (a signature's parameters) is plain whatever it holds:
        :meth:`clean` of them but none ``auth``-like (its value decides, per call)."""
        ks = list(keys)
        return self.clean(dict.fromkeys(ks)) and not any(map(_secrets.is_auth_name, ks))

    def pair(self, seq: list[Any] | tuple[Any, ...]) -> bool:
        """Whether ``seq``, two items the first a str, may be a ``[name, value]`` pair
        holding a credential (``_secrets.pair_kind``: its value is masked as a field of that
        name is). Asked without the field holding it: a True sends the call to ``_Canon``,
        which knows the field and decides."""
        first = seq[0]
        if first in self.auth_firsts:
            return _secrets.value_kind(_secrets.BASIC, seq[1]) != _secrets.DATA
        if _secrets.pair_kind(seq, _secrets.is_secret_name, None):
            return True
        # (a long text is not kept: asking it again is one len)
        if len(self.firsts) < _PLAIN_MAX and len(first) <= _secrets.PAIR_NAME_MAX:
            kept = self.auth_firsts if _secrets.is_auth_name(first) else self.firsts
            kept.add(first)
        return False

    def action(self, k: str) -> int:
        if k in self.plain:
            return _KEEP
        if _secrets.is_secret_name(k):
            return _MASK
        if k in self.vol:
            return _SCOPED if k in self.scoped else _DROP
        if _secrets.is_auth_name(k):
            return _AUTH
        return _KEEP


@functools.lru_cache(maxsize=256)
def _names_for(vol: frozenset[str], scoped: frozenset[str] = frozenset()) -> _Names:
    return _Names(vol, scoped)


_PLAIN, _WITH_NONE, _TAGGED = 1, 3, 5  # _clean's verdict bits (0: needs a rewrite)


def _clean(obj: Any, names: _Names) -> int:
    """Whether ``obj`` (a dict, list or tuple) is plain JSON data that needs no rewrite: no
    volatile, credential or escaped names, no NaN or infinity, no types other than exact JSON
    types and :data:`_LEAF` ones. 0 when it needs one, else ``_PLAIN`` with the ``_WITH_NONE``
    bit when it holds a ``None`` (see :func:`_canonical` for why that matters) and the
    ``_TAGGED`` bit when it holds a :data:`_TAG_LEAF`.

    The hot part of keying a large request (~0.15 µs a container on the 2-core VM). Strings
    are skipped by one type check and a dict's direct children are inlined (15% faster than
    one call per container). ``RecursionError`` (deep or cyclic data) reaches the caller,
    which takes the general path and names the problem.
    """
    plain = names.plain
    seen = _PLAIN
    if type(obj) is dict:
        if not plain.issuperset(obj) and not names.clean(obj):
            return 0
        obj = obj.values()
    elif (len(obj) == 2 and (type(obj) is list or type(obj) is tuple or type(obj) is Masked)
          and type(first := obj[0]) is str and first not in names.firsts and names.pair(obj)):
        return 0  # ``["api_key", "..."]``: its value is masked (``_Canon``)
    for v in obj:
        tv = type(v)
        if tv is str:
            continue
        if v is None:
            seen = _WITH_NONE
        elif tv is dict:
            if not plain.issuperset(v) and not names.clean(v):
                return 0
            for w in v.values():
                tw = type(w)
                if tw is str:
                    continue
                if w is None:
                    seen = _WITH_NONE
                elif tw is dict or tw is list or tw is tuple:
                    r = _clean(w, names)
                    if not r:
                        return 0
                    seen |= r
                elif tw is float:
                    if w - w != 0.0:  # NaN and ±inf: orjson would write null, like None
                        return 0
                elif tw not in _SIMPLE:
                    if tw not in _TAG_LEAF and not _late_leaf(tw):
                        return 0
                    seen |= _TAGGED
        elif tv is list or tv is tuple or tv is Masked:  # (a receiver's, patterns applied)
            r = _clean(v, names)
            if not r:
                return 0
            seen |= r
        elif tv is float:
            if v - v != 0.0:
                return 0
        elif tv not in _SIMPLE:
            if tv not in _TAG_LEAF and not _late_leaf(tv):
                return 0
            seen |= _TAGGED
    return seen


# ------------------------------------------------------------------------------ rewriting


class _Unhashable(Exception):
    def __init__(self, value_type: type, path: str = "", reason: str = "") -> None:
        self.value_type = value_type
        self.path = path
        self.reason = reason


# ``_receiver`` (a method's receiver, a model's data) and ``_captures`` (a closure's or a
# run-time class's captured values, late leaf types) when first needed: ~0.5 ms of a fresh
# process's import that a plain function called with JSON data never uses. Read as
# ``(_rcv or _receiver_module())``; ``_Members`` is the receiver's set type once loaded
# (:func:`_members`: no value of it exists before).
_rcv: ModuleType | None = None
_cap: ModuleType | None = None
_Members: Any = None


def _receiver_module() -> ModuleType:
    global _rcv, _Members
    if _rcv is None:
        from . import _receiver

        _Members = _receiver.Members
        _rcv = _receiver
    return _rcv


def _members() -> Any:
    """``_receiver.Members``, or None while nothing has loaded ``_receiver`` (whoever did:
    then a value of it may exist). Asked once per general write, not per container."""
    if _Members is None and "dejacache._receiver" in sys.modules:
        _receiver_module()
    return _Members


def _captures_module() -> ModuleType:
    global _cap
    if _cap is None:
        from . import _captures

        _cap = _captures
    return _cap


def _cells(target: Any, ignore: frozenset[str]) -> tuple[tuple[str, Any], ...]:
    """``_captures.cells``: what a closure's key holds (nothing without a closure)."""
    if not getattr(target, "__closure__", None):
        return ()
    return (_cap or _captures_module()).cells(target, ignore)  # type: ignore[no-any-return]


def _tagged(value: Any) -> Any:
    """orjson ``default=``: canonical data for types orjson does not handle itself.

    Container-like results (dataclass fields, model data) are returned as they are; the fast
    form writes them raw, and :class:`_Canon` rewrites them.
    """
    t = type(value)
    if t is bytes or t is bytearray or t is memoryview:
        import base64  # ~1 ms at import: for bytes arguments only

        return {_secrets.BYTES_TAG: base64.b64encode(bytes(value)).decode()}
    hook = getattr(t, "__dejacache_key__", None)
    if hook is not None:  # (first: a dataclass or model that says how to key it is obeyed)
        data = _hooked(value, hook)
        if isinstance(data, enum.Enum):  # orjson would write it as its bare value
            return _tagged(data)
        return data
    data = _object_data(value, t)
    if data is not None:
        return {_TAG + "obj": [_class_name(t), data]}
    if _secrets.wraps_secret(t):  # who is asking: keyed by its value, never written plain
        return _secrets.mask(value.get_secret_value())
    if _LATE_PENDING:
        _refresh_late()
    dec = sys.modules.get("decimal")  # loaded (by _refresh_late) if a Decimal can exist
    if dec is not None and isinstance(value, dec.Decimal):
        # As written, not normalised: Decimal("2.50") == Decimal("2.5"), but str() and
        # arithmetic keep the exponent ("2.50" in a prompt, 2.50 * 2 == 5.00), as copysign
        # tells -0.0 from 0.0. A new tag name: schema 2 wrote "\x00decimal" normalised, and
        # its "1E+2" entry (for Decimal("100")) must not answer Decimal("1E+2").
        return {_TAG + "dec": str(value)}
    pl = sys.modules.get("pathlib")
    if pl is not None and isinstance(value, pl.PurePath):
        return {_TAG + "path": value.as_posix()}
    if isinstance(value, (set, frozenset)) or (  # (or a receiver's set of plain objects)
            (members := _members()) is not None and isinstance(value, members)):
        return {_TAG + "set": [orjson.Fragment(i) for i in sorted(_item(v) for v in value)]}
    if isinstance(value, enum.Enum):  # (orjson writes members itself: _Canon tags them)
        return {_TAG + "enum": [_class_name(t), value.value]}
    if t is _dt.timedelta:
        return {_TAG + "timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, tuple):  # tuple subclasses that are not named tuples: a tuple
        return list(value)
    if isinstance(value, float):  # float subclasses (orjson only takes exact floats)
        return float(value)
    raise _Unhashable(t)


_dump = functools.partial(orjson.dumps, default=_tagged, option=_OPTS)


def _class_name(t: type) -> str:
    return (_cap or _captures_module()).class_tag(t)  # type: ignore[no-any-return]


def _object_data(value: Any, t: type) -> Any:
    """The data of a dataclass instance, a model (pydantic, or any ``model_dump``) or a named
    tuple, or None. Keyed under its class (``{"\x00obj": [class, data]}``): ``Read(path)``
    and ``Delete(path)`` are different calls, and Python's ``==`` tells them apart."""
    if isinstance(value, type):
        return None
    if dataclasses.is_dataclass(value):
        data: Any = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif hasattr(value, "model_dump"):
        data = (_rcv or _receiver_module()).model_data(value)
    elif isinstance(value, tuple) and hasattr(t, "_fields"):
        return list(value)  # (what it holds is its values: basic credentials are one)
    else:
        return None
    # A class made at run time: what tells it apart from others of its name, by the
    # closure rule (what is not immutable is left out, as a closure's key leaves it). The
    # memo read first: the call cost a dataclass argument 1.9k instructions a hit, 1.2k so.
    cap = _cap or _captures_module()
    held = cap.HELD.get(t)
    if held is None:
        held = cap.class_cells(t)
    return cap.with_values(data, held)[0] if held else data


def _hooked(value: Any, hook: Any) -> Any:
    """What a class's ``__dejacache_key__`` makes of an instance: the method's answer, or
    the attributes it names (a tuple of names, or one name)."""
    if callable(hook):
        return hook(value)
    names = (hook,) if type(hook) is str else hook
    t = type(value)
    if not (isinstance(names, (tuple, list)) and all(type(n) is str for n in names)):
        raise _Unhashable(t, "", f"has a __dejacache_key__ ({type(hook).__name__}) that is "
                                 "neither a method returning plain data nor a tuple of "
                                 "attribute names")
    data = {}
    for n in names:
        try:
            data[n] = getattr(value, n)
        except AttributeError:
            raise _Unhashable(t, "", f"has no attribute {n!r}, which "
                                     f"{t.__name__}.__dejacache_key__ names") from None
    return data


def _keyable(value: Any) -> bool:
    """Whether the canonicaliser can key ``value`` (a receiver's attribute; asked when the
    key could not be written, and by ``explain``): one unsorted ``orjson.dumps``, or, for
    what only the general path writes (big integers, non-str keys), its walk."""
    try:
        orjson.dumps(value, default=_tagged, option=orjson.OPT_PASSTHROUGH_DATACLASS)
        return True
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        _Canon(None).norm(value, "", 1)
    except Exception:  # _Unhashable, or a model_dump or a hook that raised: not data
        return False
    return True


def _item(value: Any) -> bytes:
    """Raw canonical bytes of one set member in the fast form (members sort by these)."""
    try:
        return orjson.dumps(value, default=_tagged, option=_OPTS)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_Canon(None).norm(value, "{set}", 1), option=orjson.OPT_SORT_KEYS)


def _bigint(v: int) -> dict[str, str]:
    return {_TAG + "int": str(v) if v.bit_length() <= _DECIMAL_BITS else hex(v)}


def _valid_text(s: str, path: str) -> str:
    if not s.isascii():
        try:
            s.encode()
        except UnicodeEncodeError:
            raise _Unhashable(str, path, "holds text that is not valid Unicode (a lone "
                              "surrogate, e.g. from a bad decode)") from None
    return s


_CHUNK = 64  # subtrees this deep are written out as fragments: orjson's 254-level limit
# then applies per fragment, and tags (one more level each) never push valid data over it


def _parent(path: str) -> str | None:
    """The field name a value at ``path`` (``_Canon``'s spelling) is held under, or None for
    a list item or the arguments themselves."""
    if not path or path.endswith("]"):
        return None
    return path.rpartition(".")[2]


class _Canon:
    """The general canonicaliser: every rewrite, any type, any nesting up to ``MAX_DEPTH``.

    ``names`` None writes data raw (the fast form's fallback for data orjson refuses);
    otherwise volatile fields are dropped and credentials masked. Substitutions map a live
    credential to its placeholder before masking, so ``substitute=`` keys it portably.

    ``loose``: how many plain dicts, lists and tuples below the arguments enclose the value
    being written. An Enum member there keys as its value: the hit path writes such data
    with one ``orjson.dumps``, which writes a member as its value and cannot be told
    otherwise without a walk (~0.15 µs a container on every hit). An argument that is a
    member, and one anywhere inside a dataclass, model, named tuple or set (``held``: data
    never looked up by its raw bytes), is keyed under its class (:meth:`_enum_form`).
    """

    __slots__ = ("active", "held", "loose", "names", "none", "subs")

    def __init__(self, names: _Names | None,
                 subs: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.names = names
        self.subs = subs
        self.active: set[int] = set()  # containers on the current path: a revisit is a cycle
        self.none = False  # a None was written (the form then gets the None mark)
        self.loose = 0
        self.held = 0  # objects and sets enclosing the value being written (``_held``)
        if _LATE_PENDING:  # norm and mask look leaves up in _LEAF without asking
            _refresh_late()
        _members()  # (_container compares types with _Members, read as it is)

    def norm(self, obj: Any, path: str, depth: int, place: int = 0) -> Any:
        """``place``: where ``obj`` sits, for telemetry ids (``_vol.telemetry_at``)."""
        t = type(obj)
        if obj is None:
            self.none = True
            return obj
        if t is bool:
            return obj
        if t is str:
            return _valid_text(obj, path)
        if t is int:
            return obj if -(2**63) <= obj < 2**64 else _bigint(obj)
        if t is float:
            return obj if obj - obj == 0.0 else {_TAG + "float": repr(obj)}
        if t in _LEAF:
            if t is _dt.time and obj.tzinfo is not None:
                return _aware_time(obj, path)
            return orjson.loads(orjson.dumps(obj, default=_tagged))
        oid = self._enter(obj, t, path, depth)
        try:
            out = self._container(obj, t, path, depth, place)
        finally:
            self.active.discard(oid)
        if depth % _CHUNK == 0 and isinstance(out, (dict, list)):
            return orjson.Fragment(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
        return out

    def _container(self, obj: Any, t: type, path: str, depth: int, place: int) -> Any:
        # Plain containers: one more ``loose`` level inside, unless it is the arguments
        # mapping itself (depth 0). Inlined: a frame more per level ran the interpreter's
        # stack out before MAX_DEPTH.
        if isinstance(obj, Mapping):
            if depth == 0:
                return self._mapping(obj, path, depth, place)
            self.loose += 1
            try:
                return self._mapping(obj, path, depth, place)
            finally:
                self.loose -= 1
        if t is _Members:  # a receiver's set of plain objects, each in its form: a set
            return self._held(self._set, obj, path, depth)
        if t is list or t is tuple or (isinstance(obj, (list, tuple)) and not (
                hasattr(t, "_fields") or hasattr(t, "__dejacache_key__"))):
            item = _vol.telemetry_item(place)
            kind = _secrets.DATA if self.names is None else _secrets.pair_kind(
                obj, _secrets.is_secret_name, _parent(path))
            if kind:
                # A ``[name, value]`` pair holding a credential: masked as a field of that
                # name is (the key held a plain xxh3 of the value, guessable offline if weak).
                return [self.norm(obj[0], f"{path}[0]", depth + 1, item),
                        self.mask(obj[1], f"{path}[1]", depth + 1)
                        if kind == _secrets.CREDENTIAL
                        else self._auth(obj[1], f"{path}[1]", depth + 1)]
            self.loose += 1
            try:
                return [self.norm(v, f"{path}[{i}]", depth + 1, item)
                        for i, v in enumerate(obj)]
            finally:
                self.loose -= 1
        if isinstance(obj, (set, frozenset)):
            return self._held(self._set, obj, path, depth)
        if isinstance(obj, (str, int)) and not isinstance(obj, (bool, enum.Enum)):
            return self.norm(str.__str__(obj) if isinstance(obj, str) else int(obj), path,
                             depth)
        if isinstance(obj, enum.Enum):
            return self._enum_form(obj, self.norm(obj.value, path, depth))
        if isinstance(obj, _dt.time) and obj.tzinfo is not None:
            return _aware_time(obj, path)
        if isinstance(obj, (_dt.date, _dt.time, UUID)):  # subclasses: orjson's spelling
            return orjson.loads(orjson.dumps(obj))
        return self._object(obj, t, path, depth, self.norm, place)

    def _object(self, obj: Any, t: type, path: str, depth: int, write: Callable[..., Any],
                *rest: Any) -> Any:
        """An object as ``write`` (:meth:`norm`, or :meth:`_hidden` under a credential's
        name) keys its data: under its class, or as its ``__dejacache_key__`` says."""
        if getattr(t, "__dejacache_key__", None) is None:
            data = _object_data(obj, t)
            if data is not None:
                return {_TAG + "obj": [_class_name(t), self._held(write, data, path, depth,
                                                                   *rest)]}
        try:
            data = _tagged(obj)
        except _Unhashable as exc:
            raise _Unhashable(t, path, exc.reason) from None
        if data is obj:
            raise _Unhashable(t, path)
        return write(data, path, depth, *rest)

    def _held(self, write: Callable[..., Any], obj: Any, path: str, depth: int,
              *rest: Any) -> Any:
        """``write(obj, ...)`` for what an object or a set holds, at any depth: never looked
        up by raw bytes (their tag is in them), so Enum members key under their class."""
        self.held += 1
        try:
            return write(obj, path, depth, *rest)
        finally:
            self.held -= 1

    def _rows(self, pairs: list[tuple[Any, Any]], path: str, depth: int,
              value: Callable[[Any, str, int], Any]) -> list[Any]:
        return [[self.norm(k, f"{path}[key]", depth + 1),
                 value(v, f"{path}[{k!r}]", depth + 1)] for k, v in pairs]

    def _tag_rows(self, out: dict[str, Any], pairs: list[tuple[Any, Any]], path: str,
                  depth: int, value: Callable[[Any, str, int], Any]) -> Any:
        """A mapping with non-string keys: sorted [key, value] pairs under a tag (``value``
        writes each value). Held (``_held``): orjson refuses such a dict, so its bytes are
        never a lookup form."""
        rows = self._held(self._rows, pairs, path, depth, value)
        rows += [[k, v] for k, v in out.items()]
        rows.sort(key=lambda p: orjson.dumps(p[0], option=orjson.OPT_SORT_KEYS))
        return {_TAG + "dict": rows}

    def _set(self, obj: Any, path: str, depth: int,
             item: Callable[[Any, str, int], Any] | None = None) -> Any:
        item = item or self.norm
        items = [orjson.dumps(item(v, f"{path}{{}}", depth + 1),
                              option=orjson.OPT_SORT_KEYS) for v in obj]
        return {_TAG + "set": [orjson.Fragment(i) for i in sorted(items)]}

    def _enum_form(self, member: enum.Enum, value: Any) -> Any:
        """A member's form: its class and value, or only its value inside plain data
        (see ``loose``). ``Color.RED`` and ``Size.SMALL`` (both 1) differ, as Python says."""
        if self.loose and not self.held:
            return value
        return {_TAG + "enum": [_class_name(type(member)), value]}

    def _mapping(self, obj: Mapping[Any, Any], path: str, depth: int, place: int) -> Any:
        names = self.names
        below, other = _vol.telemetry_below(place)
        out: dict[str, Any] = {}
        pairs: list[tuple[Any, Any]] = []
        for k, v in obj.items():
            if isinstance(k, str):
                k = _valid_text(str.__str__(k), path)
                sub = f"{path}.{k}" if path else k
                act = names.action(k) if names is not None else _KEEP
                if act == _SCOPED:
                    act = _DROP if _vol.telemetry_at(place, obj) else _KEEP
                if act == _DROP:
                    continue
                # A key starting with NUL would spell a type tag: one more NUL, so
                # ``{"\x00set": [1, 2]}`` never keys like ``{1, 2}``.
                out[_TAG + k if k[:1] == _TAG else k] = (
                    self.mask(v, sub, depth + 1) if act == _MASK
                    else self._auth(v, sub, depth + 1) if act == _AUTH
                    and _secrets.is_basic_auth(v)
                    else self.norm(v, sub, depth + 1, below.get(k, other)))
            else:
                pairs.append((k, v))
        return self._tag_rows(out, pairs, path, depth, self.norm) if pairs else out

    def _auth(self, v: Any, path: str, depth: int) -> Any:
        """Basic credentials (``_secrets.is_basic_auth``) by ``_secrets.basic_auth``'s rule
        (the one of stores and cassettes): the password a keyed digest, the rest as data. A
        named tuple (aiohttp's ``BasicAuth``) keys under its class, as anywhere else."""
        t = type(v)
        if isinstance(v, str):
            return _secrets.basic_auth(_valid_text(str.__str__(v), path),
                                       self._password(path, depth), self._kept(path, depth))
        if getattr(t, "__dejacache_key__", None) is not None:
            return self.norm(v, path, depth)
        if isinstance(v, tuple) and hasattr(t, "_fields"):
            return self._object(v, t, path, depth, self._auth_items)
        return self._auth_items(v, path, depth)

    def _auth_items(self, v: Any, path: str, depth: int) -> Any:
        """A list or tuple of basic credentials, with :meth:`norm`'s guards."""
        oid = self._enter(v, type(v), path, depth)
        self.loose += 1  # (as a plain list's items, in norm)
        try:
            out = _secrets.basic_auth(v, self._password(path, depth), self._kept(path, depth))
        finally:
            self.loose -= 1
            self.active.discard(oid)
        if depth % _CHUNK == 0:
            return orjson.Fragment(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
        return out

    def _password(self, path: str, depth: int) -> Callable[[Any], Any]:
        return lambda x: self._hidden(x, path, depth + 1)

    def _kept(self, path: str, depth: int) -> Callable[[Any], Any]:
        return lambda x: self.norm(x, path + "[]", depth + 1)

    def mask(self, v: Any, path: str, depth: int) -> Any:
        """A credential's stand-in, by ``_secrets.credential``'s rule (the one of stores and
        cassettes): a JSON Schema describing the credential (a tool's ``password``
        property) is keyed as data but for the values it gives; anything else is the
        credential at every depth, each leaf a keyed digest (:meth:`_hidden`)."""
        if type(v) is dict and _secrets.is_schema(v):
            return self._schema(v, path, depth)
        return self._hidden(v, path, depth)

    def _schema(self, v: dict[str, Any], path: str, depth: int) -> Any:
        """A schema under a credential's name: its keywords are plain names (no tag, no
        credential), left out only when declared volatile; ``default``, ``enum``... hidden."""
        oid = self._enter(v, dict, path, depth)
        names = self.names
        try:
            return {k: (self._hidden(x, f"{path}.{k}", depth + 1) if k in _secrets.SCHEMA_VALUES
                        else self.norm(x, f"{path}.{k}", depth + 1))
                    for k, x in v.items() if names is None or names.action(k) != _DROP}
        finally:
            self.active.discard(oid)

    def _hidden(self, v: Any, path: str, depth: int) -> Any:
        """``v``, all of it a credential: scalars become keyed digests at any depth (a dict,
        list, tuple, set or object keeps its shape); None and booleans stay."""
        t = type(v)
        if v is None:
            self.none = True
            return v
        if t is bool:
            return v
        if t is str and self.subs:
            esc = orjson.dumps(v)
            subbed = _subst(esc, self.subs)
            if subbed != esc:  # a declared live value: key it as its placeholder, portably
                return orjson.loads(subbed)
        if t is str and _secrets.is_credential_token(v):  # the request's own key, named
            return v
        if t is str or t is int or t is float or t in _LEAF:
            return _secrets.mask(v)
        if isinstance(v, enum.Enum):  # its value masked, under its class as anywhere else
            return self._enum_form(v, self._hidden(v.value, path, depth))
        if isinstance(v, (str, int, float)):  # a str subclass is a password all the same
            return self._hidden(str.__str__(v) if isinstance(v, str)
                                else float(v) if isinstance(v, float) else int(v), path, depth)
        return self._hidden_container(v, t, path, depth)

    def _hidden_container(self, v: Any, t: type, path: str, depth: int) -> Any:
        """:meth:`_hidden` of a container, with :meth:`norm`'s guards: depth, cycles, and
        orjson's nesting limit (a fragment every ``_CHUNK`` levels). One frame between
        levels of a list, as in :meth:`norm`: a frame more ran the interpreter's stack out
        before ``MAX_DEPTH``."""
        oid = self._enter(v, t, path, depth)
        try:
            if t is list or t is tuple or (isinstance(v, (list, tuple)) and not (
                    hasattr(t, "_fields") or hasattr(t, "__dejacache_key__"))):
                out = [self._hidden(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
            elif isinstance(v, Mapping):
                out = self._hidden_mapping(v, path, depth)
            elif isinstance(v, (set, frozenset)):
                out = self._held(self._set, v, path, depth, self._hidden)
            else:
                out = self._hidden_object(v, t, path, depth)
        finally:
            self.active.discard(oid)
        if depth % _CHUNK == 0 and isinstance(out, (dict, list)):
            return orjson.Fragment(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
        return out

    def _enter(self, v: Any, t: type, path: str, depth: int) -> int:
        """``v``'s id, now on the current path (the caller discards it from ``active``):
        refused when nested too deep or already on the path (a cycle)."""
        if depth > MAX_DEPTH:
            raise _Unhashable(t, path, f"is nested more than {MAX_DEPTH} levels deep")
        oid = id(v)
        if oid in self.active:
            raise _Unhashable(t, path, "contains itself (a cycle)")
        self.active.add(oid)
        return oid

    def _hidden_mapping(self, v: Mapping[Any, Any], path: str, depth: int) -> Any:
        out: dict[str, Any] = {}
        pairs: list[tuple[Any, Any]] = []
        for k, x in v.items():
            if isinstance(k, str):
                k = _valid_text(str.__str__(k), path)
                out[_TAG + k if k[:1] == _TAG else k] = self._hidden(x, f"{path}.{k}", depth + 1)
            else:
                pairs.append((k, x))
        return self._tag_rows(out, pairs, path, depth, self._hidden) if pairs else out

    def _hidden_object(self, v: Any, t: type, path: str, depth: int) -> Any:
        """An object under a credential's name: its data hidden, under its class."""
        return self._object(v, t, path, depth, self._hidden)


def _aware_time(v: _dt.time, path: str) -> str:
    """An aware time of day (orjson refuses them): its ISO text with the offset, as orjson
    writes an aware datetime. A zone whose offset depends on the date (``ZoneInfo``) gives
    the time no offset to write, and keyed without one it would share the naive time's key:
    refused, naming the argument."""
    if v.utcoffset() is None:
        raise _Unhashable(type(v), path, f"is a time of day in time zone {v.tzinfo}, which "
                          "has no offset without a date: pass a datetime, or a time with a "
                          "fixed offset (datetime.timezone)")
    return v.isoformat()


def _subst(data: bytes, pairs: tuple[tuple[bytes, bytes], ...]) -> bytes:
    for live, placeholder in pairs:
        data = data.replace(live, placeholder)
    return data


def _general(data: Mapping[str, Any], names: _Names | None, function: str,
             subs: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    canon = _Canon(names, subs)
    try:
        tree = canon.norm(data, "", 0)
    except _Unhashable as exc:
        raise UnhashableArgument(_secrets.mask_text(exc.path, _secrets.placeholder),
                                 exc.value_type, function, reason=exc.reason) from None
    except RecursionError:  # the interpreter's stack ran out before MAX_DEPTH did
        raise UnhashableArgument("?", type(data), function,
                                 reason="is nested too deeply to key") from None
    out = orjson.dumps(tree, option=orjson.OPT_SORT_KEYS)
    return out + _NONE_MARK if canon.none else out


# Appended (JSON allows trailing whitespace) to every full form that writes a ``null``. The
# fast lookup form is one raw ``orjson.dumps``, which writes NaN as ``null`` too; it gets the
# mark only once the ``null`` places are seen to hold ``None`` (``_NULLS``), so a NaN call can
# never look up the ``None`` entry.
_NONE_MARK = b" "

# Per byte string (by its key: the seeded 128-bit hex digest of the bytes alone): where the
# plain data that wrote it held ``None``, and the key of the bytes with the mark. ``(None,
# None)`` when there is nothing to probe (searching 2 KB for a ``null`` cost more than
# hashing it). Probing those places costs a few dict lookups where a walk of the whole
# request cost 3x the orjson floor (a 200 KB hit went from 1.10x to 2.96x).
_NULLS: dict[str, tuple[_seg.NoneCheck | None, str | None]] = {}


# Where the lists a form was cut into start, with their runs, whether the form may hold a
# URL credential (see ``_seg.Ctx``), and whether it needs the None mark (not appended to a
# form cut out of a whole: ``_first_sight`` decides).
_Spans = tuple[list[tuple[int, "_seg.Run"]], bool, bool]


_STR_ONLY: Final = frozenset({str})


def _flat(d: dict[str, Any], plain: set[str]) -> bool:
    """Whether ``d`` holds only strings and dicts of strings, under names already found
    plain: then it has nothing to write by parts and :func:`_clean` finds it ``_PLAIN``,
    told here in a few C loops (a WebSocket audio chunk's key, ``{"ws_session", "body":
    {"type", "audio"}}``, spent ~190 opcodes in ``has_lists`` and ``_clean``)."""
    if not plain.issuperset(d):
        return False
    for v in d.values():
        tv = type(v)
        if tv is dict:
            if not plain.issuperset(v) or not _STR_ONLY.issuperset(map(type, v.values())):
                return False
        elif tv is not str:
            return False
    return True


def _full(data: Mapping[str, Any], names: _Names, function: str,
          subs: tuple[tuple[bytes, bytes], ...], collect: bool,
          whole: bytes | None = None, by_parts: bool = True
          ) -> tuple[bytes, _seg.NoneCheck | None, _Spans | None]:
    """The full form before substitutions and URL masking, and (``collect``) where it holds
    ``None`` when the data is plain without tags (None otherwise: nothing to remember, as
    other data can write the same bytes). ``whole`` is ``_dump(data)`` when the caller has
    it; ``by_parts`` False walks the whole at once. Third: where the lists written by
    parts out of ``whole`` start in the form, with their runs (None otherwise)."""
    if type(data) is dict and _flat(data, names.plain):
        try:
            out = whole if whole is not None else _dump(data)
        except orjson.JSONEncodeError:  # invalid text: the general path names it
            return _general(data, names, function, subs), None, None
        return out, _seg.NoneCheck(()) if collect else None, None
    if by_parts and type(data) is dict and _seg.has_lists(data):
        # Lists of messages or schemas: by parts, walking only what was not seen before.
        parts, check, spans = _by_parts(data, names, collect, whole)
        if parts is not None:
            return parts, check, spans
    try:
        verdict = _clean(data, names)
        if verdict:
            out = whole if whole is not None else _dump(data)
            if verdict == _PLAIN:
                return out, _seg.NoneCheck(()) if collect else None, None
            if (verdict & _TAGGED) == _TAGGED:
                return (out + _NONE_MARK if (verdict & _WITH_NONE) == _WITH_NONE else out,
                        None, None)
            paths = _seg.none_paths(data, _SIMPLE) if collect else None
            return (out + _NONE_MARK, _seg.NoneCheck(paths) if paths is not None else None,
                    None)
    except (TypeError, orjson.JSONEncodeError, RecursionError):
        pass  # big integers, invalid text, deep or cyclic data: the general path
    return _general(data, names, function, subs), None, None


def _by_parts(data: dict[str, Any], names: _Names, collect: bool, whole: bytes | None
              ) -> tuple[bytes | None, _seg.NoneCheck | None, _Spans | None]:
    ctx = _seg.Ctx(names, names.lists, _clean, _dump, _SIMPLE)
    try:
        out = _seg.segmented(ctx, data, whole)
    except (TypeError, orjson.JSONEncodeError, RecursionError):
        out = None
    if out is None:
        return None, None, None
    spans = (ctx.spans, ctx.url, ctx.nones) if ctx.spans is not None else None
    if ctx.nones and spans is None:  # cut out of a whole: the caller adds the mark
        out += _NONE_MARK
    return out, (ctx.check() if collect else None), spans


def _finish(out: bytes, subs: tuple[tuple[bytes, bytes], ...]) -> bytes:
    if subs:
        out = _subst(out, subs)
    # ``?password=...`` inside a URL string is a credential by name too: mask it in the key.
    # (Asked first of the few substring checks that find none: the masks load only then.)
    return _secrets.mask_url_queries(out) if _secrets.url_may_hold_secret(out) else out


def _canonical(data: Mapping[str, Any], names: _Names, function: str,
               subs: tuple[tuple[bytes, bytes], ...], by_parts: bool = True) -> bytes:
    """The full canonical form: one ``orjson.dumps`` (or one per part of a long list) when
    nothing needs a rewrite, the general canonicaliser otherwise (same bytes either way)."""
    return _finish(_full(data, names, function, subs, False, by_parts=by_parts)[0], subs)


def canonical_json(
    arguments: Mapping[str, Any],
    *,
    volatile: frozenset[str] | None = None,
    volatile_paths: tuple[_vol.Path, ...] = (),
    volatile_patterns: tuple[re.Pattern[str], ...] = (),
    function: str = "",
    substitutions: tuple[tuple[bytes, bytes], ...] = (),
    fixed: Mapping[str, Any] | None = None,
    by_parts: bool = True,
    telemetry: frozenset[str] = frozenset(),
) -> bytes:
    """Canonical JSON bytes of an argument mapping: sorted, compact, volatile fields, paths
    and pattern matches removed (see ``_core/volatile.py``), credentials and secret-shaped
    strings masked, ``substitutions`` applied (see :func:`key_substitutions`). ``fixed``:
    members added after the volatile paths and patterns ran, which they never rewrite (an
    HTTP request's identity digest: a pattern matching hex must not make two callers one).
    ``by_parts`` False writes lists of messages whole (the same bytes), for data too small
    for the parts' memos to pay. ``telemetry``: names dropped only where telemetry lives
    (:func:`telemetry_names`)."""
    # (no paths or patterns: apply hands the data back, without its call)
    data: Any = (_vol.apply(arguments, volatile_paths, volatile_patterns)
                 if volatile_paths or volatile_patterns else arguments)
    if fixed:
        data = {**data, **fixed}
    return _canonical(data, _names_for(volatile or frozenset(), telemetry), function,
                      substitutions, by_parts)


# Called with the seed by position: ``seed=`` made each call build a keywords dict for the
# argument parser (~210 of a 2 KB hit's instructions).
_hex = xxhash.xxh3_128_hexdigest
_PLAIN_ENTRY: tuple[_seg.NoneCheck | None, str | None] = (None, None)  # nothing to probe


# Types orjson writes as themselves, none of them an Enum: one set lookup clears the
# commonest arguments (an isinstance each cost ~4% of a small hit on the 2-core VM).
_NO_RECEIVER: Final = object()  # (``KeyBuilder._receiver_of``: a call without one)
_NOT_MEMBERS: Final = frozenset({dict, list, str, int, float, bool, type(None), tuple, bytes})


def _has_member(values: Iterable[Any]) -> bool:
    """Whether an argument is an Enum member, which orjson writes as its bare value: keyed
    under its class (``_Canon._enum_form``), its raw bytes are not its lookup form. Asked
    once ``_NOT_MEMBERS`` has not cleared them all."""
    return any(isinstance(v, enum.Enum) for v in values)


def _fast_key(data: Any, names: _Names, function: str,
              subs: tuple[tuple[bytes, bytes], ...], seed: int,
              checked: bool = False, out: bytes | None = None
              ) -> tuple[str, bytes, bytes, bool]:
    """``(key, body, tail, full)``: the key (seeded digest) of the fast lookup form
    ``body + tail``, kept in two parts so a hit never copies the bytes to append the mark;
    ``full`` as in :func:`fast_json`. ``checked``: the caller knows ``data``'s own keys
    are plain names and no value of it is an Enum member.

    One one-shot digest of ``body`` is both the ``_NULLS`` lookup and, when the bytes hold
    no ``None``, the key; the key with the mark was computed once, when the bytes were first
    seen (a hasher object fed the mark cost 0.5 µs of a 2 KB hit, the
    one-shot digest 0.15; hashing twice cost 12% of a 20 or 200 KB hit). ``out``: the
    ``orjson.dumps`` of ``data`` when the caller has it (:meth:`KeyBuilder.probe_key` wrote
    it for a lookup that found nothing remembered): written again, a 200 KB request's miss
    paid the floor twice.

    The first sight of some bytes walks the data (the full form, needed on a miss anyway):
    raw bytes are a key only once that walk has found them to be their own full form. A
    nested password written raw may literally be another password's ``<secret:…>`` mask, and
    a dict keyed ``"\x00set"`` writes the bytes of a set: as lookup forms both were served
    another call's answer. A repeated hit is unchanged; the first sight of bytes without a
    ``null`` costs the walk it used to skip (measured: 3.5 -> 7 µs at 2 KB, 105 -> 122 µs a
    turn of a growing 200 KB conversation; bytes with a ``null`` were walked already).
    """
    if not checked and ((not names.plain.issuperset(data) and not names.clean(data))
                        or (not _NOT_MEMBERS.issuperset(map(type, data.values()))
                            and _has_member(data.values()))):
        return _full_key(data, names, function, subs, seed)  # a credential, an Enum member
    if out is None:
        try:
            out = orjson.dumps(data, default=_tagged, option=_OPTS)
        except (TypeError, orjson.JSONEncodeError):
            return _full_key(data, names, function, subs, seed)
    key = _hex(out, seed)
    entry = _NULLS.get(key)
    if entry is None:
        return _first_sight(data, names, function, subs, seed, out, key)
    check, marked_key = entry
    if check is None:
        if subs:
            form = _subst(out, subs)
            return _hex(form, seed), form, b"", False
        return key, out, b"", False
    probe = check.probe  # compiled on the second sight (NoneCheck.ok)
    if not (probe(data) if probe is not None else check.ok(data)):
        return _full_key(data, names, function, subs, seed)
    if subs:
        form = _subst(out + _NONE_MARK, subs)
        return _hex(form, seed), form, b"", False
    assert marked_key is not None
    return marked_key, out, _NONE_MARK, False


# Below this many bytes a first sight walks the whole request at once. By parts, with no run
# remembered yet, a 2 KB request cost 14 µs that one walk does in 4; above it, remembered runs
# make a growing conversation's turns cheaper, and since the lists' bytes are cut out of the
# lookup's write instead of written again, from ~8 KB on (a 100-message turn: 141 -> 59 µs
# on a 18 µs floor; 32 KB was the threshold while by parts wrote the list a second time).
_BY_PARTS_MIN = 8 * 1024


def _first_sight(data: Any, names: _Names, function: str,
                 subs: tuple[tuple[bytes, bytes], ...], seed: int, out: bytes,
                 key: str) -> tuple[str, bytes, bytes, bool]:
    """:func:`_fast_key` for bytes not seen before: the full form, and, when ``out`` is that
    form (plain data, no tags, nothing for URL masking to do), where its ``None`` are, so
    the next call with these bytes takes them as they are."""
    full, check, cut = _full(data, names, function, subs, True, out,
                             len(out) > _BY_PARTS_MIN)
    # Cut out of ``out`` (``full`` is ``out``) with no URL credential in it, or none that URL
    # masking rewrites (asked of each run once: ``_seg.scrub_free``): it has nothing to do.
    unmasked = cut is not None and not subs and (
        not cut[1] or _seg.scrub_free(out, cut[0], _urls_unmasked, "url_clean"))
    if cut is not None and cut[2]:  # cut out of ``out`` (``full`` is ``out``), with a None
        if unmasked and check is not None:
            return _marked_cut(out, check, cut[0], seed, key)
        full += _NONE_MARK
    form = full if unmasked else _finish(full, subs)
    form_key = key if form == out else _hex(form, seed)
    if cut is not None and not subs and form is full:
        # Written by parts out of ``out``: the store's scrubbing of the request may ask
        # only what is new (``_secrets.vouch``).
        _secrets.vouch(form, functools.partial(_seg.scrub_free, form, cut[0],
                                               _scrub_invariant), out)
    if check is not None and (form if not subs else _finish(full, ())) == full:
        if not check.nones:
            _remember(key, _PLAIN_ENTRY)
        elif form is full and (cut is not None or (
                len(form) == len(out) + 1 and form[-1:] == _NONE_MARK
                and form.startswith(out))):  # no second copy of a 200 KB request
            _remember(key, (check, form_key))
        else:
            marked = out + _NONE_MARK
            _remember(key, (check, form_key if form == marked else _hex(marked, seed)))
    return form_key, form, b"", True


def _urls_unmasked(data: bytes) -> bool:
    return not _secrets.url_may_hold_secret(data) or _secrets.mask_url_queries(data) == data


def _scrub_invariant(data: bytes) -> bool:
    # Named here, not bound: the masks load when a store first asks (a hit never does).
    return _secrets.scrub_invariant(data)


def _marked_cut(out: bytes, check: _seg.NoneCheck, spans: list[tuple[int, _seg.Run]],
                seed: int, key: str) -> tuple[str, bytes, bytes, bool]:
    """:func:`_first_sight` for a form cut out of ``out`` that holds ``None`` and nothing
    to mask: ``out`` + the None mark, never written out (a 200 KB copy and its page faults
    cost 0.3x the key's floor): its key is the digest of both, and ``out`` is vouched for
    as the request the store keeps (which never holds the mark)."""
    h = xxhash.xxh3_128(out, seed=seed)
    h.update(_NONE_MARK)
    form_key = h.hexdigest()
    _secrets.vouch(out, functools.partial(_seg.scrub_free, out, spans,
                                          _scrub_invariant), out)
    _remember(key, (check, form_key))
    return form_key, out, _NONE_MARK, True


def _full_key(data: Any, names: _Names, function: str,
              subs: tuple[tuple[bytes, bytes], ...], seed: int) -> tuple[str, bytes, bytes, bool]:
    """:func:`_fast_key`'s answer when only the full form will do."""
    form = _canonical(data, names, function, subs)
    return _hex(form, seed), form, b"", True


def _remember(key: str, entry: tuple[_seg.NoneCheck | None, str | None]) -> None:
    if len(_NULLS) >= _seg.MEMO_MAX:
        _NULLS.clear()
    _NULLS[key] = entry


def _fast(data: Any, names: _Names, function: str,
          subs: tuple[tuple[bytes, bytes], ...]) -> tuple[bytes, bool]:
    _key, body, tail, full = _fast_key(data, names, function, subs, 0)
    return (body + tail if tail else body), full


def fast_json(
    arguments: Mapping[str, Any],
    *,
    names: _Names,
    volatile_paths: tuple[_vol.Path, ...] = (),
    volatile_patterns: tuple[re.Pattern[str], ...] = (),
    function: str = "",
    substitutions: tuple[tuple[bytes, bytes], ...] = (),
) -> tuple[bytes, bool]:
    """``(form, full)``: a lookup form that skips the names walk, or the full form when the
    fast one could be ambiguous (``full`` True).

    Sound as a first lookup key: stored canonicals never hold volatile fields or unmasked
    credentials, so this form can only equal a stored one when the call has none either, in
    which case it *is* the full form. NaN, which orjson writes as ``null`` like ``None``, is
    kept apart by the mark full forms with a ``null`` carry (``_NONE_MARK``): the fast form
    gets it only when every ``null`` is seen to be a ``None`` (:class:`_seg.NoneCheck`).
    """
    data: Any = (_vol.apply(arguments, volatile_paths, volatile_patterns)
                 if volatile_paths or volatile_patterns else arguments)
    return _fast(data, names, function, substitutions)


def key_seed(namespace: str, name: str) -> int:
    """The digest seed of a namespace and call name (``digest`` hashes under it)."""
    return _seed(namespace, name)


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
    keys the same under another. Prefer passing ``substitutions=`` to the canonicaliser: a
    credential is masked before this could see it, and only there is it keyed as its
    placeholder."""
    return _subst(canonical, pairs)


def digest(namespace: str, name: str, canonical: bytes) -> str:
    """The key of a canonical request: 32 hex characters."""
    return xxhash.xxh3_128_hexdigest(canonical, seed=_seed(namespace, name))


_EMPTY = inspect.Parameter.empty
_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD
_PO = inspect.Parameter.POSITIONAL_ONLY
_VAR_POS = inspect.Parameter.VAR_POSITIONAL
_VAR_KW = inspect.Parameter.VAR_KEYWORD
_FAST_KINDS = (_PK, inspect.Parameter.KEYWORD_ONLY, _VAR_KW)
# The key of a call the signature refuses holds its positional arguments under this key: not
# a str, so no binding (whose names all are) nor keyword can ever write it.
_REFUSED: Any = None
_ARG_N = pattern(r"arg[0-9]+")  # compiled when first used


def _unmasked_class(form: Any, patterns: tuple[re.Pattern[str], ...]) -> Masked:
    """A classmethod's class form (``_receiver.class_form``) that the volatile patterns of
    the arguments' pass leave alone (a :class:`Masked` list), the patterns run over a run-time
    class's captured values only: its name is no text to mask (under ``\\d+``, ``Gen2``'s
    answer was served for ``Gen3``)."""
    if type(form) is str:
        return Masked((form,))
    name, held = form
    return Masked((name, _vol.apply({"cls": held}, (), patterns)["cls"]))


def _receiver(target: Any, sig: inspect.Signature) -> str | None:
    """``self`` or ``cls`` when it is the first parameter of a function defined in a class
    body (``__qualname__`` ``Class.method``): the instance or class a method is called on,
    keyed by ``KeyBuilder._put_receiver`` (unless ``key_self=False``). Anywhere else it is
    an argument like any."""
    parts = str(getattr(target, "__qualname__", "")).split(".")
    if len(parts) < 2 or parts[-2] == "<locals>":
        return None
    first = next(iter(sig.parameters.values()), None)
    if first is None or first.kind not in (_PK, _PO) or first.name not in ("self", "cls"):
        return None
    return first.name


def _check_key_self(key_self: bool | None, receiver: str | None, ignore: frozenset[str],
                    name: str) -> None:
    """``key_self=`` refused where it cannot mean anything (rather than ignored)."""
    if key_self is not None and type(key_self) is not bool:
        raise ConfigurationError(f"key_self on {name} must be True, False or None, not "
                                 f"{key_self!r}")
    if key_self and receiver is None:
        raise ConfigurationError(
            f"key_self=True on {name}: it is not a method (no self or cls first parameter "
            "of a function defined in a class body), so there is no instance to key")
    if key_self and receiver in ignore:
        raise ConfigurationError(f"key_self=True on {name} contradicts ignore=[{receiver!r}]")


def _bound_receiver(target: Any) -> bool:
    """Whether ``target`` is a method bound to an instance (or a class) it is a method of."""
    if not inspect.ismethod(target):
        return False
    try:
        sig = inspect.signature(target.__func__)
    except (TypeError, ValueError):
        return False
    return _receiver(target.__func__, sig) is not None


def _unsigned(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments of a function without a signature: ``arg0``, ``arg1``... by position, and
    keywords that would read as one of those (or start with ``*``) get a ``*`` more."""
    bound: dict[str, Any] = {f"arg{i}": a for i, a in enumerate(args)}
    for k, v in kwargs.items():
        escape = isinstance(k, str) and (k[:1] == "*" or _ARG_N.fullmatch(k) is not None)
        bound["*" + k if escape else k] = v
    return bound


class KeyBuilder:
    """Binds a function's call arguments by name and builds canonical keys.

    Precomputes the signature once; a call with plain positional-or-keyword parameters
    binds with a zip instead of ``inspect.Signature.bind`` (measured: 2 µs per call).
    """

    __slots__ = (
        "_all_plain",
        "_arg_paths",
        "_cells",
        "_closure",
        "_defaults",
        "_drop",
        "_escape_kw",
        "_fast",
        "_filter",
        "_free",
        "_ignore",
        "_key_self",
        "_must",
        "_names",
        "_one",
        "_one_plain",
        "_plan",
        "_posonly",
        "_pre_args",
        "_pre_kwargs",
        "_recv",
        "_recv_paths",
        "_seen",
        "_sig",
        "name",
        "paths",
        "patterns",
        "volatile",
    )

    def __init__(
        self,
        fn: Callable[..., Any] | None,
        name: str,
        *,
        ignore: Iterable[str] = (),
        volatile: Iterable[str | re.Pattern[str]] | None = (),
        use_default_volatile: bool = True,
        key_self: bool | None = None,
    ) -> None:
        self.name = name
        self._key_self = key_self
        self._recv: str | None = None  # the receiver the key holds (``_put_receiver``)
        self._recv_paths: tuple[_vol.Path, ...] = ()  # volatile paths under it
        self._seen: tuple[type | None, Receiver | None] = (None, None)
        self._pre_args: tuple[Any, ...] = ()
        self._pre_kwargs: dict[str, Any] = {}
        target = fn
        if isinstance(fn, functools.partial):
            # A partial's frozen arguments are part of the call: key on them too.
            self._pre_args, self._pre_kwargs = fn.args, dict(fn.keywords)
            target = fn.func
        if key_self is not False and _bound_receiver(target):
            # ``cache(obj.method)``: the instance it is bound to is its receiver, keyed as a
            # method's is (its signature alone has no ``self`` to bind it to). Left bound
            # when the instance is not keyed: passing it through the key cost ~2 µs a hit.
            method: Any = target
            self._pre_args = (method.__self__, *self._pre_args)
            target = method.__func__
        spec = _vol.parse(volatile)
        base = DEFAULT_VOLATILE if use_default_volatile else frozenset()
        # Credentials are not listed here: every canonical form masks them (``_Names``).
        self.volatile = volatile_spellings(kept_out(base | spec.names, spec.keep)) | (
            kept_out(_HEADER_ONLY, spec.keep) if use_default_volatile else frozenset()
        )
        self._filter = _names_for(self.volatile, telemetry_names(self.volatile, spec.keep)
                                  if use_default_volatile else frozenset())
        self.paths = spec.paths
        self._arg_paths = spec.paths  # the paths applied to the bound arguments
        self.patterns = spec.patterns
        self._ignore = frozenset(ignore)
        self._drop = self._ignore  # and the receiver of a method: dropped once bound
        self._sig: inspect.Signature | None = None
        self._names: tuple[str, ...] = ()
        self._defaults: dict[str, Any] = {}
        self._posonly: frozenset[str] = frozenset()
        self._must: frozenset[str] = frozenset()
        self._escape_kw = False
        self._fast = False
        self._plan = False
        # A closure's captured values are part of its calls (``_Captures``).
        self._cells = _cells(target, self._ignore)
        self._closure: tuple[Any, ...] = getattr(target, "__closure__", None) or ()
        self._free: tuple[str, ...] = getattr(getattr(target, "__code__", None),
                                              "co_freevars", ())
        if target is not None:
            try:
                self._sig = inspect.signature(target)
            except (TypeError, ValueError):
                self._sig = None
        receiver: str | None = None
        if self._sig is not None:
            params = list(self._sig.parameters.values())
            # Positional-or-keyword names, in order: positional arguments zip onto these.
            self._names = tuple(p.name for p in params if p.kind is _PK)
            self._defaults = {p.name: p.default for p in params if p.default is not _EMPTY}
            receiver = _receiver(target, self._sig)
            if receiver is not None:
                # Dropped by the binding, then put back in its keyed form by
                # ``_put_receiver``: a method never takes the fast paths (``_plan`` below), so
                # none of them can key a call without it.
                self._drop = self._ignore | {receiver}
                if key_self is not False and receiver not in self._ignore:
                    self._recv = receiver
                    self._recv_paths = tuple(p for p in spec.paths if p[0] == receiver)
                    # Applied by ``receiver_form`` as it walks (into objects and containers
                    # the form then wraps, where the same path would name something else).
                    self._arg_paths = tuple(p for p in spec.paths if p[0] != receiver)
            # Required parameters the key leaves out: a call without one is refused, never
            # keyed like the calls that pass it.
            self._must = frozenset(p.name for p in params if p.default is _EMPTY
                                   and p.kind not in (_VAR_POS, _VAR_KW)) & self._drop
            # **kwargs keys that would read as ``*args`` or as a positional-only parameter
            # get a ``*`` more (only such signatures bind those names).
            self._posonly = frozenset(p.name for p in params if p.kind is _PO)
            self._escape_kw = bool(self._posonly) or any(p.kind is _VAR_POS for p in params)
            # The zip fast path also covers keyword-only parameters and **kwargs (chat(**req)
            # is the common LLM wrapper shape): Signature.bind costs ~2 µs a call.
            self._fast = all(p.kind in _FAST_KINDS for p in params)
        _check_key_self(key_self, receiver, self._ignore, name)
        if self._cells:
            self.__class__ = _Captures
        # Positional-only calls of such a function bind with one zip and drop nothing.
        self._plan = (self._fast and not self._defaults and not self._pre_args
                      and not self._pre_kwargs and self._drop.isdisjoint(self._names))
        # The first parameter's name, when one positional argument binds to it and nothing
        # else: the commonest call, ``llm(request)``, binds as one dict display (0.07 µs;
        # the zip was 0.46).
        self._one: str | None = self._names[0] if self._plan and self._names else None
        # ... and when that name is neither volatile nor a credential and no volatile path
        # or pattern applies, its one-key dict needs no names check either (``bind_key``).
        # (not a closure's: its captured values go in after binding, ``_Captures``)
        self._one_plain: str | None = self._one if (
            self._one is not None and not self._cells and not self.paths and not self.patterns
            and self._filter.always_plain((self._one,))) else None
        # ... and the same for all the parameters, bound by position (``hit_key``).
        self._all_plain = bool(self._plan and not self._cells and self._names and not self.paths
                               and not self.patterns
                               and self._filter.always_plain(self._names))

    def unreachable_paths(self) -> list[str]:
        """Volatile paths whose first name no call of the function can carry."""
        sig = self._sig
        if sig is None or any(p.kind is inspect.Parameter.VAR_KEYWORD
                              for p in sig.parameters.values()):
            return []
        return [".".join(str(s) for s in p) for p in self.paths
                if isinstance(p[0], str) and p[0] not in sig.parameters]

    def unkeyed_receiver_paths(self) -> list[str]:
        """Volatile paths under a method's receiver that ``key_self=False`` leaves out."""
        gone = self._drop - self._ignore - {self._recv}
        return [".".join(str(s) for s in p) for p in self.paths if p[0] in gone]

    def unkeyed(self) -> frozenset[str]:
        """The parameters whose values the key leaves out as given: the ``ignore``d ones,
        and a method's receiver (keyed in its own form, if at all)."""
        return self._drop

    def unknown_ignored(self) -> tuple[list[str], list[str]]:
        """``ignore=`` names no call of the function can carry (a misspelling would keep the
        argument in the key without a word), and the parameters there are."""
        sig = self._sig
        if sig is None or any(p.kind is inspect.Parameter.VAR_KEYWORD
                              for p in sig.parameters.values()):
            return [], []
        known = {*sig.parameters, *self._free}  # a closure's captured names too
        return sorted(n for n in self._ignore if n not in known), list(sig.parameters)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments by parameter name; ignored ones, a method's receiver and arguments
        equal to their default dropped.

        Every call has one spelling that no other call has: ``*args`` is written
        ``"*args"``, a ``**kwargs`` key that would read as that or as a positional-only
        parameter gets a ``*`` more, and a call the signature refuses is keyed on what was
        given, its positional arguments under a key no binding writes (``_REFUSED``)."""
        one = self._one
        if one is not None and not kwargs and len(args) == 1:
            return {one: args[0]}
        if self._plan and not kwargs and len(args) <= len(self._names):
            return dict(zip(self._names, args, strict=False))
        if self._pre_args or self._pre_kwargs:
            args = self._pre_args + tuple(args)
            kwargs = {**self._pre_kwargs, **kwargs}
        sig = self._sig
        if sig is None:
            return self._dropped(_unsigned(args, kwargs), False)
        if self._fast and len(args) <= len(self._names) and (
            not args or not kwargs or kwargs.keys().isdisjoint(self._names[: len(args)])
        ):
            bound = dict(zip(self._names, args, strict=False))
            if kwargs:
                bound.update(kwargs)
            must = self._must  # a call without one is refused below
            if not must or bound.keys() >= must:
                if self._defaults:
                    return self._dropped(bound, True)
                drop = self._drop  # inlined: a method's hit drops its receiver here
                if drop.isdisjoint(bound):
                    return bound  # nothing to drop: skip rebuilding the dict on the hot path
                out = {k: v for k, v in bound.items() if k not in drop}
                return out if self._recv is None else self._put_receiver(out, bound)
        try:
            b = sig.bind(*args, **kwargs)
        except TypeError:  # the function raises its own error (unless a wrapper lied)
            return self._dropped({_REFUSED: list(args), **kwargs}, False)
        return self._dropped(self._flat(sig, b.arguments), True)

    def _flat(self, sig: inspect.Signature, arguments: Mapping[str, Any]) -> dict[str, Any]:
        bound: dict[str, Any] = {}
        for pname, value in arguments.items():
            kind = sig.parameters[pname].kind
            if kind is _VAR_KW:
                if not self._escape_kw:
                    bound.update(value)
                    continue
                posonly = self._posonly
                for k, v in value.items():
                    bound["*" + k if k[:1] == "*" or k in posonly else k] = v
            elif kind is _VAR_POS:
                # starred so ``f(1, 2)`` and ``f(args=[2])`` via **kwargs differ
                bound["*" + pname] = list(value)
            else:
                bound[pname] = value
        return bound

    def _dropped(self, bound: dict[str, Any], binds: bool) -> dict[str, Any]:
        """``bound`` without ignored names; when the call ``binds``, also without the
        receiver and arguments equal to their defaults."""
        drop = self._drop if binds else self._ignore
        defaults = self._defaults if binds else {}
        if not defaults and drop.isdisjoint(bound):
            return bound  # nothing to drop: skip rebuilding the dict on the hot path
        out = {k: v for k, v in bound.items()
               if k not in drop and not (k in defaults and self._is_default(k, v))}
        return out if not binds or self._recv is None else self._put_receiver(out, bound)

    def _put_receiver(self, out: dict[str, Any], bound: Mapping[str, Any]) -> dict[str, Any]:
        """``out`` with the receiver ``bound`` holds, as the key holds it: a class by its
        qualified name, an instance as ``_receiver.receiver_form`` says (``key_self=False``
        or an ``ignore``d receiver never gets here)."""
        recv = self._recv
        if recv is None or recv not in bound:
            return out
        out[recv] = self._receiver_form(bound[recv], False)[0]
        return out

    def _receiver_form(self, value: Any, every: bool,
                       deep: bool = False) -> tuple[Any, tuple[str, ...]]:
        """``(form, attributes left out)`` of the receiver ``value`` (``every``, ``deep``:
        see ``_receiver.receiver_form``)."""
        if self._recv == "cls":
            cls = value if isinstance(value, type) else type(value)
            form, left = (_rcv or _receiver_module()).class_form(cls, self._closure)
            return (_unmasked_class(form, self.patterns) if self.patterns else form), left
        t = type(value)
        # The rule for the last class seen, in one tuple a thread replaces whole: a method's
        # calls are on one class, and asking the class each call cost 0.35 µs of a 3.3 µs hit.
        seen = self._seen
        rule = seen[1]
        if seen[0] is not t or rule is None:
            rule = (_rcv or _receiver_module()).rule_for(t)
            if rule.cells and self._closure:
                rule = rule.but(self._closure)
            self._seen = (t, rule)
        return (_rcv or _receiver_module()).receiver_form(  # type: ignore[no-any-return]
            value, rule, self._recv or "self", self._recv_paths, self.patterns,
            self._key_self is True, self.name, _keyable, every, deep)

    def _rechecked(self, bound: dict[str, Any], exc: Exception, args: tuple[Any, ...],
                   kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``bound`` whose key could not be written (``exc``), the receiver's form made with
        every container walked for plain objects, its attributes the canonicaliser refuses
        left out (tried again as it is when none is: a container holding a plain object past
        its first item); ``exc`` again when there is no receiver."""
        recv = self._recv
        value = self._receiver_of(args, kwargs)
        if recv is None or value is _NO_RECEIVER:
            raise exc
        deep = self._receiver_form(value, False, True)[0]
        fixed = _receiver_module().recheck(deep, recv, self._key_self is True, self.name,
                                           _keyable)
        return {**bound, recv: deep if fixed is None else fixed}

    def _receiver_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The receiver of a call with ``args`` and ``kwargs`` (``_NO_RECEIVER``: none)."""
        if self._recv is None:
            return _NO_RECEIVER
        args = self._pre_args + tuple(args)
        if args:  # the first parameter
            return args[0]
        return {**self._pre_kwargs, **kwargs}.get(self._recv, _NO_RECEIVER)

    def left_out(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str, ...]:
        """The receiver's attributes the key of this call leaves out (``recv.name``), as
        ``explain`` reports them."""
        value = self._receiver_of(args, kwargs)
        if value is _NO_RECEIVER:
            return ()
        return tuple(f"{self._recv}.{n}" for n in self._receiver_form(value, True)[1])

    def _is_default(self, name: str, value: Any) -> bool:
        """Whether ``value`` is the default of parameter ``name``: the same canonical form,
        not merely ``==`` (``-0.0 == 0.0``, ``(True, 2) == (1, 2)`` and ``{"t": 1.0} ==
        {"t": 1}``, and dropping one as the default served the other's answer)."""
        default = self._defaults[name]
        if value is default:
            return True
        if type(value) is not type(default):
            return False
        try:
            equal = value == default
            return bool(equal) and self._form(name, value) == self._form(name, default)
        except Exception:  # exotic __eq__ (arrays), or not keyable: keep it in the key
            return False

    def _form(self, name: str, value: Any) -> bytes:
        return _canonical({name: value}, self._filter, self.name, ())

    def canonical(self, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                  substitutions: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
        bound = self.bind(args, kwargs)
        try:
            return self.canonical_bound(bound, substitutions)
        except Exception as exc:  # a receiver's attribute the key cannot hold: left out
            return self.canonical_bound(self._rechecked(bound, exc, args, kwargs),
                                        substitutions)

    def canonical_bound(self, bound: Mapping[str, Any],
                        substitutions: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
        """The canonical form of already-bound arguments: volatile fields stripped,
        credentials masked."""
        data: Any = _vol.apply(bound, self._arg_paths, self.patterns) if (
            self._arg_paths or self.patterns) else bound
        return _canonical(data, self._filter, self.name, substitutions)

    def fast_form(self, bound: Mapping[str, Any],
                  substitutions: tuple[tuple[bytes, bytes], ...] = ()) -> tuple[bytes, bool]:
        """``(form, full)``: a first lookup form that skips the walk for volatile and
        credential names, or the full form (``full`` True) when that one is what it takes.

        The walk (≈0.15 µs per container: 110 µs on a 200 KB request) is then only paid on a
        miss, to compute the key to store under and look up once more. See :func:`fast_json`
        for why it is sound.
        """
        data: Any = _vol.apply(bound, self._arg_paths, self.patterns) if (
            self._arg_paths or self.patterns) else bound
        return _fast(data, self._filter, self.name, substitutions)

    def fast_key(self, bound: Mapping[str, Any], seed: int,
                 substitutions: tuple[tuple[bytes, bytes], ...] = (),
                 out: bytes | None = None) -> tuple[str, bytes, bytes, bool]:
        """:meth:`fast_form` with its key: ``(key, body, tail, full)``, the form being
        ``body + tail`` and the key its digest under ``seed`` (:func:`key_seed`), which is
        exactly ``digest(namespace, name, body + tail)``. ``out``: see :meth:`bind_key`."""
        data: Any = _vol.apply(bound, self._arg_paths, self.patterns) if (
            self._arg_paths or self.patterns) else bound
        return _fast_key(data, self._filter, self.name, substitutions, seed, False,
                         out if data is bound else None)

    def full_key(self, bound: Mapping[str, Any], seed: int,
                 substitutions: tuple[tuple[bytes, bytes], ...] = (),
                 out: bytes | None = None) -> tuple[str, bytes, bytes]:
        """``(key, body, tail)`` of the full form (the form ``body + tail``, the key its
        digest under ``seed``): what a miss stores under once its fast key missed, written
        as a first sight writes it: by parts, cut out of ``out`` (the fast form's bytes,
        when these very arguments wrote them), asking only what is new of a conversation
        whose earlier turns were seen. Written from scratch (:meth:`canonical_bound`), a
        miss after a probe of the same bytes cost 31x the orjson floor at 1,000 messages."""
        data: Any = _vol.apply(bound, self._arg_paths, self.patterns) if (
            self._arg_paths or self.patterns) else bound
        names = self._filter
        if out is None or data is not bound:
            out = None
            if names.plain.issuperset(data) or names.clean(data):
                with contextlib.suppress(TypeError, orjson.JSONEncodeError):
                    out = _dump(data)
        if out is None:  # a credential argument, or data orjson cannot write
            key, body, tail, _full = _full_key(data, names, self.name, substitutions, seed)
        else:
            key, body, tail, _full = _first_sight(data, names, self.name, substitutions, seed,
                                                  out, _hex(out, seed))
        return key, body, tail

    def bind_key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], seed: int,
                 substitutions: tuple[tuple[bytes, bytes], ...] = (),
                 out: bytes | None = None) -> tuple[dict[str, Any], str, bytes, bytes, bool]:
        """:meth:`bind` then :meth:`fast_key`: ``(bound, key, body, tail, full)``. The
        commonest call, ``llm(request)``, binds as one dict display and skips the names
        check of its one plain parameter (~3% of a 2 KB hit). ``out``: the bytes
        :meth:`probe_key` returned for these very arguments, not written again."""
        one = self._one_plain
        if one is not None and len(args) == 1 and not kwargs and (
                type(args[0]) in _NOT_MEMBERS or not isinstance(args[0], enum.Enum)):
            bound = {one: args[0]}
            key, body, tail, full = _fast_key(bound, self._filter, self.name, substitutions,
                                              seed, True, out)
            return bound, key, body, tail, full
        bound = self.bind(args, kwargs)
        try:
            key, body, tail, full = self.fast_key(bound, seed, substitutions, out)
        except Exception as exc:  # a receiver's attribute the key cannot hold: left out
            bound = self._rechecked(bound, exc, args, kwargs)
            key, body, tail, full = self.fast_key(bound, seed, substitutions)
        return bound, key, body, tail, full

    def hit_key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], seed: int) -> str | None:
        """:meth:`probe_key`'s key, or None."""
        found = self.probe_key(args, kwargs, seed)
        return found if type(found) is str else None

    def probe_key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], seed: int
                  ) -> str | bytes | None:
        """The key :meth:`bind_key` gives a call by position of plain parameters (the
        commonest, ``llm(request)``) with no substitutions, when its bytes were seen before
        and need no rewrite. Else the bytes it wrote, when it got that far (pass them to
        :meth:`bind_key` as ``out``), or None, and :meth:`bind_key` answers. A hit needs
        nothing but the key: this skips building the miss path's parts and one call level
        (0.3 of a 2 KB hit's 6 µs).
        A miss then binds again through :meth:`bind_key`, which gives the same key."""
        one = self._one_plain
        # (an Enum member: keyed under its class, which orjson does not write)
        if one is not None and len(args) == 1 and not kwargs:
            if type(args[0]) not in _NOT_MEMBERS and isinstance(args[0], enum.Enum):
                return None
            data = {one: args[0]}
        elif self._all_plain and not kwargs and len(args) <= len(self._names):
            if not _NOT_MEMBERS.issuperset(map(type, args)) and _has_member(args):
                return None
            data = dict(zip(self._names, args, strict=False))  # as ``bind`` does
        else:
            return None
        try:
            out = orjson.dumps(data, default=_tagged, option=_OPTS)
        except (TypeError, orjson.JSONEncodeError):
            return None
        key = _hex(out, seed)
        entry = _NULLS.get(key)
        if entry is None:
            return out
        check, marked_key = entry
        if check is None:
            return key
        probe = check.probe
        return marked_key if probe is not None and probe(data) else out

    def canonical_fast(self, bound: Mapping[str, Any],
                       substitutions: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
        """:meth:`fast_form` without the flag."""
        return self.fast_form(bound, substitutions)[0]

    def key(self, namespace: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        return digest(namespace, self.name, self.canonical(args, kwargs))


class _Captures(KeyBuilder):
    """The key builder of a closure: binds as any, then adds what it captured. A class of
    its own (``KeyBuilder.__init__`` makes a closure's builder one), so other functions'
    binds pay nothing for it."""

    __slots__ = ()

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`KeyBuilder.bind`, with the immutable values the closure captured (read at
        each call: the enclosing function may rebind them) under ``"<captured>"``. Two
        closures of one factory, ``make(1)`` and ``make(2)``, have one name and one
        signature: without these they shared every entry. A str member, so a hit takes the
        fast path (under a non-str key, which only the general path writes, a 2 KB hit took
        20 µs, not 1.4); a ``**kwargs`` key starting with ``<`` gets one more, so no call
        can write it."""
        bound = KeyBuilder.bind(self, args, kwargs)
        if any(type(k) is str and k[:1] == "<" for k in bound):
            bound = {"<" + k if type(k) is str and k[:1] == "<" else k: v
                     for k, v in bound.items()}
        cap = _cap or _captures_module()
        values = cap.values(self._cells)[0]
        if values:
            bound = {**bound, cap.CAPTURED: values}
        return bound


def call_key(
    namespace: str,
    name: str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    fn: Callable[..., Any] | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str | re.Pattern[str]] = (),
    key_self: bool | None = None,
) -> str:
    """The stable key of one call: a 32-character hex digest.

    With ``fn`` the arguments are bound through its signature, so ``f(1, b=2)`` and
    ``f(a=1, b=2)`` agree; without it positional arguments are named ``arg0``, ``arg1``...
    ``key_self``: as on ``@cache``, for a method's receiver.
    """
    kb = KeyBuilder(fn, name, ignore=ignore, volatile=volatile, key_self=key_self)
    return kb.key(namespace, args, kwargs or {})


def explain(
    namespace: str,
    name: str,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    fn: Callable[..., Any] | None = None,
    ignore: Iterable[str] = (),
    volatile: Iterable[str | re.Pattern[str]] = (),
    key_self: bool | None = None,
) -> KeyParts:
    """The parts that make a key, for debugging: version, namespace, name, canonical args."""
    from ._key_parts import KeyParts

    kb = KeyBuilder(fn, name, ignore=ignore, volatile=volatile, key_self=key_self)
    canon = kb.canonical(args, kwargs or {})
    return KeyParts(
        left_out=kb.left_out(args, kwargs or {}),
        key=digest(namespace, name, canon),
        version=KEY_SCHEMA_VERSION,
        namespace=namespace,
        name=name,
        arguments=orjson.loads(canon),
        canonical=canon.decode(),
    )


def env_volatile() -> tuple[str, ...]:
    """Extra volatile items from ``DEJACACHE_VOLATILE``: names, dotted paths and ``re:``
    patterns, comma separated (or newline separated, which keeps commas inside patterns)."""
    raw = os.environ.get("DEJACACHE_VOLATILE", "")
    items = tuple(p.strip() for p in raw.split("\n" if "\n" in raw else ",") if p.strip())
    try:
        _vol.check(items)  # a malformed item is an error here, never silently ignored
    except ConfigurationError as exc:
        raise ConfigurationError(f"DEJACACHE_VOLATILE: {exc}") from None
    return items
