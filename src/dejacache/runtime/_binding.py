"""Entity templates: ``key="cart:{user_id}"`` formatted from a call's arguments."""

from __future__ import annotations

import inspect
import string
import sys
import types
from collections import Counter, OrderedDict, UserList, deque
from collections.abc import Callable, Mapping, Set
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Template", "entity_value", "is_error_result"]

_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD
# Past this many digits an integral Decimal is not made an int (Decimal("1e999999999")
# would take gigabytes); Python formats no int that long anyway (``int_max_str_digits``).
_MAX_DIGITS = 4300


def entity_value(v: Any) -> Any:
    """The value an entity template formats for ``v``: values equal to each other (and so
    one dict key) become one value. Numbers (``1 == 1.0 == True == Decimal("1")``) become
    the ``int`` for a whole number and the ``float`` otherwise; ``str`` and ``int`` are kept.

    The reader's and the writer's templates both format through this, so a read of
    ``order_id=1`` and a write of ``order_id=1.0`` name one entity. Two unequal numbers may
    meet on one float (``Decimal("0.1")`` and ``0.1``): a write to one then invalidates the
    other too, a miss, never a stale read. A ``str`` is kept as given: ``"1"`` names the
    entity ``1`` does (the text is the same), ``"1.0"`` does not. Tuples, lists, dicts and
    sets hold their items by the same rule, a dict's items and a set's in one order (a set
    as a tuple): ``{"a", "b"}`` iterates in an order each process draws at random. A value
    whose ``__eq__`` is one this module knows is formatted by that equality's rule (see
    ``_RULES`` and ``_learn``); any other keeps its own text."""
    tv = type(v)
    if tv is int or tv is str:
        return v
    if tv is float:  # (the ABC checks below cost ~2 µs)
        return int(v) if v.is_integer() else v
    if tv is bool:
        return int(v)
    if tv is tuple or tv is list:  # (exact types: a subclass goes by its ``__eq__`` below)
        return tv(map(entity_value, v))
    if tv is dict:
        return _dict(v.items())
    if tv is set or tv is frozenset:
        return _set(v)
    if isinstance(v, int):  # an IntEnum, whether or not ``numbers`` is loaded
        return int(v)
    if isinstance(v, float):  # numpy's float64
        f = float(v)
        return int(f) if f.is_integer() else f
    # A value equal as a builtin's are (a named tuple to its tuple, an OrderedDict to its
    # dict, a ``(str, Enum)`` member to its str) names what that builtin would: found by the
    # ``__eq__`` it compares with, one dict lookup (an ABC check is ~1 µs).
    eq = tv.__eq__
    rule = _RULES.get(eq, _UNKNOWN)
    if rule is _UNKNOWN:
        rule = _LEARNED.get(eq, _UNKNOWN)
        if rule is _UNKNOWN:
            rule = _learn(eq, tv)
    if rule is not None:
        return rule(v)
    return _number(v)


def _number(v: Any) -> Any:
    """A number of a kind the fast checks above do not know (``Decimal``, ``Fraction``,
    ``complex``, a registered ``numbers.Number``) by value; anything else as given."""
    # ``numbers`` and ``decimal`` as loaded by whoever made ``v``: a tool cache loads
    # neither (``decimal`` is ~3 ms), and a number of theirs cannot exist before they are.
    num, dec = sys.modules.get("numbers"), sys.modules.get("decimal")
    is_dec = dec is not None and isinstance(v, dec.Decimal)
    if not (is_dec or (num is not None and isinstance(v, num.Number))):
        return v
    if num is not None and isinstance(v, num.Complex) and not isinstance(v, num.Real):
        if v.imag:
            return v
        v = v.real
    if is_dec and v.is_finite() and v.adjusted() > _MAX_DIGITS:
        return v  # (formats as its own text: equal to an int Python cannot print anyway)
    try:
        whole = int(v)
        if whole == v:
            return whole
    except (ArithmeticError, ValueError, TypeError):  # inf, nan
        pass
    if isinstance(v, float):
        return v
    try:
        return float(v)
    except (ArithmeticError, ValueError, TypeError):
        return v


def _first_repr(item: tuple[Any, Any]) -> str:
    return repr(item[0])


def _dict(items: Any) -> dict[Any, Any]:
    return dict(sorted(((entity_value(k), entity_value(x)) for k, x in items),
                       key=_first_repr))


def _set(v: Any) -> tuple[Any, ...]:
    return tuple(sorted(map(entity_value, v), key=repr))


class _Shown:
    """A text standing for a value (a dataclass's fields by value): it formats, prints and
    reprs as the text, so a list holding one prints as the list of the value would."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(self.text, spec)


def _range(v: range) -> range:
    """Ranges are equal when they hold the same numbers (``range(0) == range(2, 2)``,
    ``range(0, 3, 2) == range(0, 4, 2)``): the shortest spelling of those."""
    n = len(v)
    if n == 0:
        return range(0)
    return range(v.start, v.start + 1) if n == 1 else range(v.start, v[-1] + 1, v.step)


def _memory(v: memoryview) -> Any:
    # A view of bytes equals the bytes; a view of numbers equals a view of equal numbers.
    # (A view of numbers is equal to bytes of the same item values too, and a bytearray to
    # an array of the same raw bytes: those chains are left apart.)
    if v.format in ("B", "b", "c"):
        return v.tobytes()
    return _Shown(f"memoryview({entity_value(v.tolist())!r})")


def _namespace(v: types.SimpleNamespace) -> types.SimpleNamespace:
    # Equal when their attributes are, whatever order they were set in (the repr's order).
    return types.SimpleNamespace(**dict(sorted((k, entity_value(x))
                                               for k, x in vars(v).items())))


_UNKNOWN: Any = object()
_Rule = Callable[[Any], Any] | None
# By the ``__eq__`` a value compares with: what it names. (A subclass that keeps its base's
# ``__eq__`` is equal to the base's values, so it names what they name: a named tuple
# formats as its tuple, a defaultdict as its dict, a ``(str, Enum)`` member as its str.)
_RULES: dict[Any, _Rule] = {
    tuple.__eq__: lambda v: tuple(map(entity_value, v)),
    list.__eq__: lambda v: list(map(entity_value, v)),
    UserList.__eq__: lambda v: list(map(entity_value, v.data)),
    deque.__eq__: lambda v: deque(map(entity_value, v)),  # (maxlen does not count)
    dict.__eq__: lambda v: _dict(dict.items(v)),
    OrderedDict.__eq__: lambda v: _dict(v.items()),  # (to a dict; so its order cannot count)
    # (A Counter with a zero count is equal to one without it, and to the dict with it:
    # named as the dict, so the first pair is the one gap left.)
    Counter.__eq__: lambda v: _dict(v.items()),
    Mapping.__eq__: lambda v: _dict(v.items()),  # ChainMap, UserDict
    types.MappingProxyType.__eq__: lambda v: _dict(v.items()),
    set.__eq__: _set,
    frozenset.__eq__: _set,
    Set.__eq__: _set,
    type({}.keys()).__eq__: _set,
    type({}.items()).__eq__: _set,
    str.__eq__: str.__str__,
    bytes.__eq__: lambda v: b"".join((v,)),  # (exact bytes: a subclass's ``bytes()`` is its own)
    bytearray.__eq__: bytes,
    memoryview.__eq__: _memory,
    range.__eq__: _range,
    slice.__eq__: lambda v: slice(*map(entity_value, (v.start, v.stop, v.step))),
    types.SimpleNamespace.__eq__: _namespace,
    object.__eq__: None,
}
# Rules learnt for other ``__eq__``s (datetime's, a dataclass's), bounded: a process that
# makes classes on the fly does not grow this without end.
_LEARNED: dict[Any, _Rule] = {}
_MAX_LEARNED = 1024
_OBJECT_FORMAT: Any = object.__format__


def _learn(eq: Any, tv: type) -> _Rule:
    """The rule for an ``__eq__`` not in ``_RULES``: one of a module loaded after this one
    (read from ``sys.modules``: a datetime cannot exist before ``datetime`` is imported),
    one generated field by field (dataclasses, attrs, pydantic), else None (own text)."""
    rule = _late_stdlib_rule(eq) or _fieldwise_rule(eq, tv)
    if len(_LEARNED) >= _MAX_LEARNED:
        _LEARNED.clear()
    _LEARNED[eq] = rule
    return rule


def _late_stdlib_rule(eq: Any) -> _Rule:
    dt = sys.modules.get("datetime")
    if dt is not None:
        if eq is dt.datetime.__eq__:
            return _datetime
        if eq is dt.time.__eq__:
            return _time
        if eq is dt.timezone.__eq__:  # equal when their offsets are, whatever their names
            return lambda v: dt.timezone(v.utcoffset(None))
    pathlib = sys.modules.get("pathlib")
    if pathlib is not None and eq is pathlib.PurePath.__eq__:
        win = pathlib.PureWindowsPath  # (equal whatever their letters' case)
        return lambda v: win(str(v).lower()) if isinstance(v, win) else v
    arr = sys.modules.get("array")
    if arr is not None and eq is arr.array.__eq__:  # equal item by item, whatever the type
        return lambda v: _Shown(f"array({entity_value(v.tolist())!r})")
    return None


def _datetime(v: Any) -> Any:
    """Aware datetimes are equal when they name one instant (``12:00+00:00 == 13:00+01:00``):
    that instant in UTC. Naive ones by their fields (the ``fold`` never counts)."""
    dt = sys.modules["datetime"]
    base = dt.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
    off = v.utcoffset()
    if off is None:
        return base
    if base.replace(tzinfo=v.tzinfo, fold=1 - v.fold).utcoffset() != off:
        # In an hour its clock repeats or skips, a datetime is equal only to those with the
        # same tzinfo and fields, whatever their fold: named by those, with fold 0's offset.
        return base.replace(tzinfo=v.tzinfo)
    try:
        return (base - off).replace(tzinfo=dt.timezone.utc)
    except OverflowError:  # an instant before year 1 or past 9999: from a day Python has
        day = dt.datetime(1, 1, 2)
        return _Shown(f"{day.replace(tzinfo=dt.timezone.utc)} {base - day - off}")


def _time(v: Any) -> Any:
    """Aware times are equal when their clocks less their offsets are (the offset's whole
    seconds: Python leaves its microseconds out, and nothing wraps at midnight): that time
    in UTC, or past midnight either way the nearest clock with the offset it takes."""
    dt = sys.modules["datetime"]
    off = v.utcoffset()
    if off is None:
        return dt.time(v.hour, v.minute, v.second, v.microsecond)
    secs = v.hour * 3600 + v.minute * 60 + v.second - (off.days * 86400 + off.seconds)
    clock = min(max(secs, 0), 86399)
    tz = dt.timezone.utc if clock == secs else dt.timezone(dt.timedelta(seconds=clock - secs))
    return dt.time(clock // 3600, clock // 60 % 60, clock % 60, v.microsecond, tzinfo=tz)


def _fieldwise_rule(eq: Any, tv: type) -> _Rule:
    """The rule for an ``__eq__`` that compares the class and its fields, written by
    ``dataclasses`` (compiled from a string), attrs or pydantic; else None."""
    pydantic = sys.modules.get("pydantic.main")
    if pydantic is not None and eq is pydantic.BaseModel.__eq__:
        return _pydantic
    owner = next((c for c in tv.__mro__ if c.__dict__.get("__eq__") is eq), None)
    code = getattr(eq, "__code__", None)
    if owner is None or code is None:
        return None
    made_in = code.co_filename
    if made_in == "<string>" and "__dataclass_fields__" in owner.__dict__:
        fields = sys.modules["dataclasses"].fields(owner)
        return _Fields(tuple((f.name, None) for f in fields if f.compare and f.repr))
    if made_in.startswith("<attrs generated") and "__attrs_attrs__" in owner.__dict__:
        return _Fields(tuple((a.name, a.eq_key) for a in owner.__dict__["__attrs_attrs__"]
                             if a.eq and a.repr))
    return None


def _own_text(tv: type, str_method: Any) -> bool:
    # A class that says how it prints (its own ``__str__`` or ``__format__``) is named by
    # that: what it prints is what the user put in the template.
    return tv.__str__ is not str_method or tv.__format__ is not _OBJECT_FORMAT


class _Fields:
    """A dataclass's or attrs class's text from the fields its ``__eq__`` compares (those
    its repr shows: a ``repr=False`` field, as often as not a secret, stays out), each by
    value: ``Sku(id=1)`` for ``Sku(id=1.0)`` too."""

    __slots__ = ("fields",)

    def __init__(self, fields: tuple[tuple[str, Callable[[Any], Any] | None], ...]) -> None:
        self.fields = fields

    def __call__(self, v: Any) -> Any:
        tv = type(v)
        if _own_text(tv, object.__str__):
            return v
        shown = []
        for name, key in self.fields:
            x = getattr(v, name)
            shown.append(f"{name}={entity_value(x if key is None else key(x))!r}")
        return _Shown(f"{tv.__qualname__}({', '.join(shown)})")


def _pydantic(v: Any) -> Any:
    """A pydantic model as ``str()`` shows it (``x=1 y='a'``) from what its ``__eq__``
    compares: its fields by value (``repr=False`` ones left out), then its extra ones."""
    tv = type(v)
    if _own_text(tv, sys.modules["pydantic.main"].BaseModel.__str__):
        return v
    fields, values = tv.__pydantic_fields__, vars(v)
    items = [(n, values[n]) for n, f in fields.items() if f.repr and n in values]
    items.extend(sorted((v.__pydantic_extra__ or {}).items(), key=_first_repr))
    return _Shown(" ".join(f"{n}={entity_value(x)!r}" for n, x in items))


def _text(v: Any) -> str:
    """One template field's text, for a field with no format spec or conversion."""
    tv = type(v)
    return v if tv is str else str(v) if tv is int else format(entity_value(v), "")


_Parsed = list[tuple[str, str | None, str | None, str | None]]
_FORMATTER = string.Formatter()


def _render(parsed: _Parsed, bound: Mapping[str, Any]) -> str:
    """``text.format_map(bound)`` from the template's parse, with every field's value passed
    through :func:`entity_value` before its conversion and format spec (``{order.id}``,
    ``{n:05d}``, ``{x!r}``). (``string.Formatter.vformat`` parsed the text on every call:
    twice the cost.)"""
    out = []
    for lit, field, spec, conv in parsed:
        out.append(lit)
        if field is None:
            continue
        value = entity_value(_FORMATTER.get_field(field, (), bound)[0])
        if conv:
            value = _FORMATTER.convert_field(value, conv)
        if spec and "{" in spec:  # a nested field: "{price:{width}}"
            spec = _render(list(_FORMATTER.parse(spec)), bound)
        out.append(format(value, spec or ""))
    return "".join(out)


# A field that cannot be formatted (a missing name, a spec the value refuses, an int too
# long to print, a list that holds itself) names no entity: the reader runs uncached, the
# writer invalidates the whole resource.
_UNBOUND = (TypeError, KeyError, AttributeError, IndexError, ValueError, RecursionError)


class Template:
    """Formats an entity template with the call's arguments, defaults applied.

    Field names are checked against the signature when the tool is decorated, so a typo
    fails at import time instead of silently sharing one entity between all calls.
    """

    __slots__ = ("_defaults", "_fast", "_fields", "_names", "_parsed", "_pieces", "_sig",
                 "nparams", "one", "roots", "text")

    def __init__(self, fn: Callable[..., Any], text: str, where: str) -> None:
        self.text = text
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        self._names = tuple(p.name for p in params)
        self.nparams = len(self._names)
        self._defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self._fast = all(p.kind is _PK for p in params)
        has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        try:
            parsed: _Parsed = list(_FORMATTER.parse(text))
        except ValueError as exc:
            raise ConfigurationError(f"{where}: bad key template {text!r}: {exc}") from None
        self._parsed = parsed
        #: Every field the text is formatted from, those of nested specs too
        #: (``"{price:{width}}"``), and the arguments they start from (``roots``).
        self._fields = tuple(_all_fields(parsed, where, text))
        self.roots = frozenset(_root(f) for f in self._fields)
        # Templates of bare parameter names (the usual ``"cart:{user_id}"``) are formatted
        # piece by piece from the arguments, without binding a dict (a third of the cost):
        # (text before, parameter position, name) per field, then the text after.
        index = {n: i for i, n in enumerate(self._names)}
        self._pieces: tuple[tuple[tuple[str, int, str], ...], str] | None = None
        if self._fast and all(f is None or (f in index and not spec and not conv)
                              for _, f, spec, conv in parsed):
            pieces: list[tuple[str, int, str]] = []
            text_before = ""  # ``{{`` and ``}}`` come as literal-only items: joined here
            for lit, f, _, _ in parsed:
                text_before += lit
                if f is not None:
                    pieces.append((text_before, index[f], f))
                    text_before = ""
            self._pieces = (tuple(pieces), text_before)
        # The position of the one parameter a one-field template names ("cart:{user_id}"):
        # a call passing it by position, alone, formats to a function of its value.
        self.one: int | None = (self._pieces[0][0][1] if self._pieces is not None
                                and len(self._pieces[0]) == 1 else None)
        for f in self._fields:
            root = _root(f)
            if not root or root.isdigit():
                raise ConfigurationError(
                    f"{where}: key template {text!r} must name arguments, like "
                    "'cart:{user_id}'"
                )
            if root not in self._names and not has_var_kw:
                raise ConfigurationError(
                    f"{where}: key template {text!r} names {root!r}, which is not a "
                    f"parameter (parameters: {', '.join(self._names) or 'none'})"
                )

    def value_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The one argument a one-field template formats when it is an exact ``int`` or
        ``str`` passed by position without keywords (the entity is then a function of it
        alone, and equal such values are the same value), else None. The tool cache's sync
        hit path inlines this rule (``_cached._sync_wrapper``)."""
        i = self.one
        if i is None or kwargs or not i < len(args) <= self.nparams:
            return None
        v = args[i]
        tv = type(v)
        return v if tv is int or tv is str else None

    def format(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """The entity for this call, or None when the arguments do not bind (the tool will
        raise its own ``TypeError``)."""
        pieces = self._pieces
        if pieces is not None and len(args) <= len(self._names):
            # As ``format_map`` of the bound arguments: a keyword wins over a position (that
            # call raises in the tool), then the position, then the default.
            if len(pieces[0]) == 1:  # the usual "cart:{user_id}"
                lit, i, name = pieces[0][0]
                try:
                    v = (kwargs[name] if name in kwargs else args[i] if i < len(args)
                         else self._defaults[name])
                    return lit + _text(v) + pieces[1]
                except _UNBOUND:
                    return None
            out = []
            try:
                for lit, i, name in pieces[0]:
                    if name in kwargs:
                        v = kwargs[name]
                    elif i < len(args):
                        v = args[i]
                    else:
                        v = self._defaults[name]
                    out.append(lit)
                    out.append(_text(v))
            except _UNBOUND:
                return None
            out.append(pieces[1])
            return "".join(out)
        try:
            return _render(self._parsed, self._bound(args, kwargs))
        except _UNBOUND:
            return None

    def values(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any] | None:
        """The values of every field, as given (not as :func:`entity_value` names them), or
        None when the arguments do not bind. Unequal values can format to one entity
        (``Decimal("0.1")`` and ``0.1``, ``"{x:.0f}"`` of 1.2 and 1.4, ``1`` and ``"1"``):
        where the arguments they come from are not keyed, these tell the entries apart."""
        try:
            bound = self._bound(args, kwargs)
            return [_FORMATTER.get_field(f, (), bound)[0] for f in self._fields]
        except _UNBOUND:
            return None

    def _bound(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, defaults applied and ``**kwargs`` spread; raises
        one of ``_UNBOUND`` when they do not bind."""
        if self._fast and len(args) <= len(self._names):
            bound = dict(zip(self._names, args, strict=False))
            bound.update(kwargs)
            for k, v in self._defaults.items():
                bound.setdefault(k, v)
            return bound
        b = self._sig.bind(*args, **kwargs)
        b.apply_defaults()
        bound = {}
        for k, v in b.arguments.items():
            if self._sig.parameters[k].kind is inspect.Parameter.VAR_KEYWORD:
                bound.update(v)
            else:
                bound[k] = v
        return bound


def _root(field: str) -> str:
    """The argument a field starts from: ``order`` of ``order.id`` and ``items[0]``."""
    return field.split(".", 1)[0].split("[", 1)[0]


def _all_fields(parsed: _Parsed, where: str, text: str) -> list[str]:
    out: list[str] = []
    for _, field, spec, _ in parsed:
        if field is not None:
            out.append(field)
        if spec and "{" in spec:
            try:
                out += _all_fields(list(_FORMATTER.parse(spec)), where, text)
            except ValueError as exc:
                raise ConfigurationError(f"{where}: bad key template {text!r}: {exc}") from None
    return out


def is_error_result(value: Any) -> bool:
    """True for results a tool marks as errors (``is_error``/``isError``, MCP-style)."""
    if value is None or type(value) in (str, int, float, bool, list, tuple, bytes):
        return False
    if isinstance(value, Mapping):
        return bool(value.get("is_error") or value.get("isError"))
    try:
        return bool(getattr(value, "is_error", False) or getattr(value, "isError", False))
    except Exception:  # an object whose attribute access fails cannot be proven fine
        return True
