"""Where dejacache keeps files by default (``_paths.py``)."""

from __future__ import annotations

import pathlib

import pytest

import dejacache
from dejacache._paths import exists, path_text, project_root


@pytest.mark.parametrize("marker", ["pyproject.toml", ".git", "setup.cfg"])
def test_the_root_is_the_nearest_directory_with_a_marker(tmp_path: pathlib.Path,
                                                          marker: str) -> None:
    (tmp_path / "outer" / "inner" / "deep").mkdir(parents=True)
    (tmp_path / "outer" / "pyproject.toml").write_text("")
    if marker == ".git":
        (tmp_path / "outer" / "inner" / marker).mkdir()
    else:
        (tmp_path / "outer" / "inner" / marker).write_text("")
    deep = tmp_path / "outer" / "inner" / "deep"
    assert project_root(deep) == (tmp_path / "outer" / "inner").resolve()
    assert isinstance(project_root(deep), pathlib.Path)


def test_without_a_marker_the_root_is_the_start_resolved(tmp_path: pathlib.Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    real = pathlib.Path(os.path.realpath(tmp_path))
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    assert project_root(tmp_path) == real
    monkeypatch.chdir(tmp_path)
    assert project_root() == real
    assert project_root(pathlib.Path(".")) == real  # a relative start, as Path.resolve() took it


@pytest.mark.parametrize("path", [123, None, b"a.json"])
def test_a_cassette_path_that_is_not_a_path_is_refused_naming_it(path: object) -> None:
    with pytest.raises(dejacache.ConfigurationError,
                       match=f"cassette path must be a str or os.PathLike, not "
                             f"{type(path).__name__}"):
        dejacache.cassette(path)  # type: ignore[arg-type]


def test_on_an_event_loop_the_working_directory_follows_every_chdir(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loop the directory found off it is used (os.getcwd is a blocking call there),
    # never once the process has moved: os.chdir and os.fchdir are both seen.
    import asyncio
    import os

    from dejacache._paths import cwd

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()

    async def here() -> str:
        return cwd()

    monkeypatch.chdir(a)
    assert cwd() == str(a.resolve())
    assert asyncio.run(here()) == str(a.resolve())
    monkeypatch.chdir(b)
    assert asyncio.run(here()) == str(b.resolve())
    fd = os.open(a, os.O_RDONLY)
    try:
        os.fchdir(fd)
    finally:
        os.close(fd)
    assert asyncio.run(here()) == str(a.resolve())


def test_only_the_pytest_plugin_counts_directory_changes(tmp_path: pathlib.Path) -> None:
    # Counting them is an audit hook, which every audited event of the process then pays
    # for (``id()``, ``open``, ``sys._getframe``...): a process that caches calls and opens
    # blocks outside pytest never adds it.
    import subprocess
    import sys

    script = ("import dejacache\nfrom dejacache._paths import chdirs\n"
              "@dejacache.cache\ndef add(a, b):\n    return a + b\n"
              "with dejacache.cassette('c.json'):\n    add(1, 2)\n"
              "with dejacache.scope(store='memory://'):\n    add(2, 3)\n"
              "print(chdirs())\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "None"


@pytest.mark.parametrize("text", [
    "", ".", "a", "/", "//", "///", "//a//b/", "///a", "a/./b/", "./a", "a/../b", "x//",
    "/tmp//c.json", ".hidden", "a/.", "././", "~/c.json"])
def test_a_path_as_text_is_spelt_as_pathlib_spells_it(text: str) -> None:
    assert path_text(text) == str(pathlib.Path(text))
    assert path_text(pathlib.PurePath(text)) == str(pathlib.Path(text))


def test_exists_answers_as_pathlib_does(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_text("")
    for p in (tmp_path / "f", tmp_path / "g", tmp_path / "f" / "under", tmp_path):
        assert exists(str(p)) == p.exists()
