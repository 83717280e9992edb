"""The prompt-cache plan: recorded sessions replayed through the provider's cache model, as
they were and under each fix found, with what each fix saves.

Input: :class:`Turn`\\ s (one recorded request each: its session, body, the provider's usage
and when it was sent) grouped by :class:`Account` (requests that shared the provider's caches:
one cassette, one monitor trace). For each account the requests are sent, in order, to one
:class:`~cache_model.ProviderCache`; a session's hit rate is its cached prompt tokens over its
prompt tokens (turns answered locally, by dejacache's own store, left out, as
``prefix-report`` counts them), as the provider reported it (``recorded``) and as the model
predicts it for the same requests (``predicted``: the calibration).

Fixes are found from what the session shows (``prompt_cache.SessionState``: the breaks between
consecutive turns, the hazards) and priced by sending the whole account again with the fix
applied to every session it concerns (caches are shared between sessions, so a fix in one can
change another's hits): ``saving`` is the predicted cost without the fix minus with it, in
dollars at the model's input price (0 for a model without a price), and ``tokens`` the cached
tokens it adds. Kinds: ``move`` and ``pool`` (``cache_transforms.py``: change what the model
reads, priced only), ``breakpoints``, ``routing_key`` (``cache_fixes.py``: cache controls the
runtime can apply) and ``long_ttl``. Only fixes that save something are kept; ``combined``
prices the best of ``move``/``pool`` together with every other fix found.

Pure: the caller loads the turns and passes the rates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import cache_fixes
from .cache_model import ProviderCache, Sent, Served
from .cache_rules import CacheRules, rules_for
from .cache_transforms import moved, pooled
from .hazards import PrefixHazard
from .prefix import Prefix, build_prefix
from .prompt_cache import CHARS_PER_TOKEN, PrefixBreak, Rates, SessionState, Usage

__all__ = ["RUNTIME_FIXES", "Account", "Fix", "Plan", "SessionPlan", "Turn", "plan"]

RatesFor = Callable[[str, str], Rates | None]
#: The fixes ``PrefixMonitor(apply=...)`` and ``AgentPool(apply=...)`` can apply.
RUNTIME_FIXES = ("breakpoints", "routing_key")
_BODY_FIXES = ("breakpoints", "routing_key", "long_ttl")


@dataclasses.dataclass(frozen=True, slots=True)
class Turn:
    """One recorded request. ``local``: answered from dejacache's own store (the provider
    never saw it)."""

    session: str
    api: str
    body: Mapping[str, Any]
    usage: Usage | None = None
    at: float | None = None
    local: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Account:
    """Requests that shared a provider's caches, in the order they were sent."""

    name: str
    turns: tuple[Turn, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Fix:
    """One change and what it saves over the sessions it concerns."""

    kind: str  # move | pool | breakpoints | routing_key | long_ttl
    description: str  # names the path and span
    path: str
    saving: float  # dollars
    tokens: int  # cached tokens added
    hit_rate: float  # the session's predicted hit rate with the fix
    runtime: bool  # PrefixMonitor(apply=...) / AgentPool(apply=...) can apply it


@dataclasses.dataclass(frozen=True, slots=True)
class SessionPlan:
    session: str
    account: str
    turns: int
    prompt_tokens: int
    recorded_cached: int | None  # None: the provider never said
    recorded_cost: float | None
    predicted_cached: int
    predicted_cost: float
    breaks: tuple[PrefixBreak, ...] = ()
    hazards: tuple[PrefixHazard, ...] = ()
    fixes: tuple[Fix, ...] = ()
    combined_cached: int = 0  # with every fix found applied together
    combined_cost: float = 0.0

    @property
    def recorded_hit_rate(self) -> float | None:
        if self.recorded_cached is None or not self.prompt_tokens:
            return None
        return self.recorded_cached / self.prompt_tokens

    @property
    def predicted_hit_rate(self) -> float:
        return self.predicted_cached / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    sessions: tuple[SessionPlan, ...]

    def total(self, field: str) -> float:
        return float(sum(getattr(s, field) or 0 for s in self.sessions))


# ---------------------------------------------------------------- one account, one way


@dataclasses.dataclass(slots=True)
class _Sums:
    turns: int = 0
    prompt: int = 0
    cached: int = 0
    cost: float = 0.0
    rec_cached: int | None = None
    rec_cost: float = 0.0


def _tokens(prefix: Prefix, usage: Usage | None) -> int:
    if usage is not None and usage.whole and usage.prompt:
        return usage.prompt
    return round(prefix.size / CHARS_PER_TOKEN)


def _cost(rates: Rates | None, served: Served) -> float:
    if rates is None:
        return 0.0
    short = served.written - served.written_long
    units = (served.uncached + served.read * rates.read + short * rates.write
             + served.written_long * rates.write_long)
    return units * rates.input / 1e6


def _recorded(usage: Usage | None, tokens: int) -> Served | None:
    if usage is None or usage.cached is None:
        return None
    return Served(tokens, usage.cached, usage.written or 0, usage.written_long)


Prefixes = dict[int, Prefix]  # turn index in the account -> the prefix sent


def _send(account: Account, prefixes: Prefixes, rates: RatesFor,
          rules: Callable[[str, str], CacheRules]) -> dict[str, _Sums]:
    """Each session's sums with ``prefixes`` sent in the account's order."""
    cache = ProviderCache(rules)
    out: dict[str, _Sums] = {}
    for n, turn in enumerate(account.turns):
        p = prefixes.get(n)
        if p is None or turn.local:
            continue
        tokens = _tokens(p, turn.usage)
        served = cache.send(Sent(p, tokens, turn.at))
        r = rates(p.provider, p.model)
        s = out.setdefault(turn.session, _Sums())
        s.turns += 1
        s.prompt += tokens
        s.cached += served.read
        s.cost += _cost(r, served)
        rec = _recorded(turn.usage, tokens)
        if rec is not None:
            s.rec_cached = (s.rec_cached or 0) + rec.read
            s.rec_cost += _cost(r, rec)
    return out


def _prefixes(account: Account, edit: Callable[[Turn], Mapping[str, Any] | None] | None = None
              ) -> Prefixes:
    out: Prefixes = {}
    for n, turn in enumerate(account.turns):
        body = (edit(turn) if edit is not None else None) or turn.body
        try:
            out[n] = build_prefix(turn.api, body)
        except (KeyError, TypeError, AttributeError):
            continue
    return out


# ---------------------------------------------------------------- fixes


def _body_fix(kind: str, rules: Callable[[str, str], CacheRules]
              ) -> Callable[[Turn], Mapping[str, Any] | None]:
    def edit(turn: Turn) -> Mapping[str, Any] | None:
        provider = "anthropic" if turn.api == "messages" else "openai"
        r = rules(provider, str(turn.body.get("model") or ""))
        if kind == "routing_key":
            edits = cache_fixes.key_edits(turn.api, turn.body, turn.session)
        elif kind == "breakpoints":
            edits = cache_fixes.breakpoint_edits(turn.api, turn.body, r)
        else:
            return cache_fixes.long_lived(turn.api, turn.body, r)
        return cache_fixes.apply(turn.body, edits) if edits else None

    return edit


def _by_session(account: Account, prefixes: Prefixes) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for n, turn in enumerate(account.turns):
        if n in prefixes and not turn.local:
            out.setdefault(turn.session, []).append(n)
    return out


def _session_fix(prefixes: Prefixes, sessions: Mapping[str, Sequence[int]],
                 change: Callable[[list[Prefix]], list[Prefix] | None]) -> Prefixes | None:
    out = dict(prefixes)
    changed = False
    for turns in sessions.values():
        new = change([prefixes[n] for n in turns])
        if new is not None:
            out.update(zip(turns, new, strict=True))
            changed = True
    return out if changed else None


_DESCRIBE = {
    "breakpoints": "add cache breakpoints: the end of the system prompt and the conversation's "
                   "end (Anthropic cache_control, top-level and on the last system block; "
                   "OpenAI gpt-5.6+ prompt_cache_breakpoint on the instructions)",
    "routing_key": "set prompt_cache_key per session, so each conversation stays on the "
                   "machine that holds its prefix",
    "long_ttl": "ask for the long cache lifetime (Anthropic ttl 1h, OpenAI "
                "prompt_cache_retention 24h): gaps between turns outlive the default",
}


def _describe_break(kind: str, b: PrefixBreak) -> str:
    span = f"`{b.before}` → `{b.after}`"
    if kind == "move":
        return (f"move the volatile span at `{b.path}` (offset {b.offset:,}, {span}) after the "
                "cacheable prefix, e.g. into the latest user message")
    return (f"pool the agent (AgentPool): it is rebuilt each message and its {b.segment} "
            f"changes at `{b.path}` ({span}); a pooled agent keeps the prompt it was built with")


def _candidates(account: Account, prefixes: Prefixes, breaks: Sequence[PrefixBreak],
                ) -> list[tuple[str, str, str, Prefixes]]:
    """(kind, description, path, the account's prefixes with the fix) of each fix to price."""
    sessions = _by_session(account, prefixes)
    out: list[tuple[str, str, str, Prefixes]] = []
    seen: set[tuple[str, str]] = set()
    for b in breaks:
        if b.reason not in ("system", "tools", "modified") or not b.path:
            continue
        kinds = ("move", "pool") if b.reason in ("system", "tools") else ("move",)
        for kind in kinds:
            if (kind, b.path if kind == "move" else "") in seen:
                continue
            seen.add((kind, b.path if kind == "move" else ""))
            path = b.path
            change: Callable[[list[Prefix]], list[Prefix] | None] = (
                (lambda ps, path=path: moved(ps, path)) if kind == "move" else pooled)
            fixed = _session_fix(prefixes, sessions, change)
            if fixed is not None:
                out.append((kind, _describe_break(kind, b), b.path if kind == "move" else "",
                            fixed))
    return out


# ---------------------------------------------------------------- the plan


def _verdicts(account: Account, prefixes: Prefixes, rates: RatesFor
              ) -> dict[str, tuple[list[PrefixBreak], list[PrefixHazard]]]:
    states: dict[str, SessionState] = {}
    out: dict[str, tuple[list[PrefixBreak], list[PrefixHazard]]] = {}
    for n, turn in enumerate(account.turns):
        p = prefixes.get(n)
        if p is None:
            continue
        state = states.setdefault(turn.session, SessionState(turn.session))
        _, found, hazards = state.turn(p, turn.usage, turn.at, rates, local=turn.local)
        breaks, seen = out.setdefault(turn.session, ([], []))
        breaks.extend(found)
        seen.extend(h for h in hazards if (h.kind, h.path) not in {(x.kind, x.path)
                                                                   for x in seen})
    return out


def _plan_account(account: Account, rates: RatesFor,
                  rules: Callable[[str, str], CacheRules]) -> list[SessionPlan]:
    prefixes = _prefixes(account)
    base = _send(account, prefixes, rates, rules)
    verdicts = _verdicts(account, prefixes, rates)
    every_break = [b for bs, _ in verdicts.values() for b in bs]
    priced: list[tuple[str, str, str, dict[str, _Sums]]] = []
    options: list[tuple[str, str, str, Prefixes]] = _candidates(account, prefixes, every_break)
    for kind in _BODY_FIXES:
        fixed = _prefixes(account, _body_fix(kind, rules))
        if fixed != prefixes:
            options.append((kind, _DESCRIBE[kind], "", fixed))
    for kind, text, path, fixed in options:
        priced.append((kind, text, path, _send(account, fixed, rates, rules)))
    kept = _kept(base, priced)
    combined = _combined(account, rates, rules, prefixes, kept, options)
    plans = []
    for name, s in base.items():
        breaks, hazards = verdicts.get(name, ([], []))
        fixes = []
        for kind, text, path, sums in priced:
            after = sums.get(name)
            if after is None or (kind, path) not in kept:
                continue
            saving, tokens = s.cost - after.cost, after.cached - s.cached
            if saving > 1e-12 or (saving >= -1e-12 and tokens > 0):
                fixes.append(Fix(kind, text, path, saving, tokens,
                                 after.cached / after.prompt if after.prompt else 0.0,
                                 kind in RUNTIME_FIXES))
        fixes.sort(key=lambda f: (-f.saving, -f.tokens, f.kind))
        c = combined.get(name, s)
        plans.append(SessionPlan(name, account.name, s.turns, s.prompt, s.rec_cached,
                                 s.rec_cost if s.rec_cached is not None else None, s.cached,
                                 s.cost, tuple(breaks), tuple(hazards), tuple(fixes),
                                 c.cached, c.cost))
    return plans


def _kept(base: Mapping[str, _Sums], priced: Sequence[tuple[str, str, str, dict[str, _Sums]]]
          ) -> set[tuple[str, str]]:
    """The fixes that save money (or, without prices, add cached tokens) over the account."""
    kept = set()
    for kind, _, path, sums in priced:
        saving = sum(base[n].cost - s.cost for n, s in sums.items() if n in base)
        tokens = sum(s.cached - base[n].cached for n, s in sums.items() if n in base)
        if saving > 1e-12 or (abs(saving) <= 1e-12 and tokens > 0):
            kept.add((kind, path))
    return kept


def _combined(account: Account, rates: RatesFor, rules: Callable[[str, str], CacheRules],
              prefixes: Prefixes, kept: set[tuple[str, str]],
              options: Sequence[tuple[str, str, str, Prefixes]]) -> dict[str, _Sums]:
    """Each session's sums with every kept fix applied together: the body fixes first, then
    ``pool`` (which subsumes ``move``) or else every ``move``."""
    kinds = {k for k, _ in kept}
    edits = [_body_fix(k, rules) for k in _BODY_FIXES if k in kinds]

    def edit(turn: Turn) -> Mapping[str, Any] | None:
        body: Mapping[str, Any] = turn.body
        for e in edits:
            body = e(dataclasses.replace(turn, body=body)) or body
        return body

    fixed = _prefixes(account, edit) if edits else dict(prefixes)
    sessions = _by_session(account, fixed)
    if "pool" in kinds:
        fixed = _session_fix(fixed, sessions, pooled) or fixed
    else:
        for kind, _, path, _ in options:
            if kind == "move" and (kind, path) in kept:
                fixed = _session_fix(fixed, sessions, lambda ps, p=path: moved(ps, p)) or fixed
    return _send(account, fixed, rates, rules)


def plan(accounts: Sequence[Account], rates: RatesFor,
         rules: Callable[[str, str], CacheRules] = rules_for) -> Plan:
    """The plan of every session of ``accounts`` (see the module)."""
    out: list[SessionPlan] = []
    for account in accounts:
        out.extend(_plan_account(account, rates, rules))
    return Plan(tuple(out))
