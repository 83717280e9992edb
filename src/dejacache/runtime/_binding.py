"""Entity templates: ``key="cart:{user_id}"`` formatted from a call's arguments."""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Template", "is_error_result"]

_PK = inspect.Parameter.POSITIONAL_OR_KEYWORD


class Template:
    """Formats an entity template with the call's arguments, defaults applied.

    Field names are checked against the signature when the tool is decorated, so a typo
    fails at import time instead of silently sharing one entity between all calls.
    """

    __slots__ = ("_defaults", "_fast", "_names", "_pieces", "_sig", "nparams", "one", "text")

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
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise ConfigurationError(f"{where}: bad key template {text!r}: {exc}") from None
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
                    return lit + format(v, "") + pieces[1]
                except (TypeError, KeyError, AttributeError, IndexError):
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
                    out.append(format(v, ""))
            except (TypeError, KeyError, AttributeError, IndexError):
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
            return self.text.format_map(bound)
        except (TypeError, KeyError, AttributeError, IndexError):
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
