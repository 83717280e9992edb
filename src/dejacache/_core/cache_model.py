"""A provider's prompt cache, simulated: what it reads and writes for each request it is sent.

:class:`ProviderCache` holds what one account's requests left in a provider's caches and
answers, per request (:class:`Sent`: its prefix, its prompt tokens and when it was sent), the
tokens read from the cache and written to it (:class:`Served`), by the rows of
``cache_rules.py``:

- **where entries are written** (``mode``): nowhere but an explicit cache the request names
  (Gemini before 2.5); at the request's breakpoints only (Anthropic:
  each ``cache_control`` marker whose prefix reaches the minimum); at every prefix, in
  ``block``-token steps (OpenAI before gpt-5.6, Gemini's implicit caching); or at one managed
  breakpoint at the latest user or tool message plus the explicit ones (gpt-5.6 on).
- **what a request reads**: the longest live entry it repeats. A breakpoint finds entries at
  the item boundaries up to ``lookback`` content blocks before it (Anthropic's ~20); OpenAI's
  breakpoints have no lookback; an automatic cache shares the longest common prefix.
- **lifetimes**: ``ttl`` without use (``long_ttl`` when the marker or the request asks for
  it), renewed by a read when ``refresh_on_read``.
- **explicit caches** (Gemini's ``CachedContent``, priced by the planner): a prefix whose
  first ``pinned`` items are held in one is read from it, every time but the first, which
  creates it (a write at the input price); what follows is not cached. It lives as long as
  the planner asked (the conversation), so nothing expires here; its storage is the
  planner's to price (``Served.stored``).
- **routing**: where ``route_tokens`` is set (OpenAI), a request goes to the machine of a hash
  of its first ``route_tokens`` tokens and its ``prompt_cache_key``; each route serves
  ``route_rpm`` requests a minute, the next ones spill to more machines, each with its own
  cache (the n-th request of the last minute goes to machine ``n // route_rpm``: the spill
  made deterministic). Without a clock nothing spills and nothing expires.

Entries remember the tokens the request that wrote them counted (the provider's own count,
scaled per request from characters of canonical JSON), which is what a later read reports.
Pure: times are passed in.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

from ..keys import digest
from .cache_rules import AUTOMATIC, BREAKPOINTS, EXPLICIT, CacheRules, rules_for
from .prefix import Prefix, shared

__all__ = ["ProviderCache", "Sent", "Served"]

_MAX_PROMPTS = 64  # prompts an automatic cache remembers per machine (oldest dropped)
_WINDOW = 60.0  # seconds over which a route's request rate is counted
_CHARS = 4  # characters of canonical JSON per token, for the routed head only


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """One request: its prefix, its prompt tokens (reported, else estimated), and when it was
    sent (seconds; None: no clock)."""

    prefix: Prefix
    tokens: int
    at: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Served:
    """What the cache did for one request: prompt tokens, tokens read from the cache, tokens
    written to it (``written_long``: of those, with the long lifetime)."""

    prompt: int
    read: int = 0
    written: int = 0
    written_long: int = 0
    stored: int = 0  # tokens this request put in an explicit cache (storage billed per hour)

    @property
    def uncached(self) -> int:
        """Tokens paid at the plain input price."""
        return max(0, self.prompt - self.read - self.written)


@dataclasses.dataclass(slots=True)
class _Entry:
    tokens: int
    expires: float | None
    ttl: float


@dataclasses.dataclass(slots=True)
class _Prompt:
    prefix: Prefix
    tokens: int
    scale: float
    expires: float | None
    ttl: float


class _Machine:
    __slots__ = ("pinned", "points", "prompts")

    def __init__(self) -> None:
        self.points: dict[str, _Entry] = {}  # chain digest at a boundary -> entry
        self.prompts: list[_Prompt] = []  # automatic caching: whole prompts
        self.pinned: set[str] = set()  # explicit caches: chain digest of what each holds


def _live(expires: float | None, at: float | None) -> bool:
    return expires is None or at is None or at <= expires


def _until(at: float | None, ttl: float) -> float | None:
    return None if at is None else at + ttl


class ProviderCache:
    """One account's prompt caches at the providers it sends to (see the module)."""

    def __init__(self, rules: Callable[[str, str], CacheRules] = rules_for) -> None:
        self._rules = rules
        self._machines: dict[str, _Machine] = {}
        self._routes: dict[str, collections.deque[float]] = {}

    def send(self, sent: Sent) -> Served:
        p = sent.prefix
        rules = self._rules(p.provider, p.model)
        if not p.items or sent.tokens <= 0:
            return Served(max(sent.tokens, 0))
        scale = sent.tokens / p.size if p.size else 0.0
        machine = self._machine(rules, sent)
        if p.pinned:
            return _pinned(rules, machine, sent, scale)
        if rules.mode == EXPLICIT:  # no implicit caching: only a named explicit cache reads
            return Served(sent.tokens)
        if rules.mode == AUTOMATIC:
            return self._automatic(rules, machine, sent, scale)
        return self._at_points(rules, machine, sent, scale)

    # ------------------------------------------------------------ routing

    def _machine(self, rules: CacheRules, sent: Sent) -> _Machine:
        p = sent.prefix
        name = f"{p.provider}:{p.model}"
        if rules.route_tokens:
            # A fixed characters-per-token: the route must not move with each request's count.
            head = b"".join(i.canonical for i in p.items)[:rules.route_tokens * _CHARS]
            route = digest("route", name, head + b"\0" + p.route.encode())
            index = 0
            if sent.at is not None and rules.route_rpm:
                window = self._routes.setdefault(route, collections.deque())
                while window and window[0] <= sent.at - _WINDOW:
                    window.popleft()
                index = len(window) // rules.route_rpm
                window.append(sent.at)
            name = f"{route}/{index}"
        return self._machines.setdefault(name, _Machine())

    # ------------------------------------------------------------ automatic caching

    def _automatic(self, rules: CacheRules, m: _Machine, sent: Sent, scale: float) -> Served:
        p, at = sent.prefix, sent.at
        if sent.tokens < rules.minimum:
            return Served(sent.tokens)
        best, hit = 0, None
        kept = []
        for e in m.prompts:
            if not _live(e.expires, at):
                continue
            common, extends = shared(e.prefix, p)
            tokens = min(round(common * e.scale), e.tokens) // rules.block * rules.block
            if tokens >= rules.minimum and tokens > best:
                best, hit = tokens, e
            if not extends:  # what this prompt extends is now held by it (as long)
                kept.append(e)
        if hit is not None and rules.refresh_on_read:
            hit.expires = _until(at, hit.ttl)
        ttl = rules.long_ttl if p.long_lived and rules.long_ttl else rules.ttl
        m.prompts = kept
        m.prompts.append(_Prompt(p, sent.tokens, scale, _until(at, ttl), ttl))
        del m.prompts[:-_MAX_PROMPTS]
        return Served(sent.tokens, best)

    # ------------------------------------------------------------ breakpoints

    def _at_points(self, rules: CacheRules, m: _Machine, sent: Sent, scale: float) -> Served:
        p, at = sent.prefix, sent.at
        points = _points(rules, p)
        if not points:
            return Served(sent.tokens)
        ends, blocks, size, count = [], [], 0, 0
        for item in p.items:
            size += item.size
            count += item.blocks
            ends.append(size)
            blocks.append(count)
        read = self._read(rules, m, p, points, blocks, at)
        lower, last, long = read, 0, 0
        for i, is_long in points:
            tokens = round(ends[i] * scale) // rules.block * rules.block
            if tokens < rules.minimum:
                continue
            ttl = rules.long_ttl if is_long and rules.long_ttl else rules.ttl
            entry = m.points.get(p.chain[i])
            if entry is not None and _live(entry.expires, at):
                entry.expires = _until(at, max(entry.ttl, ttl))
            else:
                m.points[p.chain[i]] = _Entry(tokens, _until(at, ttl), ttl)
            if tokens > lower and is_long:
                long += tokens - lower
            lower = max(lower, tokens)
            last = tokens
        written = max(0, last - read)
        return Served(sent.tokens, read, written, min(long, written))

    def _read(self, rules: CacheRules, m: _Machine, p: Prefix, points: list[tuple[int, bool]],
              blocks: list[int], at: float | None) -> int:
        """Tokens of the longest live entry ``p`` repeats at a boundary its breakpoints look
        back to; the entry's lifetime renewed."""
        top = max(i for i, _ in points)
        for j in range(top, -1, -1):
            if rules.lookback is not None and not any(
                    b >= j and blocks[b] - blocks[j] <= rules.lookback for b, _ in points):
                continue
            entry = m.points.get(p.chain[j])
            if entry is None:
                continue
            if not _live(entry.expires, at):
                del m.points[p.chain[j]]
                continue
            if rules.refresh_on_read:
                entry.expires = _until(at, entry.ttl)
            return entry.tokens
        return 0


def _pinned(rules: CacheRules, m: _Machine, sent: Sent, scale: float) -> Served:
    p = sent.prefix
    tokens = round(sum(i.size for i in p.items[:p.pinned]) * scale)
    if tokens < rules.minimum:  # too small to create
        return Served(sent.tokens)
    key = p.chain[p.pinned - 1]
    if key in m.pinned:
        return Served(sent.tokens, tokens)
    m.pinned.add(key)
    return Served(sent.tokens, 0, tokens, stored=tokens)


def _points(rules: CacheRules, p: Prefix) -> list[tuple[int, bool]]:
    """(item index, asks for the long lifetime) of each breakpoint the provider writes."""
    marked = [(i, it.long) for i, it in enumerate(p.items) if it.breakpoint]
    if rules.mode == BREAKPOINTS:
        return marked[-rules.max_breakpoints:] if rules.max_breakpoints else []
    # Managed caching: the latest explicit breakpoints and, unless the request says
    # "explicit", one implicit breakpoint at the latest user or tool message.
    if p.explicit:
        return marked[-rules.max_breakpoints:]
    kept = marked[-(rules.max_breakpoints - 1):] if rules.max_breakpoints > 1 else []
    implicit = _latest_turn(p)
    if implicit is not None and all(i != implicit for i, _ in kept):
        kept.append((implicit, False))
    return sorted(kept)


def _latest_turn(p: Prefix) -> int | None:
    for i in range(len(p.items) - 1, -1, -1):
        data = p.items[i].data
        if type(data) is dict and (data.get("role") in ("user", "tool")
                                   or data.get("type") == "function_call_output"):
            return i
    return len(p.items) - 1 if p.items else None
