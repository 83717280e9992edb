"""Counters and token accounting."""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

import pydantic
import pytest

import dejacache
from dejacache.stats import CallStats, record_hit, record_miss, token_total, usage_of
from loopback_provider import fake_provider_module


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
        "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "cached_tokens": 1}
    model = ChatCompletion(id="x", usage=CompletionUsage(prompt_tokens=4, completion_tokens=5,
                                                         total_tokens=9))
    assert usage_of(model) == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    anth = AnthropicMessage(usage=AnthropicUsage(input_tokens=2, output_tokens=3))
    assert usage_of(anth) == {"input_tokens": 2, "output_tokens": 3}


def test_cached_parts_of_sdk_results_are_kept_apart_from_the_totals() -> None:
    """The SDKs' own objects nest the cached counts (OpenAI chat and Responses) and the 1-hour
    share of Anthropic's cache writes: kept under top-level names for the prices, never
    added to a total."""
    from anthropic.types import CacheCreation, Message, Usage
    from openai.types import completion_usage as oc
    from openai.types.chat import ChatCompletion as SDKChat
    from openai.types.responses import Response, ResponseUsage
    from openai.types.responses import response_usage as ru

    chat = SDKChat.model_construct(id="c", usage=oc.CompletionUsage(
        prompt_tokens=2006, completion_tokens=300, total_tokens=2306,
        prompt_tokens_details=oc.PromptTokensDetails(cached_tokens=1920, audio_tokens=0)))
    assert usage_of(chat) == {"prompt_tokens": 2006, "completion_tokens": 300,
                              "total_tokens": 2306, "cached_tokens": 1920}
    resp = Response.model_construct(id="r", usage=ResponseUsage(
        input_tokens=5000, output_tokens=200, total_tokens=5200,
        input_tokens_details=ru.InputTokensDetails(cached_tokens=4096, cache_write_tokens=0),
        output_tokens_details=ru.OutputTokensDetails(reasoning_tokens=128)))
    assert usage_of(resp) == {"input_tokens": 5000, "output_tokens": 200,
                              "total_tokens": 5200, "cached_tokens": 4096,
                              "cache_write_tokens": 0}
    msg = Message.model_construct(id="m", usage=Usage(
        input_tokens=120, output_tokens=80, cache_read_input_tokens=30000,
        cache_creation_input_tokens=2000, cache_creation=CacheCreation(
            ephemeral_5m_input_tokens=500, ephemeral_1h_input_tokens=1500)))
    got = usage_of(msg)
    assert got == {"input_tokens": 120, "output_tokens": 80, "cache_read_input_tokens": 30000,
                   "cache_creation_input_tokens": 2000, "ephemeral_1h_input_tokens": 1500}
    assert token_total(got) == 32200
    # A result of @cache that is a plain dict: the same.
    assert usage_of({"usage": msg.usage.model_dump()}) == got


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


def _in_thread(fn: Any, *args: Any) -> threading.Thread:
    t = threading.Thread(target=fn, args=args)
    t.start()
    t.join(30)
    return t


def test_counts_of_threads_that_have_exited_are_kept() -> None:
    """Each thread counts in its own cells (no lock on a hit); a thread that
    exits keeps its counts, and the next thread to register folds them away, so the registry
    stays as small as the live threads."""
    stats_mod = importlib.import_module("dejacache.stats")

    def work(n: int) -> None:
        for _ in range(n):
            record_hit("gone", 0.5, {"total_tokens": 2})
            record_miss("gone", stored=True)

    _in_thread(work, 3), _in_thread(work, 4)
    _in_thread(record_hit, "later", 0.0, None)  # registers, folding the two exited threads
    # The two exited threads were folded away; what stays is the thread that folded them
    # (exited since: the next to register folds it) and at most this one.
    entries = list(stats_mod._THREADS.values())
    assert len(entries) <= 2
    assert sum(alive() is None for alive, _ in entries) == 1
    s = dejacache.stats().by_name["gone"]
    assert (s.hits, s.misses, s.stores, s.tokens_saved, s.time_saved) == (7, 7, 7, 14, 3.5)
    assert dejacache.stats().total.hits == 8


def test_a_thread_started_outside_threading_is_folded_once_it_exits() -> None:
    """Liveness is read from the thread's own thread-local slot, so a bare ``_thread``
    thread (which ``threading`` never lists) leaves the registry too, its counts kept."""
    import _thread

    stats_mod = importlib.import_module("dejacache.stats")
    done = _thread.allocate_lock()
    done.acquire()

    def work() -> None:
        record_hit("bare", 1.0, None)
        done.release()

    _thread.start_new_thread(work, ())
    with done:
        pass
    for _ in range(3000):  # its slot goes just after it releases the lock
        _in_thread(record_hit, "later", 0.0, None)
        if len(stats_mod._THREADS) <= 2:
            break
    assert all(cells.get("bare") is None for _, cells in stats_mod._THREADS.values())
    assert dejacache.stats().by_name["bare"].hits == 1


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_after_a_fork_the_other_threads_are_folded_in_the_child() -> None:
    import os

    stats_mod = importlib.import_module("dejacache.stats")
    started, stop = threading.Event(), threading.Event()

    def work() -> None:
        record_hit("forked", 1.0, None)
        started.set()
        stop.wait(30)

    t = threading.Thread(target=work)
    t.start()
    started.wait(30)
    pid = os.fork()
    if pid == 0:  # the child: only the forking thread is left
        code = 1
        try:
            _in_thread(record_hit, "child", 0.0, None)
            gone = all(c.get("forked") is None for _, c in stats_mod._THREADS.values())
            code = 0 if gone and dejacache.stats().by_name["forked"].hits == 1 else 1
        finally:
            os._exit(code)
    stop.set()
    t.join(30)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_reset_reaches_counts_made_in_other_threads() -> None:
    counted, reset, again = threading.Event(), threading.Event(), threading.Event()

    def work() -> None:
        record_hit("w", 1.0, None)
        counted.set()
        reset.wait(30)
        record_hit("w", 2.0, None)
        again.set()
        reset.wait(30)

    t = threading.Thread(target=work)
    t.start()
    counted.wait(30)
    assert dejacache.stats().by_name["w"].hits == 1
    dejacache.reset_stats()
    assert dejacache.stats().by_name == {}
    reset.set()
    again.wait(30)
    assert dejacache.stats().by_name["w"] == CallStats(hits=1, time_saved=2.0)
    t.join(30)
    dejacache.reset_stats()
    assert dejacache.stats().total == CallStats()


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


# ---------------------------------------------------------------- layers


def test_the_readme_quick_start_counts_each_live_call_once() -> None:
    """The README quick start, against the real openai SDK and a loopback provider: two live
    calls print as two misses (it printed three: the Lisbon call counted at the decorator
    and again at the HTTP layer inside it, where the scope turns interception on)."""
    import openai

    server = fake_provider_module().FakeProvider().start()
    client = openai.OpenAI(base_url=server.openai_url, api_key="sk-test", max_retries=0)
    try:
        @dejacache.cache
        def ask(question: str, model: str = "gpt-4o-mini") -> Any:
            return client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": question}])

        dejacache.configure(cache_key="suite-v1")
        ask("What is WAL mode?")
        ask("What is WAL mode?")
        with dejacache.scope(mode="replay"):
            ask("What is WAL mode?")
        with dejacache.scope(cache_key="happy-path-v1", store=dejacache.MemoryStore()):
            ask("Plan a trip to Lisbon")
        snap = dejacache.stats()
    finally:
        client.close()
        server.stop()
    assert server.count() == 2
    assert (snap.total.hits, snap.total.misses, snap.total.stores) == (2, 2, 2)
    assert snap.total.tokens_saved > 0 and snap.total.time_saved > 0
    by = snap.by_name
    (ask_name,) = [n for n in by if not n.startswith("openai.")]
    assert (by[ask_name].hits, by[ask_name].misses) == (2, 2)
    assert (by["openai.chat.completions"].hits, by["openai.chat.completions"].misses) == (0, 1)
    assert (snap.nested.hits, snap.nested.misses) == (0, 1)  # the request inside Lisbon


def test_inner_layers_of_a_live_call_are_counted_as_nested() -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.cache(name="inner")
    def inner(x: int) -> dict[str, Any]:
        return {"x": x, "usage": {"total_tokens": 5}}

    @dejacache.cache(name="outer")
    def outer(x: int) -> dict[str, Any]:
        return inner(x)

    @dejacache.cache(name="other")
    def other(x: int) -> dict[str, Any]:
        return inner(x)

    outer(1)  # live: outer and, inside it, inner
    outer(1)  # served at the outer layer: inner never runs
    other(1)  # live, but the inner call inside it is served
    snap = dejacache.stats()
    assert (snap.total.hits, snap.total.misses, snap.total.stores) == (1, 2, 2)
    assert (snap.nested.hits, snap.nested.misses) == (1, 1)
    assert snap.total.tokens_saved == 10  # both hits saved their 5 tokens: every layer
    assert snap.nested.tokens_saved == 5
    assert (snap.by_name["inner"].hits, snap.by_name["inner"].misses) == (1, 1)
    assert snap.hit_rate == 1 / 3
    dejacache.reset_stats()
    assert dejacache.stats().total == dejacache.stats().nested == CallStats()


async def test_async_inner_layers_are_nested_and_siblings_are_not() -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.cache(name="ainner")
    async def inner(x: int) -> int:
        return x

    @dejacache.cache(name="aouter")
    async def outer(x: int) -> int:
        return await inner(x) + await inner(x + 1)

    assert await outer(1) == 3
    assert await inner(5) == 5  # after the outer call returned: its own outermost call
    snap = dejacache.stats()
    assert (snap.total.misses, snap.nested.misses) == (2, 2)


def test_an_error_inside_a_live_call_does_not_leave_the_marker_set() -> None:
    dejacache.configure(store=dejacache.MemoryStore())

    @dejacache.cache(name="boom")
    def boom() -> None:
        raise ValueError("no")

    @dejacache.cache(name="after")
    def after() -> int:
        return 1

    with pytest.raises(ValueError):
        boom()
    after()
    snap = dejacache.stats()
    assert (snap.total.misses, snap.total.errors, snap.nested.misses) == (2, 1, 0)


def test_snapshot_classes_load_on_first_read_and_keep_their_module() -> None:
    # They live in _stats_view, loaded by stats() or the first read.
    import pickle

    stats_module = sys.modules["dejacache.stats"]  # ``dejacache.stats`` is the function
    snap = dejacache.stats()
    for cls in (type(snap), type(snap.total)):
        assert cls.__module__ == "dejacache.stats"
        assert getattr(stats_module, cls.__qualname__) is cls
    assert pickle.loads(pickle.dumps(snap)) == snap
    assert {"CallStats", "Stats"} <= set(dir(stats_module))
    with pytest.raises(AttributeError, match="no_such_name"):
        stats_module.no_such_name  # noqa: B018


def test_call_stats_reprs_round_the_seconds() -> None:
    from dejacache.stats import CallStats, Stats

    c = CallStats(hits=1, misses=1, stores=1, time_saved=0.014215138000508887)
    assert repr(c) == ("CallStats(hits=1, misses=1, stores=1, errors=0, time_saved=0.0142, "
                       "tokens_saved=0)")
    assert c.time_saved == 0.014215138000508887  # the value itself is kept whole
    assert "time_saved=0.0142," in repr(Stats(total=c, by_name={"f": c}))
