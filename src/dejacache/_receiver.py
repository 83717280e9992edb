"""How a cached method's receiver (the ``self`` or ``cls`` it is called on) is keyed.

Two ``Client(model="a")`` and ``Client(model="b")`` asking ``ask("hi")`` are two questions, so
the key holds the instance: ``[class tag, data]``, the data being a plain instance's
``__dict__`` and ``__slots__`` values, a dataclass's or a model's fields, or a ``dict``,
``list``, ``str``... subclass's content as the base type (under ``"*"``) with its attributes.
A class that defines ``__dejacache_key__``, an Enum member or a named tuple is keyed as any
argument of its type is; a classmethod's class by its qualified name (:func:`class_form`).

The form is a plain two-item list, not a tagged object, so the hit path writes it with the
rest of the arguments in one ``orjson.dumps`` and remembers it as plain data (a tagged
object is walked in Python on every hit: ~0.15 µs a container). Only a receiver is keyed
in the receiver's place (its parameter), so no other argument can spell it.

An attribute holding a plain object (an instance of a class written in Python over
``object``, neither a dataclass nor a model, with no ``__dejacache_key__``) is keyed in the
receiver's own form, ``[class tag, data]``, when every attribute of it is data by these same
rules, plain objects included, up to ``NESTED_DEPTH`` objects deep: ``Agent("a")`` and
``Agent("b")`` holding ``Config("a")`` and ``Config("b")`` are two questions. One attribute
that is not data (a lock, a client, a callable...), a reference back to an object on the way
down (a cycle) or more depth leaves the whole object out: keyed by what a client holds (its
headers, its pools), a method would miss on every run. A two-item list or tuple attribute
whose first item could be a tag (:func:`_escaped`) is written as ``["", value]``, so no
attribute's list spells an object: a tag always holds a ``:``.

A list, tuple or dict (its values) holding plain objects is keyed by the same rule, each
object in its ``[tag, data]`` form, the container written ``[":", items]`` (:func:`_container`):
``":"`` is no class's tag, and a two-item list starting with it is escaped, so a list of
objects never spells a list of lists that look like them. A set's items are
:class:`Members`, which the canonicaliser writes as a set (sorted by their canonical forms,
so the key is the same under any hash seed); a member's step in a path is :data:`MEMBER`,
which ``[*]`` reaches and no index does. Containers count towards the depth
and a container on the way down is a cycle; one item that is not data leaves the whole
container out. The hit path looks at a container's first item only (a 200-message history is
not walked on every call); a container whose plain objects come later fails the key, and the
key is written again with every container walked (``deep``).

A class made at run time (a function's ``make.<locals>.Cfg``, one ``type()`` built) shares
its qualified name with other classes: its objects' data also holds what tells it apart, its
class-body data and what its methods capture (``_captures.class_cells``; :func:`_captured`),
and a classmethod's class is written with them (:func:`class_form`). A value there that is
not immutable leaves a nested object out, as an attribute that is not data does, and is left
out of the receiver's.

An attribute the key cannot hold (a client, a lock, a socket, a callable, anything the
canonicaliser refuses) is left out and named (``KeyParts.left_out``), never an error, unless
``key_self=True`` asks for every attribute: then it is a ``ConfigurationError`` naming it
(``self.config.lock`` when it is inside a plain object). A type that is never data is left
out by a verdict remembered per type, and a plain object's class remembers the attribute
that last made one of its instances not data, asked first (an ``openai.OpenAI`` is left out
by one look at its stream class, not a walk of its HTTP client); a container's content is
asked about only when the key cannot be written with it (:func:`recheck`).
"""

from __future__ import annotations

import copy as _copy
import dataclasses
import datetime as _dt
import enum
import sys
import types
from collections.abc import Callable, Mapping
from uuid import UUID

from . import _captures
from ._captures import class_tag
from ._core import volatile as _vol
from ._core.volatile import Masked
from ._secrets import with_secrets, wraps_secret
from .errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any
else:
    from ._hints import Any

__all__ = ["ITEMS", "MEMBER", "NESTED_DEPTH", "Masked", "Members", "Receiver", "class_form",
           "class_tag", "model_data", "receiver_form", "recheck", "rule_for"]

#: How many plain objects deep a receiver's attributes are followed (``self.a.b.c``...).
NESTED_DEPTH = 8
#: The first item of a container holding plain objects as the key writes it, ``[ITEMS, items]``.
ITEMS = ":"
#: A set member's step in a path (``self.tools[*].name``): it has no index, so ``[*]`` is
#: the one path step that reaches it, and an index never does (which member is the second
#: changes with the process's hash seed).
MEMBER = -1


class Members(tuple[Any, ...]):
    """The items of a set holding plain objects, each in its form: keyed as a set is (the
    canonicaliser sorts their canonical forms), not in the order the set gave them."""

    __slots__ = ()


_SCALARS = frozenset({str, int, float, bool, type(None)})
# Values of these types are always keyed, with a spelling of their own (``keys._tagged``).
_LEAVES = (bytes, bytearray, memoryview, _dt.date, _dt.time, _dt.timedelta, UUID, str, int,
           float)
# Values of these may be keyed, as their content says.
_CONTAINERS = (enum.Enum, Mapping, list, tuple)
# OBJECT: a plain object, data when each of its attributes is (:func:`_nested`); ARRAY: a
# list or tuple, which the key writes as an array (ASK, and :func:`_escaped` when of two);
# MAP: a dict (ASK); SET: a set or frozenset (ASK); all walked for plain objects
# (:func:`_container`).
NEVER, ALWAYS, ASK, OBJECT, ARRAY, MAP, SET = 0, 1, 2, 3, 4, 5, 6
_VERDICT: dict[type, int] = {}  # per attribute type (``_verdict``)
_RULES: dict[type, Receiver] = {}  # per plain object type (``_rule``), and by its tag:
_KINDS: dict[str, type] = {}
# Per plain object type: the attribute that last made an instance not data, asked first.
_BLOCKER: dict[type, str] = {}
_MEMO_MAX = 4096
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (a class statement's)
_PTR = tuple.__itemsize__  # a pointer's size
# Their classes are written in Python, hold only attributes, and are not data: an unused
# asyncio.Lock is three Nones and a False, a logging.Logger every logger of the process.
_NOT_DATA_MODULES = frozenset({
    "asyncio", "concurrent", "contextvars", "io", "logging", "multiprocessing", "queue",
    "sched", "selectors", "socket", "socketserver", "ssl", "subprocess", "threading",
    "weakref"})

AS_IS, FIELDS, MODEL, BUILTIN, PLAIN = range(5)


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

    __slots__ = ("base", "cells", "fields", "kind", "slots", "tag")

    def __init__(self, kind: int, t: type, fields: tuple[str, ...] = (),
                 base: Callable[[Any], Any] | None = None) -> None:
        self.kind, self.tag, self.fields, self.base = kind, class_tag(t), fields, base
        self.slots = _slot_members(t) if kind in (BUILTIN, PLAIN) else ()
        # What the methods of a class made in a function captured (none for a class written
        # at a module's top level): the class's qualified name is that of every class the
        # function makes, so these tell them apart (:func:`_captured`).
        self.cells = _captures.class_cells(t) if kind != AS_IS else ()

    def but(self, own: tuple[Any, ...]) -> Receiver:
        """This rule for the receiver of a method whose own closure holds cells ``own``:
        without them, which that method's key holds by the closure rule (``keys._Captures``:
        its ``ignore=`` honoured, a list it appends to left out as it always was)."""
        rule = _copy.copy(self)
        rule.cells = tuple((n, c) for n, c in self.cells if not any(c is o for o in own))
        return rule


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


# Why an attribute is left out: its path from the receiver (``("self", "config", "lock")``;
# an int is a list's index), the type of what it holds and what is wrong with it.
At = tuple[str | int, ...]
Why = tuple[At, type, str]
_NOT_DATA = "is not data"
_CYCLE = "refers back to an object holding it (a cycle)"
_UNKEPT = "is held by its class (captured by a method or set in its body) and is not immutable data"


def dotted(at: At) -> str:
    """``("self", "tools", 1, "lock")`` -> ``self.tools[1].lock`` (a volatile path's syntax;
    a set's member is ``[*]``)."""
    return "".join(("[*]" if s == MEMBER else f"[{s}]") if type(s) is int else f".{s}"
                   for s in at).lstrip(".")


def class_form(cls: type, own: tuple[Any, ...]) -> tuple[Any, tuple[str, ...]]:
    """``(form, names left out)`` of a classmethod's class: its qualified name, and for a
    class made at run time what tells it apart from others of that name, ``[name,
    {CAPTURED: values}]`` (:func:`_captures.class_cells`, less the cells ``own`` of the
    method's own closure, which its key holds by the closure rule). A class whose every
    class is importable pays one dict look-up and keeps its key."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    held = _captures.HELD.get(cls)
    if held is None:
        held = _captures.class_cells(cls)
    if not held:
        return name, ()
    keyed, other = _captures.values(
        tuple((n, c) for n, c in held if not any(c is o for o in own)))
    left = tuple(sorted(f"{_captures.CAPTURED}.{n}" for n, _ in other))
    return ([name, {_captures.CAPTURED: keyed}] if keyed else name), left


def _captured(data: dict[str, Any], rule: Receiver
              ) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """``data`` of an object whose class's methods capture values (``rule.cells``), with
    the immutable ones under ``CAPTURED`` (an attribute starting with ``<`` gets one more,
    so none spells it), and ``(name, value)`` of the others: its methods may answer by them,
    so the object is not data (:data:`_UNKEPT`). Read at each call, as a closure's are (the
    factory may rebind them): a receiver holding one such object with one captured str
    costs 78k instructions a hit, 61k when its captures were left out (callgrind); a class
    written at a module's top level pays one attribute read."""
    return _captures.with_values(data, rule.cells)


class _Walk:
    """One receiver's walk into the plain objects it holds: the objects on the way down
    (a revisit is a cycle), the volatile paths and patterns, and how values are asked."""

    __slots__ = ("active", "deep", "every", "keyable", "objects", "paths", "patterns")

    def __init__(self, receiver: Any, paths: tuple[_vol.Path, ...], patterns: tuple[Any, ...],
                 keyable: Callable[[Any], bool], every: bool, deep: bool) -> None:
        self.active = {id(receiver)}
        self.paths, self.patterns, self.keyable, self.every = paths, patterns, keyable, every
        self.deep = every or deep  # walk every container, not only those starting with one
        self.objects = 0  # plain objects keyed so far (a container holding none is as it is)


def receiver_form(value: Any, rule: Receiver, recv: str, paths: tuple[_vol.Path, ...],
                  patterns: tuple[Any, ...], strict: bool, where: str,
                  keyable: Callable[[Any], bool], every: bool,
                  deep: bool = False) -> tuple[Any, tuple[str, ...]]:
    """``(form, names left out)``: the receiver as the key holds it, ``value`` itself
    (``AS_IS``) or ``[tag, data]``, and the attributes its data leaves out. ``paths``: the
    volatile paths under the receiver (``recv.name...``). ``keyable`` (whether the
    canonicaliser can key a value) is asked of every attribute when ``every`` (explain);
    else (the hit path) an attribute whose type the key never holds is left out, any other
    kept for the key to try (:func:`recheck` when it fails), plain objects walked, and the
    containers whose first item is one; ``deep``: every container (the key failed)."""
    if rule.kind == AS_IS:
        return value, ()
    data = _data(value, rule)
    out: list[Any] = []
    whys: dict[Any, Why] | None = None
    if rule.cells:  # (a class made in a function: what its methods captured)
        data, unkept = _captured(data, rule)
        for name, v in unkept:
            k = f"{_captures.CAPTURED}.{name}"
            out.append(k)
            whys = whys or {}
            whys[k] = (recv, _captures.CAPTURED, name), type(v), _UNKEPT
    if paths or patterns:
        data = _vol.apply({recv: data}, paths, patterns)[recv]
    walk = None
    for k, v in data.items():
        if not every:  # (the hit path, inlined for what is not a plain object)
            tv = type(v)
            if tv in _SCALARS:
                continue
            verdict = _VERDICT.get(tv)
            if verdict is None:
                verdict = _verdict(tv)
            if verdict != OBJECT:
                if verdict == NEVER:
                    out.append(k)
                    continue
                if verdict < ARRAY:
                    continue
                # (:func:`_starts_with_object` inlined: the call cost a list 0.15 µs a hit; a
                # type not seen yet is walked once the key fails, then known)
                first = (v[0] if verdict == ARRAY else next(iter(
                    v.values() if verdict == MAP else v))) if v else None
                if not deep and _VERDICT.get(type(first)) != OBJECT:
                    if verdict == ARRAY and len(v) == 2:
                        data[k] = _escaped(v)
                    continue
            elif not (strict or paths) and _blocked(v, tv):  # (strict names the path)
                out.append(k)
                continue
        if walk is None:
            walk = _Walk(value, paths, patterns, keyable, every, deep)
        why = _attr(data, k, v, (recv,), walk, every)
        if why is not None:
            out.append(k)
            whys = whys or {}
            whys[k] = why
    if out:
        data = _without(data, out, rule.tag, recv, strict, where, whys or {})
    return (Masked if patterns else list)((rule.tag, data)), tuple(sorted(out, key=str))


def _starts_with_object(v: Any, verdict: int) -> bool:
    """Whether container ``v``'s first item (a mapping's first value) is a plain object: one
    look, so a container of data costs the hit path what it did (a 200-message history)."""
    if not v:
        return False
    first = v[0] if verdict == ARRAY else next(iter(v.values() if verdict == MAP else v))
    t = type(first)
    return t not in _SCALARS and (_VERDICT[t] if t in _VERDICT else _verdict(t)) == OBJECT


def _blocked(v: Any, t: type) -> bool:
    """Whether the attribute that last made a ``t`` not data holds, in ``v``, a value of a
    type that never is: a receiver holding a client then pays a look, not a walk (an
    ``openai.OpenAI``'s hit cost 1.6 µs more through :func:`_nested`, 0.4 this way)."""
    name = _BLOCKER.get(t)
    return name is not None and _VERDICT.get(type(_peek(v, name))) == NEVER


def _peek(v: Any, name: str) -> Any:
    """Attribute ``name`` of ``v`` as its data holds it (its ``__dict__``, else a slot):
    never a class attribute or a ``__getattr__``'s answer."""
    own = getattr(v, "__dict__", None)
    if type(own) is dict and name in own:
        return own[name]
    member = getattr(type(v), name, None)
    return getattr(v, name, None) if type(member) is types.MemberDescriptorType else None


def _escaped(v: Any) -> Any:
    """A two-item list or tuple attribute that could spell a plain object's form ``[tag,
    data]`` (its first item a str holding ``:``, or ``""``, or an Enum member) as
    ``["", v]``: a tag always holds a ``:``, so neither spells the other."""
    first = v[0]
    if isinstance(first, enum.Enum) or (isinstance(first, str) and (not first or ":" in first)):
        return ["", v]
    return v


def _attr(data: Any, k: Any, v: Any, at: At, walk: _Walk, ask: bool,
          step: str | int | None = None) -> Why | None:
    """Why item ``k`` (value ``v``) of ``data``, the data of the object (or the container)
    at ``at``, is not data, or None, ``data[k]`` then as the key holds it (a plain object's
    form, a container's, an escaped list). ``ask``: ask ``keyable`` of values that may be
    data (else the key tries them). ``step``: ``k`` in a path (``str(k)`` unless given)."""
    tv = type(v)
    verdict = ALWAYS if tv in _SCALARS else _VERDICT.get(tv)
    if verdict is None:
        verdict = _verdict(tv)
    here = (*at, str(k) if step is None else step)
    if verdict == OBJECT:
        form = _nested(v, here, walk)
        if type(form) is list:
            data[k] = form
            return None
        return form  # type: ignore[return-value]
    if verdict >= ARRAY and (walk.deep or _starts_with_object(v, verdict)):
        items = _container(v, here, walk)
        if type(items) is tuple:
            return items
        if items is not None:
            data[k] = v = items
            verdict = ASK
    if verdict == NEVER or (ask and not walk.keyable(v)):
        return here, tv, _NOT_DATA
    if verdict == ARRAY and len(v) == 2:
        data[k] = _escaped(v)
    return None


def _container(v: Any, at: At, walk: _Walk) -> list[Any] | Why | None:
    """A list's, tuple's, mapping's or set's form when it holds plain objects (at any
    depth), ``[ITEMS, items]``, each item as an attribute is written (a set's in
    :class:`Members`, at :data:`MEMBER`); None when it holds none (the key writes it as it
    is); else why not (an item that is not data, a cycle, too deep)."""
    oid = id(v)
    if oid in walk.active:
        return at, type(v), _CYCLE
    if len(at) > NESTED_DEPTH + 1:
        return None  # the key tries it: a plain object in it then leaves it out
    mapping = isinstance(v, dict)
    members = isinstance(v, (set, frozenset))
    items: Any = dict(v) if mapping else list(v)
    before = walk.objects
    walk.active.add(oid)
    try:
        for k, item in (list(items.items()) if mapping else enumerate(items)):
            if type(item) in _SCALARS:
                continue
            why = _attr(items, k, item, at, walk, False,
                        None if mapping else MEMBER if members else k)
            if why is not None:
                return why
    finally:
        walk.active.discard(oid)
    # Written as it is when it holds no plain object, escapes undone: as the hit path, which
    # does not walk it, writes it.
    if walk.objects == before:
        return None
    return [ITEMS, Members(items) if members else items]


def _nested(value: Any, at: At, walk: _Walk) -> list[Any] | Why:
    """A plain object's form, ``[tag, data]`` as a receiver's, when every attribute of it
    is data, else why not (the first attribute that is not, a cycle, or too deep)."""
    t = type(value)
    if len(at) > NESTED_DEPTH + 1:
        return at, t, f"is more than {NESTED_DEPTH} objects deep"
    oid = id(value)
    if oid in walk.active:
        return at, t, _CYCLE
    rule = _RULES.get(t) or _rule(t)
    walk.active.add(oid)
    try:
        blocker = _BLOCKER.get(t)
        if blocker is not None and not walk.paths:  # (a path may mask it)
            why = _attr({}, blocker, _peek(value, blocker), at, walk, True)
            if why is not None:
                return why
        data = _data(value, rule)
        if rule.cells:
            data, unkept = _captured(data, rule)
            if unkept:  # (its methods may answer by it: the object is not data)
                name, v = unkept[0]
                return (*at, _captures.CAPTURED, name), type(v), _UNKEPT
        if walk.paths or walk.patterns:
            data = _masked(data, at, walk)
        every = walk.every
        for k, v in data.items():
            if not every and type(v) in _SCALARS:
                continue
            why = _attr(data, k, v, at, walk, every)
            if why is not None:
                _remember(t, _cheapest(data, k))
                return why
    finally:
        walk.active.discard(oid)
    walk.objects += 1
    return [rule.tag, data]


def _rule(t: type) -> Receiver:
    rule = rule_for(t)
    if len(_RULES) < _MEMO_MAX:
        _RULES[t] = rule
        _KINDS[rule.tag] = t
    return rule


def _remember(t: type | None, name: Any) -> None:
    if t is not None and type(name) is str and (t in _BLOCKER or len(_BLOCKER) < _MEMO_MAX):
        _BLOCKER[t] = name


def _cheapest(data: dict[Any, Any], k: Any) -> Any:
    """The attribute to ask first next time: one whose type is never data if there is one
    (an ``openai.OpenAI`` by its stream class: one look, where its HTTP client, the first
    found, is four objects deep), else ``k``."""
    for name, v in data.items():
        tv = type(v)
        if tv not in _SCALARS and (_VERDICT[tv] if tv in _VERDICT else _verdict(tv)) == NEVER:
            return name
    return k


def _masked(data: dict[str, Any], at: At, walk: _Walk) -> dict[str, Any]:
    """``data`` (of the object at ``at``) less the volatile paths under it, patterns
    applied: applied to ``{"self": {"config": data}}``, so a path matches (and is noted as
    matched) as written, ``self.config.started_at``."""
    n = len(at)
    mine = tuple(p for p in walk.paths if len(p) > n and _under(p, at))
    if not mine:  # (patterns read no path: the data alone is what they see)
        return dict(_vol.apply(data, (), walk.patterns)) if walk.patterns else data
    if all(type(s) is str for s in at):
        tree: Any = data
        for step in reversed(at):
            tree = {step: tree}
        tree = _vol.apply(tree, mine, walk.patterns)
        for step in at:
            tree = tree[step]
        return dict(tree)
    return _masked_item(data, n, mine, walk.patterns)


def _masked_item(data: dict[str, Any], n: int, mine: tuple[_vol.Path, ...],
                 patterns: tuple[Any, ...]) -> dict[str, Any]:
    """``data``, of an object inside a container (its path holds an index), less ``mine``,
    the paths under it (their first ``n`` steps lead to it), each noted as the user wrote it
    when it matched: applied from the object down, as a wrapping like :func:`_masked`'s
    would be a list as long as the index (quadratic in a long list's length)."""
    from ._core.volatile_watch import WATCH

    data = _vol.apply(data, (), patterns) if patterns else data
    w = WATCH.get()
    for p in mine:
        new = _vol.apply({"": data}, (("", *p[n:]),), ())[""]
        if new is not data and p not in w.matched:
            w.note(p, True)
        data = new
    return dict(data)


def _under(path: _vol.Path, at: At) -> bool:
    """Whether ``path`` starts with ``at`` (``[*]`` matching any index)."""
    return all(a == b or (a is None and type(b) is int) for a, b in zip(path, at, strict=False))


def recheck(form: Any, recv: str, strict: bool, where: str,
            keyable: Callable[[Any], bool]) -> list[Any] | None:
    """A receiver ``form`` the key could not be written with, without the attributes the
    canonicaliser refuses; None when it is not a ``[tag, data]`` form or none is refused (the
    failure was elsewhere). Asked only then: checking every container attribute on every
    call wrote a 200-message history twice per hit (13 µs more than the key's own 24)."""
    if type(form) not in (list, Masked) or len(form) != 2 or type(form[1]) is not dict:
        return None
    tag, data = form
    whys = {k: _refused(v, (recv, str(k)), keyable) for k, v in data.items() if not keyable(v)}
    if not whys:
        return None
    out = (tag, _without(data, list(whys), tag, recv, strict, where, whys))
    return Masked(out) if type(form) is Masked else list(out)


def _refused(value: Any, at: At, keyable: Callable[[Any], bool]) -> Why:
    """Why ``value`` (at ``at``), which the canonicaliser refuses, is not data: inside a
    plain object's form, the attribute refused (remembered for its class, so the next
    instance is left out before its key is tried)."""
    if (type(value) is list and len(value) == 2 and type(value[0]) is str
            and ":" in value[0] and type(value[1]) is dict):  # (lists like it are escaped)
        for k, v in value[1].items():
            if not keyable(v):
                _remember(_KINDS.get(value[0]), k)
                return _refused(v, (*at, str(k)), keyable)
    return at, type(value), _NOT_DATA


def _without(data: dict[str, Any], out: list[Any], tag: str, recv: str, strict: bool,
             where: str, whys: Mapping[Any, Why]) -> dict[str, Any]:
    if strict:
        first = sorted(out, key=str)[0]
        at, t, reason = whys.get(first) or ((recv, str(first)), type(data[first]), _NOT_DATA)
        if len(at) > 2 or reason != _NOT_DATA:
            path = dotted(at)
            fix = ("make it immutable (a tuple, a frozen dataclass...), give its class a "
                   "__dejacache_key__," if reason == _UNKEPT else "make it data, give its "
                   f"class a __dejacache_key__, mask it (volatile=['{path}']),")
            raise ConfigurationError(
                f"key_self=True on {where}: attribute {first!r} of {tag} cannot be keyed: "
                f"{path} ({_name_of(t)}) {reason}; {fix} or drop key_self=True to leave it "
                "out of the key")
        raise ConfigurationError(
            f"key_self=True on {where}: attribute {first!r} of {tag} "
            f"({_name_of(t)}) cannot be keyed; make it data, give the class "
            f"a __dejacache_key__, mask it (volatile=['{recv}.{first}']), or drop "
            "key_self=True to leave it out of the key")
    return {k: v for k, v in data.items() if k not in out}


def _name_of(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _verdict(t: type) -> int:
    """Whether values of type ``t`` are keyed: ``ALWAYS`` (fixed spellings), ``ASK`` (their
    content decides: containers, dataclasses, models, a class's hook; the key tries them) or
    ``OBJECT`` (a plain object: data when its attributes are, :func:`_nested`) or ``NEVER``
    (a lock, a socket, a function, a class: what the key refuses whatever it holds)."""
    if (getattr(t, "__dejacache_key__", None) is not None or dataclasses.is_dataclass(t)
            or hasattr(t, "model_dump")):
        found = ASK
    elif issubclass(t, (list, tuple)) and not hasattr(t, "_fields"):
        found = ARRAY
    elif issubclass(t, dict):  # (another Mapping may compute its values: the key asks it)
        found = MAP
    elif issubclass(t, (set, frozenset)):
        found = SET
    elif issubclass(t, _CONTAINERS):
        found = ASK
    elif issubclass(t, _LEAVES) or _late_leaf(t) or wraps_secret(t):
        found = ALWAYS
    else:
        found = OBJECT if _plain_class(t) else NEVER
    if len(_VERDICT) < _MEMO_MAX:
        _VERDICT[t] = found
    return found


def _late_leaf(t: type) -> bool:
    """Decimal and PurePath, when their modules are loaded (else no instance exists)."""
    dec, pl = sys.modules.get("decimal"), sys.modules.get("pathlib")
    return bool((dec is not None and issubclass(t, dec.Decimal))
                or (pl is not None and issubclass(t, pl.PurePath)))


def _plain_class(t: type) -> bool:
    """Whether an instance of ``t`` holds all it is in attributes (``__dict__`` and
    ``__slots__``), which the key can then read: a class written in Python over ``object``
    alone (or ``SimpleNamespace``), neither callable, a class, an exception, nor one of
    ``_NOT_DATA_MODULES``."""
    if t is types.SimpleNamespace:
        return True
    if (not t.__flags__ & _HEAPTYPE or t.__itemsize__ or issubclass(t, (type, BaseException))
            or str(getattr(t, "__module__", "")).partition(".")[0] in _NOT_DATA_MODULES
            or any("__call__" in vars(k) for k in t.__mro__)):
        return False
    slots = len(_slot_members(t))
    # A base written in C holds what no attribute shows (a socket's descriptor, a lock's
    # state): its instances are bigger than an object with these slots, a dict and a weakref.
    return bool(t.__dictoffset__ or slots) and (
        t.__basicsize__ <= object.__basicsize__ + _PTR * (slots + 2))
