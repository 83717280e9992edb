"""A throwaway project holding the agent suite of ``tests/_learn/suite`` (its tests talk to
the loopback provider and tool API of ``tests/http``), and running commands in it with this
checkout's dejacache."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Any

TESTS = pathlib.Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
SUITE = TESTS / "_learn" / "suite"

PYPROJECT = """\
[project]
name = "agents"
version = "0"

[tool.pytest.ini_options]
pythonpath = [{paths}]
addopts = "-p no:cacheprovider -p no:randomly -p no:xdist"
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
"""


def make_project(where: pathlib.Path, extra: str = "", *, scenario: bool = False
                 ) -> pathlib.Path:
    """``where``/proj: pyproject.toml, tests/conftest.py and the agents (the openai suite,
    or with ``scenario`` the langwatch-scenario run, for .venv-scenario)."""
    proj = where / "proj"
    (proj / "tests").mkdir(parents=True)
    kind = "scenario" if scenario else "suite"
    shutil.copy(SUITE / f"{kind}_conftest.py", proj / "tests" / "conftest.py")
    shutil.copy(SUITE / f"{kind}_agents.py", proj / "tests" / f"test_{kind}.py")
    dirs = [TESTS, TESTS / "integrations" / "langwatch_scenario"] if scenario else \
        [TESTS, TESTS / "http"]
    paths = ", ".join(json.dumps(str(p)) for p in dirs)
    (proj / "pyproject.toml").write_text(PYPROJECT.format(paths=paths) + extra)
    return proj


def env(proj: pathlib.Path, **more: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEJACACHE_", "PYTEST_")) and k not in ("CI",)}
    out["PYTHONPATH"] = os.pathsep.join([str(SRC), out.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    out["DEJACACHE_DIR"] = str(proj / ".dejacache")
    out.update(more)
    return out


def run(proj: pathlib.Path, *args: str, timeout: float = 300, python: str = sys.executable,
        **more: str) -> subprocess.CompletedProcess[str]:
    """``python -m <args>`` in ``proj``."""
    return subprocess.run([python, "-m", *args], cwd=proj, env=env(proj, **more),
                          capture_output=True, text=True, timeout=timeout)


_CALLS = re.compile(r"calls: (\d+) replayed, (\d+) recorded, (\d+) missed")


def counts(out: str) -> tuple[int, int, int]:
    """(replayed, recorded, missed) from the plugin's summary line."""
    m = _CALLS.search(out)
    assert m is not None, out[-3000:]
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def entries(proj: pathlib.Path) -> int:
    """Calls recorded in the project's cassettes."""
    total = 0
    for p in (proj / "tests" / "cassettes").rglob("*.json"):
        doc: Any = json.loads(p.read_text())
        total += sum(len(v) for k, v in doc.items() if k.startswith("entries"))
    return total
