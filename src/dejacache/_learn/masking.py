"""Recorded requests as new volatile rules would key them.

A cassette stores each call's canonical request, with the rules in force when it was
recorded already applied (their matches read ``<volatile>``). :func:`masked` applies more
rules to such a request the way a key would: patterns inside strings (credentials guarded,
as in ``_core/volatile.py``), then paths; an HTTP request's paths are rooted at its parts
(``body``, ``headers``, ``query``...) and its ``identity`` digest is never touched. The
placeholders already there are kept as they are (applying a pattern to a string escapes a
literal ``<volatile>``, which would change every key recorded under the old rules).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any, Final

import orjson

from .._core import volatile as _vol
from .._core.volatile_apply import apply
from .._core.volatile_watch import unwatch, watch

__all__ = ["Rules", "canonical", "masked"]

_HELD: Final = re.compile(r"<volatile(\\*)>")
# What stands for a placeholder while patterns run: no shape matches it (no digits, no
# letters a pattern keys on), and it cannot occur in JSON text a request holds.
_STAND_IN: Final = "\x00\x01{}\x01\x00"
_STAND_BACK: Final = re.compile("\x00\x01(\\\\*)\x01\x00")
_IDENTITY: Final = "identity"


class Rules:
    """Parsed volatile items. :func:`masked` applies paths and patterns; names (which
    ``learn`` never writes) are dropped by the key itself (``rekey.py`` passes them on)."""

    __slots__ = ("http_paths", "items", "names", "paths", "patterns")

    def __init__(self, items: Iterable[str]) -> None:
        self.items = tuple(items)
        spec = _vol.parse(self.items)
        self.names = spec.names
        self.paths = spec.paths
        self.http_paths = _vol.under(spec.paths, _vol.REQUEST_ROOTS, "body")
        self.patterns = spec.patterns

    def __bool__(self) -> bool:
        return bool(self.paths or self.patterns or self.names)

    def __repr__(self) -> str:
        return f"Rules({list(self.items)!r})"


@functools.lru_cache(maxsize=4096)
def _hold(s: str) -> str:
    return _HELD.sub(lambda m: _STAND_IN.format(m.group(1)), s)


def _held(tree: Any) -> Any:
    t = type(tree)
    if t is str:
        return _hold(tree) if "<volatile" in tree else tree
    if t is dict:
        return {k: _held(v) for k, v in tree.items()}
    if t is list:
        return [_held(v) for v in tree]
    return tree


def _back(tree: Any) -> Any:
    t = type(tree)
    if t is str:
        if "\x00\x01" not in tree:
            return tree
        return _STAND_BACK.sub(lambda m: f"<volatile{m.group(1)}>", tree)
    if t is dict:
        return {k: _back(v) for k, v in tree.items()}
    if t is list:
        return [_back(v) for v in tree]
    return tree


def is_http(kind: str, request: Any) -> bool:
    return kind == "http" and type(request) is dict and "method" in request


def masked(request: Any, kind: str, rules: Rules) -> Any:
    """``request`` (a stored canonical request) with ``rules`` applied."""
    if not (rules.paths or rules.patterns):
        return request
    http = is_http(kind, request)
    identity = request.get(_IDENTITY) if http else None
    tree = {k: v for k, v in request.items() if k != _IDENTITY} if http else request
    tree = _held(tree) if rules.patterns else tree
    owner = object()
    watch(owner)  # learning is no call of the process: its paths are noted apart
    try:
        out = apply(tree, rules.http_paths if http else rules.paths, rules.patterns)
    finally:
        unwatch(owner)
    out = _back(out) if rules.patterns else out
    if identity is not None:
        out = {**out, _IDENTITY: identity}
    return out


def canonical(tree: Any) -> bytes:
    """Sorted compact JSON: equal bytes, equal keys (within one name and namespace)."""
    return orjson.dumps(tree, option=orjson.OPT_SORT_KEYS)
