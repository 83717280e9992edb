"""What ``volatile=`` names: field names, dotted/wildcard paths, and patterns inside text.

A volatile item is one of
* a field name (``"trace_id"``): that key is dropped wherever it appears;
* a path (``"messages[*].content"``, ``"body.metadata.run"``, ``"items[0]"``): the value at
  that place is dropped (a key) or replaced by :data:`PLACEHOLDER` (a list position, so later
  positions keep their meaning); lists met on the way are walked, ``[*]`` says so explicitly;
* a compiled regular expression: every match inside any string is replaced by
  :data:`PLACEHOLDER` before keying, so the stored request shows where volatile text was
  (a judge prompt's ``<opentelemetry_traces>`` digest, a timestamp inside a system prompt).
  In ``DEJACACHE_VOLATILE`` a pattern is written ``re:PATTERN``.

Pure functions: parsed once per key builder, applied per call, never mutating the input.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["PLACEHOLDER", "Path", "Volatility", "apply", "parse", "parse_path", "under"]

PLACEHOLDER = "<volatile>"

# A step is a key (str), an index (int) or every element (None).
Step = str | int | None
Path = tuple[Step, ...]

_SEGMENT = re.compile(r"([^.\[\]]+)?((?:\[(?:\*|\d+)\])*)")
_INDEX = re.compile(r"\[(\*|\d+)\]")


@dataclasses.dataclass(frozen=True, slots=True)
class Volatility:
    names: frozenset[str] = frozenset()
    paths: tuple[Path, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.names or self.paths or self.patterns)


def _is_path(item: str) -> bool:
    return "." in item or "[" in item


def parse_path(text: str) -> Path:
    """``"messages[*].content"`` -> ``("messages", None, "content")``."""
    steps: list[Step] = []
    for part in text.split("."):
        m = _SEGMENT.fullmatch(part)
        if not part or m is None or (m.group(1) is None and not steps and not m.group(2)):
            raise ConfigurationError(
                f"volatile path {text!r} is malformed at {part!r}: write dotted names with "
                "optional [N] or [*] after each, e.g. 'body.messages[*].content'")
        if m.group(1) is not None:
            steps.append(m.group(1))
        for idx in _INDEX.findall(m.group(2) or ""):
            steps.append(None if idx == "*" else int(idx))
    if not steps:
        raise ConfigurationError(f"volatile path {text!r} names nothing")
    return tuple(steps)


def parse(items: Iterable[str | re.Pattern[str]] | None) -> Volatility:
    """Split ``volatile=`` items into names, paths and patterns (errors name the item)."""
    names: set[str] = set()
    paths: list[Path] = []
    patterns: list[re.Pattern[str]] = []
    for item in items or ():
        if isinstance(item, re.Pattern):
            if not isinstance(item.pattern, str):
                raise ConfigurationError(f"volatile pattern {item.pattern!r} must be a str "
                                         "pattern, not bytes")
            if item.fullmatch(""):
                raise ConfigurationError(
                    f"volatile pattern {item.pattern!r} matches the empty string, so it would "
                    "insert placeholders everywhere")
            patterns.append(item)
        elif isinstance(item, str) and item.startswith("re:"):
            try:
                patterns.append(re.compile(item[3:]))
            except re.error as exc:
                raise ConfigurationError(f"volatile pattern {item[3:]!r}: {exc}") from None
        elif isinstance(item, str) and item:
            if _is_path(item):
                paths.append(parse_path(item))
            else:
                names.add(item)
        else:
            raise ConfigurationError(
                f"volatile items are field names, dotted paths or compiled patterns, "
                f"not {item!r}")
    return Volatility(frozenset(names), tuple(dict.fromkeys(paths)),
                      tuple(dict.fromkeys(patterns)))


def _strip(obj: Any, path: Path) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(obj, Mapping):
        if not isinstance(head, str) or head not in obj:
            return obj
        if not rest:
            return {k: v for k, v in obj.items() if k != head}
        inner = obj[head]
        new = _strip(inner, rest)
        if new is inner:
            return obj
        return {k: (new if k == head else v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if isinstance(head, str):  # a key under a list: every element has it
            out = [_strip(v, path) for v in obj]
        elif head is None:
            out = [PLACEHOLDER for _ in obj] if not rest else [_strip(v, rest) for v in obj]
        else:
            if head >= len(obj):
                return obj
            out = list(obj)
            out[head] = PLACEHOLDER if not rest else _strip(obj[head], rest)
        if all(a is b for a, b in zip(out, obj, strict=True)):
            return obj
        return out
    return obj


def strip_paths(obj: Any, paths: Iterable[Path]) -> Any:
    for p in paths:
        obj = _strip(obj, p)
    return obj


def _scrub(obj: Any, patterns: tuple[re.Pattern[str], ...]) -> Any:
    t = type(obj)
    if t is str:
        out: str = obj
        for pat in patterns:
            out = pat.sub(PLACEHOLDER, out)
        return out
    if isinstance(obj, Mapping):
        changed = False
        new: dict[Any, Any] = {}
        for k, v in obj.items():
            nv = _scrub(v, patterns)
            changed = changed or nv is not v
            new[k] = nv
        return new if changed else obj
    if t is list or t is tuple:
        items = [_scrub(v, patterns) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        return items
    return obj


def apply(obj: Any, paths: tuple[Path, ...], patterns: tuple[re.Pattern[str], ...]) -> Any:
    """``obj`` with volatile paths removed and pattern matches replaced (a copy where changed)."""
    if paths:
        obj = strip_paths(obj, paths)
    if patterns:
        obj = _scrub(obj, patterns)
    return obj


def under(paths: tuple[Path, ...], roots: frozenset[str], default: str) -> tuple[Path, ...]:
    """Paths for a request whose top level is ``roots``: one that starts elsewhere is read as
    relative to ``default`` (``messages[*].content`` means ``body.messages[*].content`` for an
    HTTP request), so a path written for the body is never silently ignored."""
    return tuple(p if p[0] in roots else (default, *p) for p in paths)
