"""Prompt-cache fixes applied to the requests an agent sends: ``PrefixMonitor(apply=...)`` and
``AgentPool(apply=...)``, opt in.

The fixes are the planner's own (``_core/cache_fixes.py``), so the runtime places exactly what
the plan priced: ``"prompt_cache_key"`` (OpenAI: ``prompt_cache_key`` per conversation, a digest of
its name) and ``"breakpoints"`` (Anthropic ``cache_control``, OpenAI gpt-5.6+
``prompt_cache_breakpoint``). Each is spliced into the body's bytes as the SDK wrote them
(``_core/json_edit.py``): nothing else in the request changes, so what the model reads is
byte for byte the same, and keys leave cache controls out, so recordings still replay.

A routing key needs a conversation to name (an ``agent_session``, a pool lease, or the thread
a monitor named): without one, requests of unrelated users would share a key and crowd one
machine, so none is set. Only requests made through the SDKs' httpx and httpx2 clients (the
transports a monitor watches) are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .._core.cache_fixes import breakpoint_edits, key_edits
from .._core.cache_plan import RUNTIME_FIXES
from .._core.cache_rules import CacheRules, rules_for
from .._core.json_edit import insert
from .._core.prefix import api_of
from ..errors import ConfigurationError
from ._conversation import conversation

__all__ = ["CacheFixer", "fixes_of"]


def fixes_of(apply: bool | str | Iterable[str] | None, where: str) -> tuple[str, ...]:
    """The fixes an ``apply=`` argument names: True for every one, False or None for none,
    else their names (an unknown one is a ``ConfigurationError`` naming ``where``)."""
    if apply is None or apply is False:
        return ()
    if apply is True:
        return RUNTIME_FIXES
    names = [apply] if isinstance(apply, str) else list(apply)
    unknown = [n for n in names if n not in RUNTIME_FIXES]
    if unknown or not all(isinstance(n, str) for n in names):
        raise ConfigurationError(f"{where}: apply={apply!r}: the fixes applied at runtime are "
                                 f"{', '.join(repr(f) for f in RUNTIME_FIXES)} (or True)")
    return tuple(f for f in RUNTIME_FIXES if f in names)


class CacheFixer:
    """Rewrites request bodies with ``fixes`` (see the module); :meth:`rewrite` is an
    ``http.observers`` rewriter."""

    __slots__ = ("fixes", "rules")

    def __init__(self, fixes: tuple[str, ...],
                 rules: Callable[[str, str], CacheRules] = rules_for) -> None:
        self.fixes = fixes
        self.rules = rules

    def rewrite(self, provider: str, endpoint: str, body: bytes) -> bytes | None:
        if provider not in ("anthropic", "openai") or not body.startswith(b"{"):
            return None
        try:
            data: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        api = api_of(provider, data, endpoint)
        if api is None:
            return None
        edits = []
        if "prompt_cache_key" in self.fixes:
            name = conversation()
            if name:
                edits += key_edits(api, data, name)
        if "breakpoints" in self.fixes:
            edits += breakpoint_edits(api, data, self.rules(provider, str(data.get("model"))))
        return insert(body, edits) if edits else None

    def enter(self) -> tuple[Any, ...]:
        """Rewrite the requests made in this context (and the threads it starts) until
        :meth:`leave` is given what this returned."""
        from ..http import observers
        from ..http.intercept import observe

        observe(1)
        return (observers.rewrite(self.rewrite),)

    def leave(self, tokens: tuple[Any, ...]) -> None:
        from ..http import observers
        from ..http.intercept import observe

        observers.unrewrite(tokens[0], self.rewrite)
        observe(-1)
