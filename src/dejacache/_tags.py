"""Type tags: the values :class:`~.codec.JsonCodec` stores that are not plain JSON.

Tuples, bytes, sets, datetimes, UUID, Decimal, Path, Enum, dataclasses, pydantic models, NaN
and infinities, big integers and dicts with non-string keys are written as one-member dicts
whose key starts with NUL (:func:`to_tree`) and rebuilt from them (:func:`revive`). Apart
from ``codec.py``, whose hits on plain JSON (the common LLM answer) are one ``orjson.loads``:
loaded by the first value encoded (a recording) or the first tagged value decoded, so a
replay of plain answers never reads its 21 KB of bytecode.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import importlib
import sys
import uuid
from collections.abc import Iterable
from typing import Any

from ._frozen import FrozenDict, FrozenList, thaw
from .errors import SerializationError

__all__ = ["Resolver", "from_tree", "revive", "to_tree", "why_deep"]

_T = "\x00"  # tag keys start with NUL, which user dict keys are escaped away from
_DECIMAL_BITS = 2000


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


def why_deep(value: Any) -> str:
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


class Resolver:
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

    def revive(self, tree: Any) -> Any:
        """The value ``tree`` stands for, its classes found by this resolver."""
        return revive(tree, self)


def _path_class(name: str) -> Any:
    """The class a ``path`` tag names (concrete paths come back as this system's ``Path``)."""
    import pathlib

    if name in ("PurePosixPath", "PureWindowsPath", "PurePath"):
        return getattr(pathlib, name)
    return pathlib.Path


def revive(tree: Any, resolve: Resolver) -> Any:
    t = type(tree)
    if t is list:
        return [revive(x, resolve) for x in tree]
    if t is not dict:
        return tree
    if len(tree) == 1:
        (tag, arg), = tree.items()
        if tag[:1] == _T:
            tag = tag[1:]
            if tag == "tuple":
                return tuple(revive(x, resolve) for x in arg)
            if tag == "bytes":
                import base64

                return base64.b64decode(arg)
            if tag == "bytearray":
                import base64

                return bytearray(base64.b64decode(arg))
            if tag == "set":
                return {revive(x, resolve) for x in arg}
            if tag == "frozenset":
                return frozenset(revive(x, resolve) for x in arg)
            if tag == "map":
                return {revive(k, resolve): revive(v, resolve) for k, v in arg}
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
                return resolve(arg[0], "enum")(revive(arg[1], resolve))
            if tag == "dataclass":
                cls = resolve(arg[0], "dataclass")
                values = {k: revive(v, resolve) for k, v in arg[1].items()}
                init = {f.name for f in dataclasses.fields(cls) if f.init}
                obj = cls(**{k: v for k, v in values.items() if k in init})
                for k, v in values.items():
                    if k not in init:
                        object.__setattr__(obj, k, v)
                return obj
            if tag == "model":
                return resolve(arg[0], "model").model_validate(arg[1])
            raise SerializationError(f"unknown type tag {tag!r}")
    return {k: revive(v, resolve) for k, v in tree.items()}


def from_tree(tree: Any, *, allow: Iterable[str] = ()) -> Any:
    """Inverse of :func:`to_tree`."""
    return revive(tree, Resolver(allow))
