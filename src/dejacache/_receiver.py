"""How a cached method's receiver (the ``self`` or ``cls`` it is called on) is keyed.

Two ``Client(model="a")`` and ``Client(model="b")`` asking ``ask("hi")`` are two questions, so
the key holds the instance: ``[class tag, data]``, the data being a plain instance's
``__dict__`` and ``__slots__`` values, a dataclass's or a model's fields, or a ``dict``,
``list``, ``str``... subclass's content as the base type (under ``"*"``) with its attributes.
A class that defines ``__dejacache_key__``, an Enum member or a named tuple is keyed as any
argument of its type is; a classmethod's class by its qualified name (``keys``).

The form is a plain two-item list, not a tagged object, so the hit path writes it with the
rest of the arguments in one ``orjson.dumps`` and remembers it as plain data (a tagged
object is walked in Python on every hit: ~0.15 µs a container). Only a receiver is keyed
in the receiver's place (its parameter), so no other argument can spell it.

An attribute the key cannot hold (a client, a lock, a socket, a callable, anything the
canonicaliser refuses) is left out and named (``KeyParts.left_out``), never an error, unless
``key_self=True`` asks for every attribute: then it is a ``ConfigurationError`` naming it.
A type that is never data is left out by a verdict remembered per type; a container's
content is asked about only when the key cannot be written with it (:func:`recheck`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import sys
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from ._core import volatile as _vol
from ._secrets import with_secrets, wraps_secret
from .errors import ConfigurationError

__all__ = ["Receiver", "class_tag", "model_data", "receiver_form", "recheck", "rule_for"]

_SCALARS = frozenset({str, int, float, bool, type(None)})
# Values of these types are always keyed, with a spelling of their own (``keys._tagged``).
_LEAVES = (bytes, bytearray, memoryview, _dt.date, _dt.time, _dt.timedelta, UUID, str, int,
           float)
# Values of these may be keyed, as their content says.
_CONTAINERS = (set, frozenset, enum.Enum, Mapping, list, tuple)
NEVER, ALWAYS, ASK = 0, 1, 2
_VERDICT: dict[type, int] = {}  # per attribute type (``_verdict``)
_MEMO_MAX = 4096

AS_IS, FIELDS, MODEL, BUILTIN, PLAIN = range(5)


def class_tag(t: type) -> str:
    return f"{t.__module__}:{t.__qualname__}"


def model_data(obj: Any) -> Any:
    """A model's data as keys hold it: its JSON dump, its secrets keyed by their values."""
    try:
        data = obj.model_dump(mode="json")
    except TypeError:  # model_dump() without a mode parameter (pydantic v1 shims, SDK objects)
        data = obj.model_dump()
    except ValueError:  # a field JSON cannot hold (bytes that are not UTF-8): its own data
        data = obj.model_dump()
    return with_secrets(obj, data)


class Receiver:
    """What the key does with receivers of one class, worked out once per class: its kind,
    its tag, and where its data is (field names, slot descriptors, the base type's copy)."""

    __slots__ = ("base", "fields", "kind", "slots", "tag")

    def __init__(self, kind: int, t: type, fields: tuple[str, ...] = (),
                 base: Callable[[Any], Any] | None = None) -> None:
        self.kind, self.tag, self.fields, self.base = kind, class_tag(t), fields, base
        self.slots = _slot_members(t) if kind in (BUILTIN, PLAIN) else ()


def rule_for(t: type) -> Receiver:
    """How an instance of ``t`` is keyed as a receiver."""
    if (getattr(t, "__dejacache_key__", None) is not None or issubclass(t, enum.Enum)
            or t in _SCALARS or (issubclass(t, tuple) and hasattr(t, "_fields"))):
        return Receiver(AS_IS, t)  # keyed as an argument of its type is
    if dataclasses.is_dataclass(t):
        return Receiver(FIELDS, t, tuple(f.name for f in dataclasses.fields(t)))
    if hasattr(t, "model_dump"):
        return Receiver(MODEL, t)
    for base, copy in _BASES:
        if issubclass(t, base):
            return Receiver(BUILTIN, t, base=copy)
    return Receiver(PLAIN, t)


_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (Mapping, dict), (list, list), (tuple, list), (str, str.__str__), (int, int),
    (float, float))


def _slot_members(t: type) -> tuple[tuple[str, Any], ...]:
    """``(attribute name, member descriptor)`` of every slot along ``t``'s MRO."""
    out: dict[str, Any] = {}
    for klass in reversed(t.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            mangled = f"_{klass.__name__.lstrip('_')}{name}" if (
                name.startswith("__") and not name.endswith("__")) else name
            member = klass.__dict__.get(mangled)
            if member is not None and hasattr(member, "__get__"):
                out[mangled] = member
    return tuple(out.items())


def _data(value: Any, rule: Receiver) -> dict[str, Any]:
    kind = rule.kind
    if kind == FIELDS:
        return {n: getattr(value, n) for n in rule.fields}
    if kind == MODEL:
        data = model_data(value)
        return dict(data) if isinstance(data, Mapping) else {"*": data}
    out: dict[str, Any] = {}
    own = getattr(value, "__dict__", None)
    if type(own) is dict:
        out.update(own)
    for name, member in rule.slots:
        try:
            out[name] = member.__get__(value, type(value))
        except AttributeError:  # an unset slot
            continue
    if rule.base is not None:
        out["*"] = rule.base(value)
    return out


def receiver_form(value: Any, rule: Receiver, recv: str, paths: tuple[_vol.Path, ...],
                  patterns: tuple[Any, ...], strict: bool, where: str,
                  keyable: Callable[[Any], bool] | None) -> tuple[Any, tuple[str, ...]]:
    """``(form, names left out)``: the receiver as the key holds it, ``value`` itself
    (``AS_IS``) or ``[tag, data]``, and the attributes its data leaves out. ``paths``: the
    volatile paths under the receiver (``recv.name...``). ``keyable`` (whether the
    canonicaliser can key a value) is asked of every attribute; None (the hit path): an
    attribute whose type the key never holds is left out, any other kept for the key to try
    (:func:`recheck` when it fails)."""
    if rule.kind == AS_IS:
        return value, ()
    data = _data(value, rule)
    if paths or patterns:
        data = _vol.apply({recv: data}, paths, patterns)[recv]
    out: list[Any] = []
    for k, v in data.items():
        if keyable is not None:
            if not keyable(v):
                out.append(k)
            continue
        tv = type(v)
        if tv in _SCALARS:
            continue
        verdict = _VERDICT.get(tv)
        if verdict is None:
            verdict = _verdict(tv)
        if verdict == NEVER:
            out.append(k)
    if out:
        data = _without(data, out, rule.tag, recv, strict, where)
    return [rule.tag, data], tuple(sorted(out, key=str))


def recheck(form: Any, recv: str, strict: bool, where: str,
            keyable: Callable[[Any], bool]) -> list[Any] | None:
    """A receiver ``form`` the key could not be written with, without the attributes the
    canonicaliser refuses; None when it is not a ``[tag, data]`` form or none is refused (the
    failure was elsewhere). Asked only then: checking every container attribute on every
    call wrote a 200-message history twice per hit (13 µs more than the key's own 24)."""
    if type(form) is not list or len(form) != 2 or type(form[1]) is not dict:
        return None
    tag, data = form
    out = [k for k, v in data.items() if not keyable(v)]
    return [tag, _without(data, out, tag, recv, strict, where)] if out else None


def _without(data: dict[str, Any], out: list[Any], tag: str, recv: str, strict: bool,
             where: str) -> dict[str, Any]:
    if strict:
        first = sorted(out, key=str)[0]
        raise ConfigurationError(
            f"key_self=True on {where}: attribute {first!r} of {tag} "
            f"({_type_name(data[first])}) cannot be keyed; make it data, give the class "
            f"a __dejacache_key__, mask it (volatile=['{recv}.{first}']), or drop "
            "key_self=True to leave it out of the key")
    return {k: v for k, v in data.items() if k not in out}


def _type_name(v: Any) -> str:
    t = type(v)
    return f"{t.__module__}.{t.__qualname__}"


def _verdict(t: type) -> int:
    """Whether values of type ``t`` are keyed: ``ALWAYS`` (fixed spellings), ``ASK`` (their
    content decides: containers, dataclasses, models, a class's hook; the key tries them) or
    ``NEVER`` (a client, a lock, a function, a class: what the canonicaliser refuses
    whatever it holds)."""
    if (getattr(t, "__dejacache_key__", None) is not None or dataclasses.is_dataclass(t)
            or hasattr(t, "model_dump") or issubclass(t, _CONTAINERS)):
        found = ASK
    elif issubclass(t, _LEAVES) or _late_leaf(t) or wraps_secret(t):
        found = ALWAYS
    else:
        found = NEVER
    if len(_VERDICT) < _MEMO_MAX:
        _VERDICT[t] = found
    return found


def _late_leaf(t: type) -> bool:
    """Decimal and PurePath, when their modules are loaded (else no instance exists)."""
    dec, pl = sys.modules.get("decimal"), sys.modules.get("pathlib")
    return bool((dec is not None and issubclass(t, dec.Decimal))
                or (pl is not None and issubclass(t, pl.PurePath)))
