"""The project configuration: ``[tool.dejacache]`` in pyproject.toml (``_project.py``)."""

from __future__ import annotations

import pathlib

import pytest

from dejacache import _project
from dejacache.errors import ConfigurationError


@pytest.fixture
def project_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A project in ``tmp_path`` as the current directory, outside any pytest session's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEJACACHE_PROJECT", raising=False)
    monkeypatch.setattr(_project, "_OVERRIDE", [None])
    path = tmp_path / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n")
    return path


def test_every_key_is_read_and_checked(project_file: pathlib.Path) -> None:
    project_file.write_text("""
[tool.dejacache]
volatile = ["re:\\\\d{4}", "body.metadata.run"]
mode = "Replay"
cassette_dir = "recordings"
max_age = "30d"
on_expiry = "rerecord"
live = "model, tool:search"
allow_hosts = ["api.internal"]
max_recorded_stream = 1048576
prices = {"gpt-x" = [1, 2.5]}
""")
    p = _project.current()
    assert p.path == project_file
    assert p.values == {
        "volatile": (r"re:\d{4}", "body.metadata.run"), "mode": "replay",
        "cassette_dir": "recordings", "max_age": 30 * 86400.0, "on_expiry": "rerecord",
        "live": ("model", "tool:search"), "allow_hosts": ("api.internal",),
        "max_recorded_stream": 1048576, "prices": {"gpt-x": (1.0, 2.5)}}
    assert set(p.values) == set(_project.KEYS)  # the test covers every row of the table


@pytest.mark.parametrize(("line", "message"), [
    ("volatil = []", "unknown key 'volatil'; did you mean 'volatile'?"),
    ("cassettes_dir = 'x'", "did you mean 'cassette_dir'?"),
    ("mode = 'sometimes'", "unknown .* mode 'sometimes'"),
    ("volatile = 're:x'", "volatile must be a list of strings"),
    ("volatile = ['re:(a+)+$']", "exponential time"),
    ("max_age = 'soon'", "max_age"),
    ("prices = {'m' = [1]}", "prices: 'm' must be \\[input, output\\]"),
    ("max_recorded_stream = 0", "max_recorded_stream = 0: expected a whole number > 0"),
    ("max_recorded_stream = '64MiB'", "max_recorded_stream = '64MiB': expected a whole"),
    ("max_recorded_stream = 1.5", "max_recorded_stream = 1.5: expected a whole"),
    ("max_recorded_stream = true", "max_recorded_stream = True: expected a whole"),
])
def test_an_unknown_key_or_a_bad_value_names_it(project_file: pathlib.Path, line: str,
                                                 message: str) -> None:
    project_file.write_text(f"[tool.dejacache]\n{line}\n")
    with pytest.raises(ConfigurationError, match=message) as info:
        _project.current()
    assert str(project_file) in str(info.value)


def test_no_table_no_parse_no_values(project_file: pathlib.Path) -> None:
    assert _project.current().values == {}
    project_file.unlink()
    assert _project.current() == _project.Project()


def test_the_file_is_read_again_when_it_changes(project_file: pathlib.Path) -> None:
    project_file.write_text("[tool.dejacache]\nmode = 'record'\n")
    assert _project.current().get("mode") == "record"
    project_file.write_text("[tool.dejacache]\nmode = 'replay'  # changed\n")
    assert _project.current().get("mode") == "replay"


def test_dejacache_project_names_another_file_or_none(project_file: pathlib.Path,
                                                      tmp_path: pathlib.Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "elsewhere.toml"
    other.write_text("[tool.dejacache]\nmode = 'off'\n")
    project_file.write_text("[tool.dejacache]\nmode = 'record'\n")
    monkeypatch.setenv("DEJACACHE_PROJECT", str(other))
    assert _project.current().get("mode") == "off"
    monkeypatch.setenv("DEJACACHE_PROJECT", "")
    assert _project.current().path is None


def test_ini_values_are_checked_and_laid_over_the_table(project_file: pathlib.Path) -> None:
    project_file.write_text("[tool.dejacache]\nmode = 'record'\nmax_age = '1d'\n")
    ini = {"dejacache_mode": "replay", "dejacache_volatile": ["body.a", "re:x"],
           "dejacache_prices": ["gpt-y 3 4"], "dejacache_max_recorded_stream": " 4096 "}
    over = _project.ini_values(lambda name: ini.get(name, ""))
    merged = _project.current().overlaid(over, "ini")
    assert merged.values["mode"] == "replay" and merged.sources["mode"] == "ini"
    assert merged.values["max_age"] == 86400.0
    assert merged.values["volatile"] == ("body.a", "re:x")
    assert merged.values["prices"] == {"gpt-y": (3.0, 4.0)}
    assert merged.values["max_recorded_stream"] == 4096  # (pytest reads an ini key as text)
    with pytest.raises(ConfigurationError, match="dejacache_mode"):
        _project.ini_values(lambda name: "never" if name == "dejacache_mode" else "")


def test_describe_says_where_each_setting_comes_from(project_file: pathlib.Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    project_file.write_text("[tool.dejacache]\nmode = 'record'\nvolatile = ['a.b']\n")
    monkeypatch.setenv("DEJACACHE_VOLATILE", "re:x")
    rows = {k: (v, src) for k, v, src in _project.describe(_project.current())}
    assert rows["volatile"] == ("re:x", "environment DEJACACHE_VOLATILE")
    assert rows["mode"][0] == "record" and "[tool.dejacache]" in rows["mode"][1]
    assert rows["on_expiry"] == ("warn", "default")


@pytest.mark.parametrize(("written", "exists", "mode"), [
    ("none", False, "replay"), ("once", True, "replay"), ("once", False, "record"),
    ("new_episodes", True, "auto"), ("all", True, "record"), ("Replay", False, "replay")])
def test_mode_takes_vcrpys_names_as_the_ini_key_does(
        project_file: pathlib.Path, monkeypatch: pytest.MonkeyPatch, written: str,
        exists: bool, mode: str) -> None:
    from dejacache.cassettes.block import default_mode

    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    project_file.write_text(f"[tool.dejacache]\nmode = {written!r}\n")
    assert default_mode(exists) == mode
    monkeypatch.setenv("CI", "1")  # the environment is above the project file
    assert default_mode(exists) == "replay"
    monkeypatch.setenv("DEJACACHE_MODE", "off")
    assert default_mode(exists) == "off"


@pytest.mark.parametrize(("written", "env", "shown", "source"), [
    ("none", None, "replay", "vcrpy's none, "),
    ("all", None, "record", "vcrpy's all, "),
    ("once", None, "replay (record when a test's cassette is missing)", "vcrpy's once, "),
    ("off", None, "off", ""),
    ("record", "None", "replay", "vcrpy's none, environment DEJACACHE_MODE"),
    ("record", "sometimes", "sometimes", "environment DEJACACHE_MODE")])
def test_config_shows_the_mode_that_applies_and_the_word_written(
        project_file: pathlib.Path, monkeypatch: pytest.MonkeyPatch, written: str,
        env: str | None, shown: str, source: str) -> None:
    monkeypatch.delenv("DEJACACHE_MODE", raising=False)
    if env is not None:
        monkeypatch.setenv("DEJACACHE_MODE", env)
    project_file.write_text(f"[tool.dejacache]\nmode = {written!r}\n")
    rows = {k: (v, src) for k, v, src in _project.describe(_project.current())}
    assert rows["mode"][0] == shown
    assert rows["mode"][1].startswith(source)
    assert env is not None or rows["mode"][1].endswith("[tool.dejacache]")


def test_a_mode_in_neither_vocabulary_lists_both(project_file: pathlib.Path) -> None:
    project_file.write_text("[tool.dejacache]\nmode = 'twice'\n")
    with pytest.raises(ConfigurationError, match=r"auto, replay, record, off .*vcrpy's once"):
        _project.current()


@pytest.mark.parametrize("text", [
    "[tool.dejacache]\nmode = 'replay'\n",
    "[ tool . \"dejacache\" ]\nmode = 'replay'\n",
    "[tool]\ndejacache = { mode = 'replay' }\n",
    "tool.dejacache.mode = 'replay'\n",
    "tool = { dejacache = { mode = 'replay' } }\n",
    "[\t'tool'\t]\ndejacache = { mode = 'replay' }\n",
    "  'tool' = { dejacache = { mode = 'replay' } }\n",
    "tool . dejacache . mode = 'replay'\n",
])
def test_every_spelling_of_the_table_is_read(project_file: pathlib.Path, text: str) -> None:
    # (a file without one is not parsed at all: the name "dejacache" elsewhere is no table)
    project_file.write_text(text + "\n[project]\nname = 'x'\n")
    assert _project.load(project_file).get("mode") == "replay"


def test_a_project_named_dejacache_without_the_table_is_not_parsed(
        project_file: pathlib.Path) -> None:
    project_file.write_text("[project]\nname = 'dejacache'\n[tool.ruff]\nline-length = 100\n"
                            "[project.scripts]\ndejacache = 'dejacache.cli:main'\n = broken")
    assert _project.load(project_file).get("mode") is None  # broken TOML, never read


def test_on_an_event_loop_the_project_is_the_working_directorys(
        project_file: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loop the file is not looked for (a stat per directory): the one read off the loop
    # serves while the process stays in its directory, and a chdir finds another's anew.
    import asyncio

    project_file.write_text("[tool.dejacache]\nmax_age = '1d'\n")
    other = project_file.parent / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text("[tool.dejacache]\nmax_age = '2d'\n")

    async def max_age() -> object:
        return _project.current().get("max_age")

    assert _project.current().get("max_age") == 86400  # read off the loop
    assert asyncio.run(max_age()) == 86400
    monkeypatch.chdir(other)
    assert asyncio.run(max_age()) == 2 * 86400
    monkeypatch.setenv("DEJACACHE_PROJECT", str(project_file))
    assert asyncio.run(max_age()) == 86400
