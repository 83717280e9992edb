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
- **breakpoints** (``cache_breakpoints.py``): Anthropic caches only at ``cache_control``
  markers: one at the end of what every conversation shares (the last system block or tool
  before any volatile-looking value) and top-level automatic caching (the API marks the last
  block, and moves it forward as the conversation grows), within the four a request may
  carry. OpenAI from gpt-5.6: an explicit ``prompt_cache_breakpoint`` on the last part of the
  leading system/developer messages before any volatile value. The request's own markers
  are kept unless they buy nothing (after a volatile value, beyond the limit, or too far
  from the conversation's end for the lookback): those are moved (an edit removes them).
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
from .cache_breakpoints import EPHEMERAL, place
from .cache_fields import FIELDS, fields_in
from .cache_rules import AUTOMATIC, BREAKPOINTS, CacheRules
from .json_edit import DELETE, Path

__all__ = ["EPHEMERAL", "Edit", "apply", "breakpoint_edits", "key_edits", "long_lived",
           "routing_key"]

# Add member ``name: value`` to the object at ``path`` (remove it: ``value`` is DELETE).
Edit = tuple[Path, str, Any]


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
    """The markers to add, and those to move, where the provider caches at markers
    (``cache_breakpoints.py``); a removal's value is :data:`json_edit.DELETE`."""
    return list(place(api, body, rules).edits)


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
            if value is DELETE:
                node.pop(name, None)
            else:
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

