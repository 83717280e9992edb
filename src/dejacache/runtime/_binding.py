"""Entity templates: ``key="cart:{user_id}"`` formatted from a call's arguments."""

from __future__ import annotations

import inspect
import string
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Template", "entity_value", "is_error_result"]

_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD
# Past this many digits an integral Decimal is not made an int (Decimal("1e999999999")
# would take gigabytes); Python formats no int that long anyway (``int_max_str_digits``).
_MAX_DIGITS = 4300


def entity_value(v: Any) -> Any:
    """The value an entity template formats for ``v``: numbers equal to each other (and so
    one dict key: ``1 == 1.0 == True == Decimal("1")``) become one value, the ``int`` for a
    whole number and the ``float`` otherwise; anything else (``str`` included) is ``v``.

    The reader's and the writer's templates both format through this, so a read of
    ``order_id=1`` and a write of ``order_id=1.0`` name one entity. Two unequal numbers may
    meet on one float (``Decimal("0.1")`` and ``0.1``): a write to one then invalidates the
    other too, a miss, never a stale read. A ``str`` is kept as given: ``"1"`` names the
    entity ``1`` does (the text is the same), ``"1.0"`` does not. Tuples, lists, dicts and
    sets hold their items by the same rule, a dict's items and a set's in one order (a set
    as a tuple): ``{"a", "b"}`` iterates in an order each process draws at random."""
    tv = type(v)
    if tv is int or tv is str:
        return v
    if tv is float:  # (the ABC checks below cost ~2 µs)
        return int(v) if v.is_integer() else v
    if tv is bool:
        return int(v)
    if tv is tuple or tv is list:  # (exact types: a named tuple's text is its own)
        return tv(map(entity_value, v))
    if tv is dict:
        return dict(sorted(((entity_value(k), entity_value(x)) for k, x in v.items()),
                           key=_first_repr))
    if tv is set or tv is frozenset:
        return tuple(sorted(map(entity_value, v), key=repr))
    if isinstance(v, int):  # an IntEnum, whether or not ``numbers`` is loaded
        return int(v)
    if isinstance(v, float):  # numpy's float64
        f = float(v)
        return int(f) if f.is_integer() else f
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

    __slots__ = ("_defaults", "_fast", "_names", "_parsed", "_pieces", "_sig", "nparams", "one",
                 "text")

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
        fields = [f for _, f, _, _ in parsed if f is not None]
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
        for f in fields:
            root = f.split(".", 1)[0].split("[", 1)[0]
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
            if self._fast and len(args) <= len(self._names):
                bound = dict(zip(self._names, args, strict=False))
                bound.update(kwargs)
                for k, v in self._defaults.items():
                    bound.setdefault(k, v)
            else:
                b = self._sig.bind(*args, **kwargs)
                b.apply_defaults()
                bound = {}
                for k, v in b.arguments.items():
                    if self._sig.parameters[k].kind is inspect.Parameter.VAR_KEYWORD:
                        bound.update(v)
                    else:
                        bound[k] = v
            return _render(self._parsed, bound)
        except _UNBOUND:
            return None


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
