"""What the pytest plugin costs a suite that uses no cassette: every project with dejacache
installed runs it. A one-test suite runs in a subprocess with the plugin and with
``-p no:dejacache``; the plugin may load only its own small modules (no cassette machinery,
no HTTP library, no third-party module).

What that costs in time is measured by ``benchmarks/bench_plugin.py`` (interleaved rounds,
before and after, with and without a cassette), not here: a test that bounded the CPU time
of whole pytest processes failed under the suite's own second xdist worker, its five
with-minus-without differences spread from -0.13 to +0.18 s around a real cost of ~0.01 s.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

# What a run that opens no cassette may load of dejacache (the entry point, the state it
# shares with the cassette machinery, the usage record's light half, the error classes).
ALLOWED = {"dejacache", "dejacache._lazy", "dejacache._core", "dejacache._core.modes",
           "dejacache._pytest_state", "dejacache._pytest_usage", "dejacache.cassettes",
           "dejacache.cassettes._events", "dejacache.errors", "dejacache.pytest_plugin",
           # the finder that keeps pytest's assertion rewriting off dejacache's own modules
           "dejacache._pytest_imports",
           # the project file ([tool.dejacache] and the ini keys, checked at start-up) and
           # the notes `dejacache learn --from-miss` reads, cleared as a session starts
           "dejacache._project", "dejacache._paths", "dejacache._learn",
           "dejacache._learn.notes",
           # the project file's rows (``_slots.Row``: cheaper to load with it than two
           # ``typing.NamedTuple`` classes, 7.9M -> 7.3M instructions to import _project)
           "dejacache._slots",
           # pytest-recording's names (their machinery loads with a vcr test; the
           # prompt-cache gate's with a --dejacache-min-hit-rate bar)
           "dejacache._pytest_vcr",
           # under CI: the placeholder API keys (its guard waits for httpx to be imported)
           "dejacache.cassettes.placeholder_keys"}

CONFTEST = """
import json, os, sys

def pytest_unconfigure(config):
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def _suite(tmp_path: pathlib.Path) -> pathlib.Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (suite / "conftest.py").write_text(CONFTEST)
    return suite


def _run(suite: pathlib.Path, *extra: str, ci: bool = False) -> tuple[set[str], float]:
    """(modules loaded, CPU seconds) of one pytest process over ``suite``."""
    out = suite / "modules.json"
    # (bytecode written, as in a user's run: a PYTHONDONTWRITEBYTECODE of the shell would
    # compile the plugin's modules in every run and charge that to the plugin)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DEJACACHE"))
           and k not in ("CI", "PYTHONDONTWRITEBYTECODE")}
    env.update(MODULES_OUT=str(out), DEJACACHE_DIR=str(suite / ".dejacache"),
               **({"CI": "true"} if ci else {}))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           *extra, str(suite)]
    log = suite / "pytest.log"
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=suite)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # (reaped here: Popen must know)
    assert proc.returncode == 0, log.read_text()
    return set(json.loads(out.read_text())), usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("ci", [False, True], ids=["local", "CI"])
def test_a_suite_without_cassettes_loads_only_the_plugins_own_small_modules(
        tmp_path: pathlib.Path, ci: bool) -> None:
    suite = _suite(tmp_path)
    without, _ = _run(suite, "-p", "no:dejacache", ci=ci)
    with_plugin, _ = _run(suite, ci=ci)
    added = with_plugin - without
    ours = {m for m in added if m.split(".")[0] == "dejacache"}
    assert ours <= ALLOWED, sorted(ours - ALLOWED)
    others = sorted(m for m in added - ours if not m.startswith("_"))
    # (the plugin's own lines need glob and shlex at most: both tiny)
    assert set(others) <= {"glob", "shlex", "fnmatch"}, others

