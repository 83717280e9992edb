"""Packaging: the wheel and sdist a user installs.

Builds both with ``python -m build``, runs ``twine check --strict``, and installs the wheel
into a fresh venv with no extras: ``import dejacache`` works, the version is the one in
``__init__.py`` (the only place it is written), ``py.typed`` ships, the console script runs,
and a command that needs an extra names it. Slow (a build and a venv) and it needs the package
index for the build backend, so it runs under ``make dist`` (DEJACACHE_PACKAGING=1).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not os.environ.get("DEJACACHE_PACKAGING"),
    reason="builds a wheel and a venv: run with make dist (DEJACACHE_PACKAGING=1)")


def _run(*cmd: str | pathlib.Path, cwd: pathlib.Path = ROOT, check: bool = True,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False, env=env)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _version() -> str:
    text = (ROOT / "src" / "dejacache" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    assert found is not None
    return found.group(1)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    return out


def test_one_version_in_one_place() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'^version\s*=', pyproject, re.M)


def test_wheel_and_sdist_pass_twine_check(dist: pathlib.Path) -> None:
    files = sorted(dist.iterdir())
    version = _version()
    assert [f.name for f in files] == [f"dejacache-{version}-py3-none-any.whl",
                                       f"dejacache-{version}.tar.gz"]
    _run(sys.executable, "-m", "twine", "check", "--strict", *files)


def test_the_wheel_ships_types_and_every_package(dist: pathlib.Path) -> None:
    wheel = next(dist.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for member in ("dejacache/py.typed", "dejacache/__init__.py", "dejacache/report/html.py",
                   "dejacache/cassettes/placeholder_keys.py", "dejacache/pytest_plugin.py",
                   # what ``dejacache proxy --node-helper DIR`` copies
                   "dejacache/proxying/node/dejacache-proxy.mjs",
                   "dejacache/proxying/node/dejacache-proxy.d.mts"):
        assert member in names, member
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(meta).decode()
    assert "dejacache = dejacache.cli:main" in entry_points
    assert "dejacache = dejacache.pytest_plugin" in entry_points
    sdist = next(dist.glob("*.tar.gz"))
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    for member in ("README.md", "CHANGELOG.md", "pyproject.toml", "src/dejacache/py.typed"):
        assert member in members, member


def test_the_wheel_installs_with_no_extras(dist: pathlib.Path,
                                           tmp_path: pathlib.Path) -> None:
    uv = shutil.which("uv")
    venv = tmp_path / "venv"
    if uv:
        _run(uv, "venv", "-q", "-p", sys.executable, venv)
        py = venv / "bin" / "python"
        _run(uv, "pip", "install", "-q", "--python", py, next(dist.glob("*.whl")))
    else:
        _run(sys.executable, "-m", "venv", venv)
        py = venv / "bin" / "python"
        _run(py, "-m", "pip", "install", "-q", next(dist.glob("*.whl")))
    env = {"PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}", "HOME": str(tmp_path),
           "DEJACACHE_DIR": str(tmp_path / "cache")}
    done = _run(py, "-c", "import dejacache, sys; print(dejacache.__version__); "
                "print(sorted(m for m in ('httpx', 'httpx2', 'rich', 'redis', 'openai') "
                "if m in sys.modules))", env=env, cwd=tmp_path)
    assert done.stdout.split("\n")[:2] == [_version(), "[]"]
    assert "report" in _run(venv / "bin" / "dejacache", "--help", env=env,
                            cwd=tmp_path).stdout
    needs = _run(venv / "bin" / "dejacache", "clear", "--store", "redis://127.0.0.1:1/0",
                 env=env, cwd=tmp_path, check=False)
    assert needs.returncode == 1
    assert "pip install 'dejacache[redis]'" in needs.stderr
