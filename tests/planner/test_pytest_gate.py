"""The prompt-cache gate in pytest (``--dejacache-min-hit-rate``), through ``pytester``: a
seeded regression (the current time added to an agent's system prompt) re-recorded into the
test's cassette fails the run, naming the conversation, the turn and the span, before any
provider is paid for it in production."""

from __future__ import annotations

import shutil

import pytest

# Loaded here, before the inner sessions: modules first imported inside one are dropped when
# it ends, and the SDKs took ~15 s to import again in every inner session on a busy machine.
import runtime.cache_provider
import runtime.prefix_agents  # noqa: F401

AGENT = """
import pytest
from runtime.cache_provider import CachingProvider
from runtime.prefix_agents import run_anthropic

REBUILD = {rebuild}  # True: the system prompt gets the current time, rebuilt every turn


@pytest.fixture
def provider():
    server = CachingProvider().start()
    yield server
    server.stop()


def test_travel_agent(dejacache_cassette, provider):
    run_anthropic(provider, rebuild=REBUILD)


def test_one_shot(dejacache_cassette, provider):
    run_anthropic(provider, rebuild=False)  # passes the bar too
"""

_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout", "-p", "no:cassetter")


@pytest.fixture(autouse=True)
def _not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*_QUIET, *args)


def test_a_timestamp_added_to_the_system_prompt_fails_the_run(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT.format(rebuild=False))
    res = run(pytester, "--dejacache-min-hit-rate=0.7")
    res.assert_outcomes(passed=2)
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*dejacache prompt cache*",
                              "predicted prompt-cache hit rates of 2 cassette(s), bar 70%",
                              "ok    test_travel_agent.json#1: predicted hit rate 74%",
                              "0 of 2 sessions below the bar"])
    shutil.copytree(pytester.path / "cassettes", pytester.path / "baseline")
    # The regression, re-recorded: every test passes, the run fails.
    pytester.makepyfile(test_agent=AGENT.format(rebuild=True))
    res = run(pytester, "--dejacache-mode=record", "--dejacache-min-hit-rate=0.7")
    res.assert_outcomes(passed=2)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    out = res.stdout.str()
    assert ("FAIL  test_travel_agent.json#1: predicted hit rate 0% is below the bar 70%\n"
            "        turn 2: system: `system[0].text` at offset 7,755: "
            "`2026-05-01 12:04:31` → `2026-05-01 12:05:02` (1,972 tokens) (and 2 more)\n"
            "1 of 2 sessions below the bar") in out
    # Against the baseline recordings alone (a bar of 0): still caught.
    res = run(pytester, "--dejacache-mode=replay", "--dejacache-min-hit-rate=0",
              "--dejacache-hit-rate-baseline=baseline")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["FAIL  test_travel_agent.json#1: predicted hit rate 0% is 74% "
                              "below the baseline's 74% (allowed: 5%)"])
    # The fix re-recorded: the run passes again.
    pytester.makepyfile(test_agent=AGENT.format(rebuild=False))
    res = run(pytester, "--dejacache-mode=record", "--dejacache-min-hit-rate=0.7")
    assert res.ret == 0


def test_without_the_option_nothing_is_checked_and_bad_values_are_usage_errors(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT.format(rebuild=True))
    res = run(pytester)
    assert res.ret == 0 and "dejacache prompt cache" not in res.stdout.str()
    res = run(pytester, "--dejacache-min-hit-rate=70")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--dejacache-min-hit-rate: a fraction between 0 and 1, not 70*"])
    res = run(pytester, "--dejacache-min-hit-rate=0.5", "--dejacache-hit-rate-baseline=nowhere")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--dejacache-hit-rate-baseline: no such file or directory: "
                              "nowhere*"])
    pytester.makeini("[pytest]\ndejacache_min_hit_rate = 0.9\n")
    res = run(pytester, "--dejacache-mode=replay")
    assert res.ret == pytest.ExitCode.TESTS_FAILED  # the ini's bar
