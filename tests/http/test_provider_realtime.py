"""The realtime provider modules (``openai.realtime``, ``gemini.live``): which sessions they
name, the usage they read from server events, and audio priced as audio."""

from __future__ import annotations

import pytest

from dejacache.cassettes.prices import estimate_dollars
from dejacache.http.providers import detect
from dejacache.http.providers.gemini_live import PROVIDER as LIVE
from dejacache.http.providers.openai_realtime import PROVIDER as REALTIME


@pytest.mark.parametrize(("host", "path", "name"), [
    ("api.openai.com", "/v1/realtime", "openai.realtime"),
    ("x.openai.azure.com", "/openai/realtime", "openai.realtime"),
    ("127.0.0.1", "/v1/realtime", "openai.realtime"),
    ("generativelanguage.googleapis.com",
     "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
     "gemini.live"),
    ("us-central1-aiplatform.googleapis.com",
     "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent", "gemini.live"),
])
def test_sessions_are_named_by_their_provider(host: str, path: str, name: str) -> None:
    prov = detect(host, path, {})
    assert prov.endpoint(host, path) == name
    assert prov in (REALTIME, LIVE)  # before the HTTP modules of the same provider


def test_openai_realtime_usage_sums_response_done_events_with_audio_apart() -> None:
    done = {"type": "response.done", "response": {"usage": {
        "total_tokens": 300, "input_tokens": 200, "output_tokens": 100,
        "input_token_details": {"text_tokens": 50, "audio_tokens": 150, "cached_tokens": 10},
        "output_token_details": {"text_tokens": 20, "audio_tokens": 80}}}}
    other = {"type": "response.output_audio.delta", "delta": "AAAA"}
    usage = REALTIME.usage(None, [done, other, done])
    assert usage == {"total_tokens": 600, "input_tokens": 400, "output_tokens": 200,
                     "input_text_tokens": 100, "input_audio_tokens": 300,
                     "cached_tokens": 20, "output_text_tokens": 40,
                     "output_audio_tokens": 160}
    assert REALTIME.usage(None, [other]) is None
    assert REALTIME.model(None, [{"type": "session.created",
                                  "session": {"model": "gpt-realtime"}}]) == "gpt-realtime"
    assert "event_id" in REALTIME.volatile


def test_gemini_live_usage_reads_each_turns_metadata_by_modality() -> None:
    turn = {"serverContent": {"turnComplete": True}, "usageMetadata": {
        "promptTokenCount": 120, "responseTokenCount": 60, "totalTokenCount": 180,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 20},
                                {"modality": "AUDIO", "tokenCount": 100}],
        "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": 50},
                                  {"modality": "TEXT", "tokenCount": 10}]}}
    usage = LIVE.usage(None, [turn, {"serverContent": {}}, turn])
    assert usage == {"prompt_tokens": 240, "completion_tokens": 120, "total_tokens": 360,
                     "input_audio_tokens": 200, "input_text_tokens": 40,
                     "output_audio_tokens": 100, "output_text_tokens": 20}


def test_audio_tokens_are_priced_at_audio_prices() -> None:
    text_only = estimate_dollars({"input_tokens": 1_000_000, "output_tokens": 0},
                                 "gpt-realtime-2025-08-28")
    with_audio = estimate_dollars({"input_tokens": 1_000_000, "output_tokens": 1_000_000,
                                   "input_audio_tokens": 1_000_000,
                                   "output_audio_tokens": 500_000}, "gpt-realtime")
    assert text_only == pytest.approx(4.00)
    assert with_audio == pytest.approx(32.00 + 0.5 * 16.00 + 0.5 * 64.00)
    live = estimate_dollars({"prompt_tokens": 1_000_000, "completion_tokens": 0,
                             "input_audio_tokens": 1_000_000}, "gemini-live-2.5-flash-preview")
    assert live == pytest.approx(3.00)
    # a model with no audio price: every token at its text price
    assert estimate_dollars({"input_tokens": 10, "input_audio_tokens": 10}, "gpt-4o") == (
        pytest.approx(10 * 2.50 / 1e6))
