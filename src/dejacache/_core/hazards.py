"""Volatile-looking text inside a prompt prefix, found on the first turn before it costs anything.

A system prompt or tool description that embeds the current time, a request or message id, a
uuid or a counter changes on the next build, and every token after it is then paid in full
(hermes-agent #100336: cache hit rate 99% → 2% from one such line; PR #55595: a message id).
The patterns are deliberately specific: a date line that changes once a day is reported as
``date`` so it can be told apart from a clock that changes every turn. The same type carries
the ``below_minimum`` hazard, which needs token counts (``prompt_cache.SessionState``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .prefix import Prefix
from .spans import find as _find

__all__ = ["PrefixHazard", "scan"]

@dataclasses.dataclass(frozen=True, slots=True)
class PrefixHazard:
    """Something in a prompt that costs its provider cache before any turn breaks it: text in
    the cached prefix that looks like it changes between builds, no cache marker at all
    (Anthropic), or a cacheable prefix under the provider's minimum (``below_minimum``)."""

    session: str
    # uuid | timestamp | time | epoch | id | hex_id | counter | date | no_cache_marker |
    # below_minimum
    kind: str
    segment: str
    path: str
    offset: int
    text: str

    def __str__(self) -> str:
        where = f"`{self.path}` at offset {self.offset:,}" if self.path else (
            self.segment or "request")
        return f"{self.session}: {self.kind} in {where}: `{self.text}`"


def _strings(value: Any, path: str, description_only: bool) -> Iterator[tuple[str, str]]:
    """(path, text) of the strings worth scanning: all of a system block, descriptions of a
    tool (its names and schema types are code, not prose)."""
    if isinstance(value, str):
        if not description_only or path.endswith(("description", ".text")):
            yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}", description_only)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]", description_only)


def scan(prefix: Prefix, session: str) -> list[PrefixHazard]:
    """Hazards in the system prompt (Anthropic ``system``, OpenAI leading system/developer
    messages, Responses ``instructions``) and tool descriptions, in prefix order."""
    out: list[PrefixHazard] = []
    for item in prefix.items:
        if item.segment in ("system", "instructions") or item.system_like:
            strings = _strings(item.data, item.path, False)
        elif item.segment == "tools":
            strings = _strings(item.data, item.path, True)
        else:
            continue
        for path, text in strings:
            hits = sorted(_find(text), key=lambda h: h[1])
            out.extend(PrefixHazard(session, kind, item.segment, path, at, found)
                       for kind, at, found in hits)
    if prefix.provider == "anthropic" and prefix.items and not prefix.breakpoints():
        out.append(PrefixHazard(session, "no_cache_marker", "", "", 0,
                                "no cache_control marker: Anthropic caches nothing"))
    return out
