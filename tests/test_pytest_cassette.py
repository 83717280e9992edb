"""The cassette side of the pytest plugin (src/dejacache/_pytest_cassette.py), through
``pytester``: what a call refused for carrying the replay placeholder key is told, the
session's note on ``--dejacache-live`` patterns that matched nothing, and the summary lines."""

from __future__ import annotations

import pytest

from test_pytest_failure import SERVER
from test_pytest_plugin import AGENT, PARTIAL_AGENT, run

SDK_TESTS = """
import pytest
from openai import OpenAI

def ask(server):
    client = OpenAI(base_url=server + "/v1", max_retries=0)
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])

def test_no_cassette(server):
    ask(server)

@pytest.mark.dejacache
def test_cassette(server):
    ask(server)

@pytest.mark.dejacache(live=["model"])
def test_partial(server):
    ask(server)
"""


@pytest.fixture
def sdk_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytest.importorskip("openai")
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)
    pytester.makeconftest(SERVER)
    pytester.makepyfile(test_agent=SDK_TESTS)
    return pytester


def _refusal(res: pytest.RunResult, test: str) -> str:
    out = res.stdout.str()
    start = out.index(f"_ {test} _")
    return out[start:out.index("\n_", start + 1) if "\n_" in out[start + 1:] else len(out)]


def test_ci_tells_a_test_without_a_cassette_how_to_give_it_one(
        sdk_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    res = run(sdk_suite, "test_agent.py::test_no_cassette")
    res.assert_outcomes(failed=1)
    text = " ".join(_refusal(res, "test_no_cassette").split())
    assert "Test test_agent.py::test_no_cassette has no cassette" in text
    assert "dejacache_cassette fixture" in text and "@pytest.mark.dejacache" in text
    assert "pytestmark = pytest.mark.dejacache" in text
    assert "--dejacache-mode=record" not in text and "misses the cassette" not in text


def test_a_call_sent_live_on_purpose_is_not_called_a_miss(
        sdk_suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-recording")
    run(sdk_suite, "test_agent.py::test_partial", "test_agent.py::test_cassette",
        "--dejacache-mode=record").assert_outcomes(passed=2)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("CI", "true")
    res = run(sdk_suite, "test_agent.py::test_partial")
    res.assert_outcomes(failed=1)
    text = " ".join(_refusal(res, "test_partial").split())
    assert "sends this call live on purpose (live=model:*)" in text
    assert "set OPENAI_API_KEY" in text
    assert "misses the cassette" not in text and "re-record" not in text


def test_live_patterns_that_matched_nothing_are_named_once_for_the_session(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()

@pytest.mark.dejacache
def test_again():
    agent()
""")
    run(pytester).assert_outcomes(passed=2)
    res = run(pytester, "--dejacache-live=models,tool:search_web")
    res.assert_outcomes(passed=2)
    out = res.stdout.str()
    assert out.count("matched no call") == 1, out
    res.stdout.fnmatch_lines([
        "*live= pattern 'models' (did you mean the kind 'model'?) matched no call in the 2 "
        "cassette tests of this session (--dejacache-live), so every call replayed*"])
    assert "'tool:search_web'" not in out  # that one matched


def test_a_marker_live_pattern_that_matched_nothing_warns_at_the_end_of_its_test(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
""")
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(live=["search"])
def test_plan():
    agent()
""")
    res = run(pytester, "-W", "error::dejacache.DejacacheWarning")
    res.assert_outcomes(passed=1, errors=1)
    res.stdout.fnmatch_lines(["*live= pattern 'search' (did you mean the call 'search_web'?) "
                              "matched no call in cassette*"])


def test_prune_does_not_advise_prune_for_what_it_kept(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_agent=AGENT + """
import os

def test_t(dejacache_cassette):
    for q in os.environ.get("QS", "a,b").split(","):
        llm(q)
    assert not os.environ.get("FAIL")
""")
    run(pytester).assert_outcomes(passed=1)
    monkeypatch.setenv("QS", "a")
    monkeypatch.setenv("FAIL", "1")
    res = run(pytester, "--dejacache-prune")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "remove them with --dejacache-prune" not in out
    res.stdout.fnmatch_lines(["unused entries: 1 in 1 cassette (kept although "
                              "--dejacache-prune was given: a test that does not pass prunes "
                              "nothing):"])


def test_a_run_that_replayed_nothing_prints_no_savings_or_prices(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def test_t(dejacache_cassette):
    llm("a")
""")
    res = run(pytester)
    res.stdout.fnmatch_lines(["calls: 0 replayed, 1 recorded, 0 missed*"])
    assert "replay saved" not in res.stdout.str() and "prices as of" not in res.stdout.str()
    res = run(pytester, "--dejacache-mode=record")
    assert "prices as of" not in res.stdout.str()
    res = run(pytester, "--dejacache-mode=replay")
    res.stdout.fnmatch_lines(["replay saved:*tokens, ~$*(prices as of *"])
