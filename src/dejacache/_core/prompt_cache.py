"""What providers cache and what a broken prefix costs: minimums, lifetimes, usage, one turn's
verdict. Pure: the caller passes the time and the prices.

The provider rules (minimum cacheable prefix, block size, lifetimes, cache prices) are the rows
of ``cache_rules.py``, with their sources; this module applies them to one conversation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .cache_rules import EXPLICIT, CacheRules, rules_for
from .counts import counted
from .hazards import PrefixHazard, scan
from .prefix import Difference, Prefix, compare

__all__ = [
    "CHARS_PER_TOKEN",
    "PrefixBreak",
    "Rates",
    "SessionReport",
    "SessionState",
    "SessionTotals",
    "TurnRecord",
    "Usage",
    "lifetime",
    "minimum_tokens",
    "read_usage",
]

CHARS_PER_TOKEN = 4.0  # when the provider reports no usage; canonical JSON, so an estimate


def minimum_tokens(provider: str, model: str) -> int:
    """The smallest prefix the provider will cache for ``model``."""
    return rules_for(provider, model).minimum


def lifetime(prefix: Prefix) -> float:
    """Seconds a cache entry written for ``prefix`` survives without use: the longer
    lifetime when the request asks for it (Anthropic ``"ttl": "1h"``, OpenAI
    ``prompt_cache_retention="24h"`` or a ``"12h"`` breakpoint)."""
    rules = rules_for(prefix.provider, prefix.model)
    return rules.long_ttl if prefix.long_lived and rules.long_ttl else rules.ttl


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Prompt-side token counts as the provider reported them."""

    prompt: int  # every input token, cached or not (see ``whole``)
    cached: int | None  # read from the cache (None: the provider did not say)
    written: int | None = None  # written to the cache (Anthropic; OpenAI from gpt-5.6)
    # ``prompt`` counts the whole prompt. Anthropic's ``input_tokens`` leaves out what was read
    # from or written to the cache, so without those counts it may be the uncached tail only.
    whole: bool = True
    written_long: int = 0  # of ``written``, with the long lifetime (Anthropic's 1 h)

    @property
    def cache_used(self) -> bool:
        """The provider read or wrote a cache entry for this prompt (so its prefix met the
        minimum)."""
        return bool(self.cached) or bool(self.written)


def _int(v: Any) -> int | None:
    return v if type(v) is int and v >= 0 else None  # a negative count is no count


def read_usage(usage: Any) -> Usage | None:
    """Anthropic (``cache_read_input_tokens``...), OpenAI chat
    (``prompt_tokens_details.cached_tokens``), Responses (``input_tokens_details``) or Gemini
    (``usageMetadata``)."""
    if not isinstance(usage, Mapping):
        return None
    if "promptTokenCount" in usage:
        # Gemini: the prompt count includes the cached tokens; proto3 JSON leaves out a zero,
        # so no cachedContentTokenCount is Gemini saying none were cached.
        return Usage(_int(usage.get("promptTokenCount")) or 0,
                     _int(usage.get("cachedContentTokenCount")) or 0)
    for total, field in (("prompt_tokens", "prompt_tokens_details"),  # OpenAI chat
                         ("input_tokens", "input_tokens_details")):  # Responses
        if field in usage or (total == "prompt_tokens" and total in usage):
            details = usage.get(field)
            if not isinstance(details, Mapping):
                details = {}
            return Usage(_int(usage.get(total)) or 0, _int(details.get("cached_tokens")),
                         _int(details.get("cache_write_tokens")))
    if "input_tokens" in usage:  # Anthropic: input_tokens excludes cache reads and writes
        read = _int(usage.get("cache_read_input_tokens"))
        written = _int(usage.get("cache_creation_input_tokens"))
        base = _int(usage.get("input_tokens")) or 0
        split = usage.get("cache_creation")
        long = _int(split.get("ephemeral_1h_input_tokens")) if isinstance(split, Mapping) else 0
        return Usage(base + (read or 0) + (written or 0), read, written,
                     whole=read is not None or written is not None, written_long=long or 0)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Rates:
    """Dollars per million input tokens, and the cache multipliers of that input price."""

    input: float
    read: float  # cached read, e.g. 0.1
    write: float  # cache write, e.g. 1.25 (Anthropic); 1.0 where writes are free (OpenAI)
    write_long: float = 2.0  # a write with the long lifetime (Anthropic's 1 h: 2.0)


@dataclasses.dataclass(frozen=True, slots=True)
class PrefixBreak:
    """One turn whose prefix stopped matching what the provider had cached.

    ``tokens``: prompt tokens the provider would have served from its cache without the break;
    ``cost``: what paying for them in full (or writing them again) costs over the cached rate,
    in dollars (0.0 for a model with no known price). ``local``: the turn was answered from
    dejacache's own store, so the provider never saw it and ``cost`` is what the break costs
    once the request is sent.
    """

    session: str
    turn: int
    reason: str  # model | tools | system | settings | truncated | modified | ttl
    segment: str
    path: str
    offset: int
    before: str
    after: str
    tokens: int
    cost: float
    local: bool = False

    def __str__(self) -> str:
        where = f"`{self.path}` at offset {self.offset:,}: " if self.path else ""
        cost = f"${self.cost:.4f}" + (" once sent; answered by dejacache" if self.local else "")
        return (f"{self.session} turn {self.turn}: {self.reason}: {where}"
                f"`{self.before}` → `{self.after}` ({self.tokens:,} tokens, {cost})")


@dataclasses.dataclass(frozen=True, slots=True)
class TurnRecord:
    """One observed request of a session."""

    session: str
    turn: int
    provider: str
    model: str
    prompt_tokens: int  # reported, else estimated from the characters
    expected_cached: int  # what the prefix lets the provider serve from its cache
    reported_cached: int | None  # what the provider says it served (None: not reported)
    reported_written: int | None
    estimated: bool  # prompt_tokens is an estimate
    # Answered from dejacache's own store (a replay or a cache hit): the provider never saw
    # this request, so it reported nothing and served nothing from its cache (expected 0).
    local: bool = False


RatesFor = Callable[[str, str], Rates | None]  # (provider, model) -> rates
Verdict = tuple[TurnRecord, list[PrefixBreak], list[PrefixHazard]]


class SessionState:
    """The last turn of one conversation, and the verdict on the next (not thread-safe: the
    driver holds a lock).

    Two "last turns" are kept: ``prev``, the last request the agent made (a change from it is
    a break, wherever the answer came from), and ``seen``, the last one the provider saw (what
    its cache can hold, and since when). They differ only after turns answered locally.
    """

    __slots__ = ("below", "name", "prev", "prev_scale", "seen", "seen_at", "seen_scale",
                 "turns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.prev: Prefix | None = None
        self.prev_scale = 1.0 / CHARS_PER_TOKEN
        self.seen: Prefix | None = None
        self.seen_scale = 1.0 / CHARS_PER_TOKEN
        self.seen_at: float | None = None
        self.turns = 0
        self.below = False

    def turn(self, cur: Prefix, usage: Usage | None, now: float | None, rates: RatesFor,
             *, local: bool = False) -> Verdict:
        """Account one request: its record, the breaks it caused, and the hazards it shows
        (volatile text on a session's first turn; a cacheable prefix under the minimum)."""
        self.turns += 1
        n = self.turns
        scale = (usage.prompt / cur.size if usage and usage.whole and usage.prompt and cur.size
                 else 1.0 / CHARS_PER_TOKEN)
        expected, breaks = self._verdict(n, cur, usage, now, rates, local)
        hazards = scan(cur, self.name) if n == 1 else []
        below = self._below_minimum(cur, usage, scale)
        if below is not None:
            hazards.append(below)
        counted = bool(usage and usage.prompt)
        prompt = usage.prompt if usage and counted else round(cur.size * scale)
        # A stored answer's usage sizes the prompt, but its cache counts are a past request's.
        told = usage if not local else None
        record = TurnRecord(self.name, n, cur.provider, cur.model, prompt, expected,
                            told.cached if told else None, told.written if told else None,
                            not counted, local)
        self.prev, self.prev_scale = cur, scale
        if not local:
            self.seen, self.seen_scale, self.seen_at = cur, scale, now
        return record, breaks, hazards

    def _verdict(self, n: int, cur: Prefix, usage: Usage | None, now: float | None,
                 rates: RatesFor, local: bool) -> tuple[int, list[PrefixBreak]]:
        """(tokens the provider can serve from its cache, breaks) for turn ``n``."""
        prev = self.prev
        if prev is None:
            return 0, []  # a first turn has nothing before it to break
        diff = compare(prev, cur)
        expected = 0 if local else self._reusable(cur, diff)
        if not local:
            expired = self._expired(n, usage, now, expected, rates)
            if expired is not None:  # what outlived the gap is still read (a 1 h entry)
                return self._reusable(cur, diff, expired[1]), [expired[0]]
        # A change inside what the previous turn cached is a break even when it costs nothing
        # yet (OpenAI: inside the last, uncached 128-token step): every token the
        # conversation adds after it is paid in full from now on.
        if diff is None or diff.common >= _cacheable(prev):
            return expected, []
        full = _reuse(prev, prev.size, self.prev_scale)
        lost = full - _reuse(prev, diff.common, self.prev_scale)
        return expected, [self._break(n, diff.reason, diff.segment, diff.path, diff.offset,
                                      diff.before, diff.after, lost, prev, rates, local)]

    def _reusable(self, cur: Prefix, diff: Difference | None, gap: float | None = None
                  ) -> int:
        """Tokens of the provider's cache entries (from the last request it saw) ``cur`` can
        read (``gap``: seconds since, which entries must have outlived)."""
        seen = self.seen
        if seen is None:
            return 0
        if seen is not self.prev:
            diff = compare(seen, cur)
        return _reuse(seen, diff.common if diff else seen.size, self.seen_scale, cur, gap)

    def _expired(self, n: int, usage: Usage | None, now: float | None, reuse: int,
                 rates: RatesFor) -> tuple[PrefixBreak, float] | None:
        """A ``ttl`` break, and the gap, when some of the provider's entries did not outlive
        it (and the provider's report, if any, agrees): on Anthropic a 5-minute entry after
        a 1 h one goes while the 1 h one stays."""
        seen, at = self.seen, self.seen_at
        if seen is None or now is None or at is None:
            return None
        gap = now - at
        full = _reuse(seen, seen.size, self.seen_scale)
        alive = _reuse(seen, seen.size, self.seen_scale, gap=gap)
        reported = usage.cached if usage else None
        if not full or alive >= full or (reported is not None and reported >= reuse):
            return None
        life = max(x for x in _lives(seen) if x < gap)  # the longest that did not last
        rules = rules_for(seen.provider, seen.model)
        return self._break(n, "ttl", "", "", 0, f"{gap:,.0f} s idle",
                           f"cache lives {life:,.0f} s", full - alive, seen, rates, False,
                           long=life == rules.long_ttl), gap

    def _below_minimum(self, cur: Prefix, usage: Usage | None, scale: float
                       ) -> PrefixHazard | None:
        """A hazard when the cacheable prefix (up to the last breakpoint on Anthropic, the
        whole prompt on OpenAI) newly falls under the provider's minimum: nothing is cached."""
        minimum = minimum_tokens(cur.provider, cur.model)
        # The provider reading or writing its cache proves the prefix met the minimum; an
        # estimate (which a partial count such as Anthropic's uncached tail skews) never
        # outweighs that.
        tokens = 0 if usage and usage.cache_used else round(_cacheable(cur) * scale)
        below = 0 < tokens < minimum
        flag, self.below = below and not self.below, below
        if not flag:
            return None
        return PrefixHazard(self.name, "below_minimum", "prefix", "", 0,
                            f"{tokens:,} cacheable tokens, minimum {minimum:,}: none cached")

    def _break(self, n: int, reason: str, segment: str, path: str, offset: int, before: str,
               after: str, tokens: int, prev: Prefix, rates: RatesFor,
               local: bool, long: bool | None = None) -> PrefixBreak:
        r = rates(prev.provider, prev.model)
        cost = 0.0
        if r is not None:
            write = r.write_long if (prev.long_lived if long is None else long) else r.write
            cost = tokens * r.input / 1e6 * (write - r.read)
        return PrefixBreak(self.name, n, reason, segment, path, offset, before, after, tokens,
                           cost, local)


def _cacheable(p: Prefix) -> int:
    """Characters of ``p`` the provider would write to its cache."""
    if p.provider == "anthropic":
        bps = p.breakpoints()
        return bps[-1] if bps else 0
    return 0 if rules_for(p.provider, p.model).mode == EXPLICIT else p.size


def _lives(p: Prefix) -> list[float]:
    """Lifetimes of the entries ``p`` writes: per marker on Anthropic (a 1 h marker's entry
    outlives a 5-minute one's), one for the whole prompt elsewhere."""
    if p.provider != "anthropic":
        return [lifetime(p)]
    rules = rules_for(p.provider, p.model)
    return [_life(rules, i.long) for i in p.items if i.breakpoint] or [rules.ttl]


def _life(rules: CacheRules, long: bool) -> float:
    return float(rules.long_ttl if long and rules.long_ttl else rules.ttl)


def _reuse(prev: Prefix, common: int, scale: float, cur: Prefix | None = None,
           gap: float | None = None) -> int:
    """Tokens of ``prev``'s cache entries that a request sharing ``common`` characters with it
    can read (``cur``: that request, whose own breakpoints must reach the entry, Anthropic
    reading only at a marker and looking back ``lookback`` blocks from it; None: any;
    ``gap``: seconds since ``prev``, which an entry must outlive; None: any)."""
    rules = rules_for(prev.provider, prev.model)
    minimum = rules.minimum
    if prev.provider == "anthropic":
        reach = _reach(cur, rules.lookback) if cur is not None else None
        best, end, blocks = 0, 0, 0
        for i, item in enumerate(prev.items):
            end += item.size
            blocks += item.blocks
            if end > common:
                break
            if item.breakpoint and round(end * scale) >= minimum and (
                    gap is None or gap <= _life(rules, item.long)) and (
                    reach is None or any(b >= i and n - blocks <= reach[1] for b, n in reach[0])):
                best = end
        return round(best * scale)
    if rules.mode == EXPLICIT or (gap is not None and gap > lifetime(prev)):
        return 0
    tokens = round(min(common, prev.size) * scale)
    return 0 if tokens < minimum else tokens // rules.block * rules.block


def _reach(cur: Prefix, lookback: int | None) -> tuple[list[tuple[int, int]], float]:
    """(item index and content blocks up to its end, of each breakpoint ``cur`` carries;
    blocks a breakpoint looks back): where an Anthropic request looks for cache entries. A
    request without markers reads nothing, whatever an earlier one wrote."""
    out, blocks = [], 0
    for i, item in enumerate(cur.items):
        blocks += item.blocks
        if item.breakpoint:
            out.append((i, blocks))
    return out, float("inf") if lookback is None else lookback


@dataclasses.dataclass(frozen=True, slots=True)
class SessionReport:
    """One session's prompt-cache account.

    ``turns`` and ``breaks`` count every request the agent made; the token counts and ``cost``
    only those the provider saw: ``local_turns`` were answered from dejacache's own store.
    ``hazards``: what was flagged before it cost anything (volatile text on the first turn, a
    cacheable prefix under the provider's minimum), each kind and place once.
    """

    session: str
    turns: int
    breaks: int
    prompt_tokens: int
    expected_cached: int  # tokens the prefixes allowed the provider to serve from its cache
    reported_cached: int | None  # tokens the provider says it served (None: never reported)
    cost: float  # dollars the breaks cost over the cached rate
    local_turns: int = 0
    hazards: tuple[PrefixHazard, ...] = ()

    @property
    def hit_ratio(self) -> float | None:
        """Reported cached tokens over prompt tokens (None when the provider never said)."""
        if self.reported_cached is None or not self.prompt_tokens:
            return None
        return self.reported_cached / self.prompt_tokens

    @property
    def expected_ratio(self) -> float:
        return self.expected_cached / self.prompt_tokens if self.prompt_tokens else 0.0

    def __str__(self) -> str:
        hit = "not reported" if self.hit_ratio is None else f"{self.hit_ratio:.0%}"
        local = f" ({self.local_turns} answered by dejacache)" if self.local_turns else ""
        hazards = f", {counted(len(self.hazards), 'hazard')}" if self.hazards else ""
        return (f"{self.session}: {counted(self.turns, 'turn')}{local}, "
                f"{counted(self.breaks, 'break')} "
                f"(${self.cost:.4f}){hazards}, cached {self.reported_cached or 0:,}/"
                f"{self.prompt_tokens:,} tokens reported ({hit}), "
                f"{self.expected_cached:,} expected ({self.expected_ratio:.0%})")


class SessionTotals:
    """Running sums behind a :class:`SessionReport`."""

    __slots__ = ("breaks", "cost", "expected", "hazards", "local", "name", "prompt",
                 "reported", "turns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.turns = self.breaks = self.prompt = self.expected = self.local = 0
        self.reported: int | None = None
        self.cost = 0.0
        self.hazards: dict[tuple[str, str, str], PrefixHazard] = {}

    def add(self, record: TurnRecord, breaks: list[PrefixBreak],
            hazards: Iterable[PrefixHazard] = ()) -> None:
        self.turns += 1
        self.breaks += len(breaks)
        for h in hazards:
            self.hazards.setdefault((h.kind, h.segment, h.path), h)
        if record.local:  # the provider never saw it: none of its tokens or costs
            self.local += 1
            return
        self.cost += sum(b.cost for b in breaks)
        self.prompt += record.prompt_tokens
        self.expected += record.expected_cached
        if record.reported_cached is not None:
            self.reported = (self.reported or 0) + record.reported_cached

    def report(self) -> SessionReport:
        return SessionReport(self.name, self.turns, self.breaks, self.prompt, self.expected,
                             self.reported, self.cost, self.local,
                             tuple(self.hazards.values()))
