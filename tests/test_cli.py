"""``dejacache stats`` / ``clear`` / ``demo`` through main([...]) and the console script."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys

import pytest

import dejacache
from dejacache.cli import main


def _fill(store: dejacache.Store) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}

    @dejacache.cache(name="llm")
    def llm(q: str) -> dict[str, object]:
        return {"answer": q, "usage": usage}

    @dejacache.cache(name="tool")
    def tool(q: str) -> str:
        return q * 10

    with dejacache.scope(cache_key="ns-a", store=store):
        llm("one")
        llm("two")
        tool("x")
    with dejacache.scope(cache_key="ns-b", store=store):
        llm("three")


def test_stats_on_default_store(capsys: pytest.CaptureFixture[str]) -> None:
    _fill(dejacache.SQLiteStore())  # no path: the default file under DEJACACHE_DIR
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    assert f"store:    sqlite:///{os.environ['DEJACACHE_DIR']}/cache.db" in out
    assert "entries:  4" in out
    assert "360 tokens" in out  # three llm entries x 120
    assert "ns-a / llm" in out and "ns-a / tool" in out and "ns-b / llm" in out


def test_stats_json_and_namespace_filter(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.db"
    _fill(dejacache.SQLiteStore(db))
    assert main(["stats", "--store", f"sqlite:///{db}", "--cache-key", "ns-a", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["entries"] == 4  # the store total; by_name is filtered
    rows = {(r["namespace"], r["name"]): r for r in doc["by_name"]}
    assert set(rows) == {("ns-a", "llm"), ("ns-a", "tool")}
    assert rows[("ns-a", "llm")]["entries"] == 2 and rows[("ns-a", "llm")]["tokens"] == 240
    assert doc["tokens"] == 240 and doc["recorded_seconds"] >= 0


def test_stats_empty_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    assert "entries:  0" in out and "namespace / name" not in out
    # a read-only command: the default store is not created by looking at it
    assert not (pathlib.Path(os.environ["DEJACACHE_DIR"]) / "cache.db").exists()


def test_stats_never_creates_a_store(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for url, path in ((f"sqlite:///{tmp_path}/u.db", tmp_path / "u.db"),
                      (f"sqlite:///{tmp_path}/sub/dir/u.db", tmp_path / "sub")):
        assert main(["stats", "--store", url]) == 0
        out = capsys.readouterr().out
        assert "(no such file; nothing was created)" in out and "entries:  0" in out
        assert not path.exists()
    assert main(["stats", "--store", f"sqlite:///{tmp_path}/u.db", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0
    assert not (tmp_path / "u.db").exists()


def test_stats_reads_without_writing(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "x.db"
    store = dejacache.SQLiteStore(db)
    _fill(store)
    store.close()  # the last connection checkpoints the WAL into the file
    with sqlite3.connect(db) as conn:  # an older schema that a writable open would migrate
        conn.execute("UPDATE dejacache_meta SET v = '2' WHERE k = 'schema_version'")
    conn.close()
    before = db.read_bytes()
    assert main(["stats", "--store", f"sqlite:///{db}"]) == 0
    assert db.read_bytes() == before


def test_stats_survives_a_damaged_usage_column(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.db"
    store = dejacache.SQLiteStore(db)
    _fill(store)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE entries SET usage = ? WHERE name = 'llm' AND namespace = 'ns-b'",
                     (b'{"prompt_tok',))
        conn.execute("UPDATE entries SET usage = ? WHERE name = 'tool'",
                     (b'{"total_tokens": "many", "nested": {"a": 1}}',))
    conn.close()
    assert main(["stats", "--store", f"sqlite:///{db}"]) == 0
    out = capsys.readouterr().out
    assert "entries:  4" in out and "240 tokens" in out  # the two intact llm rows
    assert "ns-b / llm" in out
    # the damaged column costs its statistics only: the stored answer is still served
    with dejacache.scope(cache_key="ns-b", store=store):

        @dejacache.cache(name="llm")
        def llm(q: str) -> dict[str, object]:
            raise AssertionError("the cached answer should have been served")

        assert llm("three")["answer"] == "three"


def test_clear_one_namespace_then_all(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.db"
    store = dejacache.SQLiteStore(db)
    _fill(store)
    url = f"sqlite:///{db}"
    assert main(["clear", "--store", url, "--cache-key", "ns-a"]) == 0
    assert "removed 3 entries from namespace 'ns-a'" in capsys.readouterr().out
    assert [r.namespace for _, r in store.iterate()] == ["ns-b"]
    assert main(["clear", "--store", url]) == 0
    assert "removed 1 entry from" in capsys.readouterr().out
    assert store.stats().entries == 0


def test_clear_of_a_missing_file_creates_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A misspelt --store must not answer "removed 0 entries" over a new empty database
    # (and its directories) while the real cache stays full.
    typo = tmp_path / "nope" / "cahce.db"
    assert main(["clear", "--store", f"sqlite:///{typo}"]) == 1
    err = capsys.readouterr().err
    assert f"{typo}: no such file" in err and "nothing was cleared" in err
    assert not typo.parent.exists()
    # the default store of a project that has none yet: nothing to do, nothing made
    monkeypatch.setenv("DEJACACHE_DIR", str(tmp_path / "cache"))
    assert main(["clear"]) == 0
    assert "nothing to clear" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()


def test_demo_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_DEMO_LATENCY", "0.01")
    assert main(["demo", "--plain"]) == 0
    out = capsys.readouterr().out
    assert "speed-up:" in out and "same answers: yes" in out
    # what the demo stored shows up in stats, under its own namespace
    assert main(["stats", "--cache-key", "dejacache-demo"]) == 0
    out = capsys.readouterr().out
    # the model call is stored by the decorator or by HTTP interception, depending on extras
    assert "dejacache-demo / demo.tool.search_flights" in out and "chat.completions" in out


def test_demo_live_needs_a_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--live", "--plain"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().out


def test_unknown_command_exits_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nope"])
    assert exc.value.code == 2
    assert "usage: dejacache" in capsys.readouterr().err


def test_console_script_runs_demo_and_stats(tmp_path: pathlib.Path) -> None:
    exe = shutil.which("dejacache", path=str(pathlib.Path(sys.executable).parent))
    assert exe is not None, "the dejacache console script is not installed in this venv"
    env = {**os.environ, "DEJACACHE_DIR": str(tmp_path / "dc"), "DEJACACHE_DEMO_LATENCY": "0.01"}
    demo = subprocess.run([exe, "demo", "--plain"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "same answers: yes" in demo.stdout
    assert (tmp_path / "dc" / "cache.db").exists()
    st = subprocess.run([exe, "stats", "--json"], env=env, capture_output=True, text=True,
                        timeout=60, cwd=tmp_path)
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["entries"] == 10


def test_python_m_dejacache_is_the_console_script(tmp_path: pathlib.Path) -> None:
    exe = shutil.which("dejacache", path=str(pathlib.Path(sys.executable).parent))
    assert exe is not None, "the dejacache console script is not installed in this venv"
    env = {**os.environ, "DEJACACHE_DIR": str(tmp_path / "dc"), "DEJACACHE_DEMO_LATENCY": "0.01"}

    def both(*args: str) -> list[subprocess.CompletedProcess[str]]:
        return [subprocess.run([*cmd, *args], env=env, capture_output=True, text=True,
                               timeout=60, cwd=tmp_path, check=False)
                for cmd in ([exe], [sys.executable, "-m", "dejacache"])]

    script, module = both("demo", "--plain")
    assert module.returncode == 0, module.stderr
    assert "same answers: yes" in module.stdout
    script, module = both("stats", "--json")
    assert module.returncode == script.returncode == 0, module.stderr
    assert json.loads(module.stdout) == json.loads(script.stdout)
    assert json.loads(module.stdout)["entries"] == 10  # the demo's, run through ``-m``
    script, module = both("--version")
    assert module.returncode == script.returncode == 0
    assert module.stdout == script.stdout and module.stdout.strip()
    script, module = both("nope")  # usage errors: status 2, the same program name
    assert module.returncode == script.returncode == 2
    assert "usage: dejacache" in module.stderr and module.stderr == script.stderr


def test_store_error_is_one_line_not_a_traceback(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = tmp_path / "newer.db"  # written by a future dejacache: IncompatibleStore
    with sqlite3.connect(newer) as db:
        db.execute("CREATE TABLE dejacache_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        db.execute("INSERT INTO dejacache_meta VALUES ('schema_version', '999')")
    db.close()
    assert main(["stats", "--store", f"sqlite:///{newer}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dejacache stats: error:") and "Traceback" not in err


# ---------------------------------------------------------------- through a real process


def _cli(*args: str, cwd: pathlib.Path | None = None,
         **kw: object) -> subprocess.CompletedProcess[str]:
    """``dejacache ARGS`` as a user runs it: a new process (this checkout's PYTHONPATH)."""
    return subprocess.run([sys.executable, "-m", "dejacache.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, check=False, **kw)  # type: ignore[call-overload]


def _closed_port() -> int:
    from support_redis import free_port

    return free_port()  # bound and released: nothing listens there


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["clear"]])
def test_a_store_that_cannot_be_reached_is_exit_1_naming_it(command: list[str]) -> None:
    """Redis down is not an empty store: ``entries: 0`` and status 0 would tell a script
    (or a person) the cache is empty. The URL is named with its password masked."""
    pytest.importorskip("redis")
    port = _closed_port()
    url = f"redis://:hunter2-secret@127.0.0.1:{port}/0"
    res = _cli(*command, "--store", url)
    assert res.returncode == 1, res.stdout
    assert res.stdout == ""
    err = res.stderr.strip()
    assert err.startswith(f"dejacache {command[0]}: error:") and "\n" not in err, err
    assert f"redis://:***@127.0.0.1:{port}/0" in err and "hunter2" not in err
    assert "Traceback" not in err


def _tape(tmp_path: pathlib.Path) -> pathlib.Path:
    tape = tmp_path / "tape.json"
    with dejacache.cassette(tape, mode="record"):
        echo = dejacache.cache(name="echo")(lambda q: {"answer": q * 50})
        for i in range(20):
            echo(f"question {i}")
    return tape


@pytest.mark.parametrize("plain", [[], ["--plain"]])
def test_show_into_a_closed_pipe_ends_quietly(tmp_path: pathlib.Path, plain: list[str]) -> None:
    """``dejacache show FILE | head``: the reader has gone, which is no error of ours. The
    read end is closed before the command starts, so every write fails (not only the ones
    after ``head`` has read its lines): the same path every run. Status 141 (128 + SIGPIPE)
    is what the shell reports for ``cat`` or ``git`` in the same place."""
    tape = _tape(tmp_path)
    r, w = os.pipe()
    os.close(r)
    try:
        res = subprocess.run([sys.executable, "-m", "dejacache.cli", "show", str(tape), *plain],
                             stdout=w, stderr=subprocess.PIPE, text=True, timeout=60,
                             check=False)
    finally:
        os.close(w)
    assert res.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert res.returncode == 141


def test_prune_passes_its_arguments_to_pytest(tmp_path: pathlib.Path) -> None:
    (tmp_path / "test_p.py").write_text("def test_one():\n    pass\n")
    res = _cli("prune", "-q", "-p", "no:cacheprovider", "test_p.py", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--dejacache-prune -q -p no:cacheprovider test_p.py" in res.stdout
    assert "1 passed" in res.stdout


def test_unknown_options_of_other_commands_are_still_usage_errors() -> None:
    res = _cli("stats", "-q")
    assert res.returncode == 2 and "unrecognized arguments: -q" in res.stderr


def test_version() -> None:
    res = _cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"dejacache {dejacache.__version__}"


def test_import_names_the_flag_not_the_python_argument(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "vcr.json"
    src.write_text('{"interactions": []}')
    out = tmp_path / "out.json"
    out.write_text("keep me")
    res = _cli("import", str(src), "-o", str(out))
    assert res.returncode == 1
    assert "pass --force to replace it" in res.stderr and "overwrite" not in res.stderr
    assert out.read_text() == "keep me"


@pytest.mark.parametrize(("argv", "said"), [
    (["diff", "a.json", "b.json", "--limit", "-1"],
     "argument --limit: must be a whole number >= 0, not '-1'"),
    (["verify", "--max-age", "abc", "a.json"], "argument --max-age: --max-age must be a duration"),
])
def test_a_malformed_option_value_is_a_usage_error(argv: list[str], said: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err
