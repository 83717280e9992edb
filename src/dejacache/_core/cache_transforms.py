"""Fixes that change what the model reads, applied to a session's prefixes for pricing only.

The planner prices them by replaying the changed prefixes through the provider's cache model;
nothing here is ever sent (the runtime applies only cache controls: ``cache_fixes.py``).

- **move a volatile span** (:func:`moved`): a value that changes between the turns of a
  session inside the cacheable prefix (a clock or a message id in the system prompt) keeps its
  part common to every turn where it is, and what varies goes after the cacheable prefix: a
  trailing item of that turn (in the application, the latest user message).
- **pool the agent** (:func:`pooled`): an agent built again for every message rebuilds its
  system prompt and tools; a pooled one keeps those it was built with. Every turn of the
  session gets the first turn's tools, system blocks and leading system messages.

Pure.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from .prefix import Item, Prefix, chained, item

__all__ = ["head_length", "leaf_of", "moved", "pooled", "spans"]

# One step of a path as ``prefix.first_difference`` writes it: ``.name``, ``[3]``, ``['odd key']``.
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]"
                   r"|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")


def leaf_of(prefix: Prefix, path: str) -> tuple[int, list[str | int]] | None:
    """The item ``path`` (as a break names it: ``messages[0].content[0].text``) is in, and the
    steps inside that item's data, or None when no item holds it."""
    for i, it in enumerate(prefix.items):
        if path == it.path or (path.startswith(it.path) and path[len(it.path)] in ".["):
            steps: list[str | int] = []
            rest = path[len(it.path):]
            pos = 0
            while pos < len(rest):
                m = _STEP.match(rest, pos)
                if m is None:
                    return None
                name, index, quoted = m.groups()
                steps.append(name if name is not None else int(index) if index is not None
                             else _unquote(quoted))
                pos = m.end()
            return i, steps
    return None


def _unquote(text: str) -> str:
    import ast

    value = ast.literal_eval(text)
    return value if isinstance(value, str) else str(value)


def _get(data: Any, steps: Sequence[str | int]) -> Any:
    for s in steps:
        try:
            data = data[s]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _set(data: Any, steps: Sequence[str | int], value: Any) -> Any:
    if not steps:
        return value
    out = copy.copy(data)
    out[steps[0]] = _set(data[steps[0]], steps[1:], value)
    return out


def _lead(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on slices: C-speed on long prompts
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _tail(a: str, b: str, limit: int) -> int:
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def spans(values: Sequence[str]) -> tuple[int, int]:
    """(common prefix length, common suffix length) of ``values``, not overlapping in the
    shortest."""
    if not values:
        return 0, 0
    first = values[0]
    lead = len(first)
    for v in values[1:]:
        lead = min(lead, _lead(first, v))
    tail = min(len(v) for v in values) - lead
    for v in values[1:]:
        tail = _tail(first, v, tail)
    return lead, tail


def moved(prefixes: Sequence[Prefix], path: str) -> list[Prefix] | None:
    """A session's prefixes with the part of ``path``'s value that varies between turns moved
    to a trailing item of each turn (None: the value is not a string that varies)."""
    found = [(p, leaf_of(p, path)) for p in prefixes]
    values = [_get(p.items[at[0]].data, at[1]) for p, at in found if at is not None]
    texts = [v for v in values if isinstance(v, str)]
    if len(texts) < 2 or len(set(texts)) < 2:
        return None
    lead, tail = spans(texts)
    out = []
    for p, at in found:
        value = None if at is None else _get(p.items[at[0]].data, at[1])
        if at is None or not isinstance(value, str):
            out.append(p)
            continue
        i, steps = at
        old = p.items[i]
        stable = value[:lead] + value[len(value) - tail:]
        span = value[lead:len(value) - tail]
        items = list(p.items)
        items[i] = _remade(old, _set(old.data, steps, stable))
        items.append(item("moved", "moved", {"text": span}))
        out.append(_rechained(p, items))
    return out


def head_length(p: Prefix) -> int:
    """Items an agent builds once: tools, system blocks, instructions, leading system
    messages, and OpenAI's structured-output schema (Anthropic's settings, a tool_choice,
    change per call)."""
    n = 0
    for it in p.items:
        if it.segment in ("tools", "system", "instructions") or it.system_like or (
                it.segment == "settings" and p.api != "messages"):
            n += 1
        else:
            break
    return n


def pooled(prefixes: Sequence[Prefix]) -> list[Prefix] | None:
    """A session's prefixes with every turn's built-once items those of its first turn
    (None: they never change, so pooling changes nothing)."""
    if not prefixes:
        return None
    first = prefixes[0]
    head = first.items[:head_length(first)]
    heads = {tuple(i.digest for i in p.items[:head_length(p)]) for p in prefixes}
    if len(heads) < 2:
        return None
    return [_rechained(p, [*head, *p.items[head_length(p):]]) for p in prefixes]


def _remade(old: Item, data: Any) -> Item:
    new = item(old.segment, old.path, data, breakpoint=old.breakpoint,
               system_like=old.system_like, long=old.long)
    return dataclasses.replace(new, blocks=old.blocks)


def _rechained(p: Prefix, items: Sequence[Item]) -> Prefix:
    return chained(p.provider, p.api, p.model, items, one_hour=p.one_hour,
                   retention=p.retention, stateful=p.stateful, route=p.route,
                   explicit=p.explicit, pinned=p.pinned)
