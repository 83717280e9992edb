"""The plugin's usage record and ``--dejacache-verify``, driven through ``pytester``: which
cassettes and entries a run used is what tells orphans (cassettes of renamed or deleted
tests, calls no longer made)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import orjson
import pytest

from dejacache.cassettes.claimed import RUNS
from dejacache.cassettes.document import load_document
from dejacache.cassettes.render import render
from dejacache.cli import main

AGENT = """
import dejacache, pytest

@dejacache.cache(name="llm", kind="llm")
def llm(prompt):
    return {"text": prompt.upper()}
"""

TWO_TESTS = AGENT + """
def test_plan(dejacache_cassette):
    assert llm("plan")["text"] == "PLAN"
    assert llm("book")["text"] == "BOOK"

def test_other(dejacache_cassette):
    assert llm("other")["text"] == "OTHER"
"""

_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout", "-p", "no:cassetter", "-p", "no:randomly")


@pytest.fixture(autouse=True)
def _not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*_QUIET, *args)


def cassette(pytester: pytest.Pytester, name: str) -> pathlib.Path:
    return pytester.path / "cassettes" / "test_agent" / f"{name}.json"


def record() -> pathlib.Path:
    return pathlib.Path(os.environ["DEJACACHE_DIR"]) / "usage.json"


def verify(capsys: pytest.CaptureFixture[str], pytester: pytest.Pytester, *args: str
           ) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["verify", str(pytester.path), *args])
    return status, capsys.readouterr().out


def orphan_row(out: str, name: str) -> str:
    return next(ln for ln in out.splitlines() if f"{name}.json" in ln and " orphans " in ln)


def test_a_replayed_run_records_what_it_used(pytester: pytest.Pytester,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    doc = orjson.loads(record().read_bytes())
    plan = str(cassette(pytester, "test_plan").resolve())
    # Recorded in this run: written by it, so which entries it used is not known...
    assert doc["files"][plan]["unused"] is None
    assert "recorded calls the file did not have" in doc["files"][plan]["why"]
    status, out = verify(capsys, pytester, "-v")
    assert status == 0 and "usage unknown" in orphan_row(out, "test_plan")
    # ...until a run replays it.
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    doc = orjson.loads(record().read_bytes())
    assert doc["files"][plan]["unused"] == []
    assert doc["claims"][plan] == {"test_agent.py::test_plan": "passed"}
    assert list(doc["modules"]) == [str((pytester.path / "test_agent.py").resolve())]
    status, out = verify(capsys, pytester, "-v")
    assert status == 0
    assert "every entry used (1 test)" in orphan_row(out, "test_plan")
    # A pruning run rewrites what it did not use: nothing to judge it by.
    run(pytester, "--dejacache-mode=replay", "--dejacache-prune").assert_outcomes(passed=2)
    doc = orjson.loads(record().read_bytes())
    assert doc["files"][plan] == {"tests": ["test_agent.py::test_plan"], "outside": False,
                                  "unused": None, "why": "pruned by the run",
                                  "digest": doc["files"][plan]["digest"]}


def test_a_call_no_longer_made_is_an_orphan_and_fix_prunes_it(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    pytester.makepyfile(test_agent=TWO_TESTS.replace(
        '    assert llm("book")["text"] == "BOOK"\n', ""))
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    # One run's word is a warning (the call may be made on a condition the run lacked)...
    status, out = verify(capsys, pytester)
    assert status == 0
    assert "1 entry no test used in the last 1 complete run: llm" in orphan_row(out, "test_plan")
    # ...RUNS complete runs in a row make it an orphan.
    for _ in range(RUNS - 1):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    status, out = verify(capsys, pytester)
    assert status == 1
    assert f"1 entry no test used in the last {RUNS} complete runs: llm" in orphan_row(
        out, "test_plan")
    status, out = verify(capsys, pytester, "--fix")
    assert status == 0 and " fixed " in orphan_row(out, "test_plan")
    path = cassette(pytester, "test_plan")
    assert len(load_document(path.read_bytes(), path)["entries"]) == 1
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)  # still replays


def test_a_renamed_tests_cassette_is_an_orphan(pytester: pytest.Pytester,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    pytester.makepyfile(test_agent=TWO_TESTS.replace("def test_other", "def test_renamed"))
    # Tests edited since the run: the record cannot say what they use now.
    status, out = verify(capsys, pytester, "-v")
    assert status == 0
    assert "test module test_agent.py changed since the last run" in orphan_row(
        out, "test_other")
    run(pytester).assert_outcomes(passed=2)
    status, out = verify(capsys, pytester)
    assert status == 0
    assert ("no test in test_agent.py is named for it (renamed or deleted test); kept: unused "
            f"in 1 of the {RUNS} complete runs in a row needed") in orphan_row(out, "test_other")
    for _ in range(RUNS - 1):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    status, out = verify(capsys, pytester)
    assert status == 1
    assert "no test in test_agent.py is named for it" in orphan_row(out, "test_other")
    assert main(["verify", str(pytester.path), "--fix"]) == 0
    assert not cassette(pytester, "test_other").exists()
    assert cassette(pytester, "test_renamed").exists()


def test_deselected_and_failing_tests_keep_their_cassettes(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    run(pytester, "--dejacache-mode=replay", "-k", "plan").assert_outcomes(passed=1)
    status, out = verify(capsys, pytester, "-v")
    assert status == 0
    assert " skip " in orphan_row(out, "test_other")  # deselected: it may still need it
    pytester.makepyfile(test_agent=TWO_TESTS.replace(
        'assert llm("other")["text"] == "OTHER"', 'llm("other"); assert False'))
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1, failed=1)
    status, out = verify(capsys, pytester, "-v")
    assert status == 0 and "test_agent.py::test_other failed" in orphan_row(out, "test_other")


def test_a_deleted_modules_cassettes_are_orphans(pytester: pytest.Pytester,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS, test_kept=AGENT + """
def test_kept(dejacache_cassette):
    assert llm("kept")["text"] == "KEPT"
""")
    run(pytester).assert_outcomes(passed=3)
    (pytester.path / "test_agent.py").unlink()
    for _ in range(RUNS):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1)
    status, out = verify(capsys, pytester)
    assert status == 1
    assert "test_agent.py no longer exists" in orphan_row(out, "test_plan")
    # Naming one test narrows the run: it cannot tell what other tests exist.
    run(pytester, "--dejacache-mode=replay", "test_kept.py::test_kept").assert_outcomes(
        passed=1)
    status, out = verify(capsys, pytester)
    assert status == 0


def test_a_block_opened_by_hand_counts_as_used(pytester: pytest.Pytester,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=AGENT + """
import pathlib

def test_by_hand():
    here = pathlib.Path(__file__).parent / "cassettes" / "test_agent" / "handmade.json"
    with dejacache.cassette(here):
        assert llm("x")["text"] == "X"
""")
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1)
    status, out = verify(capsys, pytester, "-v")
    assert status == 0 and "every entry used" in orphan_row(out, "handmade")


def _verify_fails_on_an_orphan(pytester: pytest.Pytester, here: pathlib.Path) -> None:
    """Sessions in ``here`` (the working directory): a passing verify, then a renamed test's
    cassette that fails it."""
    (here / "test_agent.py").write_text(TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    res = run(pytester, "--dejacache-mode=replay", "--dejacache-verify")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*dejacache verify*", "dejacache verify: passed: 2 cassettes*"])
    (here / "test_agent.py").write_text(TWO_TESTS.replace("def test_other", "def test_renamed"))
    for _ in range(RUNS - 1):  # the last of RUNS complete runs verifies
        run(pytester).assert_outcomes(passed=2)
    res = run(pytester, "--dejacache-mode=replay", "--dejacache-verify")
    res.assert_outcomes(passed=2)
    assert res.ret == 1
    res.stdout.fnmatch_lines([
        "*test_other.json*orphans*fail*no test in test_agent.py is named for it*",
        "dejacache verify: FAILED: 3 cassettes, 1 fail*",
    ])


def test_dejacache_verify_fails_the_session_on_an_orphan(pytester: pytest.Pytester) -> None:
    _verify_fails_on_an_orphan(pytester, pytester.path)


def test_a_session_in_process_leaves_the_next_nothing(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest.main() twice in one process (an IDE, a notebook, pytester): the second session
    # names its files in its own directory, not the first's (a cache of resolved
    # directories outlived the first, and the orphan below passed as "not collected").
    first = pytester.mkdir("first")
    (first / "test_agent.py").write_text(TWO_TESTS)
    monkeypatch.chdir(first)
    run(pytester).assert_outcomes(passed=2)
    res = run(pytester, "--dejacache-mode=replay", "--dejacache-verify")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["dejacache verify: passed: 2 cassettes*"])
    second = pytester.mkdir("second")
    monkeypatch.chdir(second)
    _verify_fails_on_an_orphan(pytester, second)


def test_a_session_in_process_hands_the_process_back(pytester: pytest.Pytester,
                                                     request: pytest.FixtureRequest) -> None:
    from dejacache import _project, _pytest_usage, pytest_plugin
    from dejacache.cassettes import block, prices

    me = pytest_plugin.current_test()
    hooks, project, table = list(block.OPENED), _project.current(), dict(prices.PRICES)
    pytester.makeini("[pytest]\ndejacache_max_age = 30d\n"
                     "dejacache_prices =\n    gpt-test-only 1 2\n")
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester, "--dejacache-verify").assert_outcomes(passed=2)
    # This test is the one running again, with the settings this session had...
    assert me is request.node and pytest_plugin.current_test() is me
    assert (block.OPENED, _project.current(), prices.PRICES) == (hooks, project, table)
    # ...and its record did not take in the inner session's cassettes.
    outer = request.config.stash[_pytest_usage._RECORDER]
    rec = outer.recorder() if outer.started else None  # (made by the outer's first block)
    groups, uses = (rec._groups, rec._open) if rec is not None else ({}, [])
    assert not [p for p in groups if p.startswith(str(pytester.path))]
    assert not [u for u in uses if u.where.startswith(str(pytester.path))]


def test_an_inner_session_keeps_its_collection_doubts_to_itself(
        pytester: pytest.Pytester, request: pytest.FixtureRequest) -> None:
    # (the plugin's pytest_collectreport charges the innermost session configured)
    from dejacache import _pytest_usage

    outer = request.config.stash[_pytest_usage._RECORDER]
    before = (set(outer.collect_errors), set(outer.collect_skipped))
    pytester.makepyfile(test_broken="import not_a_module_anywhere\n",
                        test_skipped='import pytest\npytest.importorskip("not_a_module_x")\n')
    res = pytester.runpytest_inprocess(*_QUIET, "--continue-on-collection-errors")
    res.assert_outcomes(errors=1, skipped=1)
    assert (outer.collect_errors, outer.collect_skipped) == before
    assert not _pytest_usage._ACTIVE or _pytest_usage._ACTIVE[-1] is outer


def test_dejacache_verify_reads_the_max_age_ini(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    pytester.makeini("[pytest]\ndejacache_max_age = 30d\n")
    run(pytester).assert_outcomes(passed=2)
    path = cassette(pytester, "test_other")
    doc = load_document(path.read_bytes(), path)
    for e in doc["entries"]:
        e["recorded_at"] = "2020-01-01T00:00:00Z"
    path.write_bytes(render(doc["entries"], doc["values"]))
    res = run(pytester, "--dejacache-mode=replay", "--dejacache-verify")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*test_other.json*expired*fail*1 of 1 entries recorded more "
                              "than 30d ago (oldest 2020-01-01)*"])


def test_xdist_workers_parts_make_one_record(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    pytester.makepyfile(test_agent=TWO_TESTS.replace(
        '    assert llm("book")["text"] == "BOOK"\n', "").replace(
        "def test_other", "def test_renamed"))
    run(pytester).assert_outcomes(passed=2)  # records test_renamed
    for _ in range(RUNS - 2):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    others = [a for a in _QUIET if a not in ("-p", "no:xdist")]
    res = pytester.runpytest_subprocess(*(x for o in others for x in ("-p", o)), "-n", "2",
                                        "--dejacache-mode=replay", "--dejacache-verify")
    res.assert_outcomes(passed=2)
    assert res.ret == 1
    res.stdout.fnmatch_lines([
        "*test_other.json*orphans*fail*no test in test_agent.py is named for it*",
        "*test_plan.json*orphans*fail*1 entry no test used in the last 3 complete runs: llm*",
    ], consecutive=False)
    doc = orjson.loads(record().read_bytes())
    assert sorted(t for c in doc["claims"].values() for t in c) == [
        "test_agent.py::test_plan", "test_agent.py::test_renamed"]


# ---------------------------------------------------------------- only a complete run judges
# Each case: a run that cannot have seen every file a test opens, then `dejacache verify
# --fix` as a user runs it (its own process). The file test_b opens by hand must survive.

HAND = AGENT + """
import os, pathlib

HANDMADE = pathlib.Path(__file__).parent / "cassettes" / "test_agent" / "handmade.json"

def test_a(dejacache_cassette):
    assert llm("a")["text"] == "A"

@pytest.mark.slow
def test_b():
    how = os.environ.get("STOP_B")
    if how == "skip":
        pytest.skip("not on this machine")
    if how == "xfail":
        pytest.xfail("known to break here")
    if how == "fail":
        raise AssertionError("broken before its cassette")
    if how == "interrupt":
        raise KeyboardInterrupt
    if os.environ.get("HAND", "1") == "1":
        with dejacache.cassette(HANDMADE):
            assert llm("b")["text"] == "B"
"""


def verify_cli(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    """``dejacache verify`` run as a user runs it, in the project's directory."""
    return subprocess.run([sys.executable, "-m", "dejacache.cli", "verify", *args],
                          cwd=pytester.path, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def hand(pytester: pytest.Pytester) -> pathlib.Path:
    """test_agent.py recorded by a full run: test_a's own cassette, and the one test_b opens
    by hand (handmade.json, named for no test)."""
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow tests\n")
    pytester.makepyfile(test_agent=HAND)
    run(pytester).assert_outcomes(passed=2)
    path = cassette(pytester, "handmade")
    assert path.exists()
    return path


@pytest.mark.parametrize(("args", "why"), [
    (("-k", "not test_b"), "cannot judge: 1 test deselected (-k, -m, --deselect)"),
    (("-m", "not slow"), "cannot judge: 1 test deselected (-k, -m, --deselect)"),
    (("--deselect", "test_agent.py::test_b"),
     "cannot judge: 1 test deselected (-k, -m, --deselect)"),
    (("test_agent.py::test_a",), "cannot judge: tests named on the command line (path::name)"),
], ids=["-k", "-m", "--deselect", "::id"])
def test_a_narrowed_run_never_deletes_what_a_test_opens_by_hand(
        pytester: pytest.Pytester, hand: pathlib.Path, args: tuple[str, ...], why: str) -> None:
    run(pytester, "--dejacache-mode=replay", *args).assert_outcomes(passed=1)
    res = verify_cli(pytester, "--fix", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert hand.exists() and cassette(pytester, "test_a").exists()
    assert f" skip     {why}" in orphan_row(res.stdout, "handmade")
    assert "dejacache verify --fix: removed no orphans" in res.stdout
    assert "dejacache verify --fix: left 2 files alone" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1].startswith("dejacache verify: passed")


@pytest.mark.parametrize(("how", "outcome"), [
    ("skip", "skipped"), ("xfail", "xfailed"), ("fail", "failed")])
def test_a_test_stopped_before_its_block_in_a_full_run_keeps_its_file(
        pytester: pytest.Pytester, hand: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        how: str, outcome: str) -> None:
    monkeypatch.setenv("STOP_B", how)
    res = run(pytester, "--dejacache-mode=replay")
    assert res.parseoutcomes()["passed"] == 1
    res = verify_cli(pytester, "--fix", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert hand.exists()
    assert (f"cannot judge: test test_agent.py::test_b {outcome} (a test that did not pass "
            "may use cassettes the run never saw)") in orphan_row(res.stdout, "handmade")


def test_an_interrupted_run_cannot_judge(pytester: pytest.Pytester, hand: pathlib.Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOP_B", "interrupt")
    # In its own process: pytester's in-process run hands a KeyboardInterrupt on to this one.
    res = pytester.runpytest_subprocess(*_QUIET, "--dejacache-mode=replay")
    assert res.ret == pytest.ExitCode.INTERRUPTED
    res = verify_cli(pytester, "--fix", "-v")
    assert hand.exists()
    assert "cannot judge: the run was interrupted" in orphan_row(res.stdout, "handmade")


OPENS_HANDMADE_OF_TEST_AGENT = AGENT + """
import pathlib

def test_elsewhere():
    here = pathlib.Path(__file__).parent / "cassettes" / "test_agent" / "handmade.json"
    with dejacache.cassette(here):
        assert llm("b")["text"] == "B"
"""


@pytest.mark.parametrize(("broken", "args", "why"), [
    ("import not_a_module_anywhere\n", ("--continue-on-collection-errors",),
     "cannot judge: test_other.py failed to collect"),
    ('pytest.importorskip("not_a_module_anywhere")\n', (),
     "cannot judge: test_other.py skipped at collection"),
    ("", ("--ignore=test_other.py",), "cannot judge: --ignore / --ignore-glob left paths out"),
    ("", ("test_agent.py",), "cannot judge: the run collected test_agent.py, not the whole "
     "suite (. left out): run pytest without paths, or set testpaths"),
], ids=["collection-error", "skipped-module", "--ignore", "a-path"])
def test_a_module_the_run_did_not_collect_keeps_the_files_it_opens(
        pytester: pytest.Pytester, broken: str, args: tuple[str, ...], why: str) -> None:
    # test_other.py opens a cassette in test_agent's folder by hand: a run that never
    # collected test_other.py cannot tell that file is used.
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_agent=TWO_TESTS, test_other=OPENS_HANDMADE_OF_TEST_AGENT)
    run(pytester).assert_outcomes(passed=3)
    pytester.makepyfile(test_other="import pytest\n" + broken + OPENS_HANDMADE_OF_TEST_AGENT)
    res = run(pytester, "--dejacache-mode=replay", *args)
    assert res.parseoutcomes()["passed"] == 2
    res = verify_cli(pytester, "--fix", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert cassette(pytester, "handmade").exists()
    assert why in orphan_row(res.stdout, "handmade")


def test_testpaths_make_the_paths_they_name_the_whole_suite(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    tests = pytester.mkdir("tests")
    (tests / "test_agent.py").write_text(TWO_TESTS)
    (tests / "conftest.py").write_text("")
    run(pytester).assert_outcomes(passed=2)
    run(pytester, "--dejacache-mode=replay", "tests").assert_outcomes(passed=2)
    assert orjson.loads(record().read_bytes())["cannot_judge"] == ""
    status, out = verify(capsys, pytester, "-v")
    assert status == 0 and "every entry used" in orphan_row(out, "test_plan")


def test_a_file_opened_in_an_earlier_run_stays_claimed_while_its_test_exists(
        pytester: pytest.Pytester, hand: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # test_b opens handmade.json only when HAND=1: a complete run without it does not see
    # the file opened, and the earlier run's word keeps it.
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    monkeypatch.setenv("HAND", "0")
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    res = verify_cli(pytester, "--fix", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert hand.exists()
    doc = orjson.loads(record().read_bytes())
    assert doc["cannot_judge"] == ""
    assert doc["opened"][str(hand.resolve())]["tests"] == ["test_agent.py::test_b"]
    assert ("usage unknown: not opened in the last run, but test test_agent.py::test_b "
            "opened it in an earlier run (kept while that test exists)") in orphan_row(
        res.stdout, "handmade")
    # test_b deleted: no test that opened it is left, and a complete run says so.
    pytester.makepyfile(test_agent=HAND[:HAND.index("@pytest.mark.slow")])
    for _ in range(RUNS):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=1)
    res = verify_cli(pytester, "--fix")
    assert res.returncode == 0, res.stdout + res.stderr
    assert not hand.exists() and cassette(pytester, "test_a").exists()
    assert "dejacache verify --fix: removed 1 file" in res.stdout


def test_a_partial_replays_live_file_is_never_an_orphan(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    run(pytester, "--dejacache-live=model").assert_outcomes(passed=2)
    live = cassette(pytester, "test_plan").with_name("test_plan.live.json")
    assert live.exists()
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)  # a complete run
    res = verify_cli(pytester, "--fix", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert live.exists()
    assert orjson.loads(record().read_bytes())["cannot_judge"] == ""
    assert ("ok       the live calls of a partial replay of test_plan.json: never an orphan"
            in orphan_row(res.stdout, "test_plan.live"))


def test_a_read_only_checkout_replays_and_only_notes_the_unwritten_record(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI on a read-only checkout: replay needs no writable directory; the usage record is
    best-effort, one line in the summary naming DEJACACHE_DIR, never a raw error."""
    from fs_support import immutable

    monkeypatch.delenv("DEJACACHE_DIR")  # the default: <project>/.dejacache
    monkeypatch.chdir(pytester.path)
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester, "-p", "no:cacheprovider").assert_outcomes(passed=2)
    own = pytester.path / ".dejacache"
    assert (own / ".gitignore").read_text().splitlines()[-1] == "*"  # git add -A skips it
    shutil.rmtree(own)  # a fresh checkout has none
    monkeypatch.setenv("CI", "true")
    with immutable(pytester.path):
        res = run(pytester, "-p", "no:cacheprovider")
    assert res.ret == 0, res.stdout.str()
    res.assert_outcomes(passed=2)
    out = res.stdout.str()
    assert "CassetteError" not in out and "INTERNALERROR" not in out
    assert "Traceback" not in out + res.stderr.str()
    res.stdout.fnmatch_lines(["calls: 3 replayed, 0 recorded, 0 missed*",
                              f"dejacache: the usage record {own / 'usage.json'} was not "
                              "written (*); tests are not affected*Set DEJACACHE_DIR to a "
                              "writable directory to keep it."])
    assert "the calls recorded in this block are not saved" not in out


def test_the_roots_are_the_invocations_paths_though_a_test_changes_directory_first(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=AGENT + """
@pytest.fixture
def moved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # before the block: the recorder is made by the first block

def test_plan(moved, dejacache_cassette):
    assert llm("plan")["text"] == "PLAN"
""")
    run(pytester, "test_agent.py").assert_outcomes(passed=1)
    doc = orjson.loads(record().read_bytes())
    assert doc["roots"] == [str((pytester.path / "test_agent.py").resolve())]


# A test module whose test runs ``body`` (lines of an ``async def``) on an event loop under
# blockbuster, which fails any blocking call dejacache makes there.
_ON_A_LOOP = """
import asyncio, dejacache
from blockbuster import BlockBuster

def test_on_a_loop(tmp_path):
    async def block():{body}

    watch = BlockBuster(scanned_modules=["dejacache"])
    watch.activate()
    try:
        asyncio.run(block())
    finally:
        watch.deactivate()
"""


def test_a_sessions_first_block_opened_on_an_event_loop_does_no_blocking_io(
        pytester: pytest.Pytester) -> None:
    # The first block makes the session's recorder; it used to resolve the roots there, and
    # realpath stats: under blockbuster that block failed, but only as a session's first
    # (a one-test run), never after another test's block had made the recorder.
    pytester.makepyfile(test_agent=_ON_A_LOOP.format(body="""
        with dejacache.cassette(tmp_path / "a.json", mode="record"):
            pass"""))
    run(pytester, "test_agent.py").assert_outcomes(passed=1)
    doc = orjson.loads(record().read_bytes())
    assert doc["roots"] == [str((pytester.path / "test_agent.py").resolve())]


def test_a_relative_cassette_path_opened_on_an_event_loop_does_no_blocking_io(
        pytester: pytest.Pytester) -> None:
    # The record names a relative path against the working directory the block opened in:
    # asking the system for it (os.getcwd) on the loop failed every such block under
    # blockbuster, the session's first or not.
    pytester.makepyfile(test_agent=_ON_A_LOOP.format(body="""
        for _ in range(2):
            with dejacache.cassette("a.json", mode="record"):
                pass"""))
    run(pytester, "test_agent.py").assert_outcomes(passed=1)
    doc = orjson.loads(record().read_bytes())
    assert list(doc["files"]) == [str(pytester.path.resolve() / "a.json")]


def test_a_run_that_changes_nothing_leaves_the_record_as_it_is(pytester: pytest.Pytester
                                                              ) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    before = record().stat()
    data = record().read_bytes()
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    after = record().stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert record().read_bytes() == data
    # What the run saw changed (one test left out): the record is written anew.
    run(pytester, "--dejacache-mode=replay", "-k", "plan").assert_outcomes(passed=1)
    doc = orjson.loads(record().read_bytes())
    assert record().stat().st_ino != before.st_ino and doc["cannot_judge"]


# ---------------------------------------------------------------- no removal on one run's word
# A test may open a file, or take a branch, only on a condition (an environment variable, a
# platform): one complete run with the condition false did not see what it uses then.

NIGHTLY = AGENT + """
import os, pathlib

HERE = pathlib.Path(__file__).parent

def test_b(dejacache_cassette):
    assert llm("a")["text"] == "A"
    if os.environ.get("BRANCH"):
        assert llm("branch")["text"] == "BRANCH"

def test_nightly():
    if os.environ.get("NIGHTLY"):
        with dejacache.cassette(HERE / os.environ["WHERE"]):
            assert llm("night")["text"] == "NIGHT"
"""


@pytest.mark.parametrize("where", [
    "cassettes/test_agent/nightly.json",  # in the layout, named for no test
    "elsewhere/cassettes/nightly/run.json",  # outside it (no module nightly.py)
    "cassettes/test_agent/test_nightly.json",  # the test's own file, opened by hand
])
def test_a_file_opened_on_a_condition_survives_a_fresh_checkout(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    monkeypatch.setenv("WHERE", where)
    monkeypatch.setenv("NIGHTLY", "1")
    pytester.makepyfile(test_agent=NIGHTLY)
    run(pytester).assert_outcomes(passed=2)
    path = pytester.path / where
    assert path.exists()
    record().unlink()  # a fresh checkout: no usage record, no history
    monkeypatch.delenv("NIGHTLY")
    for _ in range(4):  # complete runs, none of them nightly
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    res = verify_cli(pytester, "--fix", "-v", ".")
    assert res.returncode == 0, res.stdout + res.stderr
    assert path.exists(), res.stdout
    assert "kept: no usage history (no recorded run opened it)" in res.stdout
    assert "dejacache verify --fix: removed no orphans" in res.stdout
    monkeypatch.setenv("NIGHTLY", "1")
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)  # still replays


def test_an_entry_used_in_earlier_runs_survives_runs_that_skip_its_branch(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("BRANCH", "1")
    pytester.makepyfile(test_agent=NIGHTLY)
    run(pytester).assert_outcomes(passed=2)
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    monkeypatch.delenv("BRANCH")
    path = cassette(pytester, "test_b")
    for n in range(1, RUNS):  # fewer complete runs than judge: reported, never removed
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
        res = verify_cli(pytester, "--fix", "-v")
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(load_document(path.read_bytes(), path)["entries"]) == 2, res.stdout
        assert (f" warn     1 entry no test used in the last {n} complete "
                f"run{'s' * (n != 1)}: llm") in orphan_row(res.stdout, "test_b")
        assert (f"kept: unused in {n} of the {RUNS} complete runs in a row needed"
                in res.stdout)
    # The branch taken again: the count starts over.
    monkeypatch.setenv("BRANCH", "1")
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    monkeypatch.delenv("BRANCH")
    for _ in range(RUNS - 1):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    res = verify_cli(pytester, "--fix")
    assert len(load_document(path.read_bytes(), path)["entries"]) == 2, res.stdout
    # RUNS complete runs in a row without it: a call no longer made, removed.
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    res = verify_cli(pytester, "--fix")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "removed 1 unused entry from 1 file" in res.stdout
    assert len(load_document(path.read_bytes(), path)["entries"]) == 1
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)  # still replays


def test_the_history_stops_growing_once_it_judges(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRANCH", "1")
    pytester.makepyfile(test_agent=NIGHTLY)
    run(pytester).assert_outcomes(passed=2)
    monkeypatch.delenv("BRANCH")
    for _ in range(RUNS):
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    doc = orjson.loads(record().read_bytes())
    o = doc["opened"][str(cassette(pytester, "test_b").resolve())]
    assert [row[2] for row in o["entries"]] == [RUNS]  # the branch's entry, counted to RUNS
    before, data = record().stat(), record().read_bytes()
    for _ in range(2):  # counts stop at RUNS: later runs that see the same write nothing
        run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    after = record().stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert record().read_bytes() == data
