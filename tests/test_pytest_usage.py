"""The plugin's usage record and ``--dejacache-verify``, driven through ``pytester``: which
cassettes and entries a run used is what tells orphans (cassettes of renamed or deleted
tests, calls no longer made)."""

from __future__ import annotations

import os
import pathlib

import orjson
import pytest

from dejacache.cassettes import format as fmt
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
    assert doc["files"][plan] == {"tests": ["test_agent.py::test_plan"], "unused": None,
                                  "why": "pruned by the run", "digest": doc["files"][plan][
                                      "digest"]}


def test_a_call_no_longer_made_is_an_orphan_and_fix_prunes_it(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester).assert_outcomes(passed=2)
    pytester.makepyfile(test_agent=TWO_TESTS.replace(
        '    assert llm("book")["text"] == "BOOK"\n', ""))
    run(pytester, "--dejacache-mode=replay").assert_outcomes(passed=2)
    status, out = verify(capsys, pytester)
    assert status == 1
    assert "1 entry no test used: llm" in orphan_row(out, "test_plan")
    status, out = verify(capsys, pytester, "--fix")
    assert status == 0 and " fixed " in orphan_row(out, "test_plan")
    path = cassette(pytester, "test_plan")
    assert len(fmt.load_document(path.read_bytes(), path)["entries"]) == 1
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
    from dejacache import _pytest_usage, pytest_plugin
    from dejacache.cassettes import ageing, block, prices

    me = pytest_plugin.current_test()
    hooks, age, table = list(block.OPENED), ageing.INI[0], dict(prices.PRICES)
    pytester.makeini("[pytest]\ndejacache_max_age = 30d\n"
                     "dejacache_prices =\n    gpt-test-only 1 2\n")
    pytester.makepyfile(test_agent=TWO_TESTS)
    run(pytester, "--dejacache-verify").assert_outcomes(passed=2)
    # This test is the one running again, with the settings this session had...
    assert me is request.node and pytest_plugin.current_test() is me
    assert (block.OPENED, ageing.INI[0], prices.PRICES) == (hooks, age, table)
    # ...and its record did not take in the inner session's cassettes.
    outer = request.config.stash[_pytest_usage._RECORDER]
    assert not [p for p in outer._groups if p.startswith(str(pytester.path))]
    assert not [u for u in outer._open if u.where.startswith(str(pytester.path))]


def test_dejacache_verify_reads_the_max_age_ini(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agent=TWO_TESTS)
    pytester.makeini("[pytest]\ndejacache_max_age = 30d\n")
    run(pytester).assert_outcomes(passed=2)
    path = cassette(pytester, "test_other")
    doc = fmt.load_document(path.read_bytes(), path)
    for e in doc["entries"]:
        e["recorded_at"] = "2020-01-01T00:00:00Z"
    path.write_bytes(fmt.render(doc["entries"], doc["values"]))
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
    others = [a for a in _QUIET if a not in ("-p", "no:xdist")]
    res = pytester.runpytest_subprocess(*(x for o in others for x in ("-p", o)), "-n", "2",
                                        "--dejacache-mode=replay", "--dejacache-verify")
    res.assert_outcomes(passed=2)
    assert res.ret == 1
    res.stdout.fnmatch_lines([
        "*test_other.json*orphans*fail*no test in test_agent.py is named for it*",
        "*test_plan.json*orphans*fail*1 entry no test used: llm*",
    ], consecutive=False)
    doc = orjson.loads(record().read_bytes())
    assert sorted(t for c in doc["claims"].values() for t in c) == [
        "test_agent.py::test_plan", "test_agent.py::test_renamed"]
