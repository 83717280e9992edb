"""``dejacache show / diff / scan / prune``."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import orjson
import pytest

import dejacache
from dejacache.cli import main

LONG = "please summarise the following report " * 20


def _record(path, answers: dict[str, str]) -> None:
    @dejacache.cache(name="agent.step", kind="llm")
    def step(q: str) -> dict[str, object]:
        return {"text": answers[q], "usage": {"input_tokens": 100, "output_tokens": len(q)}}

    with dejacache.cassette(path, mode="record"):
        for q in answers:
            step(q)


def test_show_prints_entries_with_values_expanded(tmp_path, capsys):
    path = tmp_path / "c.json"
    _record(path, {LONG: "ok", "b": "fine"})
    assert b"@ref:" in path.read_bytes()
    assert main(["show", str(path), "--plain"]) == 0
    out = capsys.readouterr().out
    assert "2 calls" in out and "#0 agent.step [llm] occurrence 0" in out
    assert LONG in out and "@ref:" not in out
    assert main(["show", str(path), "--plain", "--refs"]) == 0
    assert "@ref:" in capsys.readouterr().out


def test_diff_reports_added_dropped_changed_and_token_delta(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _record(a, {"q1": "x", "q2": "y"})
    _record(b, {"q1": "x", "q2": "y2", "q3": "z"})
    assert main(["diff", str(a), str(b), "--plain"]) == 0
    out = capsys.readouterr().out
    assert "calls: 1 added, 0 dropped, 1 changed, 1 unchanged" in out
    assert "response.text: 'y' -> 'y2'" in out
    assert "tokens: 204 -> 306 (+102)" in out
    assert main(["diff", str(a), str(a), "--plain", "--exit-code"]) == 0
    assert main(["diff", str(a), str(b), "--plain", "--exit-code"]) == 1


def test_scan_exits_non_zero_on_secret_shaped_strings(tmp_path, capsys):
    clean = tmp_path / "cassettes" / "clean.json"
    clean.parent.mkdir()
    _record(clean, {"q": "a"})
    assert main(["scan", str(tmp_path), "--plain"]) == 0
    leaked = tmp_path / "cassettes" / "leaked.json"
    leaked.write_text('{"headers": {"x-custom": "Bearer abcdefghijklmnopqrstuvwxyz123456"}}\n')
    assert main(["scan", str(tmp_path), "--plain"]) == 1
    out = capsys.readouterr().out
    assert "leaked.json:1: bearer token" in out
    assert "abcdefghijklmnopqrstuvwxyz123456" not in out


def test_show_gives_each_entrys_age_sdk_and_model(tmp_path, capsys, monkeypatch):

    from dejacache._core.ageing import stamp
    from dejacache.cassettes import ageing
    from dejacache.cassettes.document import load_document
    from dejacache.cassettes.render import render

    path = tmp_path / "c.json"
    _record(path, {"a": "ok", "b": "fine"})
    doc = load_document(path.read_bytes(), path)
    doc["entries"][0]["recorded_at"] = stamp(ageing.clock() - 45 * 86400)
    doc["entries"][0]["recorded_with"] = {"sdk": "openai 1.54.0", "model": "gpt-4o-mini"}
    del doc["entries"][1]["recorded_at"]  # recorded before dejacache kept the time
    path.write_bytes(render(doc["entries"], doc["values"]))
    monkeypatch.setenv("DEJACACHE_MAX_AGE", "30d")
    assert main(["show", str(path), "--plain"]) == 0
    out = capsys.readouterr().out
    # what max_age says comes after the SDK and model: it is about the age, not the version
    assert "recorded 45d ago (" in out
    assert "Z) with openai 1.54.0, model gpt-4o-mini; older than max_age 30d" in out
    assert "age unknown (recorded before dejacache kept the time; never expires)" in out


def test_show_of_a_missing_file_is_an_error(tmp_path, capsys):
    assert main(["show", str(tmp_path / "none.json"), "--plain"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["show", "diff", "scan", "prune", "rehash"])
def test_commands_are_listed(cmd, capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert cmd in capsys.readouterr().out


def test_diff_sees_request_changes(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _record(a, {"q1": "x"})
    doc = orjson.loads(a.read_bytes())
    doc["entries"][0]["request"]["q"] = "q1-edited"
    b.write_bytes(orjson.dumps(doc))
    assert main(["diff", str(a), str(b), "--plain"]) == 0
    out, err = capsys.readouterr()
    assert "request.q: 'q1' -> 'q1-edited'" in out
    # shown, with a warning: replay refuses a hand edit until it is accepted with rehash
    assert "dejacache diff: warning: replay would refuse this file: entry #0" in err
    assert f"dejacache rehash {b}" in err and str(a) not in err
    assert main(["rehash", str(b)]) == 0
    capsys.readouterr()
    assert main(["show", str(b), "--plain"]) == 0
    assert capsys.readouterr().err == ""


def _scan(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("dejacache", path=str(pathlib.Path(sys.executable).parent))
    assert exe is not None
    return subprocess.run([exe, "scan", "--plain", *args], capture_output=True, text=True,
                          timeout=120)


def test_scan_as_a_pre_commit_hook(tmp_path):
    """Through the console script, as a hook runs it: a missing path is not "clean",
    credential fields with a value are findings, -q names files once, counts are honest."""
    creds = tmp_path / "creds.json"
    creds.write_text('{"password": "hunter2", "api_key": "abc123def"}\n')
    (tmp_path / "conf.yaml").write_text("db:\n  password: s3cret!\n")
    (tmp_path / "ok.json").write_text(
        '{"token": "Hello", "password": "<REDACTED>", "api_key": "<secret:' + "0" * 128
        + '>", "key": "3f2a9c"}\n')
    missing = _scan(str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and "clean" not in missing.stdout
    assert "missing.json: no such file or directory" in missing.stderr
    full = _scan(str(tmp_path))
    assert full.returncode == 1
    lines = full.stdout.splitlines()
    assert f"{creds}:1: credential field 'password': …" in lines
    assert f"{creds}:1: credential field 'api_key': …" in lines
    assert any("conf.yaml:2: credential field 'password'" in line for line in lines)
    assert "hunter2" not in full.stdout and "abc123def" not in full.stdout
    assert lines[-1].startswith("dejacache scan: 3 findings in 2 of 3 files;")
    quiet = _scan("-q", str(tmp_path))
    assert quiet.returncode == 1
    assert quiet.stdout.splitlines() == [str(tmp_path / "conf.yaml"), str(creds)]
    clean = _scan("-q", str(tmp_path / "ok.json"))
    assert (clean.returncode, clean.stdout) == (0, "")
    assert _scan(str(tmp_path / "ok.json")).stdout == "dejacache scan: 1 file clean\n"


# ---------------------------------------------------------------- through a subprocess


def _cli(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dejacache", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_rehash_says_keys_are_kept_and_a_miss_on_an_edited_request_says_why(tmp_path):
    path = tmp_path / "c.json"
    _record(path, {"plan a trip to Lisbon": "ok"})
    path.write_text(path.read_text().replace("Lisbon", "Porto"))
    done = _cli("rehash", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "keys are kept: rehash only refreshes checksums" in done.stdout
    code = f"""
import dejacache
@dejacache.cache(name="agent.step", kind="llm")
def step(q):
    raise AssertionError("went live")
with dejacache.cassette({str(path)!r}, mode="replay"):
    step("plan a trip to Porto")
"""
    miss = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "ReplayMiss" in miss.stderr
    assert "edited by hand after recording" in miss.stderr
    assert "differ only in credentials" not in miss.stderr


def test_show_of_a_file_that_is_not_a_cassette_does_not_suggest_rehash(tmp_path):
    module = tmp_path / "test_agent.py"
    module.write_text("def test_x():\n    pass\n")
    done = _cli("show", str(module), cwd=tmp_path)
    assert done.returncode == 2
    assert "not a dejacache cassette: it is not JSON" in done.stderr
    assert "rehash" not in done.stderr


@pytest.mark.parametrize("command", ["show", "diff", "scan", "verify", "rehash", "report",
                                     "prefix-report", "import", "prune", "stats", "clear",
                                     "migrate", "prompt-cache"])
def test_every_command_shows_an_example_and_explains_its_positionals(tmp_path, command):
    done = _cli(command, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "example:\n  dejacache " in text or "example:\n  git show" in text, text
    positionals = text.split("positional arguments:\n", 1)
    if len(positionals) == 2:
        block = positionals[1].split("\n\n", 1)[0]
        for line in block.splitlines():
            if line.startswith("  ") and not line.startswith("    "):
                # a positional named alone on its line, with no help beside or below it
                name_only = len(line.split()) == 1
                assert not name_only or block.split(line, 1)[1].startswith("\n      "), block
