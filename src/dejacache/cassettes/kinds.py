"""What kind of step a stored call is: a model, a tool, a plain function or other HTTP.

Read by trajectories (``trajectory.py``) and by partial replay's ``live=`` rules
(``partial.py``). Which HTTP calls are model calls is the providers' knowledge; it is asked
the first time an HTTP call's kind is needed, so a cassette block without ``live=`` rules
never loads the providers (~16 ms of imports).
"""

from __future__ import annotations

import functools

__all__ = ["KINDS", "step_kind"]

KINDS = ("model", "tool", "function", "http")
_MODEL_KINDS = frozenset({"model", "llm", "chat", "completion"})


@functools.cache
def _provider_prefixes() -> tuple[str, ...]:
    # Calls named by a provider module are model calls; the generic fallback's
    # ("http.<host>") are not.
    from ..http.providers import all_providers

    return tuple(f"{p.name}." for p in all_providers() if p.name != "http")


def step_kind(raw: str, name: str) -> str:
    """The kind shown for a stored ``kind`` field (``"http"``, ``"tool"``, ``"call"``...)."""
    if raw == "http" or raw == "ws":  # a WebSocket session's steps name their provider too
        return "model" if name.startswith(_provider_prefixes()) else "http"
    if raw in _MODEL_KINDS:
        return "model"
    if raw == "tool" or (raw == "mcp" and name == "mcp.tools/call"):
        return "tool"
    return "function"
