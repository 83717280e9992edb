"""The provider cache rules: one sourced table, longest model prefix first, overridable, and
what the monitor and the price table read."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import dejacache
from dejacache._core import cache_rules
from dejacache._core.cache_rules import (
    AUTOMATIC,
    BREAKPOINTS,
    EXPLICIT,
    IMPLICIT,
    CacheRules,
    rules_for,
    set_cache_rules,
    table,
)
from dejacache._core.prefix import build_prefix
from dejacache._core.prompt_cache import lifetime, minimum_tokens
from dejacache.cassettes.prices import rates_from_table


@pytest.fixture(autouse=True)
def _built_in() -> Iterator[None]:
    yield
    set_cache_rules((), replace=True)


@pytest.mark.parametrize(("provider", "model", "minimum", "mode", "block"), [
    ("anthropic", "claude-sonnet-4-6", 1024, BREAKPOINTS, 1),
    ("anthropic", "claude-opus-4-5-20251101", 4096, BREAKPOINTS, 1),
    ("anthropic", "claude-opus-4-6", 4096, BREAKPOINTS, 1),
    ("anthropic", "claude-opus-4-7", 4096, BREAKPOINTS, 1),
    ("anthropic", "claude-opus-4-1-20250805", 1024, BREAKPOINTS, 1),
    ("anthropic", "claude-haiku-4-5", 4096, BREAKPOINTS, 1),
    ("anthropic", "claude-3-5-haiku-latest", 2048, BREAKPOINTS, 1),
    ("anthropic", "claude-next-unlisted", 1024, BREAKPOINTS, 1),
    ("openai", "gpt-4.1-mini", 1024, AUTOMATIC, 128),
    ("openai", "gpt-5.6", 1024, IMPLICIT, 1),
    ("openai", "gpt-5.6-mini", 1024, IMPLICIT, 1),
    # The English page as of 2026-10-13: 2,048 for 2.5, 4,096 for the newer ones.
    ("gemini", "gemini-2.5-pro", 2048, AUTOMATIC, 1),
    ("gemini", "gemini-2.5-flash", 2048, AUTOMATIC, 1),
    ("gemini", "gemini-3.1-pro-preview", 4096, AUTOMATIC, 1),
    ("gemini", "gemini-3.5-flash", 4096, AUTOMATIC, 1),
    ("gemini", "gemini-3-flash-preview", 1024, AUTOMATIC, 1),
    # No implicit caching before 2.5: only an explicit cache is read.
    ("gemini", "gemini-2.0-flash-001", 4096, EXPLICIT, 1),
    ("gemini", "gemini-1.5-pro-002", 4096, EXPLICIT, 1),
    ("openai", "o3-pro-2025-06-10", 1024, EXPLICIT, 128),  # no cached price: no caching
    ("openai", "gpt-5-pro", 1024, EXPLICIT, 128),
    ("mistral", "mistral-large", 1024, AUTOMATIC, 128),  # an OpenAI-shaped API
    # Bedrock ids, profiles and ARNs name the model after a vendor (and a geography).
    ("anthropic", "anthropic.claude-3-5-haiku-20241022-v1:0", 2048, BREAKPOINTS, 1),
    ("anthropic", "us.anthropic.claude-haiku-4-5-20251001-v1:0", 4096, BREAKPOINTS, 1),
    ("anthropic", "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/"
                  "eu.anthropic.claude-opus-4-5-20251101-v1:0", 4096, BREAKPOINTS, 1),
    ("anthropic", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", 1024, BREAKPOINTS, 1),
    ("anthropic", "claude-haiku-4-5@20251001", 4096, BREAKPOINTS, 1),  # Vertex AI
])
def test_longest_family_prefix_wins(provider: str, model: str, minimum: int, mode: str,
                                    block: int) -> None:
    r = rules_for(provider, model)
    assert (r.minimum, r.mode, r.block) == (minimum, mode, block)


def test_every_row_names_its_source_and_prices() -> None:
    rows = table()
    assert {r.provider for r in rows} == {"anthropic", "openai", "gemini"}
    for r in rows:
        assert r.source and "." in r.source, r
        # A model with no cached price (OpenAI's pro models) caches nothing: a read costs 1x.
        assert 0 < r.read < 1 or (r.read == 1 and r.mode == EXPLICIT), r
        assert r.write >= 1 and r.write_long >= r.write, r
        assert r.ttl > 0 and (r.long_ttl is None or r.long_ttl > r.ttl), r
    assert cache_rules.READ_ON == "2026-12-02"
    claude = rules_for("anthropic", "claude-sonnet-4-6")
    assert (claude.read, claude.write, claude.write_long, claude.ttl, claude.long_ttl,
            claude.lookback, claude.max_breakpoints) == (0.1, 1.25, 2.0, 300.0, 3600.0, 20, 4)
    gpt = rules_for("openai", "gpt-4.1")
    assert (gpt.routing_key, gpt.route_tokens, gpt.route_rpm) == ("prompt_cache_key", 256, 15)
    assert (rules_for("openai", "gpt-5.6").write, rules_for("openai", "gpt-4o").read) == (1.25,
                                                                                         0.5)


def test_a_mini_model_reads_at_its_own_discount() -> None:
    # o3-mini's cached input is half its price (o3's a quarter): the longer family wins.
    assert rules_for("openai", "o3-mini-2025-01-31").read == 0.5
    assert rules_for("openai", "o3-2025-04-16").read == 0.25


def test_overrides_change_one_field_and_what_the_monitor_reads() -> None:
    body = {"model": "claude-sonnet-4-6", "system": [
        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}], "messages": []}
    assert minimum_tokens("anthropic", "claude-sonnet-4-6") == 1024
    set_cache_rules({"anthropic:claude-sonnet-4-6": {"minimum": 2048, "ttl": 600.0}})
    assert minimum_tokens("anthropic", "claude-sonnet-4-6") == 2048
    assert lifetime(build_prefix("messages", body)) == 600.0
    assert rules_for("anthropic", "claude-sonnet-4-6").write == 1.25  # the rest kept
    assert minimum_tokens("anthropic", "claude-sonnet-4-5") == 1024  # another family
    set_cache_rules([CacheRules("openai", "my-proxy-model", 2000, read=0.2, source="ours")])
    assert rules_for("openai", "my-proxy-model-v2").minimum == 2000
    rates = rates_from_table({"my-proxy-model": (1.0, 2.0)})("openai", "my-proxy-model")
    assert rates is not None and (rates.input, rates.read) == (1.0, 0.2)
    set_cache_rules((), replace=True)
    assert minimum_tokens("anthropic", "claude-sonnet-4-6") == 1024


def test_a_malformed_override_names_itself() -> None:
    with pytest.raises(ValueError, match=r"claude-x.*provider:family"):
        set_cache_rules({"claude-x": {"minimum": 1}})


@pytest.mark.parametrize(("rows", "says"), [
    ({"anthropic:claude-x": {"minimum": "2048"}}, r"minimum='2048'; it must be a int >= 0"),
    ({"anthropic:claude-x": {"minimun": 2048}}, r"'minimun' is not a rule field.*'minimum'"),
    ({"anthropic:claude-x": {"read": -0.1}}, r"read=-0.1; it must be a float >= 0"),
    ({"anthropic:claude-x": {"read": float("nan")}}, r"read=nan"),
    ({"anthropic:claude-x": {"mode": "auto"}}, r"mode='auto'; it must be one of automatic"),
    ({"anthropic:claude-x": {"family": "y"}}, r"'family' is not a rule field"),
    ({"anthropic:claude-x": 2048}, r"as a mapping"),
    ([{"minimum": 1}], r"not a CacheRules row"),
    ({"anthropic:claude-x": {"minimum": 9}, "claude-y": {"minimum": 1}}, r"provider:family"),
])
def test_an_override_the_model_cannot_use_is_refused_where_it_is_given(rows: object,
                                                                        says: str) -> None:
    """It was taken (``"2048"`` as a minimum, a negative price: a later plan compared text
    with numbers or predicted negative costs) or failed as a bare TypeError."""
    with pytest.raises(dejacache.ConfigurationError, match=says):
        set_cache_rules(rows)  # type: ignore[arg-type]
    assert rules_for("anthropic", "claude-x").minimum == 1024  # nothing half applied


def test_lifetimes_follow_what_the_request_asks() -> None:
    def chat(**extra: object) -> object:
        return build_prefix("chat", {"model": "gpt-4.1", "messages": [], **extra})

    assert lifetime(chat()) == 300.0  # type: ignore[arg-type]
    assert lifetime(chat(prompt_cache_retention="24h")) == 86400.0  # type: ignore[arg-type]
    assert lifetime(build_prefix("chat", {"model": "gpt-5.5", "messages": []})) == 86400.0
    twelve = build_prefix("chat", {"model": "gpt-5.6", "messages": [{"role": "system", "content": [
        {"type": "text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit",
                                                                  "ttl": "12h"}}]}]})
    assert lifetime(twelve) == 43200.0
