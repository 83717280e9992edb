"""``dejacache learn``, ``learn --from-miss``, ``rekey`` and ``config`` end to end: a project's
suite that misses because of volatile text replays after one command
(``_learn/command.py``; the tests run the CLI and pytest in subprocesses, as a user does)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import orjson
import pytest

from dejacache._learn.runs import parse_upstreams
from dejacache.errors import ConfigurationError
from learn_support import counts, entries, make_project, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CLOCKED = """
import datetime
import dejacache
import pytest

@dejacache.cache(kind="llm")
def llm(prompt):
    return prompt.upper()

@pytest.mark.dejacache
def test_plan():
    now = datetime.datetime.now().isoformat(timespec="microseconds")
    assert llm(f"plan a trip, it is {now}").startswith("PLAN A TRIP")
"""


def _small(tmp_path: pathlib.Path, test: str = CLOCKED) -> pathlib.Path:
    proj = tmp_path / "small"
    (proj / "tests").mkdir(parents=True)
    (proj / "tests" / "test_plan.py").write_text(test)
    (proj / "pyproject.toml").write_text(
        "[project]\nname = 'small'  # kept as it is\nversion = '0'\n\n"
        "[tool.pytest.ini_options]\naddopts = '-p no:cacheprovider -p no:randomly'\n")
    return proj


def test_learn_write_makes_a_suite_that_missed_replay(tmp_path: pathlib.Path) -> None:
    proj = make_project(tmp_path)
    assert run(proj, "pytest", "--dejacache-mode=record", "tests").returncode == 0
    total = entries(proj)
    before = run(proj, "pytest", "--dejacache-mode=replay", "tests")
    replayed, _, missed = counts(before.stdout)
    assert before.returncode == 1 and missed == 7  # every test with volatile text misses
    learned = run(proj, "dejacache", "learn", "--write", "tests", "-q", timeout=600)
    assert learned.returncode == 0, learned.stderr[-3000:]
    out = learned.stdout
    assert f"{total} of {total} with them" in out
    assert "answered differently" in out  # the bare UUID rule, refused (the order trap)
    doc = (proj / "pyproject.toml").read_text()
    assert doc.startswith("[project]\nname = \"agents\"")
    after = run(proj, "pytest", "--dejacache-mode=replay", "tests")
    assert after.returncode == 0, after.stdout[-3000:]
    assert counts(after.stdout) == (total, 0, 0)
    assert replayed < total


def test_learn_json_lists_each_rule_with_the_calls_it_explains(tmp_path: pathlib.Path
                                                                ) -> None:
    proj = _small(tmp_path)
    res = run(proj, "dejacache", "learn", "--json", "--scratch", str(tmp_path / "s"), "tests")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout[res.stdout.index("\n{") + 1:])
    (rule,) = doc["rules"]
    assert rule["what"] == "timestamp" and rule["explains"] == [
        {"cassette": "tests/cassettes/test_plan/test_plan.json", "step": 0, "name":
         "test_plan.llm", "field": "prompt"}]
    assert (doc["calls"], doc["differing_before"], doc["differing_after"]) == (1, 1, 0)
    assert (tmp_path / "s" / "run1" / "tests" / "cassettes" / "test_plan").is_dir()
    assert not (proj / "tests" / "cassettes").exists()  # the project's own: untouched
    assert "volatile" not in (proj / "pyproject.toml").read_text()  # no --write


def test_learn_from_miss_applies_the_rule_the_miss_printed(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    assert run(proj, "pytest", "--dejacache-mode=record").returncode == 0
    miss = run(proj, "pytest", "--dejacache-mode=replay")
    assert miss.returncode == 1 and "would have made it a hit" in miss.stdout
    fixed = run(proj, "dejacache", "learn", "--from-miss")
    assert fixed.returncode == 0, fixed.stderr
    assert "re-keyed 1 entry in 1 cassette" in fixed.stdout
    assert run(proj, "pytest", "--dejacache-mode=replay").returncode == 0
    again = run(proj, "dejacache", "learn", "--from-miss")  # the passing run noted nothing
    assert again.returncode == 1 and "no replay miss" in again.stderr


def test_learn_from_miss_with_test_arguments_runs_them_first(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    assert run(proj, "pytest", "--dejacache-mode=record").returncode == 0
    fixed = run(proj, "dejacache", "learn", "--from-miss", "tests", "-q")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert run(proj, "pytest", "--dejacache-mode=replay").returncode == 0


def test_rekey_applies_rules_written_by_hand(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    assert run(proj, "pytest", "--dejacache-mode=record").returncode == 0
    with (proj / "pyproject.toml").open("a") as fh:
        fh.write("\n[tool.dejacache]\nvolatile = ['re:\\d{4}-\\d{2}-\\d{2}T[\\d:.]+']\n")
    res = run(proj, "dejacache", "rekey")
    assert res.returncode == 0 and "re-keyed 1 entry in 1 cassette" in res.stdout
    assert run(proj, "pytest", "--dejacache-mode=replay").returncode == 0
    assert "re-keyed 0 entries" in run(proj, "dejacache", "rekey", "tests").stdout
    assert run(proj, "dejacache", "rekey", "nowhere").returncode == 2
    damaged = proj / "tests" / "cassettes" / "damaged.json"
    damaged.write_text('{"checksums": "xxh3-128", "entries": [')
    res = run(proj, "dejacache", "rekey", "tests")
    assert res.returncode == 1 and "not re-keyed" in res.stdout  # (it was 0: "nothing wrong")


def test_rekey_of_a_missing_path_says_so_first(tmp_path: pathlib.Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """With no volatile rules in force either, the path is what is wrong: one line on stderr
    and status 2, as ``show`` and ``verify`` give a missing file (it was the rules' line on
    stdout and status 0)."""
    from dejacache.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEJACACHE_PROJECT", "")  # (no project file: no rules)
    monkeypatch.delenv("DEJACACHE_VOLATILE", raising=False)
    assert main(["rekey", str(tmp_path / "missing")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"dejacache rekey: {tmp_path / 'missing'}: no such file or directory\n"


def test_every_command_refuses_a_misspelt_project_key(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    (proj / "pyproject.toml").write_text("[tool.dejacache]\nmax_ages = '3d'\n")
    for command in (["stats"], ["config"], ["learn", "--from-miss"], ["rekey"]):
        res = run(proj, "dejacache", *command)
        assert res.returncode == 1, command
        assert "unknown key 'max_ages'; did you mean 'max_age'?" in res.stderr


def test_config_shows_each_setting_and_where_it_comes_from(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    (proj / "pyproject.toml").write_text("[tool.dejacache]\nmode = 'replay'\n")
    res = run(proj, "dejacache", "config", "--json", DEJACACHE_ON_EXPIRY="rerecord")
    doc = orjson.loads(res.stdout)
    rows = {r["key"]: (r["value"], r["source"]) for r in doc["settings"]}
    assert rows["mode"][0] == "replay" and "[tool.dejacache]" in rows["mode"][1]
    assert rows["on_expiry"] == ("rerecord", "environment DEJACACHE_ON_EXPIRY")
    assert rows["cassette_dir"] == ("<test dir>/cassettes", "default")


UPSTREAM = """
import os
import pytest

@pytest.mark.dejacache
def test_env():
    assert os.environ["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1"
"""


def test_upstream_is_given_to_the_runs_as_the_sdk_variable(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path, UPSTREAM)
    res = run(proj, "dejacache", "learn", "--upstream", "openai=http://127.0.0.1:9/v1",
              "tests")
    assert res.returncode == 0 and res.stdout.count("1 passed") == 2, res.stdout
    assert parse_upstreams(["my-llm=http://x"]) == {"MY_LLM_BASE_URL": "http://x"}
    with pytest.raises(ConfigurationError, match="NAME=URL"):
        parse_upstreams(["openai"])


def test_a_broken_run_stops_learning(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path)
    res = run(proj, "dejacache", "learn", "--no-such-pytest-option")
    assert res.returncode == 4 and "nothing compared" in res.stderr


def test_a_failing_test_is_named_as_learned_from_nothing(tmp_path: pathlib.Path) -> None:
    proj = _small(tmp_path, CLOCKED + "\n\ndef test_broken():\n    assert False\n")
    res = run(proj, "dejacache", "learn", "tests")
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("tests failed in run") == 2
    assert "re:" in res.stdout  # the passing test's rule all the same


def test_learn_help_lists_its_options() -> None:
    out = subprocess.run([sys.executable, "-m", "dejacache", "learn", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for option in ("--write", "--from-miss", "--scratch", "--upstream", "--json"):
        assert option in out


def test_a_scratch_directory_holding_earlier_runs_is_refused(tmp_path: pathlib.Path) -> None:
    # A test failing now records nothing: its recording of an earlier learn would be compared
    # as this run's.
    proj = _small(tmp_path)
    (tmp_path / "s" / "run2" / "tests").mkdir(parents=True)
    (tmp_path / "s" / "run2" / "tests" / "old.json").write_text("{}")
    (tmp_path / "file").write_text("")
    for where in ("s", "file"):
        res = run(proj, "dejacache", "learn", "--scratch", str(tmp_path / where), "tests")
        assert res.returncode == 1 and "running:" not in res.stdout, res.stdout
        assert res.stderr.startswith(f"dejacache learn: error: --scratch {tmp_path / where}")
    assert "earlier run's recordings" in run(proj, "dejacache", "learn", "--scratch",
                                             str(tmp_path / "s")).stderr
