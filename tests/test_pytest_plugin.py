"""The pytest plugin, driven through ``pytester`` (each test runs a small inner session)."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import orjson
import pytest

from dejacache.cassettes.document import load_document
from dejacache.cassettes.render import render

AGENT = """
import dejacache, pytest

CALLS = []

@dejacache.cache(name="llm", kind="llm")
def llm(prompt):
    CALLS.append(prompt)
    return {"text": prompt.upper(), "model": "gpt-4o",
            "usage": {"prompt_tokens": 1000, "completion_tokens": 200}}
"""


@pytest.fixture(autouse=True)
def _not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)


# Other installed plugins are switched off: each inner session then starts in a fraction of
# the time, and the plugin under test must not depend on them.
_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout", "-p", "no:cassetter")  # the benchmarks' peer, when installed


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*_QUIET, *args)


def _cassette(pytester: pytest.Pytester, name: str) -> pathlib.Path:
    return pytester.path / "cassettes" / "test_agent" / f"{name}.json"


def test_fixture_records_then_replays(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def test_plan(dejacache_cassette):
    assert llm("plan a trip")["text"] == "PLAN A TRIP"
    assert llm("book it")["text"] == "BOOK IT"
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_plan")
    entries = orjson.loads(path.read_bytes())["entries"]
    assert [e["kind"] for e in entries] == ["llm", "llm"]
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines([
        "*dejacache*",
        "calls: 2 replayed, 0 recorded, 0 missed (1 cassette use)",
        "replay saved:*2,400 tokens, ~$0.01*",
    ])


def test_failing_test_leaves_its_cassette_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def test_flow(dejacache_cassette):
    llm("one")
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_flow")
    before = path.read_bytes()
    pytester.makepyfile(test_agent=AGENT + """
def test_flow(dejacache_cassette):
    llm("one")
    llm("two")
    assert False, "the agent regressed"
""")
    run(pytester).assert_outcomes(failed=1)
    assert path.read_bytes() == before
    run(pytester, "--dejacache-mode=record").assert_outcomes(failed=1)
    assert path.read_bytes() == before


def test_replay_with_missing_cassette_names_the_rerecord_command(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def test_new(dejacache_cassette):
    llm("never recorded")
""")
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([
        "*ReplayMiss: *test_new.json (file does not exist)*",
        "*to re-record: pytest test_agent.py::test_new --dejacache-mode=record*",
        "calls: 0 replayed, 0 recorded, 1 missed*",
    ])
    assert not _cassette(pytester, "test_new").exists()


def _document(path: pathlib.Path) -> dict[str, Any]:
    """The cassette's entries, every segment (tests sharing a file append to it)."""
    return load_document(path.read_bytes(), path)


def test_marker_options_and_shared_cassette(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache(cassette="shared/one.json", cache_key="suite-v1")
def test_a():
    llm("a")

@pytest.mark.dejacache(cassette="shared/one.json", cache_key="suite-v1")
def test_b():
    llm("b")

@pytest.mark.dejacache(mode="replay", expect_misses=True)
def test_forced_replay():
    with pytest.raises(dejacache.ReplayMiss):
        llm("c")
""")
    run(pytester).assert_outcomes(passed=3)
    doc = _document(pytester.path / "shared" / "one.json")
    assert [(e["request"]["prompt"], e["namespace"]) for e in doc["entries"]] == [
        ("a", "suite-v1"), ("b", "suite-v1")]
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(passed=3)


def test_a_marker_volatile_path_that_never_matched_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@dejacache.cache(name="plan")
def plan(request):
    return len(request)

@pytest.mark.dejacache(volatile=["request.nonexistent_root.x"])
def test_typo():
    plan({"text": "plan a trip"})

@pytest.mark.dejacache(volatile=["request.run_id"])
def test_matched():
    plan({"text": "plan a trip", "run_id": 7})
""")
    res = run(pytester, "-W", "error::dejacache.DejacacheWarning")
    res.assert_outcomes(passed=2, errors=1)  # raised at the typo's teardown
    res.stdout.fnmatch_lines(["*ERROR at teardown of test_typo*",
                              "*volatile path 'request.nonexistent_root.x' from cassette *"
                              "test_typo.json never matched*"])
    assert _cassette(pytester, "test_typo").exists()  # saved before the warning was raised


def test_prune_option_and_unused_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
import os
def test_t(dejacache_cassette):
    llm("kept")
    if not os.environ.get("SHORT"):
        llm("dropped later")
""")
    first = run(pytester)
    first.assert_outcomes(passed=1)
    assert "unused entries" not in first.stdout.str()  # a recorded entry is used
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHORT", "1")
        res = run(pytester)
        res.stdout.fnmatch_lines(["unused entries: 1 in 1 cassette (*"])
        path = _cassette(pytester, "test_t")
        assert len(orjson.loads(path.read_bytes())["entries"]) == 2
        pruned = run(pytester, "--dejacache-prune")
        pruned.assert_outcomes(passed=1)
    assert len(orjson.loads(path.read_bytes())["entries"]) == 1
    # The summary says what the prune did, not that there is something left to prune.
    assert "remove them with --dejacache-prune" not in pruned.stdout.str()
    pruned.stdout.fnmatch_lines(["pruned: 1 unused entry removed from 1 cassette"])


@pytest.mark.parametrize("where", ["a fixture", "the test"])
def test_prune_keeps_the_entries_of_a_skipped_test(pytester: pytest.Pytester,
                                                  where: str) -> None:
    pytester.makepyfile(test_agent=AGENT + """
import os

@pytest.fixture
def service():
    if os.environ.get("SKIP_IN") == "a fixture":
        pytest.skip("the service is not running")

def test_t(dejacache_cassette, service):
    llm("first")
    if os.environ.get("SKIP_IN") == "the test":
        pytest.skip("not today")
    llm("second")
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_t")
    before = path.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKIP_IN", where)
        res = run(pytester, "--dejacache-prune")
    res.assert_outcomes(skipped=1)
    # A skipped test stopped before the calls it did not make: they are not unused.
    assert path.read_bytes() == before
    assert "pruned:" not in res.stdout.str()


def test_long_parametrize_ids_become_short_safe_file_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.parametrize("q", ["x" * 300, "a/b:c?"], ids=["x" * 300, "a/b:c?"])
def test_p(dejacache_cassette, q):
    llm(q)
""")
    run(pytester).assert_outcomes(passed=2)
    names = sorted(p.name for p in (pytester.path / "cassettes" / "test_agent").iterdir())
    assert "test_p_a_b_c.json" in names
    long_name = next(n for n in names if n.startswith("test_p_xxx"))
    assert len(long_name) <= 110


def test_ci_blocks_non_loopback_connections_naming_host_and_cassette(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_agent=AGENT + """
import socket

def test_live(dejacache_cassette):
    assert dejacache_cassette.mode == "replay"
    s = socket.socket()
    try:
        s.connect(("203.0.113.7", 443))
    finally:
        s.close()

def test_loopback_ok(dejacache_cassette):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    c = socket.create_connection(srv.getsockname())
    c.close()
    srv.close()

def test_dns(dejacache_cassette):
    socket.getaddrinfo("api.openai.com", 443)
""")
    res = run(pytester)
    res.assert_outcomes(passed=1, failed=2)
    res.stdout.fnmatch_lines([
        "*NetworkBlocked: dejacache blocked a connection to 203.0.113.7:443*",
        "*NetworkBlocked: dejacache blocked a connection to api.openai.com:443*",
    ])
    assert "cassettes/test_agent/test_live.json" in res.stdout.str()


def test_coexists_with_a_plugin_using_vcr_style_options(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(other_plugin="""
import pytest

def pytest_addoption(parser):
    group = parser.getgroup("recording")
    group.addoption("--block-network", action="store_true")
    group.addoption("--allowed-hosts", default=None)
    group.addoption("--disable-recording", action="store_true")

def pytest_configure(config):
    config.addinivalue_line("markers", "vcr: other plugin's cassette marker")

@pytest.fixture
def vcr(request):
    return request.config.getoption("block_network")
""")
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.vcr
@pytest.mark.dejacache
def test_both(vcr):
    assert vcr is True
    llm("both")
""")
    pytester.syspathinsert()
    res = run(pytester, "-p", "other_plugin", "--block-network", "--dejacache-mode=auto")
    res.assert_outcomes(passed=1)
    assert _cassette(pytester, "test_both").exists()


def test_coexists_with_agentcassette_installed(pytester: pytest.Pytester) -> None:
    pytest.importorskip("agentcassette")
    pytester.makepyfile(test_agent=AGENT + """
import agentcassette

tool = agentcassette.intercept(lambda x: x * 2, name="tool", kind="tool")

@pytest.mark.dejacache
def test_both(cassette):
    assert tool(21) == 42
    assert llm("both")["text"] == "BOTH"
""")
    run(pytester, "--record-mode=once").assert_outcomes(passed=1)
    assert (pytester.path / "cassettes" / "test_both.json").exists()  # agentcassette's file
    assert _cassette(pytester, "test_both").exists()  # ours, in its own directory
    res = run(pytester, "--record-mode=none", "--dejacache-mode=replay")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["calls: 1 replayed, 0 recorded, 0 missed*"])


def test_async_tests_replay_through_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent="""
import asyncio, dejacache

@dejacache.cache(name="allm")
async def allm(q):
    await asyncio.sleep(0)
    return q[::-1]

async def test_gather(dejacache_cassette):
    assert await asyncio.gather(allm("ab"), allm("cd")) == ["ba", "dc"]
""")
    args = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-o", "asyncio_mode=auto",
            "-o", "asyncio_default_fixture_loop_scope=function")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    pytester.runpytest(*args, "--dejacache-mode=replay").assert_outcomes(passed=1)


def test_xdist_workers_share_a_cassette_and_report_totals(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.parametrize("i", range(6))
@pytest.mark.dejacache(cassette="cassettes/shared.json")
def test_many(i):
    llm(f"question {i}")
""")
    res = pytester.runpytest_subprocess("-n", "2", "-p", "no:hypothesispytest")
    res.assert_outcomes(passed=6)
    res.stdout.fnmatch_lines(["calls: 0 replayed, 6 recorded, 0 missed*"])
    doc = _document(pytester.path / "cassettes" / "shared.json")
    assert sorted(e["request"]["prompt"] for e in doc["entries"]) == [
        f"question {i}" for i in range(6)]
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(passed=6)
    res.stdout.fnmatch_lines(["calls: 6 replayed, 0 recorded, 0 missed*"])


def test_a_wrapped_miss_leads_the_failure_and_counts_once(pytester: pytest.Pytester) -> None:
    # SDK retry loops, litellm and scenario turn a ReplayMiss into "Connection error" many
    # lines below the explanation; the report must lead with the miss, counted once.
    pytester.makepyfile(test_agent=AGENT + """
def ask(prompt):
    for _ in range(3):  # an SDK retrying the same call
        try:
            return llm(prompt)
        except AssertionError as exc:
            err = exc
    raise RuntimeError("litellm.InternalServerError: Connection error") from None

def test_plan(dejacache_cassette):
    assert ask("plan a trip")["text"] == "PLAN A TRIP"
""")
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=AGENT + """
def ask(prompt):
    for _ in range(3):
        try:
            return llm(prompt)
        except AssertionError as exc:
            err = exc
    raise RuntimeError("litellm.InternalServerError: Connection error") from None

def test_plan(dejacache_cassette):
    assert ask("plan a trip at 12:05")["text"]
""")
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert out.index("dejacache: this test failed after 1 replay miss(es)") \
        < out.index("RuntimeError: litellm.InternalServerError")
    assert "dejacache replay miss: no recording of llm matches" in out
    assert "calls: 0 replayed, 0 recorded, 1 missed" in out


def test_a_miss_swallowed_by_the_code_under_test_fails_the_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def answer(prompt):
    try:
        return llm(prompt)["text"]
    except Exception:  # an agent's fallback: would make a replay miss look like a pass
        return "sorry"

def test_plan(dejacache_cassette):
    assert answer("plan a trip")
""")
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1, errors=1)
    res = run(pytester, "--dejacache-mode=replay")
    res.stdout.fnmatch_lines(["*1 replay miss(es) in cassette*were caught by the code under*"])
    run(pytester).assert_outcomes(passed=1)  # auto mode records it
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1)


def test_an_unwritable_cassette_directory_is_a_clear_error_naming_the_cassette(
        pytester: pytest.Pytester) -> None:
    from fs_support import immutable

    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache(cassette="ro/shared.json")
def test_plan():
    assert llm("plan a trip")["text"] == "PLAN A TRIP"

def test_after():
    pass
""")
    ro = pytester.path / "ro"
    ro.mkdir()
    with immutable(ro):
        res = run(pytester)
    res.assert_outcomes(passed=2, errors=1)  # the session goes on to the next test
    raised = [line for line in res.stdout.lines if line.startswith(("E ", "ERROR "))]
    assert raised and not any("PermissionError" in line or ".tmp" in line for line in raised)
    res.stdout.fnmatch_lines(["*CassetteError: cannot write the cassette: Operation not "
                              f"permitted in {ro}*(cassette {ro / 'shared.json'})*"])


@pytest.mark.parametrize(("env", "value", "words"), [
    ("DEJACACHE_MODE", "bogus", ["DEJACACHE_MODE", "'bogus'", "auto, replay, record, off"]),
    ("DEJACACHE_MODE", "replayy", ["DEJACACHE_MODE", "'replayy'"]),
    ("DEJACACHE_VOLATILE", "re:(", ["DEJACACHE_VOLATILE", "'('"]),  # was: every test failed
])
def test_a_bad_environment_setting_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: str, value: str,
    words: list[str],
) -> None:
    """As ``--dejacache-mode=replayy`` is: exit status 4 and one line naming the variable,
    not an INTERNALERROR traceback."""
    pytester.makepyfile(test_agent=AGENT + "\ndef test_x():\n    assert llm('a')\n")
    bad_option = run(pytester, "--dejacache-mode=replayy")
    assert bad_option.ret == pytest.ExitCode.USAGE_ERROR
    monkeypatch.setenv(env, value)
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    text = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in text and "Traceback" not in text
    err = res.stderr.str()
    assert all(w in err for w in words), err


SHARED_PAIR = AGENT + """
@pytest.mark.dejacache(cassette="cassettes/shared.json")
def test_first():
    assert llm("first")["text"] == "FIRST"

@pytest.mark.dejacache(cassette="cassettes/shared.json")
def test_second():
    assert llm("second")["text"] == "SECOND"
"""


@pytest.mark.parametrize("mode", ["record", "auto", "replay"])
def test_tests_sharing_a_cassette_keep_each_others_entries(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str,
) -> None:
    # Each test's block reads the file the one before it wrote: its save must keep the other
    # tests' entries, or the next CI run misses them. Pruning a shared file would drop them
    # too (each test uses only its part), so it is never pruned.
    pytester.makepyfile(test_agent=SHARED_PAIR)
    path = pytester.path / "cassettes" / "shared.json"
    for _ in range(2):  # the second pass re-records over a file holding both tests' calls
        run(pytester, "--dejacache-mode=record").assert_outcomes(passed=2)
        doc = orjson.loads(path.read_bytes())
        assert sorted(e["request"]["prompt"] for e in doc["entries"]) == ["first", "second"]
    res = run(pytester, f"--dejacache-mode={mode}", "--dejacache-prune")
    res.assert_outcomes(passed=2)
    assert "unused entries" not in res.stdout.str()  # each test's part is not unused
    if mode != "record":
        res.stdout.fnmatch_lines(["calls: 2 replayed, 0 recorded, 0 missed*"])
    monkeypatch.setenv("CI", "true")
    res = run(pytester)
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["calls: 2 replayed, 0 recorded, 0 missed*"])


def test_xdist_workers_re_recording_a_shared_cassette_keep_every_entry(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.parametrize("i", range(6))
@pytest.mark.dejacache(cassette="cassettes/shared.json")
def test_many(i):
    llm(f"question {i}")
""")
    for _ in range(2):  # the second run re-reads what the first wrote
        res = pytester.runpytest_subprocess("-n", "2", "-p", "no:hypothesispytest",
                                            "--dejacache-mode=record")
        res.assert_outcomes(passed=6)
    doc = _document(pytester.path / "cassettes" / "shared.json")
    assert sorted(e["request"]["prompt"] for e in doc["entries"]) == [
        f"question {i}" for i in range(6)]
    monkeypatch.setenv("CI", "true")
    res = run(pytester)
    res.assert_outcomes(passed=6)
    res.stdout.fnmatch_lines(["calls: 6 replayed, 0 recorded, 0 missed*"])


def _age_cassette(path: pathlib.Path, days: float) -> None:
    from dejacache._core.ageing import stamp
    from dejacache.cassettes import ageing
    from dejacache.cassettes.document import load_document

    # The clock the library judges ages by (held still within a test): days from time.time()
    # could come out a second short of them, and "45d" read as 44d.
    doc = load_document(path.read_bytes(), path)
    for e in doc["entries"]:
        e["recorded_at"] = stamp(ageing.clock() - days * 86400)
    path.write_bytes(render(doc["entries"], doc["values"]))


def test_marker_max_age_warns_of_expired_entries(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache(max_age="30d")
def test_plan():
    assert llm("plan a trip")["text"] == "PLAN A TRIP"
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_plan")
    assert "recorded_at" in orjson.loads(path.read_bytes())["entries"][0]
    _age_cassette(path, 45)
    res = run(pytester, "--dejacache-mode=replay", "-W", "default::UserWarning")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*DejacacheWarning*test_plan.json: entry 0 (llm, occurrence 0) "
                              "was recorded 45d ago*older than max_age 30d*"])


def test_ini_max_age_and_marker_rerecord(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\ndejacache_max_age = 10d\n")
    pytester.makepyfile(test_agent=AGENT + """
import os

@pytest.mark.dejacache(on_expiry="rerecord")
def test_plan():
    llm("plan a trip")
    assert len(CALLS) == int(os.environ["LIVE_CALLS"])
""")
    monkeypatch.setenv("LIVE_CALLS", "1")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_plan")
    _age_cassette(path, 11)
    run(pytester).assert_outcomes(passed=1)  # expired (the ini's 10d): re-recorded live
    monkeypatch.setenv("LIVE_CALLS", "0")
    run(pytester).assert_outcomes(passed=1)  # fresh again: replayed, no warning


PARTIAL_AGENT = AGENT + """
TOOLS = []

@dejacache.cache(name="tools.search_web", kind="tool")
def search_web(q):
    TOOLS.append(q)
    return "found " + q

def agent():
    return llm("plan " + search_web("paris"))["text"]
"""


def test_marker_live_and_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_plan")
    before = path.read_bytes()
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(live=["model"])
def test_plan():
    agent()
    assert CALLS == ["plan found paris"] and TOOLS == []
""")
    run(pytester).assert_outcomes(passed=1)
    assert path.read_bytes() == before
    derived = path.with_name("test_plan.live.json")
    assert [e["name"] for e in orjson.loads(derived.read_bytes())["entries"]] == ["llm"]
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
    assert CALLS == [] and TOOLS == ["paris"]
""")
    run(pytester, "--dejacache-live=tool:search_web").assert_outcomes(passed=1)
    assert path.read_bytes() == before


def test_marker_strict_live_checks_the_replayed_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
    search_web("rome")
""")
    run(pytester).assert_outcomes(passed=1)
    path = _cassette(pytester, "test_plan")
    before = path.read_bytes()
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(strict=True, live=["model"])
def test_plan():
    agent()
    search_web("rome")
    assert CALLS == ["plan found paris"] and TOOLS == []

@pytest.mark.dejacache(strict=True, live=["model"], cassette="cassettes/test_agent/test_plan.json")
def test_swapped():
    search_web("rome")
""")
    res = run(pytester)
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([
        "*strict replay divergence*call #0 (tool tools.search_web) is out of order*",
        "*expected: step 0: tool tools.search_web*paris*"])
    assert path.read_bytes() == before
    # --dejacache-strict with a live= marker: the same check, no configuration error
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(live=["model"])
def test_plan():
    agent()
    search_web("rome")
""")
    run(pytester, "--dejacache-strict").assert_outcomes(passed=1)


def test_marker_replay_until_fails_where_the_run_diverges(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
""")
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(replay_until=1)
def test_plan():
    agent()
    assert TOOLS == [] and CALLS == ["plan found paris"]

@pytest.mark.dejacache(replay_until=2, cassette="cassettes/test_agent/test_plan.json")
def test_other_question():
    search_web("rome")
""")
    res = run(pytester)
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*differs from the recorded call at step 0*",
                              "*q: 'paris' -> 'rome'*"])


def test_the_derived_live_cassette_is_no_orphan(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache
def test_plan():
    agent()
""")
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=PARTIAL_AGENT + """
@pytest.mark.dejacache(live=["model"])
def test_plan():
    agent()
""")
    run(pytester).assert_outcomes(passed=1)
    assert _cassette(pytester, "test_plan").with_name("test_plan.live.json").exists()
    res = run(pytester, "--dejacache-verify")
    res.assert_outcomes(passed=1)
    assert res.ret == 0, res.stdout.str()


# ---------------------------------------------------------------- Ctrl-C
# A real pytest process recording 20 calls to a loopback server gets SIGINT from the server
# when the 10th call arrives; that call is never answered (the server waits for the client to
# hang up), so the signal lands while the test is blocked in the middle of its recording. No
# sleep decides anything: the server's counter is the synchronisation.

INTERRUPTED_SUITE = """
import os, dejacache, httpx, pytest

URL = os.environ["DEJACACHE_TEST_URL"]

def record_twenty():
    with httpx.Client() as client:
        for i in range(20):
            assert client.post(URL, json={"call": i}).json()["call"] == i

def test_fixture(dejacache_cassette):
    record_twenty()

@pytest.mark.dejacache(record_on_error=True)
def test_marker():
    record_twenty()

def test_block():
    # record_on_error keeps a failing block's calls; an interrupted one is not a failure
    with dejacache.cassette("cassettes/by_hand.json", record_on_error=True):
        record_twenty()
"""


class _Interrupter:
    """A loopback server that answers each POST with its body, and on the ``at``-th sends
    SIGINT to ``pid`` and holds the call until the client hangs up."""

    def __init__(self, at: int | None) -> None:
        import http.server
        import threading

        self.at, self.count, self.pid = at, 0, 0
        self.pid_known = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.count += 1
                    n = outer.count
                if n == outer.at:
                    import os
                    import signal

                    assert outer.pid_known.wait(60)
                    os.kill(outer.pid, signal.SIGINT)
                    self.connection.settimeout(60)  # a bound, not a synchronisation
                    self.connection.recv(1)  # until the interrupted client hangs up
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/call"

    def run(self, pytester: pytest.Pytester, *args: str) -> tuple[int, str]:
        import subprocess
        import sys

        proc = pytester.popen([sys.executable, "-m", "pytest", *_QUIET, *args],
                              stdin=subprocess.DEVNULL)
        self.pid = proc.pid
        self.pid_known.set()
        out, err = proc.communicate(timeout=100)
        return proc.returncode, out.decode() + err.decode()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _interrupted_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                     test: str, *args: str, at: int | None = 10) -> tuple[int, str, int]:
    server = _Interrupter(at)
    monkeypatch.setenv("DEJACACHE_TEST_URL", server.url)
    try:
        code, out = server.run(pytester, f"test_agent.py::{test}", *args)
    finally:
        server.stop()
    return code, out, server.count


@pytest.mark.parametrize(("test", "name"), [("test_fixture", "test_agent/test_fixture.json"),
                                            ("test_marker", "test_agent/test_marker.json"),
                                            ("test_block", "by_hand.json")])
def test_ctrl_c_in_a_recording_test_writes_nothing_and_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, test: str, name: str,
) -> None:
    pytester.makepyfile(test_agent=INTERRUPTED_SUITE)
    code, out, calls = _interrupted_run(pytester, monkeypatch, test)
    assert (code, calls) == (pytest.ExitCode.INTERRUPTED, 10), out
    assert "KeyboardInterrupt" in out
    path = pytester.path / "cassettes" / name
    assert not path.exists(), out
    said = (r"\nrecording discarded \(KeyboardInterrupt\): 9 calls not written to "
            rf"\S*cassettes/{name} \(test_agent.py::{test}\)\n")
    assert re.search(said, out), out


def test_ctrl_c_while_re_recording_leaves_the_cassette_as_it_was(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytester.makepyfile(test_agent=INTERRUPTED_SUITE)
    code, out, calls = _interrupted_run(pytester, monkeypatch, "test_fixture", at=None)
    assert (code, calls) == (pytest.ExitCode.OK, 20), out
    path = pytester.path / "cassettes" / "test_agent" / "test_fixture.json"
    before = path.read_bytes()
    assert len(orjson.loads(before)["entries"]) == 20
    code, out, calls = _interrupted_run(pytester, monkeypatch, "test_fixture",
                                        "--dejacache-mode=record")
    assert (code, calls) == (pytest.ExitCode.INTERRUPTED, 10), out
    assert path.read_bytes() == before
    assert "recording discarded (KeyboardInterrupt): 9 calls not written" in out, out


@pytest.mark.parametrize(("stop", "reason", "code"), [
    ('pytest.exit("enough")', "SystemExit", pytest.ExitCode.INTERRUPTED),
    ("raise SystemExit(3)", "SystemExit", pytest.ExitCode.TESTS_FAILED),
])
def test_a_test_stopped_mid_recording_writes_nothing_and_says_so(
    pytester: pytest.Pytester, stop: str, reason: str, code: pytest.ExitCode,
) -> None:
    # pytest.exit() ends the session as Ctrl-C does (no call report, fixtures torn down at
    # the session's end); SystemExit fails the test, and record_on_error does not keep an
    # interrupted run.
    pytester.makepyfile(test_agent=AGENT + f"""
@pytest.mark.dejacache(record_on_error=True)
def test_plan():
    llm("one")
    llm("two")
    {stop}
""")
    res = run(pytester)
    assert res.ret == code
    assert not _cassette(pytester, "test_plan").exists()
    res.stdout.fnmatch_lines([f"recording discarded ({reason}): 2 calls not written to "
                              "*test_plan.json (test_agent.py::test_plan)"])


def test_a_test_skipped_mid_recording_writes_nothing(pytester: pytest.Pytester) -> None:
    # "written only when the test passes": a skipped test's calls are a prefix of a run.
    pytester.makepyfile(test_agent=AGENT + """
def test_plan(dejacache_cassette):
    llm("one")
    pytest.skip("the service is down")
""")
    res = run(pytester, "--dejacache-mode=record")
    res.assert_outcomes(skipped=1)
    assert not _cassette(pytester, "test_plan").exists()
    res.stdout.fnmatch_lines(["recording discarded (the test was skipped): 1 call not written "
                              "to *test_plan.json (test_agent.py::test_plan)"])


def test_a_failed_test_names_the_recording_it_did_not_write(pytester: pytest.Pytester) -> None:
    # The summary counted its calls as recorded while no file was written.
    pytester.makepyfile(test_agent=AGENT + """
def test_plan(dejacache_cassette):
    llm("one")
    llm("two")
    assert False
""")
    res = run(pytester, "--dejacache-mode=record")
    res.assert_outcomes(failed=1)
    assert not _cassette(pytester, "test_plan").exists()
    res.stdout.fnmatch_lines(["recording discarded (the test failed): 2 calls not written "
                              "to *test_plan.json (test_agent.py::test_plan)"])


def test_a_test_that_handles_an_interruption_itself_is_not_named(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_agent=AGENT + """
def test_plan(tmp_path):
    with pytest.raises(KeyboardInterrupt), dejacache.cassette(tmp_path / "c.json"):
        llm("one")
        raise KeyboardInterrupt
    assert not (tmp_path / "c.json").exists()
""")
    res = run(pytester)
    res.assert_outcomes(passed=1)
    assert "discarded" not in res.stdout.str()


def test_a_session_takes_its_discard_listener_away_when_it_ends(
    pytester: pytest.Pytester,
) -> None:
    from dejacache.cassettes import block

    before = list(block.DISCARDED)
    pytester.makepyfile(test_agent=AGENT + """
def test_plan(dejacache_cassette):
    llm("one")
""")
    run(pytester).assert_outcomes(passed=1)
    assert before == block.DISCARDED


# ---------------------------------------------------------------- the project file

CLOCKED = AGENT + """
import datetime

@pytest.mark.dejacache
def test_plan():
    now = datetime.datetime.now().isoformat(timespec="microseconds")
    assert llm(f"plan a trip, it is {now}")["text"].startswith("PLAN A TRIP")
"""

_TIMESTAMP = r"re:\d{4}-\d{2}-\d{2}T[\d:.]+"


def test_volatile_rules_in_pyproject_make_a_fresh_clock_replay(pytester: pytest.Pytester
                                                               ) -> None:
    pytester.makepyfile(test_agent=CLOCKED)
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--dejacache-mode=replay").assert_outcomes(failed=1)  # the clock moved
    pytester.makepyprojecttoml(f"[tool.dejacache]\nvolatile = ['{_TIMESTAMP}']\n")
    run(pytester, "--dejacache-mode=record").assert_outcomes(passed=1)
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["calls: 1 replayed, 0 recorded, 0 missed*"])


def test_the_ini_key_spells_the_same_rules(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=CLOCKED)
    pytester.makeini(f"[pytest]\ndejacache_volatile =\n    {_TIMESTAMP}\n")
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1)


@pytest.mark.parametrize(("files", "message"), [
    ({"pyproject.toml": "[tool.dejacache]\nvolatil = []\n"},
     "unknown key 'volatil'; did you mean 'volatile'?"),
    ({"pyproject.toml": "[tool.dejacache]\nmode = 'sometimes'\n"}, "mode 'sometimes'"),
    ({"pytest.ini": "[pytest]\ndejacache_volatil = x\n"},
     "unknown ini key 'dejacache_volatil'; did you mean 'dejacache_volatile'?"),
    ({"pyproject.toml": "[tool.pytest.ini_options]\ndejacache_cassettes_dir = 'x'\n"},
     "did you mean 'dejacache_cassette_dir'?"),
    # spellings a look for the bytes "dejacache_" alone would miss (configparser lowers keys)
    ({"pytest.ini": "[pytest]\nDEJACACHE_VOLATIL = x\n"}, "unknown ini key 'dejacache_volatil'"),
    ({"pyproject.toml": '[tool.pytest.ini_options]\n"dejacache\\u005fvolatil" = "x"\n'},
     "unknown ini key 'dejacache_volatil'"),
    # the plugin's own ini keys are suggested too, not a project setting in their place
    ({"pytest.ini": "[pytest]\ndejacache_scenaro = true\n"},
     "did you mean 'dejacache_scenario'?"),
    ({"pytest.ini": "[pytest]\ndejacache_min_hitrate = 0.5\n"},
     "did you mean 'dejacache_min_hit_rate'?"),
    ({"pytest.ini": "[pytest]\ndejacache_proxy_upstream = openai=http://127.0.0.1:1\n"},
     "did you mean 'dejacache_proxy_upstreams'?"),
])
def test_a_misspelt_or_bad_setting_is_a_usage_error_naming_it(
        pytester: pytest.Pytester, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (pytester.path / name).write_text(text)
    pytester.makepyfile(test_agent=AGENT + "\ndef test_x():\n    pass\n")
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert message in res.stderr.str()


MODE_SEEN = AGENT + """
@pytest.mark.dejacache@MARKER@
def test_mode(dejacache_cassette):
    print("MODE", dejacache_cassette.mode)
"""


@pytest.mark.parametrize(("env", "option", "marker", "expected"), [
    (None, None, "", "replay"),  # the ini key, over [tool.dejacache]
    ("auto", None, "", "auto"),  # the environment, over the project file
    ("auto", "--dejacache-mode=off", "", "off"),  # the command line, over the environment
    ("auto", "--dejacache-mode=off", "(mode='record')", "record"),  # the marker, over all
])
def test_one_precedence_from_the_marker_down_to_the_project_file(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: str | None,
        option: str | None, marker: str, expected: str) -> None:
    pytester.makepyprojecttoml("[tool.dejacache]\nmode = 'record'\n"
                               "[tool.pytest.ini_options]\ndejacache_mode = 'replay'\n")
    if env is not None:
        monkeypatch.setenv("DEJACACHE_MODE", env)
    pytester.makepyfile(test_agent=MODE_SEEN.replace("@MARKER@", marker))
    res = run(pytester, "-s", *([option] if option else []))
    res.stdout.fnmatch_lines([f"*MODE {expected}*"])


@pytest.mark.parametrize(("env", "option", "marker"), [
    ("none", None, ""), ("NONE", None, ""), (None, "--dejacache-mode=none", ""),
    (None, None, "(mode='none')")])
def test_vcrpys_none_is_replay_wherever_a_mode_is_read(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: str | None,
        option: str | None, marker: str) -> None:
    """As ``[tool.dejacache] mode = "none"`` already was: pytest-recording's word for
    replay only, not refused in the environment, the option or the marker."""
    pytester.makepyprojecttoml("[tool.dejacache]\nmode = 'record'\n")
    if env is not None:
        monkeypatch.setenv("DEJACACHE_MODE", env)
    pytester.makepyfile(test_agent=MODE_SEEN.replace("@MARKER@", marker))
    res = run(pytester, "-s", *([option] if option else []))
    res.stdout.fnmatch_lines(["*MODE replay*"])


def test_cassette_dir_and_prices_from_the_project_file(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.dejacache]\ncassette_dir = 'recordings'\n"
                               "prices = {'gpt-4o' = [1000, 0]}\n")
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache
def test_plan():
    llm("plan")
""")
    run(pytester).assert_outcomes(passed=1)
    assert (pytester.path / "recordings" / "test_agent" / "test_plan.json").exists()
    assert not (pytester.path / "cassettes").exists()
    res = run(pytester, "--dejacache-mode=replay")
    res.stdout.fnmatch_lines(["replay saved:*~$1.00*"])  # 1,000 tokens at $1,000 per million


def test_a_miss_in_volatile_text_is_noted_for_learn_from_miss(pytester: pytest.Pytester,
                                                              tmp_path: pathlib.Path) -> None:
    pytester.makepyfile(test_agent=CLOCKED)
    run(pytester).assert_outcomes(passed=1)
    res = run(pytester, "--dejacache-mode=replay")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*would have made it a hit*",
                              "1 replay miss differed from the nearest recording only in "
                              "volatile text*dejacache learn --from-miss*"])
    (note,) = (tmp_path / ".dejacache").glob("learn-misses*.json")
    (entry,) = orjson.loads(note.read_bytes())
    assert entry["name"] == "llm" and entry["rules"][0].startswith("re:")
    run(pytester).assert_outcomes(passed=1)  # a session starts: the last run's notes go
    assert not list((tmp_path / ".dejacache").glob("learn-misses*.json"))


# ---------------------------------------------------------------- typos


@pytest.mark.parametrize(("marker", "meant"), [
    ('cassete="cassettes/shared.json"', "cassette"),
    ("strcit=True", "strict"),
    ("replay_untill=1", "replay_until"),
])
def test_a_marker_argument_it_does_not_take_is_a_usage_error_naming_the_closest(
        pytester: pytest.Pytester, marker: str, meant: str) -> None:
    pytester.makepyfile(test_agent=AGENT + f"""
def test_fine():
    pass

@pytest.mark.dejacache({marker})
def test_typo():
    llm("plan a trip")
""")
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    name = marker.split("=")[0]
    err = res.stderr.str()
    assert (f"test_agent.py::test_typo: @pytest.mark.dejacache takes no argument {name!r}; "
            f"did you mean {meant!r}?") in err, err
    assert not (pytester.path / "cassettes").exists()  # nothing ran, nothing recorded


def test_a_second_positional_marker_argument_is_a_usage_error(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache("a.json", "b.json")
def test_two():
    llm("x")
""")
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "takes one positional argument (the cassette), got 2" in res.stderr.str()


def test_a_marker_cassette_that_is_not_a_path_is_a_usage_error(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.mark.dejacache(cassette=5)
def test_five():
    llm("x")
""")
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert ("test_agent.py::test_five: @pytest.mark.dejacache cassette must be a str or "
            "os.PathLike, not int 5") in res.stderr.str()


@pytest.mark.parametrize(("marker", "said"), [
    ("mode=5", "mode must be a string, one of auto, replay, record, off, not 5"),
    ("redact=5", "redact= takes names, dotted paths and compiled regexes (or a Redactor), "
                 "not 5"),
])
def test_a_marker_argument_of_the_wrong_type_fails_the_test_naming_it(
        pytester: pytest.Pytester, marker: str, said: str) -> None:
    pytester.makepyfile(test_agent=AGENT + f"""
@pytest.mark.dejacache({marker})
def test_bad():
    llm("x")
""")
    res = run(pytester)
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines([f"*ConfigurationError: {said}*"])


def test_an_invalidated_resource_no_tool_reads_is_named_at_the_end_of_the_session(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_shop="""
import dejacache

CARTS = {1: []}

@dejacache.tool_cache(resource="cart", key="cart:{user_id}", scope="global")
def get_cart(user_id):
    return list(CARTS[user_id])

@dejacache.invalidates("cartz", key="cart:{user_id}", scope="global")
def add_item(user_id, sku):
    CARTS[user_id].append(sku)

def test_stale():
    dejacache.configure(store=dejacache.MemoryStore())
    assert get_cart(1) == []
    add_item(1, "book")
    assert get_cart(1) == []  # served stale: the write invalidated nothing
""")
    res = run(pytester)
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*add_item invalidates 'cartz' (did you mean the resource "
                              "'cart'?). No @tool_cache in this process reads that resource*"])


def test_each_option_keeps_the_dest_pytest_would_derive(pytester: pytest.Pytester) -> None:
    # (the plugin names each dest itself, which spares pytest's check against every option)
    config = pytester.parseconfig("--dejacache-hit-rate-drop=0.1", "--dejacache-strict")
    assert config.getoption("dejacache_hit_rate_drop") == 0.1
    assert config.getoption("dejacache_strict") is True
    for dest in ("dejacache_mode", "dejacache_prune", "dejacache_block_network",
                 "dejacache_live", "dejacache_scenario", "dejacache_verify", "dejacache_report",
                 "dejacache_min_hit_rate", "dejacache_hit_rate_baseline"):
        config.getoption(dest)  # (an unknown dest raises ValueError)


def test_a_block_opened_on_an_event_loop_finds_the_default_store_without_blocking(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without DEJACACHE_DIR the settings a block derives from name the default store's
    # directory under the project root: a stat per directory, looked for on the loop when
    # the session's first block opened there (blockbuster failed it). The plugin finds the
    # root after each test's fixtures, off the loop (monkeypatch.chdir included).
    monkeypatch.delenv("DEJACACHE_DIR")
    pytester.makepyprojecttoml("")
    pytester.mkdir("sub")
    pytester.makepyfile(test_agent="""
import asyncio, dejacache, os, pytest
from blockbuster import BlockBuster

@pytest.fixture
def in_sub(monkeypatch):
    monkeypatch.chdir("sub")

def test_async_block(in_sub):
    async def block():
        with dejacache.cassette("a.json", mode="record"):
            return dejacache.config.get_settings().store.url

    watch = BlockBuster(scanned_modules=["dejacache"])
    watch.activate()
    try:
        url = asyncio.run(block())
    finally:
        watch.deactivate()
    assert url == "sqlite:///" + os.path.join(os.path.dirname(os.getcwd()), ".dejacache",
                                              "cache.db")
""")
    run(pytester, "test_agent.py").assert_outcomes(passed=1)


@pytest.mark.parametrize("checker", [False, True], ids=["no loop checker", "blockbuster"])
def test_directory_changes_are_counted_only_where_a_loop_checker_is_loaded(
        pytester: pytest.Pytester, checker: bool) -> None:
    # Counting them is an audit hook every audited event of the process then pays for
    # (``id()``, ``open``...); it serves only a block on an event loop that a loop checker
    # would fail for asking the OS where it is.
    pytester.makeconftest("import blockbuster\n" if checker else "")
    pytester.makepyfile(test_one=(
        "from dejacache._paths import chdirs\n\n"
        f"def test_one():\n    assert (chdirs() is not None) is {checker}\n"))
    pytester.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=1)
