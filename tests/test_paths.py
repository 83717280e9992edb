"""Where dejacache keeps files by default (``_paths.py``)."""

from __future__ import annotations

import pathlib

import pytest

import dejacache
from dejacache._paths import project_root


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
