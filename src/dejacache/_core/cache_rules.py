"""How each provider's prompt cache works, per model family: a table with its sources.

One row (:class:`CacheRules`) per provider and model-name prefix (the longest prefix wins):
the smallest cacheable prefix, the granularity of a cached length, where entries are written
(``mode``), how many breakpoints a request may write and how far back one looks, lifetimes and
what refreshes them, routing, and the prices of reads, writes and storage as multiples of the
model's input price. The prompt-prefix monitor and the prompt-cache planner read these rows,
and nothing else, for provider rules.

Sources, read on 2026-12-02 (the documentation changes: override with
:func:`set_cache_rules`, e.g. ``set_cache_rules({"anthropic:claude-sonnet-4-6":
{"minimum": 2048}})``):

- Anthropic, https://platform.claude.com/docs/en/build-with-claude/prompt-caching: breakpoints
  are ``cache_control`` markers, up to 4 per request, or one top-level ``cache_control`` that
  the API puts on the last cacheable block; a breakpoint also finds entries at the block
  boundaries up to about 20 blocks before it; entries live 5 minutes, refreshed at no cost on
  each use, or 1 hour with ``"ttl": "1h"``; 5-minute writes cost 1.25x the input price, 1-hour
  writes 2x, reads 0.1x. Minimum cacheable prompt, as the docs list it (quoted in
  anthropics/anthropic-sdk-python#1194): 4,096 tokens for Opus 4.6 and 4.5 and Haiku 4.5;
  2,048 for Haiku 3.5 and 3; 1,024 for Sonnet 4.6, 4.5, 4, 3.7 and Opus 4.1, 4. *Contradicted*:
  that issue reports Sonnet 4.6 caching only from 2,048 tokens, and some gateways' tables
  say 2,048 for Sonnet 4.6; we keep the documented 1,024. Models the docs did not list when
  read (later Opus and Sonnet versions) take the family default, 1,024, but Opus 4.7:
  4,096, as copies of the page made since list it (claudecodeguides.com, clawdemy.org; one
  blog says 2,048).
- OpenAI, https://developers.openai.com/api/docs/guides/prompt-caching and the API reference
  as shipped in openai-python 3.57.0 (``prompt_cache_options``, ``prompt_cache_breakpoint``,
  ``prompt_cache_retention``): automatic caching from 1,024 tokens; before the gpt-5.6 family a
  cached prefix grows in 128-token steps and writes are free; from gpt-5.6 one implicit
  breakpoint near the latest user or tool message plus up to three explicit ones (four in
  ``"explicit"`` mode), exact boundaries (no 128-token rounding), matching against the latest
  80 breakpoints with no block lookback, writes 1.25x, a 30-minute minimum lifetime (``"12h"``
  per breakpoint). Requests are routed by a hash of about the first 256 tokens plus
  ``prompt_cache_key``, and one route serves about 15 requests a minute before spilling to
  more machines (OpenAI's staff on community.openai.com/t/1267103, restating the guide).
  In-memory entries live 5 to 10 minutes idle (always gone within an hour): we take 5;
  ``prompt_cache_retention="24h"`` keeps them up to 24 h, the only policy from gpt-5.5 on.
  *Unclear*: the reference says organisations without zero data retention default to
  ``"24h"`` on older models too; we assume in-memory unless the request says otherwise.
  Cached-read prices per model: OpenAI's price list, as in the cassette price table; it
  lists none for the pro models (o1-pro, o3-pro, gpt-5-pro): they cache nothing.
- Gemini, https://ai.google.dev/gemini-api/docs/caching (and Vertex AI's context-cache
  overview): implicit caching on by default, reads 90% off, writes at the input price, no
  storage charge; explicit ``CachedContent`` with a TTL (default 1 h) and a per-hour storage
  price. Implicit caching is for "Gemini 2.5 and newer models" only: 2.0 and 1.5 cache only
  explicitly (reads 0.25x, as their price list has it; their minimum for an explicit cache,
  4,096, is an older version of the page's: *unverified*). Minimums, as the English page
  last updated 2026-10-13 lists them: 2,048 for 2.5 Flash and 2.5 Pro, 4,096 for 3.1 Pro and
  the 3.5 to 3.8 Flash models and Gemini 4 (models it did not list take 4,096); 3 Flash
  (1,024) and 3 Pro (4,096) from its version of 2026-05-07, which listed 1,024 for 2.5 Flash
  and 4,096 for 2.5 Pro, since changed. Storage of an
  explicit cache, per million tokens per hour, from the price list
  (https://ai.google.dev/gemini-api/docs/pricing, as third-party pages quote it: not read
  directly): $1.00 for the Flash models, $4.50 for the Pro ones. Implicit caching keeps a
  prefix for an unstated few minutes: we take 5. The order in which Gemini renders the
  system instruction, tools and contents is not documented: we take that order.

Pure: data and lookups, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["AUTOMATIC", "BREAKPOINTS", "EXPLICIT", "IMPLICIT", "READ_ON", "RULES", "CacheRules",
           "model_id", "rules_for", "set_cache_rules", "table"]

READ_ON = "2026-12-02"

#: ``mode``: where a provider writes entries.
BREAKPOINTS = "breakpoints"  # only at the request's markers (Anthropic cache_control)
AUTOMATIC = "automatic"  # every prefix of the prompt, in ``block`` steps (OpenAI < gpt-5.6)
IMPLICIT = "implicit"  # one managed breakpoint at the latest message, and explicit ones
EXPLICIT = "explicit"  # nothing cached unless the request names an explicit cache (Gemini 2.0)


@dataclasses.dataclass(frozen=True, slots=True)
class CacheRules:
    """One model family's prompt cache. Lifetimes in seconds; prices as multiples of the
    model's input price (``storage``: dollars per million tokens per hour)."""

    provider: str
    family: str  # model-name prefix; "" is the provider's default
    minimum: int  # tokens a prefix needs before anything is cached
    block: int = 1  # a cached length is a multiple of this many tokens
    mode: str = BREAKPOINTS
    max_breakpoints: int = 4  # breakpoints one request writes
    lookback: int | None = None  # content blocks a breakpoint looks back; None: no limit
    ttl: float = 300.0  # an entry's lifetime without use
    long_ttl: float | None = None  # the longer lifetime a request can ask for
    refresh_on_read: bool = True
    routing_key: str = ""  # the request field that routes to a cache ("" none)
    route_tokens: int = 0  # leading tokens hashed to choose a machine (0: one cache)
    route_rpm: int = 0  # requests a minute one route serves before spilling (0: no limit)
    read: float = 0.1
    write: float = 1.0
    write_long: float = 1.0
    storage: float = 0.0
    source: str = ""


_ANTHROPIC_DOC = "platform.claude.com/docs/en/build-with-claude/prompt-caching"
_OPENAI_DOC = "developers.openai.com/api/docs/guides/prompt-caching; openai-python 3.57.0"
_GEMINI_DOC = "ai.google.dev/gemini-api/docs/caching"

_CLAUDE = CacheRules("anthropic", "", 1024, mode=BREAKPOINTS, lookback=20, ttl=300.0,
                     long_ttl=3600.0, read=0.1, write=1.25, write_long=2.0,
                     source=_ANTHROPIC_DOC)
_GPT = CacheRules("openai", "", 1024, block=128, mode=AUTOMATIC, max_breakpoints=0, ttl=300.0,
                  long_ttl=86400.0, routing_key="prompt_cache_key", route_tokens=256,
                  route_rpm=15, read=0.5, write=1.0, write_long=1.0, source=_OPENAI_DOC)
_GPT56 = dataclasses.replace(_GPT, block=1, mode=IMPLICIT, max_breakpoints=4, ttl=1800.0,
                             long_ttl=43200.0, read=0.1, write=1.25, write_long=1.25)
_GEMINI = CacheRules("gemini", "", 4096, mode=AUTOMATIC, max_breakpoints=0, ttl=300.0,
                     long_ttl=3600.0, read=0.1, write=1.0, write_long=1.0, storage=1.0,
                     source=_GEMINI_DOC)


def _row(base: CacheRules, family: str, **changes: Any) -> CacheRules:
    return dataclasses.replace(base, family=family, **changes)


#: The built-in rows, by (provider, family).
RULES: dict[tuple[str, str], CacheRules] = {(r.provider, r.family): r for r in (
    _CLAUDE,
    _row(_CLAUDE, "claude-opus-4-5", minimum=4096),
    _row(_CLAUDE, "claude-opus-4-6", minimum=4096),
    _row(_CLAUDE, "claude-opus-4-7", minimum=4096),
    _row(_CLAUDE, "claude-haiku-4-5", minimum=4096),
    _row(_CLAUDE, "claude-3-5-haiku", minimum=2048),
    _row(_CLAUDE, "claude-3-haiku", minimum=2048),
    _GPT,
    _row(_GPT, "gpt-4o", read=0.5),
    _row(_GPT, "o1", read=0.5),
    _row(_GPT, "gpt-4.1", read=0.25),
    _row(_GPT, "o3", read=0.25),
    _row(_GPT, "o3-mini", read=0.5),
    _row(_GPT, "o4-mini", read=0.25),
    _row(_GPT, "gpt-5", read=0.1),
    _row(_GPT, "gpt-5.5", read=0.1, ttl=86400.0, long_ttl=None),  # only "24h" from gpt-5.5
    # No cached price: no caching, and a token reported cached costs the full price.
    _row(_GPT, "o1-pro", mode=EXPLICIT, long_ttl=None, read=1.0),
    _row(_GPT, "o3-pro", mode=EXPLICIT, long_ttl=None, read=1.0),
    _row(_GPT, "gpt-5-pro", mode=EXPLICIT, long_ttl=None, read=1.0),
    _row(_GPT56, "gpt-5.6"),
    _row(_GPT56, "gpt-5.7"),
    _row(_GPT56, "gpt-6"),
    _GEMINI,
    _row(_GEMINI, "gemini-2.5-flash", minimum=2048),
    _row(_GEMINI, "gemini-2.5-pro", minimum=2048, storage=4.5),
    _row(_GEMINI, "gemini-3-pro", minimum=4096, storage=4.5),
    _row(_GEMINI, "gemini-3.1-pro", minimum=4096, storage=4.5),
    _row(_GEMINI, "gemini-3-flash", minimum=1024),
    _row(_GEMINI, "gemini-2.0", mode=EXPLICIT, read=0.25),
    _row(_GEMINI, "gemini-1.5", mode=EXPLICIT, read=0.25),
    _row(_GEMINI, "gemini-1.5-pro", mode=EXPLICIT, read=0.25, storage=4.5),
)}
_BUILT_IN = dict(RULES)
_FOUND: dict[tuple[str, str], CacheRules] = {}


# Bedrock's cross-region inference profile ids put a geography before the model id.
_GEOGRAPHIES = frozenset({"us", "eu", "apac", "global", "us-gov", "ca", "jp", "au"})


def model_id(model: str) -> str:
    """The model id a Bedrock ARN or cross-region profile names (``arn:...:inference-profile/
    us.anthropic.claude-haiku-4-5-...`` -> ``anthropic.claude-haiku-4-5-...``); other names as
    they are."""
    name = model.rsplit("/", 1)[-1]
    geo, _, rest = name.partition(".")
    return rest if geo in _GEOGRAPHIES and rest else name


def _longest(provider: str, model: str) -> CacheRules | None:
    best: CacheRules | None = None
    for (prov, family), row in RULES.items():
        if prov == provider and model.startswith(family) and (
                best is None or len(family) > len(best.family)):
            best = row
    return best


def rules_for(provider: str, model: str) -> CacheRules:
    """The row for ``model`` (longest family prefix) of ``provider``; the provider's default
    row when none matches; OpenAI's for a provider the table does not know (the OpenAI-shaped
    APIs cache like it). A Bedrock id (``us.anthropic.claude-haiku-4-5-...-v1:0``, or an ARN
    ending in one) is read as the model it names."""
    found = _FOUND.get((provider, model))
    if found is not None:
        return found
    best = _longest(provider, model)
    if best is not None and not best.family:
        # Bedrock prefixes the vendor ("anthropic.claude-...") and may prefix a geography:
        # Haiku 4.5 there caches from 4,096 tokens as it does at Anthropic, not the default.
        vendor, _, rest = model_id(model).partition(".")
        if vendor == provider and rest:
            best = _longest(provider, rest) or best
    if best is None:
        best = RULES.get(("openai", ""), _GPT)
    if len(_FOUND) < 4096:
        _FOUND[(provider, model)] = best
    return best


def set_cache_rules(rows: Iterable[CacheRules] | Mapping[str, Mapping[str, Any]], *,
                    replace: bool = False) -> None:
    """Add or change rows: :class:`CacheRules` objects, or ``{"provider:family": {field:
    value}}``, which changes those fields of the row ``rules_for`` gives for that family
    (a new family starts as a copy of it). ``replace=True`` restores the built-in table
    first. Every row is checked before any is applied: a refused call changes nothing."""
    changed = dict(rows) if isinstance(rows, Mapping) else None
    given: list[Any] = [] if changed is not None else list(rows)
    for name, changes in (changed or {}).items():
        _check_changes(name, changes)
    for row in given:
        if not isinstance(row, CacheRules):
            raise ConfigurationError(f"set_cache_rules: {row!r} is not a CacheRules row (or "
                                     "pass {'provider:family': {field: value}})")
    _FOUND.clear()
    if replace:
        RULES.clear()
        RULES.update(_BUILT_IN)
    if changed is not None:
        for name, changes in changed.items():
            provider, _, family = name.partition(":")
            base = rules_for(provider, family)
            _FOUND.clear()
            RULES[(provider, family)] = dataclasses.replace(
                base, provider=provider, family=family, **dict(changes))
        return
    for row in given:
        RULES[(row.provider, row.family)] = row


_MODES = frozenset({BREAKPOINTS, AUTOMATIC, IMPLICIT, EXPLICIT})


def _check_changes(name: Any, changes: Any) -> None:
    """Refuse an override the model could not use (a misspelt field, a count given as text,
    a negative price) where it is given, not as a wrong number or a crash in a later plan."""
    if type(name) is not str or ":" not in name or not name.partition(":")[0]:
        raise ConfigurationError(f"set_cache_rules: {name!r}: name rows 'provider:family', "
                                 "e.g. 'anthropic:claude-sonnet-4-6'")
    if not isinstance(changes, Mapping):
        raise ConfigurationError(f"set_cache_rules: {name!r}: give the fields to change as a "
                                 f"mapping ({{'minimum': 2048}}), not {changes!r}")
    fields = {f.name: f for f in dataclasses.fields(CacheRules)}
    for field, value in changes.items():
        f = fields.get(field)
        if f is None or field in ("provider", "family"):
            from .._suggest import did_you_mean

            known = [n for n in fields if n not in ("provider", "family")]
            raise ConfigurationError(
                f"set_cache_rules: {name!r}: {field!r} is not a rule field ({', '.join(known)})"
                f"{did_you_mean(str(field), known)}")
        if not _valid(field, f.type, value):
            wanted = (f"one of {', '.join(sorted(_MODES))}" if field == "mode"
                      else f"a {f.type}" + (" >= 0" if "int" in f.type or "float" in f.type
                                            else ""))
            raise ConfigurationError(
                f"set_cache_rules: {name!r}: {field}={value!r}; it must be {wanted}")


def _valid(field: str, kind: Any, value: Any) -> bool:
    if field == "mode":
        return value in _MODES
    if value is None:
        return "None" in str(kind)
    if "bool" in str(kind):
        return type(value) is bool
    if "int" in str(kind):
        return type(value) is int and value >= 0
    if "float" in str(kind):
        return type(value) in (int, float) and value >= 0 and value == value
    return isinstance(value, str)


def table() -> list[CacheRules]:
    """Every row, by provider and family (for the docs and ``prompt-cache rules``)."""
    return [RULES[k] for k in sorted(RULES)]
