"""``dejacache verify`` on real cassette files: damaged, secret-bearing, newer-format,
expired, hand-laid-out; orphans by a usage record (the plugin's runs: test_pytest_usage.py)."""

from __future__ import annotations

import datetime
import json
import pathlib
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest

import dejacache
from dejacache.cassettes import block
from dejacache.cassettes import format as fmt
from dejacache.cassettes.claimed import RUNS
from dejacache.cassettes.document import load_document
from dejacache.cassettes.render import build_xref, dumps, entry_checksum, render
from dejacache.cassettes.usage import UsageRecorder, build, write
from dejacache.cassettes.verify import recorded_at
from dejacache.cli import main


def _record(path: pathlib.Path, answers: dict[str, str]) -> None:
    @dejacache.cache(name="agent.step", kind="llm")
    def step(q: str) -> dict[str, object]:
        return {"text": answers[q], "usage": {"input_tokens": 10, "output_tokens": 2}}

    with dejacache.cassette(path, mode="record"):
        for q in answers:
            step(q)


def _edit(path: pathlib.Path, change: Any) -> None:
    """Change the parsed entries and write the file as dejacache would (fresh checksums)."""
    doc = load_document(path.read_bytes(), path)
    for e in doc["entries"]:
        change(e)
    path.write_bytes(render(doc["entries"], doc["values"]))


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A project with two recorded cassettes at the plugin's default place."""
    d = tmp_path / "tests" / "cassettes" / "test_agent"
    _record(d / "test_one.json", {"q1": "a", "q2": "b"})
    _record(d / "test_two.json", {"q3": "c"})
    (tmp_path / "tests" / "other.json").write_text("{}")  # not in a cassettes directory
    return tmp_path


def verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["verify", *args])
    return status, capsys.readouterr().out


def rows(out: str, name: str) -> dict[str, tuple[str, str]]:
    """check -> (verdict, detail) of the rows about the file ``name``."""
    found = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=3)
        if parts and parts[0].endswith(name):
            found[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
    return found


def test_a_clean_tree_passes_and_lists_every_check(tree: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    status, out = verify(capsys, str(tree), "-v")
    assert status == 0
    one = rows(out, "test_one.json")
    assert {k: v[0] for k, v in one.items()} == {
        "format": "ok", "damaged": "ok", "secrets": "ok", "orphans": "skip", "expired": "skip"}
    assert "2 entries, checksums match" in one["damaged"][1]
    assert "no usage record" in one["orphans"][1]
    assert "other.json" not in out  # JSON outside a cassettes directory is not a cassette
    assert out.splitlines()[-1].startswith("dejacache verify: passed: 2 cassettes")
    status, out = verify(capsys, str(tree))  # quiet: only the summary
    assert status == 0 and len(out.splitlines()) == 1


def test_a_damaged_cassette_fails_and_fix_leaves_it(tree: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    path.write_bytes(path.read_bytes().replace(b'"text": "a"', b'"text": "A"'))
    before = path.read_bytes()
    status, out = verify(capsys, str(path), "--fix")
    assert status == 1
    verdict, detail = rows(out, "test_one.json")["damaged"]
    assert verdict == "fail" and "does not match its checksum" in detail
    assert "dejacache rehash" in detail  # how to accept an intended edit
    assert path.read_bytes() == before  # damage is never accepted by --fix
    assert "FAILED" in out.splitlines()[-1]


def test_merge_conflict_markers_are_damage(tree: pathlib.Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_two.json"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines[:5], "<<<<<<< HEAD\n", *lines[5:]]))
    status, out = verify(capsys, str(tree))
    assert status == 1
    verdict, detail = rows(out, "test_two.json")["damaged"]
    assert verdict == "fail" and "merge conflict" in detail


def test_a_secret_in_a_valid_cassette_fails(tree: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_two.json"
    token = "Bearer abcdefghijklmnopqrstuvwxyz123456"
    _edit(path, lambda e: e["response"].update(note=token))
    status, out = verify(capsys, str(path))
    assert status == 1
    got = rows(out, "test_two.json")
    assert got["secrets"][0] == "fail" and "bearer token" in got["secrets"][1]
    assert "abcdefghijklmnopqrstuvwxyz123456" not in out
    assert "damaged" not in got  # the file itself is fine: only problems are listed


def test_a_newer_format_is_not_called_damaged(tree: pathlib.Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    newer = path.read_bytes().replace(b'"format": 4', b'"format": 5')
    path.write_bytes(newer)
    status, out = verify(capsys, str(path), "--fix", "-v")
    assert status == 1
    got = rows(out, "test_one.json")
    assert got["format"][0] == "fail"
    assert "cassette format 5" in got["format"][1] and "upgrade dejacache" in got["format"][1]
    assert got["damaged"][0] == "skip"
    assert path.read_bytes() == newer


def test_an_older_or_hand_laid_out_file_warns_and_fix_rewrites_it(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    written = path.read_bytes()
    doc = json.loads(written)
    path.write_text(json.dumps(doc, indent=4))  # an editor's layout: content unchanged
    status, out = verify(capsys, str(path))
    assert status == 0  # replay still accepts it: a warning
    verdict, detail = rows(out, "test_one.json")["format"]
    assert verdict == "warn" and "not in the written layout" in detail
    status, out = verify(capsys, str(path), "--fix")
    assert rows(out, "test_one.json")["format"][0] == "fixed"
    assert path.read_bytes() == written
    status, out = verify(capsys, str(path), "-v")
    assert rows(out, "test_one.json")["format"][0] == "ok"


def _ago(days: float) -> str:
    t = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    return t.isoformat(timespec="seconds")


def test_expired_entries_fail_by_recorded_at(tree: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    ages = iter([40, 2])
    _edit(path, lambda e: e.update(recorded_at=_ago(next(ages))))
    status, out = verify(capsys, str(path), "--max-age", "30d")
    assert status == 1
    verdict, detail = rows(out, "test_one.json")["expired"]
    assert verdict == "fail" and "1 of 2 entries recorded more than 30d ago" in detail
    status, out = verify(capsys, str(path), "--max-age", "60d", "-v")
    assert status == 0 and rows(out, "test_one.json")["expired"] == (
        "ok", "all 2 entries younger than 60d")


def test_the_project_files_and_the_environments_max_age_judge_without_the_flag(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `dejacache config` says max_age is in force: verify (the pre-commit hook, CI) must not
    # call the cassettes fine for want of a flag.
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    _edit(path, lambda e: e.update(recorded_at=_ago(40)))
    project = tree / "pyproject.toml"
    project.write_text('[tool.dejacache]\nmax_age = "30d"\n')
    monkeypatch.setenv("DEJACACHE_PROJECT", str(project))
    monkeypatch.delenv("DEJACACHE_MAX_AGE", raising=False)
    from dejacache import _project

    monkeypatch.setattr(_project, "_OVERRIDE", [None])  # not this pytest session's settings
    status, out = verify(capsys, str(path))
    assert status == 1 and rows(out, "test_one.json")["expired"][0] == "fail"
    monkeypatch.setenv("DEJACACHE_MAX_AGE", "60d")  # the environment, over the file
    status, out = verify(capsys, str(path), "-v")
    assert status == 0 and rows(out, "test_one.json")["expired"][0] == "ok"
    status, out = verify(capsys, str(path), "--max-age", "10d")  # the flag, over both
    assert status == 1
    monkeypatch.setenv("DEJACACHE_PROJECT", "")
    monkeypatch.delenv("DEJACACHE_MAX_AGE")
    status, out = verify(capsys, str(path), "-v")
    verdict, detail = rows(out, "test_one.json")["expired"]
    assert verdict == "skip" and "[tool.dejacache]" in detail and "--max-age" in detail


def test_the_cassettes_own_max_age_wins_and_unknown_age_is_said(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    doc = load_document(path.read_bytes(), path)
    doc["entries"][0]["recorded_at"] = time.time() - 3 * 86400  # Unix seconds
    doc["entries"][0]["checksum"] = entry_checksum(doc["entries"][0])
    doc["xref"] = build_xref(doc["entries"])
    doc["max_age"] = "1d"
    path.write_bytes(dumps(doc))
    status, out = verify(capsys, str(path), "--max-age", "30d")
    assert status == 1
    assert "1 of 2 entries recorded more than 1d ago" in rows(out, "test_one.json")["expired"][1]
    other = tree / "tests" / "cassettes" / "test_agent" / "test_two.json"
    doc = load_document(other.read_bytes(), other)
    for e in doc["entries"]:  # as recorded before dejacache kept the time
        e.pop("recorded_at")
    other.write_bytes(render(doc["entries"], doc["values"]))
    status, out = verify(capsys, str(other), "--max-age", "30d")
    assert status == 0
    verdict, detail = rows(out, "test_two.json")["expired"]
    assert verdict == "warn" and "1 of 1 entries have no recorded_at" in detail


def _cli(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    """``dejacache ARGS`` as a user runs it: its own process."""
    return subprocess.run([sys.executable, "-m", "dejacache.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_entry_dated_in_the_future_is_expired(tree: pathlib.Path) -> None:
    path = tree / "tests" / "cassettes" / "test_agent" / "test_one.json"
    ahead = iter([-400, 2])  # one a year ahead (a wrong clock, a hand edit), one fresh
    _edit(path, lambda e: e.update(recorded_at=_ago(next(ahead))))
    res = _cli("verify", str(path), "--max-age", "30d")
    assert res.returncode == 1, res.stdout + res.stderr
    verdict, detail = rows(res.stdout, "test_one.json")["expired"]
    assert verdict == "fail"
    assert detail.startswith("1 of 2 entries dated in the future (latest ")
    assert "beyond the 5m allowed for clock skew): a wrong clock or a hand edit, so expired" \
        in detail
    # No max_age to judge ages by: still never called fresh.
    res = _cli("verify", str(path), "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    verdict, detail = rows(res.stdout, "test_one.json")["expired"]
    assert verdict == "warn" and detail.startswith("1 of 2 entries dated in the future")
    # A clock a minute ahead is skew, not the future.
    _edit(path, lambda e: e.update(recorded_at=_ago(-60 / 86400)))
    res = _cli("verify", str(path), "--max-age", "30d", "-v")
    assert res.returncode == 0, res.stdout + res.stderr
    assert rows(res.stdout, "test_one.json")["expired"] == (
        "ok", "all 2 entries younger than 30d")


@pytest.mark.parametrize(("value", "expected"), [
    ("2026-01-02T03:04:05+00:00", 1767323045.0),
    ("2026-01-02T03:04:05Z", 1767323045.0),
    ("2026-01-02T03:04:05", 1767323045.0),  # no zone: UTC
    (1767323045, 1767323045.0),
    ("yesterday", None), (True, None), (None, None), (float("nan"), None),
])
def test_recorded_at_forms(value: Any, expected: float | None) -> None:
    assert recorded_at({"recorded_at": value}) == expected


def test_a_missing_path_is_an_error_not_clean(tmp_path: pathlib.Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_bad_max_age_is_a_usage_error(tree: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # exit 2, as docs/cli.md says of usage errors
        main(["verify", str(tree), "--max-age", "soon"])
    assert exited.value.code == 2
    assert "--max-age must be a duration" in capsys.readouterr().err


# ---------------------------------------------------------------- orphans, by a record


def _run_record(tmp_path: pathlib.Path, uses: list[tuple[pathlib.Path, list[str]]],
                claims: list[tuple[pathlib.Path, str]], modules: list[pathlib.Path], *,
                earlier: tuple[pathlib.Path, ...] = (), runs: int = RUNS) -> pathlib.Path:
    """A usage record of ``runs`` complete runs whose passing tests replayed ``uses`` (file,
    the questions asked), as the plugin writes it; before them, one whose tests (since
    gone) opened the files ``earlier``."""
    history = build([_part(tmp_path, [(p, []) for p in earlier], [], [], "gone")]
                    ) if earlier else None
    part = _part(tmp_path, uses, claims, modules, "t")
    for _ in range(runs):
        history = build([part], history)
    assert history is not None
    return write(history, tmp_path / ".dejacache")


def _part(tmp_path: pathlib.Path, uses: list[tuple[pathlib.Path, list[str]]],
          claims: list[tuple[pathlib.Path, str]], modules: list[pathlib.Path], name: str
          ) -> dict[str, Any]:
    rec = UsageRecorder([str(tmp_path)])
    outcomes = {}

    @dejacache.cache(name="agent.step", kind="llm")
    def step(q: str) -> dict[str, object]:
        raise AssertionError("replay only")

    for i, (path, asked) in enumerate(uses):
        test = f"tests/test_agent.py::{name}{i}"
        outcomes[test] = "passed"
        rec.claim(path, test, "passed")

        def seen(blk: Any, tape: Any, test: str = test) -> None:
            rec.opened(tape, test)

        block.OPENED.append(seen)
        try:
            with dejacache.cassette(path, mode="replay"):
                for q in asked:
                    step(q)
        finally:
            block.OPENED.remove(seen)
    for path, test in claims:
        rec.claim(path, test, "passed")
    for m in modules:
        rec.module(m)
    return rec.part(outcomes)


def test_orphans_by_a_usage_record_and_fix_prunes_them(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tree / "tests" / "cassettes" / "test_agent"
    module = tree / "tests" / "test_agent.py"
    module.write_text("")
    one = d / "test_one.json"
    usage = _run_record(tree, [(one, ["q2"])], [], [module], earlier=(d / "test_two.json",))
    status, out = verify(capsys, str(tree), "--usage", str(usage))
    assert status == 1
    key = load_document(one.read_bytes(), one)["entries"][0]["key"]
    assert rows(out, "test_one.json")["orphans"] == (
        "fail", f"1 entry no test used in the last 3 complete runs: agent.step (key {key[:12]})")
    assert rows(out, "test_two.json")["orphans"][0] == "fail"
    assert "no test in test_agent.py is named for it" in rows(out, "test_two.json")["orphans"][1]
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix")
    assert status == 0
    assert rows(out, "test_one.json")["orphans"][0] == "fixed"
    assert not (d / "test_two.json").exists()
    doc = load_document(one.read_bytes(), one)  # checksums recomputed
    assert [e["occurrence"] for e in doc["entries"]] == [0]
    assert "b" in one.read_text() and '"a"' not in one.read_text()
    # The record described the file before the fix: it no longer judges it.
    status, out = verify(capsys, str(one), "--usage", str(usage), "-v")
    assert rows(out, "test_one.json")["orphans"] == ("skip", "changed since the last run")


def test_fix_keeps_the_order_of_the_entries_left(tmp_path: pathlib.Path) -> None:
    from dejacache.cassettes.verify import _without

    entries: list[dict[str, Any]] = [
        {"key": "a", "follows": -1}, {"key": "b", "follows": 0}, {"key": "a", "follows": 1},
        {"key": "c", "follows": 2}, {"key": "d"}]
    kept = _without(entries, {("b", 0), ("a", 1)})
    assert kept == [{"key": "a", "follows": -1}, {"key": "c", "follows": 0}, {"key": "d"}]


def test_a_damaged_usage_record_is_an_error(tree: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tree / "usage.json"
    bad.write_text("{nope")
    assert main(["verify", str(tree), "--usage", str(bad)]) == 1
    assert "not a usage record" in capsys.readouterr().err
    assert main(["verify", str(tree), "--usage", str(tree / "none.json")]) == 2


def test_a_directory_given_as_the_usage_record_is_a_usage_error(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "adir").mkdir()
    assert main(["verify", str(tree), "--usage", str(tree / "adir")]) == 2
    err = capsys.readouterr().err
    assert "is a directory, not a usage record" in err and "(cassette" not in err


def test_a_deleted_test_modules_cassettes_are_orphans(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tree / "tests" / "cassettes" / "test_agent"
    usage = _run_record(tree, [], [], [], earlier=(d / "test_one.json", d / "test_two.json"))
    status, out = verify(capsys, str(tree), "--usage", str(usage))
    assert status == 1
    assert "test_agent.py no longer exists" in rows(out, "test_one.json")["orphans"][1]
    # A narrowed run (one test named on the command line) cannot tell.
    doc = orjson.loads(usage.read_bytes())
    doc["cannot_judge"] = "tests named on the command line (path::name)"
    usage.write_bytes(orjson.dumps(doc))
    status, out = verify(capsys, str(tree), "--usage", str(usage), "-v")
    assert status == 0 and rows(out, "test_one.json")["orphans"] == (
        "skip", "cannot judge: tests named on the command line (path::name)")


def test_the_pre_commit_hooks_run_commands_that_exist(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    import shlex

    import yaml

    root = pathlib.Path(__file__).parents[2]
    hooks = {h["id"]: h for h in yaml.safe_load((root / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"dejacache-verify", "dejacache-scan"}
    for hook in hooks.values():
        # pre-commit passes the staged files that match, relative to the repository root
        assert re.search(hook["files"], "tests/cassettes/test_agent/test_one.json")
        assert not re.search(hook["files"], "tests/fixtures/data.json")
        prog, *args = shlex.split(hook["entry"])
        assert prog == "dejacache"
        files = [str(p.relative_to(tree)) for p in sorted(tree.rglob("cassettes/*/*.json"))]
        monkeypatch.chdir(tree)
        assert main([*args, *files]) == 0
    assert "dejacache verify: passed: 2 cassettes" in capsys.readouterr().out


def test_the_record_keeps_a_bounded_number_of_blocks(tree: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.cassettes import usage

    monkeypatch.setattr(usage, "MAX_USES", 2)
    rec = UsageRecorder([str(tree)])
    d = tree / "tests" / "cassettes" / "test_agent"

    def tape(name: str) -> Any:
        return dejacache.cassette(d / f"{name}.json", mode="replay").open()

    for name in ("test_one", "test_two", "test_two"):  # one test opening blocks without end
        rec.opened(tape(name), "t1")
    assert len(rec._open) == 2
    rec.opened(tape("test_one"), "t2")  # the next test: t1's blocks are folded and let go
    assert [u.test for u in rec._open] == ["t2"]
    files = build([rec.part({"t1": "passed", "t2": "passed"})])["files"]
    assert files[str(d.resolve() / "test_two.json")]["why"] == (
        "a test opened more than 2 blocks")
    one = files[str(d.resolve() / "test_one.json")]
    assert one["why"] == "" and one["tests"] == ["t1", "t2"]
    assert len(one["unused"]) == 2  # no block asked anything


def test_a_record_from_before_it_knew_a_complete_run_judges_nothing(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    usage = _run_record(tree, [], [], [])  # judged alone, the files would be orphans
    doc = orjson.loads(usage.read_bytes())
    doc["version"] = 1
    for k in ("cannot_judge", "opened", "overflow"):
        del doc[k]
    usage.write_bytes(orjson.dumps(doc))
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix")
    assert status == 0
    assert (tree / "tests" / "cassettes" / "test_agent" / "test_two.json").exists()
    assert ("cannot judge: the usage record was written by an older dejacache: run the tests "
            "again") in out


def test_what_dejacache_writes_beside_a_cassette_is_never_an_orphan(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dejacache.cassettes.orphans import beside

    d = tree / "tests" / "cassettes" / "test_agent"
    live = d / "test_one.live.json"
    _record(live, {"q9": "z"})
    # complete runs that opened nothing, after one that opened these
    usage = _run_record(tree, [], [], [], earlier=(d / "test_one.json", d / "test_two.json"))
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix", "-v")
    assert status == 0
    assert live.exists() and not (d / "test_one.json").exists()
    assert rows(out, "test_one.live.json")["orphans"] == (
        "ok", "the live calls of a partial replay of test_one.json: never an orphan")
    status, out = verify(capsys, str(live), "-v")  # with no record at all
    assert status == 0 and rows(out, "test_one.live.json")["orphans"][0] == "ok"
    one = d / "test_one.json"
    assert beside(fmt.undo_path(one)) == "an append's undo record: never an orphan"
    assert beside(d / ".test_one.json.0123456789abcdef.tmp") == (
        "a temporary file of a save: never an orphan")
    assert beside(one) == "" and beside(d / "notes.live.txt") == ""


@pytest.mark.parametrize(("doubts", "claims", "why"), [
    ({}, {"a": {"t::a": "passed", "t::b": "deselected"}}, ""),
    ({"deselected": 1}, {"a": {"t::a": "passed", "t::b": "deselected"}},
     "1 test deselected (-k, -m, --deselect)"),
    ({"narrowed": "--lf ran the last failures only"}, {}, "--lf ran the last failures only"),
    ({"collect_errors": {"t2.py", "t1.py", "t3.py"}}, {},
     "t1.py, t2.py and 1 more failed to collect"),
    ({"interrupted": True}, {"a": {"t::a": "not run"}},
     "the run was interrupted; test t::a not run (a test that did not pass may use cassettes "
     "the run never saw)"),
])
def test_why_a_run_cannot_judge(doubts: dict[str, Any], claims: dict[str, dict[str, str]],
                                why: str) -> None:
    from dejacache.cassettes.usage import Doubts, cannot_judge

    assert cannot_judge(Doubts(**doubts), claims) == why


def test_a_record_of_the_version_before_counts_as_one_run(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dejacache.cassettes.usage import read_previous

    d = tree / "tests" / "cassettes" / "test_agent"
    module = tree / "tests" / "test_agent.py"
    module.write_text("")
    one = d / "test_one.json"
    usage = _run_record(tree, [(one, ["q2"])], [], [module], earlier=(d / "test_two.json",),
                        runs=1)
    doc = orjson.loads(usage.read_bytes())
    doc["version"] = 2  # as version 2 wrote it: no counts
    doc["opened"] = {p: {"tests": o["tests"]} for p, o in doc["opened"].items()}
    usage.write_bytes(orjson.dumps(doc))
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix", "-v")
    assert status == 0
    assert rows(out, "test_one.json")["orphans"][0] == "warn"
    assert "1 entry no test used in the last 1 complete run" in rows(
        out, "test_one.json")["orphans"][1]
    assert rows(out, "test_two.json")["orphans"] == (
        "warn", "no test in test_agent.py is named for it (renamed or deleted test); kept: "
        f"unused in 1 of the {RUNS} complete runs in a row needed")
    assert (d / "test_two.json").exists() and len(load_document(
        one.read_bytes(), one)["entries"]) == 2
    assert "dejacache verify --fix: removed no orphans" in out
    assert (f"dejacache verify --fix: kept the orphans of 2 files judged by too few runs "
            f"(never removed on the word of fewer than {RUNS} complete runs in a row, nor "
            "without a usage history):") in out
    # The next runs carry it on as the first of them.
    history = read_previous(usage)
    part = _part(tree, [(one, ["q2"])], [], [module], "t")
    for _ in range(RUNS - 1):
        history = build([part], history)
    assert history is not None
    write(history, usage.parent)
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix")
    assert status == 0
    assert not (d / "test_two.json").exists()
    assert len(load_document(one.read_bytes(), one)["entries"]) == 1
    assert "removed 1 file and 1 unused entry from 1 file" in out


def test_a_file_no_recorded_run_opened_is_only_reported(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A fresh checkout: no run of this record ever opened test_two.json, which a test may
    # open on a condition no run here had. However many runs judged it, it stays.
    d = tree / "tests" / "cassettes" / "test_agent"
    module = tree / "tests" / "test_agent.py"
    module.write_text("")
    usage = _run_record(tree, [(d / "test_one.json", ["q1", "q2"])], [], [module], runs=5)
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix", "-v")
    assert status == 0 and (d / "test_two.json").exists()
    assert rows(out, "test_two.json")["orphans"] == (
        "warn", "no test in test_agent.py is named for it (renamed or deleted test); "
        "kept: no usage history (no recorded run opened it)")
    assert "     1  kept: no usage history (no recorded run opened it)" in out


def test_fix_removes_the_entries_judged_often_enough_and_keeps_the_rest(
        tree: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tree / "tests" / "cassettes" / "test_agent"
    module = tree / "tests" / "test_agent.py"
    module.write_text("")
    one = d / "test_one.json"
    history = None
    for asked in (["q2"], ["q2"], []):  # q1 unused in 3 complete runs, q2 in the last one
        history = build([_part(tree, [(one, asked), (d / "test_two.json", ["q3"])], [],
                               [module], "t")], history)
    assert history is not None
    usage = write(history, tree / ".dejacache")
    status, out = verify(capsys, str(tree), "--usage", str(usage))
    assert status == 1
    verdict, detail = rows(out, "test_one.json")["orphans"]
    assert verdict == "fail" and detail.startswith(
        "1 entry no test used in the last 3 complete runs: agent.step")
    assert detail.endswith("; kept: 1 more entry unused in fewer than the 3 complete runs in "
                           "a row needed")
    status, out = verify(capsys, str(tree), "--usage", str(usage), "--fix")
    assert status == 0
    assert [e["occurrence"] for e in load_document(one.read_bytes(), one)["entries"]] == [0]
    assert '"b"' in one.read_text() and '"a"' not in one.read_text()  # q2's answer kept
    assert rows(out, "test_one.json")["orphans"] == (
        "fixed", "removed 1 unused entry, checksums recomputed; kept: 1 more entry unused in "
        "fewer than the 3 complete runs in a row needed")
    assert "dejacache verify --fix: removed 1 unused entry from 1 file" in out
    assert ("dejacache verify --fix: kept the orphans of 1 file judged by too few runs" in out)
