"""The prompt-cache fixes that touch only cache controls, as edits to a request body.

One rule per fix, used twice: by the planner, which applies the edits to recorded requests
and replays them through the provider's cache model to price the fix, and at runtime
(``PrefixMonitor(apply=...)``, ``AgentPool(apply=...)``), which splices the same edits into the
request's bytes (``json_edit.insert``). So the runtime does what the plan priced, and nothing
the model reads changes: an edit only ever adds a cache control member (``cache_fields.py``
lists them; keys leave them out, so recordings still replay).

- **routing key** (OpenAI): ``prompt_cache_key`` set to a digest of the session's name, so the
  turns of one conversation reach the machine that holds its prefix instead of spilling over
  to others when many conversations share the first ~256 tokens. A key the request already
  has is kept.
- **breakpoints**: Anthropic caches only at ``cache_control`` markers: one on the last system
  block (the end of what every conversation shares; a tool when there is no system list) and
  top-level automatic caching (the API marks the last block, and moves it forward as the
  conversation grows), within the four a request may carry, the request's own kept. OpenAI
  from gpt-5.6: an explicit ``prompt_cache_breakpoint`` on the last part of the leading
  system/developer message, so the instructions stay cached when what follows changes.
  Content given as a string cannot carry a marker without changing its JSON shape, so it
  gets none (the top-level marker needs no block).
- **long lifetime** (planner only: it changes what a write costs): ``"ttl": "1h"`` on each
  Anthropic marker (the breakpoints above added first where there are none),
  ``prompt_cache_retention="24h"`` on OpenAI models that keep entries in memory by default.

Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ..keys import digest
from .cache_fields import FIELDS, fields_in
from .cache_rules import AUTOMATIC, BREAKPOINTS, IMPLICIT, CacheRules
from .json_edit import Path

__all__ = ["EPHEMERAL", "Edit", "apply", "breakpoint_edits", "key_edits", "long_lived",
           "routing_key"]

Edit = tuple[Path, str, Any]  # add member ``name: value`` to the object at ``path``
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
_EXPLICIT: dict[str, Any] = {"mode": "explicit"}


def routing_key(session: str) -> str:
    """A stable ``prompt_cache_key`` for a session: a digest, never the name itself (names
    can carry user ids; OpenAI asks for no personal data in the key)."""
    return "dejacache-" + digest("prompt_cache_key", "session", session.encode())[:22]


def key_edits(api: str, body: Mapping[str, Any], session: str) -> list[Edit]:
    """The routing key for an OpenAI request that has none."""
    if api not in ("chat", "responses") or body.get("prompt_cache_key"):
        return []
    return [((), "prompt_cache_key", routing_key(session))]


def breakpoint_edits(api: str, body: Mapping[str, Any], rules: CacheRules) -> list[Edit]:
    """The markers to add where the provider caches only at markers (see the module)."""
    if rules.mode == BREAKPOINTS and api == "messages":
        return _anthropic(body, rules.max_breakpoints)
    if rules.mode == IMPLICIT and api in ("chat", "responses"):
        return _openai(api, body, rules.max_breakpoints)
    return []


def _marked(block: Any, name: str = "cache_control") -> bool:
    return type(block) is dict and block.get(name) is not None


def _anthropic_markers(body: Mapping[str, Any]) -> int:
    n = int(_marked(body))
    for field in ("tools", "system"):
        seq = body.get(field)
        n += sum(_marked(b) for b in seq) if type(seq) is list else 0
    for msg in body.get("messages") or []:
        content = msg.get("content") if type(msg) is dict else None
        for block in content if type(content) is list else []:
            n += _marked(block)
            inner = block.get("content") if type(block) is dict else None
            n += sum(_marked(b) for b in inner) if type(inner) is list else 0
    return n


def _anthropic(body: Mapping[str, Any], limit: int) -> list[Edit]:
    budget = limit - _anthropic_markers(body)
    messages = body.get("messages")
    if budget <= 0 or type(messages) is not list or not messages:
        return []
    out: list[Edit] = []
    last = messages[-1]
    content = last.get("content") if type(last) is dict else None
    tail_marked = type(content) is list and bool(content) and _marked(content[-1])
    if not _marked(body) and not tail_marked:
        out.append(((), "cache_control", dict(EPHEMERAL)))  # the conversation's end
    stable = _stable_end(body)
    if stable is not None and len(out) < budget:
        out.append((stable, "cache_control", dict(EPHEMERAL)))
    return out[:budget]


def _stable_end(body: Mapping[str, Any]) -> Path | None:
    """The last system block, else the last tool, when it is a block without a marker."""
    for field in ("system", "tools"):
        seq = body.get(field)
        if type(seq) is list and seq:
            return (field, len(seq) - 1) if type(seq[-1]) is dict and not _marked(seq[-1]) \
                else None
        if seq:  # a string system prompt: the tools before it are not its end
            return None
    return None


def _openai(api: str, body: Mapping[str, Any], limit: int) -> list[Edit]:
    field = "messages" if api == "chat" else "input"
    items = body.get(field)
    if type(items) is not list:
        return []
    options = body.get("prompt_cache_options")
    explicit_mode = type(options) is dict and options.get("mode") == "explicit"
    marks = 0
    lead = None
    leading = True
    for i, it in enumerate(items):
        content = it.get("content") if type(it) is dict else None
        parts = content if type(content) is list else []
        marks += sum(_marked(p, "prompt_cache_breakpoint") for p in parts)
        leading = leading and type(it) is dict and it.get("role") in ("system", "developer")
        if leading:
            lead = i
    budget = limit - marks - (0 if explicit_mode else 1)
    if lead is None or budget <= 0:
        return []
    parts = items[lead].get("content")
    if type(parts) is not list or not parts or type(parts[-1]) is not dict or _marked(
            parts[-1], "prompt_cache_breakpoint"):
        return []
    return [((field, lead, "content", len(parts) - 1), "prompt_cache_breakpoint",
             dict(_EXPLICIT))]


def apply(body: Mapping[str, Any], edits: Sequence[Edit]) -> dict[str, Any]:
    """A copy of ``body`` with ``edits`` made (what :func:`json_edit.insert` does to the
    bytes, on the parsed value)."""
    out = copy.deepcopy(dict(body))
    for path, name, value in edits:
        node: Any = out
        for step in path:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if type(node) is dict:
            node[name] = copy.deepcopy(value)
    return out


def long_lived(api: str, body: Mapping[str, Any], rules: CacheRules) -> dict[str, Any] | None:
    """``body`` asking for the provider's longer cache lifetime (None: it cannot, or does
    already): every Anthropic marker with ``"ttl": "1h"``, the breakpoints fix's added first
    (a lifetime needs a marker to hang on); ``prompt_cache_retention="24h"`` on an OpenAI model
    that caches automatically."""
    if rules.long_ttl is None:
        return None
    if rules.mode == BREAKPOINTS and api == "messages":
        out = apply(body, breakpoint_edits(api, body, rules))
        changed = False
        for _, mark in fields_in(out, FIELDS["anthropic"]):
            if type(mark) is dict and mark.get("ttl") != "1h":
                mark["ttl"] = "1h"
                changed = True
        return out if changed else None
    if rules.mode == AUTOMATIC and api in ("chat", "responses") and rules.ttl < rules.long_ttl \
            and body.get("prompt_cache_retention") != "24h":
        return {**body, "prompt_cache_retention": "24h"}
    return None

