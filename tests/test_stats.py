"""Counters and token accounting."""

from __future__ import annotations

import threading
from typing import Any

import pydantic

import dejacache
from dejacache.stats import CallStats, record_hit, record_miss, token_total, usage_of


class CompletionUsage(pydantic.BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None


class ChatCompletion(pydantic.BaseModel):
    id: str
    usage: CompletionUsage | None = None


class AnthropicUsage(pydantic.BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None


class AnthropicMessage(pydantic.BaseModel):
    usage: AnthropicUsage


def test_usage_from_dicts_and_models() -> None:
    assert usage_of({"usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3,
                               "prompt_tokens_details": {"cached_tokens": 1}}}) == {
        "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    model = ChatCompletion(id="x", usage=CompletionUsage(prompt_tokens=4, completion_tokens=5,
                                                         total_tokens=9))
    assert usage_of(model) == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    anth = AnthropicMessage(usage=AnthropicUsage(input_tokens=2, output_tokens=3))
    assert usage_of(anth) == {"input_tokens": 2, "output_tokens": 3}


def test_no_usage() -> None:
    for value in (None, 1, "usage", [1], {"usage": None}, {"usage": 5}, {"usage": {"x": 1}},
                  ChatCompletion(id="x"), {"usage": {"prompt_tokens": "many"}}):
        assert usage_of(value) is None


def test_token_total() -> None:
    assert token_total({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 10}) == 10
    assert token_total({"prompt_tokens": 1, "completion_tokens": 2}) == 3
    assert token_total({"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 30,
                        "cache_creation_input_tokens": 400}) == 433


def test_pydantic_results_count_tokens_on_hits() -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.cache(name="sdk.create")
    def create(q: str) -> ChatCompletion:
        return ChatCompletion(id=q, usage=CompletionUsage(prompt_tokens=10, completion_tokens=2,
                                                          total_tokens=12))

    first = create("a")
    again = create("a")
    assert again == first and type(again) is ChatCompletion
    s = dejacache.stats().by_name["sdk.create"]
    assert (s.hits, s.misses, s.tokens_saved) == (1, 1, 12)


def test_counters_are_thread_safe() -> None:
    def work() -> None:
        for _ in range(2000):
            record_hit("t", 0.001, {"total_tokens": 1})
            record_miss("t", stored=True)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    s = dejacache.stats().by_name["t"]
    assert (s.hits, s.misses, s.stores, s.tokens_saved) == (8000, 8000, 8000, 8000)
    assert abs(s.time_saved - 8.0) < 1e-6


def test_snapshot_is_a_copy_and_totals_add_up() -> None:
    record_hit("a", 1.0, None)
    record_miss("b", stored=False, error=True)
    snap = dejacache.stats()
    record_hit("a", 1.0, None)
    assert snap.by_name["a"].hits == 1
    assert snap.total == CallStats(hits=1, misses=1, stores=0, errors=1, time_saved=1.0)
    assert isinstance(snap, dejacache.Stats)
    assert dejacache.stats().hit_rate == 2 / 3


def test_empty_stats() -> None:
    snap: Any = dejacache.stats()
    assert snap.total == CallStats()
    assert snap.hit_rate == 0.0
