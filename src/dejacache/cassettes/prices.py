"""What a replayed call would have cost: a small, dated price table the user can override.

Prices are US dollars per million tokens (input, output), matched by longest model-name
prefix. They go stale; override or extend them with :func:`set_prices` (or the pytest ini
option ``dejacache_prices``), e.g. ``set_prices({"my-model": (1.0, 2.0)})``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .._core.cache_rules import model_id, rules_for

if TYPE_CHECKING:
    from .._core.prompt_cache import Rates

__all__ = ["AUDIO_PRICES", "PRICES", "PRICES_DATE", "estimate_dollars", "input_price",
           "rates_from_table", "set_prices"]

PRICES_DATE = "2026-11-01"

PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku-4": (1.00, 5.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
    # Longer names the prefix match above priced as their shorter namesakes (o3-mini at o3's
    # price, Opus 4.5 at Opus 4's: 3x its cost), from the same price pages (Opus 4.7 from
    # copies of Anthropic's caching page, which price it at $5).
    "o3-mini": (1.10, 4.40),
    "o3-pro": (20.00, 80.00),
    "gpt-5-pro": (15.00, 120.00),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-opus-4-6": (5.00, 25.00),
    "claude-opus-4-7": (5.00, 25.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-pro": (1.25, 10.00),
    # Added from the providers' public price pages as they stood in mid-2025 (Google AI
    # Studio's Gemini API pricing, Mistral's La Plateforme, GroqCloud's on-demand prices,
    # Cohere's API pricing), not re-read since: standard tier, text, a prompt of at most
    # 200k tokens (Gemini 2.5 Pro doubles above that). The Llama prices are Groq's: the same
    # model from another host is priced as if Groq served it.
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "gemini-2.0-flash-lite": (0.075, 0.30),
    "gemini-1.5-flash": (0.075, 0.30),
    "gemini-1.5-pro": (1.25, 5.00),
    "mistral-large": (2.00, 6.00),
    "mistral-medium": (0.40, 2.00),
    "mistral-small": (0.10, 0.30),
    "codestral": (0.30, 0.90),
    "llama-3.3-70b-versatile": (0.59, 0.79),
    "llama-3.1-8b-instant": (0.05, 0.08),
    "command-a": (2.50, 10.00),
    "command-r-plus": (2.50, 10.00),
    "command-r7b": (0.0375, 0.15),
    "command-r": (0.15, 0.60),
    # Amazon Bedrock model ids, on-demand in US East (N. Virginia), from AWS's price list
    # (aws.amazon.com/bedrock/pricing) as published in 2025, not re-read since. Anthropic's
    # models cost on Bedrock what Anthropic lists. Cross-region inference profiles
    # ("us.anthropic...") and ARNs are priced as the model id they name (_lookup).
    "anthropic.claude-3-haiku": (0.25, 1.25),
    "anthropic.claude-3-5-haiku": (0.80, 4.00),
    "anthropic.claude-haiku-4": (1.00, 5.00),
    "anthropic.claude-3-5-sonnet": (3.00, 15.00),
    "anthropic.claude-3-7-sonnet": (3.00, 15.00),
    "anthropic.claude-sonnet-4": (3.00, 15.00),
    "anthropic.claude-opus-4": (15.00, 75.00),
    "anthropic.claude-opus-4-5": (5.00, 25.00),
    "anthropic.claude-opus-4-6": (5.00, 25.00),
    "anthropic.claude-opus-4-7": (5.00, 25.00),
    "amazon.nova-micro": (0.035, 0.14),
    "amazon.nova-lite": (0.06, 0.24),
    "amazon.nova-pro": (0.80, 3.20),
    "amazon.nova-premier": (2.50, 12.50),
    # Realtime and Live models, text tokens (their audio tokens: AUDIO_PRICES), from
    # OpenAI's and Google AI Studio's price pages as they stood in late 2025, not re-read
    # since: standard tier, uncached input.
    "gpt-realtime-mini": (0.60, 2.40),
    "gpt-realtime": (4.00, 16.00),
    "gpt-4o-realtime": (5.00, 20.00),
    "gpt-4o-mini-realtime": (0.60, 2.40),
    "gemini-2.5-flash-native-audio": (0.50, 2.00),
    "gemini-live-2.5-flash": (0.50, 2.00),
    "gemini-2.0-flash-live": (0.35, 1.50),
}
#: Audio tokens of the realtime and live models, dollars per million (input, output): an
#: audio token costs several times a text token, and their usage reports the two apart
#: (``input_audio_tokens`` / ``output_audio_tokens``). Same sources and date as above.
AUDIO_PRICES: dict[str, tuple[float, float]] = {
    "gpt-realtime-mini": (10.00, 20.00),
    "gpt-realtime": (32.00, 64.00),
    "gpt-4o-realtime": (40.00, 80.00),
    "gpt-4o-mini-realtime": (10.00, 20.00),
    "gemini-2.5-flash-native-audio": (3.00, 12.00),
    "gemini-live-2.5-flash": (3.00, 12.00),
    "gemini-2.0-flash-live": (2.10, 8.50),
}
_DEFAULT: tuple[float, float] | None = None  # unknown models cost nothing rather than a guess


def set_prices(table: Mapping[str, tuple[float, float]], *, replace: bool = False) -> None:
    """Add or change prices (``replace=True`` drops the built-in table first)."""
    _CACHE.clear()
    if replace:
        PRICES.clear()
    PRICES.update({k: (float(v[0]), float(v[1])) for k, v in table.items()})


_CACHE: dict[str, tuple[float, float] | None] = {}


def _price(model: str) -> tuple[float, float] | None:
    if model in _CACHE:
        return _CACHE[model]
    _CACHE[model] = found = _lookup(model)
    return found


def _lookup(model: str) -> tuple[float, float] | None:
    best = _longest(model)
    if not best and ("/" in model or "." in model):
        best = _longest(model_id(model))
    return PRICES[best] if best else _DEFAULT


def _longest(model: str) -> str:
    best = ""
    for prefix in PRICES:
        if model.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return best


def estimate_dollars(usage: Mapping[str, int], model: str) -> float:
    """Dollars of ``usage`` at ``model``'s prices: audio tokens (``input_audio_tokens``,
    ``output_audio_tokens``, parts of the input and output counts) at its audio prices;
    cached reads and cache writes at the multiples of the input price its provider's cache
    rules give (``_core/cache_rules.py``), all other input at the full price."""
    price = _price(model) if model else None
    if price is None:
        return 0.0
    tin = usage.get("input_tokens", usage.get("prompt_tokens", 0))
    tout = usage.get("output_tokens", usage.get("completion_tokens", 0))
    ain, aout = usage.get("input_audio_tokens", 0), usage.get("output_audio_tokens", 0)
    audio = (_audio_price(model) if ain or aout else None) or price
    read, write, write_long = _cache_rates(model)
    # Anthropic (and Bedrock's Converse) report reads and writes apart from input_tokens;
    # cache_creation_input_tokens counts both lifetimes, the 1-hour share at its own rate.
    made = usage.get("cache_creation_input_tokens", 0)
    made_long = min(usage.get("ephemeral_1h_input_tokens", 0), made)
    apart = (usage.get("cache_read_input_tokens", 0) * read + (made - made_long) * write
             + made_long * write_long)
    # OpenAI, Gemini, Cohere and the realtime APIs count cached reads (and OpenAI's writes)
    # within the prompt. Which of them are audio is not said: the audio share of the prompt.
    cached = min(usage.get("cached_tokens", 0), tin)
    written = min(usage.get("cache_write_tokens", 0), tin - cached)
    prompt = tin - cached - written + cached * read + written * write  # in full-price tokens
    share = min(ain, tin) / tin if ain and tin else 0.0
    return ((apart + prompt * (1 - share)) * price[0] + prompt * share * audio[0]
            + (tout - aout) * price[1] + aout * audio[1]) / 1_000_000


def _cache_rates(model: str) -> tuple[float, float, float]:
    """(read, write, 1-hour write) multiples of the input price; 1.0 each for a model whose
    provider's cache rules are not known (priced in full, as the usage reports it)."""
    found = _RULED.get(model)
    if found is None:
        found = _RULED[model] = _ruled(model)
    if not found[0]:
        return 1.0, 1.0, 1.0
    r = rules_for(*found)  # (asked each time: set_cache_rules changes the rows)
    return r.read, r.write, r.write_long


#: Model-name starts -> the provider whose cache rules price its cached tokens (a Bedrock
#: id is read as the model it names: ``us.anthropic.claude-...`` is Anthropic's).
_PROVIDERS = (("claude-", "anthropic"), ("anthropic.", "anthropic"), ("gpt-", "openai"),
              ("chatgpt-", "openai"), ("o1", "openai"), ("o3", "openai"), ("o4", "openai"),
              ("gemini-", "gemini"))
_RULED: dict[str, tuple[str, str]] = {}  # model -> (provider or "", the name its rules read)


def _ruled(model: str) -> tuple[str, str]:
    name = model_id(model)
    for start, provider in _PROVIDERS:
        if name.startswith(start):
            return provider, name
    return "", name


def _audio_price(model: str) -> tuple[float, float] | None:
    best = max((p for p in AUDIO_PRICES if model.startswith(p)), key=len, default="")
    return AUDIO_PRICES[best] if best else None


def input_price(model: str) -> float | None:
    """Dollars per million input tokens of ``model`` (None when the table does not know it)."""
    price = _price(model) if model else None
    return price[0] if price is not None else None


def rates_from_table(table: Mapping[str, tuple[float, float]] | None = None,
                     ) -> Callable[[str, str], Rates | None]:
    """``rates(provider, model)``: the input price of ``model``, from ``table`` (model prefix
    -> (input, output) dollars per million tokens; the longest prefix wins) or, without one,
    from :data:`PRICES`, and its cache multipliers (``_core/cache_rules.py``). None for a
    model with no known price."""
    from .._core.prompt_cache import Rates

    def rates(provider: str, model: str) -> Rates | None:
        if table is None:
            price = input_price(model)
        else:
            best = max((p for p in table if model.startswith(p)), key=len, default=None)
            price = float(table[best][0]) if best is not None else None
        if price is None:
            return None
        r = rules_for(provider, model)
        return Rates(price, r.read, r.write, r.write_long)

    return rates
