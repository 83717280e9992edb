"""What a function made inside another one captured, and what a class made at run time
holds, as keys hold them: one rule for closures and for the classes made at run time.

``make(1)`` and ``make(2)`` return closures, or classes whose methods are closures, with one
qualified name (``make.<locals>.Cfg``) and one signature: what tells them apart is what they
captured, and a class's own data attributes (``LABEL = tag``; ``type("Cfg", (), {...})``
names two classes alike too). A closure's key holds its captured values (``keys._Captures``);
the key of an object whose class was made at run time (:func:`made_at_run_time`), of such a
classmethod's class and of such a dataclass or model argument holds its class's (``_receiver``,
``keys._object_data``), all read here: the cells (:func:`cells`, :func:`class_cells`), which
values are keyed (:func:`immutable`) and how (:func:`form`, :func:`with_values`).

Only immutable values are keyed. A list, a dict, an object, a function or a module captured
is most often a client, a helper or a counter the function appends to: its contents change
each call, and keying them would make every call miss. A closure leaves them out of its key,
as it always did, and so does an argument; an object whose class holds one is left out and
named as any attribute that is not data (``_receiver``): its methods may answer by it, so no
key may hold it without.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import sys
import types
from collections.abc import Mapping
from uuid import UUID

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["CAPTURED", "CODE", "HELD", "LATE", "cells", "class_cells", "class_tag", "form",
           "immutable", "made_at_run_time", "values", "with_values"]

#: The member holding captured values (a closure's bound arguments, an object's data): not an
#: identifier, so no parameter or attribute spells it (a ``**kwargs`` key or an attribute
#: starting with ``<`` gets one more ``<`` where this member can be written).
CAPTURED: Final = "<captured>"
#: Under :data:`CAPTURED`, ``Class.<code>``: a digest of the code of the functions written for
#: a class made at run time (``_code_digest``).
CODE: Final = "<code>"
_ENUM_TAG: Final = "\x00enum"  # (``keys._Canon._enum_form``'s spelling)
#: Types of modules ``import dejacache`` does not load, keyed as data (leaves) when one is.
LATE: Final = {"decimal": ("Decimal",),
                "pathlib": ("PurePosixPath", "PureWindowsPath", "PosixPath", "WindowsPath")}
_IMMUTABLE: frozenset[type] = frozenset({type(None), bool, int, float, str, bytes,
                                         _dt.datetime, _dt.date, _dt.time, _dt.timedelta,
                                         UUID})


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
    """``(name, cell)`` of what tells ``t`` apart from another class of its name, for
    :data:`CAPTURED`: for each class of its MRO made at run time (:func:`made_at_run_time`),
    what the functions its body holds capture and its own data attributes (``Cfg.LABEL``:
    a reader with a cell's ``cell_contents``, so both are read at each call by
    :func:`values`); none when every class of it is importable, whose key stays as it was.
    A name two classes of its MRO hold from different scopes is ``name#i`` for the later
    one, ``i`` its place in the MRO. Worked out once per class (:data:`HELD`)."""
    held = HELD.get(t)
    if held is None:
        held = _class_cells(t)
        if len(HELD) < _HELD_MAX:
            HELD[t] = held
    return held


def _class_cells(t: type) -> tuple[tuple[str, Any], ...]:
    out: dict[str, Any] = {}
    for i, klass in enumerate(t.__mro__):
        if not made_at_run_time(klass):
            continue
        prefix = f"{klass.__qualname__}."
        found: list[tuple[str, Any]] = []
        own = _own_functions(klass, prefix)
        for _name, fn in own:
            found.extend(cells(fn))
        if own:
            found.append((f"{klass.__name__}.{CODE}", _Fixed(_code_digest(own))))
        found.extend((f"{klass.__name__}.{name}", _Attr(klass, name))
                     for name in _data_names(klass))
        for name, cell in found:
            if out.setdefault(name, cell) is not cell:
                out.setdefault(f"{name}#{i}", cell)
    return tuple(sorted(out.items()))


def _own_functions(klass: type, prefix: str) -> list[tuple[str, types.FunctionType]]:
    """``(attribute, function)`` of the functions written for ``klass`` (in its body, or
    handed to ``type()`` as they were written): not one a decorator or dataclasses generated
    and renamed (a dataclass's ``__repr__`` captures a set and a function, and its object is
    data)."""
    return [(name, fn) for name, fn in _functions(klass)
            if (code := fn.__code__.co_qualname).startswith(prefix) or fn.__qualname__ == code]


def _code_digest(fns: list[tuple[str, types.FunctionType]]) -> str:
    """A digest of the code of ``fns``, the functions written for a class made at run time:
    two classes of one name whose methods differ only in their code (``type("Cfg", (),
    {"run": f1})`` and one with ``f2``; two ``class Cfg`` statements in one factory)
    answer differently, and what they capture is the same. Worked out once per class."""
    import hashlib  # (a class made at run time only)

    h = hashlib.blake2b(digest_size=8)
    for name, fn in fns:
        h.update(f"{name}\0{_code_text(fn)}\0".encode(errors="surrogatepass"))
    return h.hexdigest()


def _code_text(fn: types.FunctionType) -> str:
    """What a function does, as text that does not change with the Python version: its
    source (the span its instructions cover, so two lambdas on one line differ), its
    parameters and defaults; its bytecode when its source cannot be read (``exec``)."""
    code = fn.__code__
    head = (f"{code.co_varnames[:_arg_count(code)]}{code.co_flags & _KINDS:x}"
            f"{_stable(fn.__defaults__)}{_stable(fn.__kwdefaults__)}")
    return head + _source(code, fn.__globals__)


def _arg_count(code: Any) -> int:
    n: int = code.co_argcount + code.co_kwonlyargcount
    return n + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)


# *args, **kwargs, generator, coroutine, async generator: flags that say how it is called.
_KINDS = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


def _source(code: Any, module: dict[str, Any]) -> str:
    """The text of ``code``'s span in its file (``module``: its globals, for a loader's
    source), or its marshalled bytes in hex when there is none to read."""
    import linecache
    import marshal

    spans: list[tuple[int, int, int, int]] = []
    stack = [code]
    while stack:
        c = stack.pop()
        # (a zero-width position is the function's entry, at its first line's column 0)
        spans.extend(p for p in c.co_positions()
                     if None not in p and (p[0], p[2]) != (p[1], p[3]))
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
    lines = linecache.getlines(code.co_filename, module)
    if not spans or not lines:
        return marshal.dumps(code).hex()
    (l0, c0), (l1, c1) = min((p[0], p[2]) for p in spans), max((p[1], p[3]) for p in spans)
    if l1 > len(lines):
        return marshal.dumps(code).hex()
    text = "".join(lines[l0 - 1:l1]).encode(errors="surrogatepass")
    end = len(text) - len(lines[l1 - 1].encode(errors="surrogatepass")) + c1
    return text[c0:end].decode(errors="surrogatepass")


def _stable(v: Any) -> str:
    """A default value as text the same in every process (a frozenset's items sorted, an
    Enum member by its class and name); a value that is not immutable by its type alone."""
    t = type(v)
    if t is tuple:
        return "(" + ",".join(_stable(x) for x in v) + ")"
    if t is frozenset:
        return "{" + ",".join(sorted(_stable(x) for x in v)) + "}"
    if t is dict:  # (``__kwdefaults__``)
        return "{" + ",".join(sorted(f"{k}={_stable(x)}" for k, x in v.items())) + "}"
    if isinstance(v, enum.Enum):
        return f"{class_tag(t)}.{v.name}"
    if t in _IMMUTABLE:
        return repr(v)
    return f"<{class_tag(t)}>"


class _Fixed:
    """A value worked out once, read as a cell is (``cell_contents``)."""

    __slots__ = ("cell_contents",)

    def __init__(self, value: Any) -> None:
        self.cell_contents = value


#: :func:`class_cells` per class, read first where a call costs (a hit's argument).
HELD: dict[type, tuple[tuple[str, Any], ...]] = {}
_HELD_MAX = 4096
# Class attributes frameworks set that are no data of the class: ABCMeta's cache, a named
# tuple's defaults and pydantic's settings (its values and the model's dump reflect them).
_MACHINERY = frozenset({"_abc_impl", "_field_defaults", "model_config"})


def made_at_run_time(t: type) -> bool:
    """Whether ``t`` is not the class its module and qualified name name (a factory's
    ``make.<locals>.Cfg``, one ``type()`` built, one whose module is not loaded): its name
    is then that of other classes, so its tag alone does not tell it apart."""
    obj: Any = sys.modules.get(t.__module__)
    for part in t.__qualname__.split("."):
        try:
            obj = getattr(obj, part, None)
        except Exception:  # a module's __getattr__ that raises: not found by its name
            return True
    return obj is not t


def _data_names(klass: type) -> list[str]:
    """The names of ``klass``'s own data attributes: not dunders, methods or other
    descriptors, classes or modules, nor a dataclass field's default (its objects' data
    holds the field); which of them are keyed is :func:`immutable`'s."""
    fields = vars(klass).get("__dataclass_fields__", ())
    return [name for name, v in vars(klass).items()
            if not (name[:2] == "__" == name[-2:] or name in _MACHINERY or name in fields
                    or hasattr(type(v), "__get__") or isinstance(v, (type, types.ModuleType)))]


class _Attr:
    """A class's data attribute read as a cell is (``cell_contents``, ValueError when gone):
    the class may be given another value, as a factory may rebind what it captured."""

    __slots__ = ("klass", "name")

    def __init__(self, klass: type, name: str) -> None:
        self.klass, self.name = klass, name

    @property
    def cell_contents(self) -> Any:
        try:
            return vars(self.klass)[self.name]
        except KeyError:
            raise ValueError(self.name) from None


def _functions(klass: type) -> list[tuple[str, types.FunctionType]]:
    """``(attribute, function)`` of the functions ``klass``'s body defines: methods, static
    and class methods, properties' accessors, a ``cached_property``'s, under their
    decorators (``@cache``'s, any ``functools.wraps``)."""
    out: list[tuple[str, types.FunctionType]] = []
    for name, v in vars(klass).items():
        if isinstance(v, property):
            parts: tuple[Any, ...] = (v.fget, v.fset, v.fdel)
        else:
            # (any class attribute: one whose __getattr__ raises is no function of it)
            try:
                parts = (inspect.unwrap(getattr(v, "__func__", None) or v),
                         getattr(v, "func", None))
            except Exception:
                continue
        out.extend((name, f) for f in parts if isinstance(f, types.FunctionType))
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


def with_values(data: Any, held: tuple[tuple[str, Any], ...]
                ) -> tuple[dict[Any, Any], list[tuple[str, Any]]]:
    """``data`` (an object's, a mapping or any value) with the immutable values of ``held``
    under :data:`CAPTURED` (a key starting with ``<`` gets one more, so none spells it; a
    value that is no mapping is under ``"<"``, which no escaped key is), and ``(name,
    value)`` of the others (:func:`values`)."""
    keyed, other = values(held)
    if isinstance(data, Mapping):
        out = {("<" + k if type(k) is str and k[:1] == "<" else k): v for k, v in data.items()}
    else:
        out = {"<": data}
    if keyed:
        out[CAPTURED] = keyed
    return out, other
