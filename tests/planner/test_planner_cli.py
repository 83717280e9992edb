"""``dejacache prompt-cache plan|check|rules`` on cassettes recorded with the real SDKs against
the caching loopback provider (``tests/runtime``), which reports what it cached."""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import orjson
import pytest

import dejacache
from dejacache.cli import main
from runtime.cache_provider import CachingProvider
from runtime.prefix_agents import run_anthropic, run_openai


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """Four cassettes: each SDK agent with its system prompt built once, and rebuilt with the
    clock every turn (the seeded regression)."""
    out = tmp_path_factory.mktemp("recordings")
    for name, run in (("anthropic", run_anthropic), ("openai", run_openai)):
        for rebuild in (False, True):
            provider = CachingProvider().start()
            try:
                path = out / ("rebuilt" if rebuild else "once") / f"{name}.json"
                with dejacache.cassette(path, mode="record"):
                    run(provider, rebuild=rebuild)
            finally:
                provider.stop()
    yield out


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_plan_json_per_session_named_by_its_cassette(
        recorded: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "prompt-cache", "plan", str(recorded), "--json")
    assert status == 0
    doc = orjson.loads(out)
    names = [(s["recording"], s["session"]) for s in doc["sessions"]]
    assert sorted(names) == [("anthropic.json", "anthropic.json#1")] * 2 + [
        ("openai.json", "openai.json#1")] * 2  # one of each per directory
    for s in doc["sessions"]:
        # Calibration: the model predicts what the provider reported, to the token.
        assert s["predicted_cached"] == s["recorded_cached"], s["session"]
        assert s["predicted_hit_rate"] == s["recorded_hit_rate"]
        assert set(s) >= {"recorded_hit_rate", "predicted_hit_rate", "fixes", "turns"}
    rebuilt = [s for s in doc["sessions"] if s["recorded_hit_rate"] == 0.0]
    (claude,) = rebuilt  # the Anthropic agent rebuilding its marked system prompt
    assert [f["kind"] for f in claude["fixes"]] == ["pool", "move"]
    pool = claude["fixes"][0]
    assert pool["saving"] > 0.02 and pool["hit_rate"] > 0.7 and not pool["alternative"]
    assert "`system[0].text`" in pool["description"] and "AgentPool" in pool["description"]
    assert claude["fixes"][1]["alternative"] and "offset" in claude["fixes"][1]["description"]
    assert doc["total"]["saving"] > 0.02 and doc["total"]["saving_by_fix"]["pool"] > 0.02


def test_plan_text(recorded: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "prompt-cache", "plan", str(recorded / "rebuilt"))
    assert status == 0
    assert "anthropic.json#1: 4 turns, 8,096 prompt tokens" in out
    assert "  recorded   hit rate   0% (0 cached)" in out
    assert "calibration: 100.0% of reported" in out  # the OpenAI agent, whose cache hits
    assert "  fix pool        saves $0.0208" in out
    assert "  instead   move" in out
    assert out.rstrip().splitlines()[-1].startswith("  pool        saves $0.02")


def test_check_fails_a_regression_naming_session_turn_and_span(
        recorded: pathlib.Path, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
        ) -> None:
    once, rebuilt = recorded / "once", recorded / "rebuilt"
    status, out, _ = cli(capsys, "prompt-cache", "check", str(once), "--min-hit-rate", "0.7")
    assert status == 0 and "0 of 2 sessions below the bar" in out
    status, out, _ = cli(capsys, "prompt-cache", "check", str(rebuilt), "--min-hit-rate", "0.7")
    assert status == 1
    assert "FAIL  anthropic.json#1: predicted hit rate 0% is below the bar 70%" in out
    assert ("turn 2: system: `system[0].text` at offset 7,755: `2026-05-01 12:04:31` → "
            "`2026-05-01 12:05:02`") in out
    # Against the baseline: the OpenAI agent's 1-point drop is allowed, Anthropic's is not.
    status, out, _ = cli(capsys, "prompt-cache", "check", str(rebuilt), "--min-hit-rate", "0",
                         "--baseline", str(once), "--json")
    doc = orjson.loads(out)
    assert status == 1 and doc["failed"] == 1
    (bad,) = [s for s in doc["sessions"] if not s["ok"]]
    assert bad["session"] == "anthropic.json#1" and bad["baseline_hit_rate"] == 0.7436
    assert "74% below the baseline's 74%" in bad["why"]
    # One cassette file works too; a JSON file that is no cassette is named, not skipped.
    shutil.copy(rebuilt / "openai.json", tmp_path / "openai.json")
    status, out, err = cli(capsys, "prompt-cache", "check", str(tmp_path / "openai.json"),
                           "--min-hit-rate", "0.5")
    assert status == 0, err
    (tmp_path / "notes.json").write_bytes(b'{"not": "a cassette"}')
    status, out, err = cli(capsys, "prompt-cache", "check", str(tmp_path), "--min-hit-rate",
                           "0.5")
    assert status == 2 and "not a dejacache cassette" in err and "notes.json" in err


def test_unreadable_input_is_status_2(capsys: pytest.CaptureFixture[str],
                                      tmp_path: pathlib.Path) -> None:
    status, _, err = cli(capsys, "prompt-cache", "plan", str(tmp_path / "missing"))
    assert status == 2 and "no such file or directory" in err and "missing" in err
    bad = tmp_path / "t.jsonl"
    bad.write_bytes(b'{"dejacache": "prompt-cache-trace", "version": 1}\nnot json\n')
    status, _, err = cli(capsys, "prompt-cache", "check", str(bad), "--min-hit-rate", "0.5")
    assert status == 2 and "line 2 is not JSON" in err
    with pytest.raises(SystemExit):
        main(["prompt-cache", "check", str(bad), "--min-hit-rate", "70"])
    assert "a fraction between 0 and 1" in capsys.readouterr().err


@pytest.mark.parametrize("rate", ["70", "seventy", "70%"])
def test_a_rate_that_is_no_fraction_is_named_with_what_is_wanted(
        capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, rate: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["prompt-cache", "check", str(tmp_path), "--min-hit-rate", rate])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--min-hit-rate: {rate}: a fraction between 0 and 1, e.g. 0.7" in err
    assert "_number" not in err


def test_rules_lists_the_table_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "prompt-cache", "rules")
    assert status == 0
    assert "read 2026-12-02" in out
    assert "claude-opus-4-5" in out and "platform.claude.com" in out
    # An explicit Gemini cache's storage, per million tokens per hour.
    assert "gemini-2.5-pro" in out and "storage $4.5/M/h" in out
    status, out, _ = cli(capsys, "prompt-cache", "rules", "--json")
    doc = orjson.loads(out)
    assert {r["provider"] for r in doc["rules"]} == {"anthropic", "openai", "gemini"}


def test_hostile_traces_are_status_2_not_a_traceback(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: pathlib.Path) -> None:
    head = b'{"dejacache": "prompt-cache-trace", "version": 1}\n'
    deep = tmp_path / "deep.jsonl"
    content = b"[" * 1000 + b'"Time 12:04:31"' + b"]" * 1000  # orjson reads 1,024 levels
    row = (b'{"session": "s", "at": %d, "provider": "openai", "endpoint": "", "body": '
           b'{"model": "gpt-4.1", "messages": [{"role": "system", "content": '
           + content + b'}, {"role": "user", "content": "hi"}]}}\n')
    deep.write_bytes(head + row % 0 + row % 10)
    status, _, err = cli(capsys, "prompt-cache", "plan", str(deep))
    assert status == 2 and "line 2 is nested more than 254 levels deep" in err
    listed = tmp_path / "list.jsonl"
    listed.write_bytes(b"[1, 2]\n")  # a first line that is not an object
    status, _, err = cli(capsys, "prompt-cache", "check", str(listed), "--min-hit-rate", "0.5")
    assert status == 2 and "no recorded LLM request to check" in err


def test_check_of_nothing_is_status_2(capsys: pytest.CaptureFixture[str],
                                      tmp_path: pathlib.Path) -> None:
    status, _, err = cli(capsys, "prompt-cache", "check", str(tmp_path), "--min-hit-rate",
                         "0.9")
    assert status == 2 and "no recorded LLM request to check" in err and str(tmp_path) in err
