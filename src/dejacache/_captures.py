"""What a function made inside another one captured, as keys hold it: one rule for closures
and for the classes a factory makes.

``make(1)`` and ``make(2)`` return closures, or classes whose methods are closures, with one
qualified name (``make.<locals>.Cfg``) and one signature: what tells them apart is what they
captured. A closure's key holds its captured values (``keys._Captures``), and the key of an
object whose class was made in a function holds those of its class's methods
(``_receiver``), both read here: the cells (:func:`cells`, :func:`class_cells`), which values
are keyed (:func:`immutable`) and how (:func:`form`).

Only immutable values are keyed. A list, a dict, an object, a function or a module captured
is most often a client, a helper or a counter the function appends to: its contents change
each call, and keying them would make every call miss. A closure leaves them out of its key,
as it always did; an object whose class captured one is left out and named as any attribute
that is not data (``_receiver``): its methods may answer by it, so no key may hold it without.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import sys
import types
from typing import Any, Final
from uuid import UUID

__all__ = ["CAPTURED", "LATE", "cells", "class_cells", "class_tag", "form", "immutable",
           "values"]

#: The member holding captured values (a closure's bound arguments, an object's data): not an
#: identifier, so no parameter or attribute spells it (a ``**kwargs`` key or an attribute
#: starting with ``<`` gets one more ``<`` where this member can be written).
CAPTURED: Final = "<captured>"
_ENUM_TAG: Final = "\x00enum"  # (``keys._Canon._enum_form``'s spelling)
#: Types of modules ``import dejacache`` does not load, keyed as data (leaves) when one is.
LATE: Final = {"decimal": ("Decimal",),
                "pathlib": ("PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath")}
_IMMUTABLE: frozenset[type] = frozenset({type(None), bool, int, float, str, bytes,
                                         _dt.datetime, _dt.date, _dt.time, _dt.timedelta,
                                         UUID})
_LOCALS = "<locals>"


def class_tag(t: type) -> str:
    """How keys spell a class: ``module:qualified name``."""
    return f"{t.__module__}:{t.__qualname__}"


@functools.lru_cache(maxsize=256)
def _assigned_free(code: Any) -> frozenset[str]:
    """Free variables a function (or a function inside it) assigns with ``nonlocal``: its own
    state (a counter), not what it was made with; keyed, every call would miss."""
    import dis  # decorating a closure only

    out: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        out.update(str(i.argval) for i in dis.get_instructions(c)
                   if i.opname in ("STORE_DEREF", "DELETE_DEREF"))
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
    return frozenset(out)


def cells(target: Any, ignore: frozenset[str] = frozenset()) -> tuple[tuple[str, Any], ...]:
    """``(name, cell)`` of the values a closure's key holds: what ``make(1)`` and
    ``make(2)`` were made with. Not ``__class__`` (``super()``'s), nor variables it assigns
    itself, nor those ``ignore`` names."""
    closure = getattr(target, "__closure__", None)
    code = getattr(target, "__code__", None)
    if not closure or code is None:
        return ()
    mine = _assigned_free(code)
    return tuple((n, c) for n, c in zip(code.co_freevars, closure, strict=False)
                 if n != "__class__" and n not in mine and n not in ignore)


def class_cells(t: type) -> tuple[tuple[str, Any], ...]:
    """``(name, cell)`` of what the methods of ``t`` written in a function's body capture
    (those of its bases made in one too), for :data:`CAPTURED`; none for a class written at
    a module's top level, whose key stays as it was. A name two classes of its MRO capture
    from different scopes is ``name#i`` for the later one, ``i`` its place in the MRO."""
    out: dict[str, Any] = {}
    for i, klass in enumerate(t.__mro__):
        prefix = f"{klass.__qualname__}."
        if _LOCALS not in prefix:
            continue
        for fn in _functions(klass):
            # Written in the class body: not one a decorator or dataclasses generated (a
            # dataclass's __repr__ captures a set and a function, and its object is data).
            if not fn.__code__.co_qualname.startswith(prefix):
                continue
            for name, cell in cells(fn):
                if out.setdefault(name, cell) is not cell:
                    out.setdefault(f"{name}#{i}", cell)
    return tuple(sorted(out.items()))


def _functions(klass: type) -> list[types.FunctionType]:
    """The functions ``klass``'s body defines: methods, static and class methods,
    properties' accessors, a ``cached_property``'s, under their decorators (``@cache``'s,
    any ``functools.wraps``)."""
    out: list[types.FunctionType] = []
    for v in vars(klass).values():
        if isinstance(v, property):
            parts: tuple[Any, ...] = (v.fget, v.fset, v.fdel)
        else:
            # (any class attribute: one whose __getattr__ raises is no function of it)
            try:
                parts = (inspect.unwrap(getattr(v, "__func__", None) or v),
                         getattr(v, "func", None))
            except Exception:
                continue
        out.extend(f for f in parts if isinstance(f, types.FunctionType))
    return out


def immutable(v: Any, depth: int = 0) -> bool:
    """Whether a captured value is keyed: a value of a type that cannot change (tuples,
    frozensets and frozen dataclasses of them too)."""
    t = type(v)
    if t in _IMMUTABLE or isinstance(v, enum.Enum):
        return t is not _dt.time or v.tzinfo is None or v.utcoffset() is not None
    if depth > 8:
        return False
    names = LATE.get(t.__module__)
    if names is not None:  # Decimal, PurePath's kinds (their modules are loaded: one is)
        mod = sys.modules.get(t.__module__)
        return mod is not None and any(getattr(mod, n, None) is t for n in names)
    if isinstance(v, (tuple, frozenset)):  # named tuples too
        return all(immutable(x, depth + 1) for x in v)
    params = getattr(t, "__dataclass_params__", None)
    if params is not None and params.frozen:
        return all(immutable(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v))
    return False


def form(v: Any) -> Any:
    """A captured value as the key holds it: an Enum member (bare, or in a plain tuple)
    under its class, since inside plain data it would be its value (``keys._Canon.loose``).
    The tag is escaped like a caller's NUL key in the full form, which these members always
    take (no dict is captured as data, so nothing else writes it)."""
    if isinstance(v, enum.Enum):
        return {_ENUM_TAG: [class_tag(type(v)), form(v.value)]}
    if type(v) is tuple:
        return [form(x) for x in v]
    return v


def values(held: tuple[tuple[str, Any], ...]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """``(keyed, not keyed)``: the values of cells ``held`` as the key holds them (read at
    each call: the enclosing function may rebind them; one not assigned yet is neither), and
    ``(name, value)`` of those that are not immutable."""
    keyed: dict[str, Any] = {}
    other: list[tuple[str, Any]] = []
    for name, cell in held:
        try:
            v = cell.cell_contents
        except ValueError:  # not assigned yet
            continue
        if immutable(v):
            keyed[name] = form(v)
        else:
            other.append((name, v))
    return keyed, other
