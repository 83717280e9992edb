"""Packaging: the wheel and sdist a user installs.

Builds both with ``python -m build``, runs ``twine check --strict``, and installs the wheel
into a fresh venv with no extras: ``import dejacache`` works, the version is the one in
``__init__.py`` (the only place it is written), ``py.typed`` ships, the console script runs,
and a command that needs an extra names it. Slow (a build and a venv) and it needs the package
index for the build backend, so it runs under ``make dist`` (DEJACACHE_TEST_PACKAGING=1).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not os.environ.get("DEJACACHE_TEST_PACKAGING"),
    reason="builds a wheel and a venv: run with make dist (DEJACACHE_TEST_PACKAGING=1)")


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


def _fresh_venv(dist: pathlib.Path, venv: pathlib.Path, *also: str) -> pathlib.Path:
    """A new venv holding the wheel (no extras) and the packages ``also``; its python."""
    uv = shutil.which("uv")
    py = venv / "bin" / "python"
    if uv:
        _run(uv, "venv", "-q", "-p", sys.executable, venv)
        _run(uv, "pip", "install", "-q", "--python", py, next(dist.glob("*.whl")), *also)
    else:
        _run(sys.executable, "-m", "venv", venv)
        _run(py, "-m", "pip", "install", "-q", next(dist.glob("*.whl")), *also)
    return py


def test_the_wheel_installs_with_no_extras(dist: pathlib.Path,
                                           tmp_path: pathlib.Path) -> None:
    venv = tmp_path / "venv"
    py = _fresh_venv(dist, venv)
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


# A user's suite on the stacks that are not httpx, from `pip install dejacache requests boto3
# aiohttp` and nothing else: a loopback server while recording, none while CI replays.
_CONFTEST = """
import http.server, json, os, threading
import pytest

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, data):
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._json({"path": self.path})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._json({"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
                    "stopReason": "end_turn", "metrics": {"latencyMs": 1},
                    "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}})

@pytest.fixture(scope="session")
def server():
    url = "http://127.0.0.1:" + os.environ["SUITE_PORT"]
    if os.environ.get("CI"):
        yield url  # replaying: nothing listens there
        return
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["SUITE_PORT"])), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield url
    srv.shutdown()
    srv.server_close()
"""
_TESTS = """
import asyncio
import aiohttp, boto3, requests, urllib3

def test_requests(dejacache_cassette, server):
    assert requests.get(server + "/weather?city=Lima", timeout=5).json()["path"].endswith("Lima")

def test_urllib3(dejacache_cassette, server):
    assert urllib3.request("GET", server + "/tool").json() == {"path": "/tool"}

def test_boto3(dejacache_cassette, server):
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=server,
                     aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="example-secret")
    r = c.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hello"}]}])
    assert r["output"]["message"]["content"][0]["text"] == "hi"

def test_aiohttp(dejacache_cassette, server):
    async def fetch():
        async with aiohttp.ClientSession() as session:
            async with session.get(server + "/search?q=trains") as r:
                return await r.json()
    assert asyncio.run(fetch()) == {"path": "/search?q=trains"}
"""


def test_requests_urllib3_boto3_and_aiohttp_record_and_replay_from_a_plain_install(
        dist: pathlib.Path, tmp_path: pathlib.Path) -> None:
    py = _fresh_venv(dist, tmp_path / "venv", "requests", "boto3", "aiohttp", "pytest")
    assert _run(py, "-c", "import importlib.util as u; print(u.find_spec('httpx'), "
                "u.find_spec('httpx2'))").stdout.split() == ["None", "None"]
    suite = tmp_path / "suite"
    (suite / "tests").mkdir(parents=True)
    (suite / "tests" / "conftest.py").write_text(_CONFTEST)
    (suite / "tests" / "test_stacks.py").write_text(_TESTS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "SUITE_PORT": port}
    recorded = _run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=suite,
                    env=env, check=False)
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    assert "0 replayed, 4 recorded" in recorded.stdout
    assert "DejacacheWarning" not in recorded.stdout
    assert len(list((suite / "tests" / "cassettes").rglob("*.json"))) == 4
    replayed = _run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=suite,
                    env={**env, "CI": "true"}, check=False)
    assert replayed.returncode == 0, replayed.stdout[-3000:]
    assert "4 replayed, 0 recorded, 0 missed" in replayed.stdout
