"""Record and replay through ``dejacache.cassette``: modes, FIFO order, files left alone."""

from __future__ import annotations

import asyncio
import os
import re
import threading

import orjson
import pytest

import dejacache
from dejacache import ReplayMiss


class Model:
    """A stand-in for an LLM: counts live calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def answer(self, q: str) -> dict[str, object]:
        self.calls.append(q)
        return {"answer": f"{q}#{len(self.calls)}", "model": "gpt-4o-mini",
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def ask(model: Model):
    @dejacache.cache(name="ask", kind="llm")
    def ask(q: str) -> dict[str, object]:
        return model.answer(q)

    return ask


def test_record_then_replay_without_live_calls(tmp_path, model, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path) as tape:
        first = ask("hello")
    assert tape.counters.recorded == 1 and path.exists()
    with dejacache.cassette(path, mode="replay") as tape:
        assert ask("hello") == first
    assert model.calls == ["hello"]
    assert tape.counters.replayed == 1
    assert tape.counters.tokens_saved == 15


def test_identical_calls_replay_in_recorded_order(tmp_path, model, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        recorded = [ask("same"), ask("same"), ask("other"), ask("same")]
    with dejacache.cassette(path, mode="replay"):
        replayed = [ask("same"), ask("same"), ask("other"), ask("same")]
    assert replayed == recorded
    assert [r["answer"] for r in recorded] == ["same#1", "same#2", "other#3", "same#4"]
    doc = orjson.loads(path.read_bytes())
    assert [e["occurrence"] for e in doc["entries"]] == [0, 1, 0, 2]


async def test_gather_reordering_replays_each_request_its_own_answer(tmp_path):
    @dejacache.cache(name="slow", ignore=["delay"])
    async def slow(q: str, delay: float) -> str:
        await asyncio.sleep(delay)
        return q.upper()

    path = tmp_path / "c.json"
    async with dejacache.cassette(path):
        rec = await asyncio.gather(slow("a", 0.03), slow("b", 0.0), slow("c", 0.01))
    async with dejacache.cassette(path, mode="replay"):
        rep = await asyncio.gather(slow("c", 0.0), slow("a", 0.0), slow("b", 0.0))
    assert rec == ["A", "B", "C"] and rep == ["C", "A", "B"]


def test_all_hits_leave_the_file_untouched(tmp_path, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        ask("x")
        ask("y")
    before = path.stat()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns - 10_000_000_000))
    stamp = path.stat().st_mtime_ns
    with dejacache.cassette(path):
        ask("x")
        ask("y")
    assert path.stat().st_mtime_ns == stamp
    assert path.stat().st_ino == before.st_ino


def test_auto_mode_appends_only_the_misses(tmp_path, model, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        ask("x")
    with dejacache.cassette(path) as tape:
        ask("x")
        ask("new")
    assert model.calls == ["x", "new"]
    assert tape.counters.replayed == 1 and tape.counters.recorded == 1
    names = [e["request"]["q"] for e in orjson.loads(path.read_bytes())["entries"]]
    assert names == ["x", "new"]


def test_rerecording_an_unchanged_run_keeps_bytes_and_durations(tmp_path):
    @dejacache.cache(name="det")
    def det(q: str) -> str:
        return q * 2

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        det("a")
        det("b")
    before = path.read_bytes()
    with dejacache.cassette(path, mode="record") as tape:
        det("a")
        det("b")
    assert tape.counters.recorded == 2
    assert path.read_bytes() == before


def test_rerecording_a_changed_run_changes_only_that_entry(tmp_path):
    answers = {"a": "A", "b": "B"}

    @dejacache.cache(name="det")
    def det(q: str) -> str:
        return answers[q]

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        det("a")
        det("b")
    old = orjson.loads(path.read_bytes())["entries"]
    answers["b"] = "B2"
    with dejacache.cassette(path, mode="record"):
        det("a")
        det("b")
    new = orjson.loads(path.read_bytes())["entries"]
    assert new[0] == old[0]
    assert new[1]["response"] == "B2"


def test_replay_mode_miss_explains_itself(tmp_path, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        ask("what is the weather in Paris")
    before = path.read_bytes()
    with pytest.raises(ReplayMiss) as err, dejacache.cassette(path, mode="replay"):
        ask("what is the weather in Rome")
    text = str(err.value)
    assert "nearest recorded call of ask" in text
    assert "q: 'what is the weather in Paris' -> 'what is the weather in Rome'" in text
    assert "mode='record'" in text and str(path) in text
    assert isinstance(err.value, AssertionError)
    assert path.read_bytes() == before


def test_replay_with_missing_file_says_so(tmp_path, ask):
    path = tmp_path / "nope.json"
    with pytest.raises(ReplayMiss, match="does not exist"), dejacache.cassette(
        path, mode="replay"
    ):
        ask("q")
    assert not path.exists()


def test_block_that_raises_writes_nothing_unless_asked(tmp_path, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path):
        ask("keep")
    before = path.read_bytes()
    with pytest.raises(RuntimeError), dejacache.cassette(path):
        ask("lost")
        raise RuntimeError("test failed")
    assert path.read_bytes() == before
    with pytest.raises(RuntimeError), dejacache.cassette(path, record_on_error=True):
        ask("kept")
        raise RuntimeError("test failed")
    assert b'"kept"' in path.read_bytes()


def test_unused_entries_are_reported_and_pruned(tmp_path, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path) as first:
        ask("a")
        ask("b")
        ask("a")
    # a brand-new recording: everything in it was used, and nothing recorded went unmade
    assert first.unused == [] and first.divergences == []
    with dejacache.cassette(path) as tape:
        ask("a")
    assert [(u.name, u.occurrence) for u in tape.unused] == [("ask", 0), ("ask", 1)]
    assert len(orjson.loads(path.read_bytes())["entries"]) == 3  # reporting is not pruning
    with dejacache.cassette(path, prune=True):
        ask("a")
    entries = orjson.loads(path.read_bytes())["entries"]
    assert [(e["request"]["q"], e["occurrence"]) for e in entries] == [("a", 0)]


def test_recorded_exceptions_replay_as_the_same_exception(tmp_path):
    live = []

    @dejacache.cache(name="flaky")
    def flaky(q: str) -> str:
        live.append(q)
        raise ValueError(f"bad input {q!r}")

    path = tmp_path / "c.json"
    with pytest.raises(ValueError), dejacache.cassette(path, record_errors=[ValueError],
                                                       record_on_error=True):
        flaky("x")
    with pytest.raises(ValueError, match="bad input 'x'"), dejacache.cassette(
        path, mode="replay", record_errors=[ValueError]
    ):
        flaky("x")
    assert live == ["x"]


def test_exceptions_are_not_recorded_by_default(tmp_path):
    @dejacache.cache(name="boom")
    def boom() -> None:
        raise KeyError("k")

    path = tmp_path / "c.json"
    with pytest.raises(KeyError), dejacache.cassette(path, record_on_error=True):
        boom()
    assert not path.exists()


def test_decorator_form_sync_and_async(tmp_path, model, ask):
    path = tmp_path / "c.json"

    @dejacache.cassette(path)
    def run() -> object:
        return ask("deco")

    assert run() == run()
    assert model.calls == ["deco"]

    @dejacache.cache(name="aq")
    async def aq(q: str) -> str:
        model.calls.append(q)
        return q

    @dejacache.cassette(tmp_path / "a.json")
    async def arun() -> str:
        return await aq("async")

    assert asyncio.run(arun()) == asyncio.run(arun()) == "async"
    assert model.calls == ["deco", "async"]


def test_calls_from_bare_worker_threads_go_to_the_cassette(tmp_path, model, ask):
    path = tmp_path / "c.json"
    out: list[object] = []
    with dejacache.cassette(path):
        t = threading.Thread(target=lambda: out.append(ask("thread")))
        t.start()
        t.join()
    with dejacache.cassette(path, mode="replay"):
        t = threading.Thread(target=lambda: out.append(ask("thread")))
        t.start()
        t.join()
    assert out[0] == out[1] and model.calls == ["thread"]


def test_mode_defaults_to_replay_under_ci(tmp_path, monkeypatch, ask):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ReplayMiss), dejacache.cassette(tmp_path / "c.json"):
        ask("q")
    monkeypatch.setenv("DEJACACHE_MODE", "auto")
    with dejacache.cassette(tmp_path / "c.json") as tape:
        ask("q")
    assert tape.mode == "auto"


def test_cache_key_sets_the_namespace(tmp_path, ask):
    path = tmp_path / "c.json"
    with dejacache.cassette(path, cache_key="v1"):
        ask("q")
    with pytest.raises(ReplayMiss), dejacache.cassette(path, mode="replay", cache_key="v2"):
        ask("q")
    assert orjson.loads(path.read_bytes())["entries"][0]["namespace"] == "v1"


def test_a_volatile_path_that_never_matched_warns_after_the_file_is_written(tmp_path, model):
    @dejacache.cache(name="lookup")
    def lookup(request: dict[str, object]) -> dict[str, object]:
        return model.answer(str(request))

    path = tmp_path / "c.json"
    typo = rf"'request\.nonexistent_root\.x' from cassette {re.escape(str(path))}"
    # under -W error the warning is raised from the block's exit: the recording is kept
    with pytest.raises(dejacache.DejacacheWarning, match=typo), dejacache.cassette(
            path, "record", volatile=["request.nonexistent_root.x"]):
        lookup({"q": "refund?"})
    with dejacache.cassette(path, "replay"):
        assert lookup({"q": "refund?"})["answer"] == "{'q': 'refund?'}#1"
    assert len(model.calls) == 1


# ---------------------------------------------------------------- calls that outlive the block


def _late_task(pool, go: threading.Event, fn):
    """Submitted inside a block (the executor carries the block's context), run after it."""
    return pool.submit(lambda: (go.wait(10), fn())[1])


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_a_task_recording_after_its_cassette_block_closed_is_named_not_lost(
    tmp_path, model, ask, mode
):
    import concurrent.futures

    path = tmp_path / "c.json"
    go = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with dejacache.cassette(path, mode) as tape:
            ask("inside")
            late = _late_task(pool, go, lambda: ask("outlives the block"))
        written = path.read_bytes()
        dejacache.reset_stats()
        with pytest.warns(dejacache.DejacacheWarning,
                          match=r"ask was called after its cassette block exited .*"
                                r"outlives the block.*not recorded in .*c\.json") as caught:
            go.set()
            # the block allowed live calls: the task gets its live answer
            assert late.result(10)["answer"] == "outlives the block#2"
    assert len(caught) == 1  # named once, not again as a failed write
    assert dejacache.stats().total.stores == 0  # and not counted as stored
    assert path.read_bytes() == written
    assert tape.counters.recorded == 1 and tape.misses == []
    assert model.calls == ["inside", "outlives the block"]


def test_a_task_calling_after_its_replay_block_closed_is_refused_not_run_live(
    tmp_path, model, ask
):
    import concurrent.futures

    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        ask("inside")
    go = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with dejacache.cassette(path, mode="replay") as tape:
            ask("inside")
            late = _late_task(pool, go, lambda: ask("inside"))  # recorded, yet too late
        go.set()
        with pytest.raises(ReplayMiss, match=r"ask was called after its cassette block "
                                             r"exited .*refused rather than run live"):
            late.result(10)
    assert model.calls == ["inside"] and tape.misses == []


def test_a_cached_generator_left_open_at_cassette_exit_is_named_then(tmp_path):
    @dejacache.cache(name="words")
    def words(text):
        yield from text.split()

    path = tmp_path / "c.json"
    warns = pytest.warns(dejacache.DejacacheWarning,
                         match=r"words generator was still being read when its cassette block "
                               r"exited; it was not recorded in .*c\.json")
    with warns, dejacache.cassette(path, mode="record"):
        it = words("one two")
        assert next(it) == "one"
    assert list(it) == ["two"]  # read on after the block: nothing more is said or written
    assert not path.exists()


def test_dollars_saved_priced_at_reading_are_the_per_hit_sum() -> None:
    """Hits are priced when the total is read, not as they replay: the same float as
    pricing each hit in turn, and adding to the total (a worker's share) keeps both."""
    from dejacache.cassettes.prices import estimate_dollars
    from dejacache.cassettes.store import TapeCounters, summarize

    hits = [({"prompt_tokens": 10 + i, "completion_tokens": 3 * i}, model)
            for i, model in enumerate(["gpt-4o-mini", "gpt-4o", "claude-3-5-sonnet", "",
                                       "unknown-model", "gpt-4o-mini"] * 5)]
    c = TapeCounters()
    expected = 0.0
    for usage, model in hits[:10]:
        c.unpriced.append((usage, model))
        expected += estimate_dollars(usage, model)
    assert c.dollars_saved == expected > 0
    for usage, model in hits[10:]:
        c.unpriced.append((usage, model))
        expected += estimate_dollars(usage, model)
    assert c.dollars_saved == expected and not c.unpriced
    c.unpriced.append(hits[0])
    c.dollars_saved += 1.5
    assert c.dollars_saved == expected + estimate_dollars(*hits[0]) + 1.5

    class _Tape:
        counters = c

    assert summarize([_Tape(), _Tape()]).dollars_saved == 2 * c.dollars_saved  # type: ignore[list-item]


def test_a_cassettes_stats_show_the_dollars_saved_and_no_internals(tmp_path) -> None:
    from dejacache.cassettes.store import Cassette

    tape = Cassette(tmp_path / "s.json", mode="auto")
    tape.counters.unpriced.append(({"prompt_tokens": 100, "completion_tokens": 10},
                                   "gpt-4o-mini"))
    extra = tape.stats().extra
    assert list(extra) == ["replayed", "recorded", "missed", "time_saved", "tokens_saved",
                           "dollars_saved"]
    assert extra["dollars_saved"] > 0 and not tape.counters.unpriced
