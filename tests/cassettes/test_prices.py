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


# ---------------------------------------------------------------- cached tokens
# Usage as each provider reports it (their API references), read by the provider modules as a
# recording stores it, then priced. Rates: _core/cache_rules.py; prices: PRICES.

SONNET = "claude-sonnet-4-5-20250929"  # $3 / $15; reads 0.1x, writes 1.25x (5 min), 2x (1 h)
_CLAUDE_USAGE = {"input_tokens": 120, "cache_creation_input_tokens": 2000,
                 "cache_read_input_tokens": 30000,
                 "cache_creation": {"ephemeral_5m_input_tokens": 500,
                                    "ephemeral_1h_input_tokens": 1500},
                 "output_tokens": 80, "service_tier": "standard", "server_tool_use": None}
_CLAUDE_DOLLARS = (120 * 3 + 30000 * 0.3 + 500 * 3.75 + 1500 * 6 + 80 * 15) / 1e6


def test_anthropic_cache_reads_and_5m_and_1h_writes_at_their_rates() -> None:
    from dejacache.http.providers.anthropic import PROVIDER
    from dejacache.stats import token_total

    body = {"id": "msg_01", "type": "message", "role": "assistant", "model": SONNET,
            "content": [{"type": "text", "text": "Paris."}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": _CLAUDE_USAGE}
    start = {**_CLAUDE_USAGE, "output_tokens": 1}
    events = [{"type": "message_start", "message": {**body, "content": [], "usage": start}},
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}},
              {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": 80}},
              {"type": "message_stop"}]
    whole, streamed = PROVIDER.usage(body, []), PROVIDER.usage(None, events)
    assert whole == streamed == {"input_tokens": 120, "cache_creation_input_tokens": 2000,
                                 "cache_read_input_tokens": 30000, "output_tokens": 80,
                                 "ephemeral_1h_input_tokens": 1500}
    assert token_total(whole) == 120 + 2000 + 30000 + 80  # the 1 h share is a part
    assert estimate_dollars(whole, SONNET) == pytest.approx(_CLAUDE_DOLLARS)  # not 0.09756


def test_bedrock_converse_cache_counts_are_anthropics_rates() -> None:
    from dejacache.http.providers.bedrock import PROVIDER

    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    body = {"output": {"message": {"role": "assistant", "content": [{"text": "Paris."}]}},
            "stopReason": "end_turn", "metrics": {"latencyMs": 912},
            "usage": {"inputTokens": 120, "outputTokens": 80, "totalTokens": 32200,
                      "cacheReadInputTokens": 30000, "cacheWriteInputTokens": 2000}}
    usage = PROVIDER.usage(body, [])
    assert usage is not None
    # No lifetime split: every write at the 5-minute rate.
    assert estimate_dollars(usage, model) == pytest.approx(
        (120 * 3 + 30000 * 0.3 + 2000 * 3.75 + 80 * 15) / 1e6)


_CHAT_USAGE = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
               "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                             "accepted_prediction_tokens": 0,
                                             "rejected_prediction_tokens": 0}}


@pytest.mark.parametrize(("model", "price", "read"), [
    ("gpt-4o-2024-08-06", (2.50, 10.00), 0.5),
    ("gpt-4.1-2025-04-14", (2.00, 8.00), 0.25),
    ("gpt-5-mini-2025-08-07", (0.25, 2.00), 0.1),
    # No cached price (cache_rules: EXPLICIT, nothing cached): a token the usage says was
    # cached is billed as any other.
    ("o3-pro-2025-06-10", (20.00, 80.00), 1.0),
])
def test_openai_chat_cached_tokens_at_the_models_cached_rate(
        model: str, price: tuple[float, float], read: float) -> None:
    from dejacache.http.providers.openai import PROVIDER

    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1733000000,
            "model": model, "system_fingerprint": "fp_1", "usage": _CHAT_USAGE,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "Paris."}}]}
    # stream_options.include_usage: the usage in a last chunk with no choices.
    events = [{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": {"content": "Paris."},
                            "finish_reason": "stop"}], "usage": None},
              {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
               "choices": [], "usage": _CHAT_USAGE}]
    whole, streamed = PROVIDER.usage(body, []), PROVIDER.usage(None, events)
    assert whole == streamed == {"prompt_tokens": 2006, "completion_tokens": 300,
                                 "total_tokens": 2306, "cached_tokens": 1920}
    assert estimate_dollars(whole, model) == pytest.approx(
        ((2006 - 1920) * price[0] + 1920 * price[0] * read + 300 * price[1]) / 1e6)


def test_openai_responses_cached_tokens_and_gpt_5_6_cache_writes() -> None:
    from dejacache.http.providers.openai import PROVIDER

    usage = {"input_tokens": 5000, "input_tokens_details": {"cached_tokens": 4096},
             "output_tokens": 200, "output_tokens_details": {"reasoning_tokens": 128},
             "total_tokens": 5200}
    body = {"id": "resp_1", "object": "response", "created_at": 1733000000,
            "status": "completed", "model": "gpt-5-2025-08-07", "output": [], "usage": usage}
    done = {"type": "response.completed", "sequence_number": 9, "response": body}
    whole, streamed = PROVIDER.usage(body, []), PROVIDER.usage(None, [done])
    assert whole == streamed == {"input_tokens": 5000, "output_tokens": 200,
                                 "total_tokens": 5200, "cached_tokens": 4096}
    assert estimate_dollars(whole, "gpt-5-2025-08-07") == pytest.approx(  # $1.25 / $10, 0.1x
        (904 * 1.25 + 4096 * 0.125 + 200 * 10) / 1e6)
    # From gpt-5.6 writes are billed too (1.25x), reported beside the reads.
    usage["input_tokens_details"] = {"cached_tokens": 1000, "cache_write_tokens": 1500}
    written = PROVIDER.usage({**body, "usage": usage}, [])
    assert written is not None and written["cache_write_tokens"] == 1500
    assert estimate_dollars(written, "gpt-5.6") == pytest.approx(
        (2500 * 1.25 + 1000 * 0.125 + 1500 * 1.5625 + 200 * 10) / 1e6)


@pytest.mark.parametrize(("model", "price", "read"), [
    ("gemini-2.5-flash", (0.30, 2.50), 0.1),  # implicit caching
    ("gemini-2.0-flash-001", (0.10, 0.40), 0.25),  # an explicit cache (cachedContent) only
])
def test_gemini_cached_content_tokens_at_the_models_cached_rate(
        model: str, price: tuple[float, float], read: float) -> None:
    from dejacache.http.providers.gemini import PROVIDER

    body = {"candidates": [{"content": {"parts": [{"text": "Paris."}], "role": "model"},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10000, "candidatesTokenCount": 50,
                              "totalTokenCount": 10050, "cachedContentTokenCount": 8000,
                              "promptTokensDetails": [{"modality": "TEXT",
                                                       "tokenCount": 10000}],
                              "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 8000}]},
            "modelVersion": model, "responseId": "r1"}
    usage = PROVIDER.usage(body, [])
    assert usage is not None and usage["cached_tokens"] == 8000
    assert estimate_dollars(usage, model) == pytest.approx(
        (2000 * price[0] + 8000 * price[0] * read + 50 * price[1]) / 1e6)


def test_cached_tokens_of_a_provider_without_cache_rules_cost_the_full_price() -> None:
    # Cohere reports cached_tokens within its billed input; the cache rules know no Cohere
    # rate, so they are priced as before: in full.
    usage = {"input_tokens": 1000, "output_tokens": 10, "cached_tokens": 800}
    assert estimate_dollars(usage, "command-a-03-2025") == pytest.approx(
        (1000 * 2.50 + 10 * 10.00) / 1e6)
    assert estimate_dollars({**usage, "cached_tokens": 0}, "command-a-03-2025") == (
        estimate_dollars(usage, "command-a-03-2025"))
