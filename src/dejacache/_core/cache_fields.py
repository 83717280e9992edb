"""Prompt-cache controls in a request body: where they sit, and the body without them.

A cache control decides what the provider caches, for how long, and on which machine; never
what the model reads: Anthropic's ``cache_control`` (top level, or on a tool, a system block or
a content block), OpenAI's ``prompt_cache_key`` (routing), ``prompt_cache_retention``,
``prompt_cache_options`` and a content part's ``prompt_cache_breakpoint``. :data:`FIELDS` names
each provider's as paths (``"messages[*].content[*].cache_control"``); the provider modules
declare theirs from it (``Provider.cache_fields``).

Requests are keyed without them, so a recording replays whatever breakpoints or routing key
the code adds later (the prompt-cache planner's fixes, applied at runtime, add exactly these),
and stored with them, so the planner reads the breakpoints a recording was made with.

Paths name the places, never a bare field name: a tool whose JSON schema has a property
called ``cache_control`` keeps it in its key. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

__all__ = ["FIELDS", "fields_in", "may_hold", "parse", "strip"]

Step = str | None  # a member name, or every element of a list (``[*]``)

#: Where each provider's requests carry cache controls.
FIELDS: dict[str, tuple[str, ...]] = {
    # Breakpoints and their lifetimes: top level (automatic caching), on a tool, a system
    # block, a content block, or a block inside a tool_result.
    "anthropic": ("cache_control", "tools[*].cache_control", "system[*].cache_control",
                  "messages[*].content[*].cache_control",
                  "messages[*].content[*].content[*].cache_control"),
    # Routing, lifetime and breakpoints (chat parts, Responses input parts), and Anthropic's
    # cache_control as OpenAI-compatible gateways (OpenRouter) take it.
    "openai": ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options",
               "cache_control", "messages[*].content[*].prompt_cache_breakpoint",
               "messages[*].content[*].cache_control",
               "input[*].content[*].prompt_cache_breakpoint"),
}


@functools.lru_cache(maxsize=64)
def parse(paths: tuple[str, ...]) -> tuple[tuple[Step, ...], ...]:
    """``"messages[*].content[*].cache_control"`` -> ``("messages", None, "content", None,
    "cache_control")``: member names, ``[*]`` for each element of a list."""
    out = []
    for text in paths:
        steps: list[Step] = []
        for part in text.split("."):
            name, _, rest = part.partition("[")
            if not name or rest.replace("*]", "").replace("[", ""):
                raise ValueError(f"cache field path {text!r}: write names with [*] after a "
                                 "list, e.g. 'messages[*].content[*].cache_control'")
            steps.append(name)
            steps.extend(None for _ in range(part.count("[*]")))
        out.append(tuple(steps))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _needles(paths: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(sorted({p.rpartition(".")[2].encode() for p in paths}))


def may_hold(raw: bytes, paths: tuple[str, ...]) -> bool:
    """Whether a raw body can hold one of ``paths``' fields (its last name occurs in it): the
    cheap test before parsing. False says so for sure; True only maybe."""
    return bool(paths) and any(n in raw for n in _needles(paths))


_LEAF: dict[Any, Any] = {}  # a tree's mark for "this member goes"


@functools.lru_cache(maxsize=64)
def _tree(paths: tuple[str, ...]) -> dict[Any, Any]:
    """``paths`` merged into one tree (member name or None for ``[*]`` -> subtree), walked
    once per body."""
    root: dict[Any, Any] = {}
    for steps in parse(paths):
        node = root
        for step in steps[:-1]:
            node = node.setdefault(step, {})
        node[steps[-1]] = _LEAF
    return root


def strip(body: Any, paths: tuple[str, ...]) -> Any:
    """``body`` without the fields ``paths`` name: a copy of what changes, the same object
    when nothing does (so ``strip(b, p) is b`` says "no cache field"). One walk over the
    places the paths can reach (a long conversation: ~0.2 ms)."""
    return _without(body, _tree(paths))


def _without(node: Any, tree: dict[Any, Any]) -> Any:
    if type(node) is dict:
        out: Any = None
        for key, sub in tree.items():
            if key is None or key not in node:
                continue
            if sub is _LEAF:
                out = dict(node) if out is None else out
                del out[key]
                continue
            value = node[key]
            new = _without(value, sub)
            if new is not value:
                out = dict(node) if out is None else out
                out[key] = new
        return node if out is None else out
    if type(node) is list and None in tree:
        sub = tree[None]
        copied: list[Any] | None = None
        for i, x in enumerate(node):
            new = _without(x, sub)
            if new is not x:
                copied = list(node) if copied is None else copied
                copied[i] = new
        return node if copied is None else copied
    return node


def fields_in(body: Any, paths: tuple[str, ...]) -> Iterable[tuple[str, Any]]:
    """(path as written, value) of every cache field ``body`` holds, in ``paths`` order."""
    for text, steps in zip(paths, parse(paths), strict=True):
        yield from ((text, v) for v in _values(body, steps))


def _values(node: Any, steps: tuple[Step, ...]) -> Iterable[Any]:
    if not steps:
        yield node
        return
    step, rest = steps[0], steps[1:]
    if step is None:
        if type(node) is list:
            for x in node:
                yield from _values(x, rest)
    elif type(node) is dict and step in node:
        yield from _values(node[step], rest)
