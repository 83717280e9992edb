"""The prompt-cache plan: recorded sessions replayed through the provider's cache model, as
they were and under each fix found, with what each fix saves.

Input: :class:`Turn`\\ s (one recorded request each: its session, body, the provider's usage
and when it was sent) grouped by :class:`Account` (requests that shared the provider's caches:
one cassette, one monitor trace). For each account the requests are sent, in order, to one
:class:`~cache_model.ProviderCache`; a session's hit rate is its cached prompt tokens over its
prompt tokens (turns answered locally, by dejacache's own store, left out, as
``prefix-report`` counts them), as the provider reported it (``recorded``) and as the model
predicts it for the same requests (``predicted``: the calibration).

Fixes are found from what the sessions show (``prompt_cache.SessionState``: the breaks between
consecutive turns) and priced by sending the whole account again with the fix applied to
every session it concerns (caches are shared between sessions, so a fix in one can change
another's hits). Fixes interact (moving a clock out of the first 256 tokens puts every
conversation on one route, which a routing key then spreads), so they are chosen greedily:
the one that saves most first, then each next one priced on top of those before it, until
none saves more. ``saving`` is that step's predicted cost minus the next, in dollars at the
model's input price (0 for a model without a price: then cached tokens decide), ``tokens``
the cached tokens it adds, ``hit_rate`` the session's with it and the ones before. Kinds:
``move`` and ``pool`` (``cache_transforms.py``: change what the model reads, priced only),
``cached_content`` (Gemini: an explicit cache for what every turn repeats,
``cache_explicit.py``; priced with its storage, planner only), ``breakpoints`` (added, or
moved from where they buy nothing: the description names each move, from and to),
``prompt_cache_key`` (``cache_fixes.py``: cache controls the runtime can apply) and
``long_ttl``. ``combined``: every fix chosen, applied together. A fix not chosen that
saves on its own (moving a span where pooling saves more) is listed after them as an
``alternative``, priced alone.

Pure: the caller loads the turns and passes the rates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import cache_fixes
from .cache_breakpoints import place, show
from .cache_explicit import describe, held, lifetime, pinned
from .cache_model import ProviderCache, Sent, Served
from .cache_rules import CacheRules, rules_for
from .cache_transforms import moved, pooled
from .hazards import PrefixHazard
from .json_edit import DELETE
from .prefix import Prefix, build_prefix
from .prompt_cache import CHARS_PER_TOKEN, PrefixBreak, Rates, SessionState, Usage

__all__ = ["RUNTIME_FIXES", "Account", "Fix", "Plan", "SessionPlan", "Turn", "plan", "price"]

RatesFor = Callable[[str, str], Rates | None]
#: The fixes ``PrefixMonitor(apply=...)`` and ``AgentPool(apply=...)`` can apply.
RUNTIME_FIXES = ("breakpoints", "prompt_cache_key")
_BODY_FIXES = ("breakpoints", "prompt_cache_key", "long_ttl")


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

    kind: str  # move | pool | breakpoints | prompt_cache_key | long_ttl | cached_content
    description: str  # names the path and span
    path: str
    saving: float  # dollars
    tokens: int  # cached tokens added
    hit_rate: float  # the session's predicted hit rate with the fix
    runtime: bool  # PrefixMonitor(apply=...) / AgentPool(apply=...) can apply it
    # Not chosen (another saves as much or more): priced alone, instead of the others.
    alternative: bool = False


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
    # explicit cache -> (tokens, its rules, (when, by which session) each use)
    stored: dict[str, tuple[int, CacheRules, list[tuple[float | None, str]]]] = {}
    for n, turn in enumerate(account.turns):
        p = prefixes.get(n)
        if p is None or turn.local:
            continue
        tokens = _tokens(p, turn.usage)
        served = cache.send(Sent(p, tokens, turn.at))
        r = rates(p.provider, p.model)
        s = out.setdefault(turn.session, _Sums())
        if p.pinned:  # an explicit cache: stored from its creation to its last use
            key = p.chain[p.pinned - 1]
            if served.stored and r is not None:
                stored[key] = (served.stored, rules(p.provider, p.model), [])
            if key in stored:
                stored[key][2].append((turn.at, turn.session))
        s.turns += 1
        s.prompt += tokens
        s.cached += served.read
        s.cost += _cost(r, served)
        rec = _recorded(turn.usage, tokens)
        if rec is not None:
            s.rec_cached = (s.rec_cached or 0) + rec.read
            s.rec_cost += _cost(r, rec)
    for tokens, row, uses in stored.values():  # shared by its uses, as each one reads it
        bill = tokens / 1e6 * row.storage * lifetime([at for at, _ in uses], row) / 3600
        for _, session in uses:
            out[session].cost += bill / len(uses)
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


_PROVIDER = {"messages": "anthropic", "gemini": "gemini"}


def _rules_of(turn: Turn, rules: Callable[[str, str], CacheRules]) -> CacheRules:
    return rules(_PROVIDER.get(turn.api, "openai"), str(turn.body.get("model") or ""))


def _body_fix(kind: str, rules: Callable[[str, str], CacheRules]
              ) -> Callable[[Turn], Mapping[str, Any] | None]:
    def edit(turn: Turn) -> Mapping[str, Any] | None:
        r = _rules_of(turn, rules)
        if kind == "prompt_cache_key":
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
    "breakpoints": "add cache breakpoints at the end of the system prompt and at the "
                   "conversation's end (Anthropic: cache_control on the last system block and "
                   "top-level; OpenAI gpt-5.6+: prompt_cache_breakpoint on the instructions)",
    "prompt_cache_key": "set prompt_cache_key per session, so each conversation stays on the "
                   "machine that holds its prefix instead of spilling over to others",
    "long_ttl": "ask for the long cache lifetime (Anthropic: ttl 1h on the breakpoints, added "
                "where missing; OpenAI: prompt_cache_retention 24h): turns come more than the "
                "default lifetime apart",
}


def _describe_break(kind: str, b: PrefixBreak) -> str:
    span = f"`{b.before}` → `{b.after}`"
    if kind == "move":
        return (f"move the volatile span at `{b.path}` (offset {b.offset:,}, {span}) after the "
                "cacheable prefix, e.g. into the latest user message")
    part = "tools" if b.segment == "tools" else "system prompt"
    return (f"pool the agent (AgentPool): it is rebuilt each message and its {part} "
            f"changes at `{b.path}` ({span}); a pooled agent keeps the prompt it was built with")


def _moved_breakpoints(account: Account, rules: Callable[[str, str], CacheRules]
                       ) -> dict[str, tuple[str, str]]:
    """Per session whose requests carry badly placed breakpoints: (the first one's path, a
    description of the moves and of what is added), from its first such request."""
    out: dict[str, tuple[str, str]] = {}
    for turn in account.turns:
        if turn.session in out or turn.local:
            continue
        placed = place(turn.api, turn.body, _rules_of(turn, rules))
        if not placed.moves:
            continue
        moves = "; ".join(
            f"`{m.source}` ({m.why}) to `{m.target}`" if m.target else
            f"`{m.source}` ({m.why}): drop it" for m in placed.moves)
        targets = {m.target for m in placed.moves}
        added = [show(p) for p, _, v in placed.edits if v is not DELETE
                 and show(p) not in targets]
        more = f"; and add one at {', '.join(f'`{a}`' for a in added)}" if added else ""
        out[turn.session] = (placed.moves[0].source,
                             f"move the cache breakpoints: {moves}{more}")
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Option:
    kind: str
    description: str
    path: str = ""  # the span a move takes
    alternative: bool = False


_MAX_MOVES = 5  # places priced as a move: those whose breaks cost the most tokens


def _options(breaks: Sequence[PrefixBreak]) -> list[_Option]:
    """The fixes worth pricing: a move per place a break shows variable text (the costliest
    few), pooling where the system prompt or tools change, and every cache-control fix."""
    lost: dict[str, int] = {}
    first: dict[str, PrefixBreak] = {}
    pool: PrefixBreak | None = None
    for b in breaks:
        if b.reason not in ("system", "tools", "modified") or not b.path:
            continue
        lost[b.path] = lost.get(b.path, 0) + b.tokens
        first.setdefault(b.path, b)
        if pool is None and b.reason in ("system", "tools"):
            pool = b
    places = sorted(lost, key=lambda path: -lost[path])[:_MAX_MOVES]
    out = [_Option("move", _describe_break("move", first[p]), p) for p in places]
    if pool is not None:
        out.append(_Option("pool", _describe_break("pool", pool)))
    return out + [_Option(k, _DESCRIBE[k]) for k in _BODY_FIXES]


def _explicit_options(account: Account) -> list[_Option]:
    if any(t.api == "gemini" for t in account.turns):
        return [_Option("cached_content", "create a Gemini CachedContent with what every turn "
                                          "repeats, shared by the conversations repeating it")]
    return []


class _Pricer:
    """Sends an account with a set of fixes applied (body fixes first, in a fixed order, then
    pooling and moves) and remembers each result."""

    def __init__(self, account: Account, rates: RatesFor,
                 rules: Callable[[str, str], CacheRules]) -> None:
        self.account, self.rates, self.rules = account, rates, rules
        self.prefixes = _prefixes(account)
        self._memo: dict[frozenset[_Option], dict[str, _Sums] | None] = {}

    def sums(self, chosen: frozenset[_Option]) -> dict[str, _Sums] | None:
        """Each session's sums with ``chosen`` applied (None: they change nothing)."""
        if chosen not in self._memo:
            fixed = self._fixed(chosen)
            self._memo[chosen] = None if fixed is None else _send(
                self.account, fixed, self.rates, self.rules)
        return self._memo[chosen]

    def _fixed(self, chosen: frozenset[_Option]) -> Prefixes | None:
        kinds = {o.kind for o in chosen}
        edits = [_body_fix(k, self.rules) for k in _BODY_FIXES if k in kinds]
        fixed = self.prefixes
        changed = False
        if edits:
            edited = [False]

            def edit(turn: Turn) -> Mapping[str, Any] | None:
                body, any_change = turn.body, False
                for e in edits:
                    new = e(dataclasses.replace(turn, body=body))
                    if new is not None:
                        body, any_change = new, True
                edited[0] |= any_change
                return body if any_change else None

            fixed = _prefixes(self.account, edit)
            changed = edited[0]
        sessions = _by_session(self.account, fixed)
        for o in sorted(chosen, key=lambda o: (o.kind != "pool", o.path)):
            if o.kind in ("pool", "move"):
                change = pooled if o.kind == "pool" else (lambda ps, p=o.path: moved(ps, p))
                new = _session_fix(fixed, sessions, change)
                if new is not None:
                    fixed, changed = new, True
        if "cached_content" in kinds:  # last: it holds what the other fixes left repeated
            new = _session_fix(fixed, sessions, pinned)
            if new is not None:
                fixed, changed = new, True
        return fixed if changed else None


def _gain(before: Mapping[str, _Sums], after: Mapping[str, _Sums]) -> tuple[float, int]:
    cost = sum(before[n].cost - s.cost for n, s in after.items() if n in before)
    tokens = sum(s.cached - before[n].cached for n, s in after.items() if n in before)
    return cost, tokens


def _greedy(pricer: _Pricer, options: Sequence[_Option], base: dict[str, _Sums]
            ) -> list[tuple[_Option, dict[str, _Sums], dict[str, _Sums]]]:
    """Fixes in the order that saves most, each priced on top of those before it:
    (fix, sums before it, sums with it)."""
    chosen: frozenset[_Option] = frozenset()
    current = base
    out = []
    left = list(options)
    while left:
        best: tuple[float, int, _Option, dict[str, _Sums]] | None = None
        for o in left:
            sums = pricer.sums(chosen | {o})
            if sums is None:
                continue
            cost, tokens = _gain(current, sums)
            if (cost > 1e-12 or (abs(cost) <= 1e-12 and tokens > 0)) and (
                    best is None or (cost, tokens) > best[:2]):
                best = (cost, tokens, o, sums)
        if best is None:
            break
        _, _, o, sums = best
        out.append((o, current, sums))
        chosen |= {o}
        current = sums
        left.remove(o)
    return out


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
        known = {(x.kind, x.path) for x in seen}
        seen.extend(h for h in hazards if (h.kind, h.path) not in known)
    return out


def _plan_account(account: Account, rates: RatesFor,
                  rules: Callable[[str, str], CacheRules]) -> list[SessionPlan]:
    pricer = _Pricer(account, rates, rules)
    base = _send(account, pricer.prefixes, rates, rules)
    verdicts = _verdicts(account, pricer.prefixes, rates)
    options = _options([b for bs, _ in verdicts.values() for b in bs]) + _explicit_options(
        account)
    steps = _greedy(pricer, options, base)
    final = steps[-1][2] if steps else base
    taken = {o for o, _, _ in steps}
    for o in options:  # what else would save on its own
        alone = pricer.sums(frozenset({o})) if o not in taken else None
        if alone is not None and _gain(base, alone)[0] > 1e-12:
            steps.append((dataclasses.replace(o, alternative=True), base, alone))
    plans = []
    moved = _moved_breakpoints(account, rules)
    for name, s in base.items():
        breaks, hazards = verdicts.get(name, ([], []))
        fixes = []
        for o, before, after in steps:
            b, a = before.get(name), after.get(name)
            if b is None or a is None:
                continue
            saving, tokens = b.cost - a.cost, a.cached - b.cached
            if o.kind == "breakpoints" and name in moved:
                o = dataclasses.replace(o, path=moved[name][0], description=moved[name][1])
            if o.kind == "cached_content":
                o = _explicit_option(account, pricer.prefixes, name, o, rules)
            if saving > 1e-12 or (saving >= -1e-12 and tokens > 0):
                fixes.append(Fix(o.kind, o.description, o.path, saving, tokens,
                                 a.cached / a.prompt if a.prompt else 0.0,
                                 o.kind in RUNTIME_FIXES, o.alternative))
        c = final.get(name, s)
        plans.append(SessionPlan(name, account.name, s.turns, s.prompt, s.rec_cached,
                                 s.rec_cost if s.rec_cached is not None else None, s.cached,
                                 s.cost, tuple(breaks), tuple(hazards), tuple(fixes),
                                 c.cached, c.cost))
    return plans


def price(accounts: Sequence[Account], kinds: Sequence[str], rates: RatesFor,
          rules: Callable[[str, str], CacheRules] = rules_for) -> float:
    """The predicted cost of ``accounts`` with the fixes ``kinds`` (no ``move``: it needs a
    span) applied together: what a fix saves alone, where the plan chose it after others."""
    chosen = frozenset(_Option(k, "") for k in kinds)
    total = 0.0
    for account in accounts:
        pricer = _Pricer(account, rates, rules)
        sums = pricer.sums(chosen) or _send(account, pricer.prefixes, rates, rules)
        total += sum(s.cost for s in sums.values())
    return total


def _explicit_option(account: Account, prefixes: Prefixes, session: str, o: _Option,
                     rules: Callable[[str, str], CacheRules]) -> _Option:
    """``o`` described for ``session``: what its cache holds, for how long."""
    turns = [n for n, t in enumerate(account.turns)
             if t.session == session and not t.local and n in prefixes]
    if len(turns) < 2:
        return o
    first = account.turns[turns[0]]
    row = _rules_of(first, rules)
    ps = [prefixes[n] for n in turns]
    k = held(ps)
    if k < 1:
        return o
    key = ps[0].chain[k - 1]
    times = [account.turns[n].at for n, p in prefixes.items()  # every conversation using it
             if len(p.chain) > k and p.chain[k - 1] == key and not account.turns[n].local]
    return dataclasses.replace(o, path=ps[0].items[0].path, description=describe(
        ps, _tokens(ps[0], first.usage), lifetime(times, row), row))


def plan(accounts: Sequence[Account], rates: RatesFor,
         rules: Callable[[str, str], CacheRules] = rules_for) -> Plan:
    """The plan of every session of ``accounts`` (see the module)."""
    out: list[SessionPlan] = []
    for account in accounts:
        out.extend(_plan_account(account, rates, rules))
    return Plan(tuple(out))
