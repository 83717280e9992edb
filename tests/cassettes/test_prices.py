"""The price table: the longest model-name prefix wins, so a longer model name priced apart
from its shorter namesake needs its own row; Bedrock ids are priced as the model they name."""

from __future__ import annotations

import pytest

from dejacache.cassettes.prices import estimate_dollars, input_price, rates_from_table


@pytest.mark.parametrize(("model", "price"), [
    ("claude-opus-4-1-20250805", 15.00),
    ("claude-opus-4-5-20251101", 5.00),  # a third of Opus 4's, not Opus 4's
    ("claude-opus-4-6", 5.00),
    ("claude-opus-4-7", 5.00),
    ("claude-opus-4-20250514", 15.00),
    ("us.anthropic.claude-opus-4-6-v1", 5.00),
    ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
     "us.anthropic.claude-opus-4-5-20251101-v1:0", 5.00),
    ("o3-2025-04-16", 2.00),
    ("o3-mini-2025-01-31", 1.10),  # not o3's
    ("o3-pro", 20.00),
    ("gpt-5-2025-08-07", 1.25),
    ("gpt-5-pro", 15.00),  # not gpt-5's
    ("gpt-5-mini", 0.25),
])
def test_input_price_by_longest_prefix(model: str, price: float) -> None:
    assert input_price(model) == price


def test_a_cached_read_is_priced_at_the_models_own_rates() -> None:
    rates = rates_from_table()("openai", "o3-mini")
    assert rates is not None and (rates.input, rates.read) == (1.10, 0.5)
    usage = {"input_tokens": 1_000_000, "output_tokens": 0}
    assert estimate_dollars(usage, "claude-opus-4-5") == pytest.approx(5.0)
