"""Fixtures for ``dejacache proxy`` and ``mcp-proxy``: tests/http's loopback providers, one
proxy process per run (each test opens its own session on it, as a test runner does), and
the real Node SDKs of tests/node (``make node-deps`` installs them; without node or them,
the Node tests skip and say so).
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Iterator

import pytest

HTTP_TESTS = pathlib.Path(__file__).resolve().parents[1] / "http"
if str(HTTP_TESTS) not in sys.path:
    sys.path.insert(0, str(HTTP_TESTS))

from fake_provider import FakeProvider  # noqa: E402
from proxy_support import PROXY_AWS_KEY, proxy_env  # noqa: E402

import dejacache  # noqa: E402
from dejacache.proxying.handle import ProxyProcess, ProxySession  # noqa: E402


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    # One event per write, a millisecond apart: as real providers stream.
    server = FakeProvider(chunk_delay=0.001).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def proxy_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("proxy")


@pytest.fixture(scope="session")
def proxy_process(proxy_dir: pathlib.Path) -> Iterator[ProxyProcess]:
    """One proxy for the tests of a run (of an xdist worker); each opens a session of its
    own on it, named after the test, as a test runner does."""
    # The proxy's own AWS credentials (it signs Bedrock requests again with them); no file
    # of the developer's is read.
    aws = {"AWS_ACCESS_KEY_ID": PROXY_AWS_KEY, "AWS_SECRET_ACCESS_KEY": "proxy-aws-secret-0001",
           "AWS_CONFIG_FILE": str(proxy_dir / "no-aws-config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(proxy_dir / "no-aws-credentials")}
    with dejacache.proxy(cassette_dir=proxy_dir, env=proxy_env(proxy_dir, **aws)) as p:
        yield p


@pytest.fixture
def session_for(proxy_process: ProxyProcess, request: pytest.FixtureRequest
                ) -> Iterator[object]:
    """``session_for(name, fake, mode=...)``: a session on the module's proxy routed to
    ``fake``; every session a test opened is closed (not saved) when it ends."""
    opened: list[ProxySession] = []

    def open_one(name: str, fake: FakeProvider | None = None, **kw: object) -> ProxySession:
        ups = {"openai": fake.url, "anthropic": fake.url} if fake is not None else None
        ups = kw.pop("upstreams", ups)  # type: ignore[assignment]
        s = proxy_process.session(f"{request.node.name}/{name}", upstreams=ups, **kw)  # type: ignore[arg-type]
        opened.append(s)
        return s

    yield open_one
    for s in opened:
        s.close(ok=False)


@pytest.fixture(autouse=True)
def _child_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Subprocesses (node, a proxy started by a test) must not find an API key of the
    # developer's: every key here is a test's own.
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("DEJACACHE_PROXY", raising=False)
