"""``dejacache.proxy()`` and the ``dejacache_proxy`` fixture: a Python suite that drives an
agent as a subprocess records it through the proxy and replays it, a cassette per test,
written only when the test passes."""

from __future__ import annotations

import pathlib
import re
import socket
import textwrap
import time

import httpx2
import pytest
from fake_provider import FakeProvider
from proxy_support import entries, proxy_env

import dejacache
from dejacache.errors import ConfigurationError

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
LOOP = "asyncio_default_fixture_loop_scope = function\n"


def test_proxy_records_then_replays_its_cassette(tmp_path: pathlib.Path,
                                                 fake: FakeProvider) -> None:
    cassette = tmp_path / "agent.json"
    env = proxy_env(tmp_path)
    with dejacache.proxy(cassette, upstreams={"openai": fake.url}, env=env) as p:
        assert p.env["OPENAI_BASE_URL"] == p.url + "/openai/v1"
        live = httpx2.post(p.env["OPENAI_BASE_URL"] + "/chat/completions", json=CHAT,
                           timeout=30).json()
    assert len(entries(cassette)) == 1
    with dejacache.proxy(cassette, mode="replay", upstreams={"openai": fake.url}, env=env) as p:
        again = httpx2.post(p.base_url("openai") + "/v1/chat/completions", json=CHAT,
                            timeout=30).json()
    assert again == live and fake.count() == 1


def test_max_recorded_stream_reaches_the_proxy(tmp_path: pathlib.Path, fake: FakeProvider,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    # 400 bytes: less than one streamed answer of the fake provider (~2 kB).
    cassette = tmp_path / "long.json"
    with dejacache.proxy(cassette, upstreams={"openai": fake.url}, env=proxy_env(tmp_path),
                         max_recorded_stream=400) as p, \
            httpx2.stream("POST", p.base_url("openai") + "/v1/chat/completions", timeout=30,
                          json={**CHAT, "stream": True}) as r:
        body = r.read()
    assert body.endswith(b"data: [DONE]\n\n") and fake.count() == 1
    assert not cassette.exists() or entries(cassette) == []
    said = capfd.readouterr().err
    assert "passed 400 bytes held for its recording" in said and "--max-recorded-stream" in said


def test_a_proxy_that_cannot_start_says_why(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    with pytest.raises(ConfigurationError, match=r"did not start: .*bad\.json"):
        dejacache.proxy(bad, env=proxy_env(tmp_path))


@pytest.mark.parametrize(("given", "said"), [
    ({"read_timeout": 0}, "read_timeout=0: expected a number of seconds > 0"),
    ({"idle_timeout": float("nan")}, "idle_timeout=nan: expected"),
    ({"write_timeout": "soon"}, "write_timeout='soon': expected"),
    ({"idle_timeout": True}, "idle_timeout=True: expected"),
    ({"max_connections": 0}, "max_connections=0: expected a whole number > 0"),
    ({"max_connections": True}, "max_connections=True: expected a whole number > 0"),
    ({"max_connections": 2.5}, "max_connections=2.5: expected a whole number > 0"),
    ({"max_buffered": -1}, "max_buffered=-1: expected a whole number > 0"),
    ({"max_buffered": "1GiB"}, "max_buffered='1GiB': expected a whole number > 0"),
    ({"max_message": 0}, "max_message=0: expected a whole number > 0"),
    ({"max_message": 1e6}, "max_message=1000000.0: expected a whole number > 0"),
    ({"max_recorded_stream": 0}, "max_recorded_stream=0: expected a whole number > 0"),
    ({"max_recorded_stream": "64MiB"}, "max_recorded_stream='64MiB': expected a whole"),
])
def test_a_bad_timeout_or_limit_is_refused_naming_it_before_a_proxy_starts(
        tmp_path: pathlib.Path, given: dict[str, object], said: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        dejacache.proxy(tmp_path / "c.json", env=proxy_env(tmp_path), **given)  # type: ignore[arg-type]


def test_the_connection_timeouts_are_the_proxys_own(tmp_path: pathlib.Path) -> None:
    # An idle connection is closed after idle_timeout (75 s by default), a request that
    # stops arriving answered 408 after read_timeout (30 s by default).
    with dejacache.proxy(tmp_path / "c.json", env=proxy_env(tmp_path), idle_timeout=0.3,
                         read_timeout=0.3) as p:
        host, port = p.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as idle:
            t0 = time.monotonic()
            assert idle.recv(100) == b""
            assert time.monotonic() - t0 < 5
        with socket.create_connection((host, int(port)), timeout=10) as slow:
            slow.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            assert slow.recv(100).startswith(b"HTTP/1.1 408")


def whole_answer(sock: socket.socket) -> bytes:
    """One answer framed by Content-Length, its head included."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_the_limits_are_the_proxys_own(tmp_path: pathlib.Path) -> None:
    # One connection open at once: a second is answered 503 and closed; bodies held at
    # once 100 bytes at most: a larger one could never be, a 413.
    with dejacache.proxy(tmp_path / "c.json", env=proxy_env(tmp_path), max_connections=1,
                         max_buffered=100) as p:
        host, port = p.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as first:
            first.sendall(b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n")
            assert whole_answer(first).startswith(b"HTTP/1.1 200 ")  # taken
            with socket.create_connection((host, int(port)), timeout=10) as second:
                refused = second.recv(1000)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"--max-connections" in refused
            first.sendall(b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 101\r\n\r\n")
            too_large = first.recv(1000)
        assert too_large.startswith(b"HTTP/1.1 413 ") and b"over 100" in too_large


AGENT = textwrap.dedent("""
    import os, sys
    import httpx2
    r = httpx2.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", timeout=30,
                    json={"model": "gpt-test", "messages": [{"role": "user",
                                                             "content": sys.argv[1]}]})
    r.raise_for_status()
    print(r.json()["choices"][0]["message"]["content"])
""")

SUITE = textwrap.dedent("""
    import os, subprocess, sys, pytest

    def agent(proxy, question):
        out = subprocess.run([sys.executable, "agent.py", question], capture_output=True,
                             text=True, env={**os.environ, **proxy.env})
        return out.returncode, out.stdout.strip()

    def test_agent(dejacache_proxy):
        status, text = agent(dejacache_proxy, "weather?")
        assert status == 0 and text.startswith("Hello from the fake model")

    def test_fails_after_the_call(dejacache_proxy):
        agent(dejacache_proxy, "doomed")
        assert False, "the test failed"

    @pytest.mark.dejacache(mode="replay")
    def test_agent_that_misses(dejacache_proxy):
        status, _ = agent(dejacache_proxy, "never recorded")
        assert status != 0  # the agent saw the miss, and the test tolerated it
""")


def test_the_fixture_gives_each_test_its_cassette_on_one_proxy(
        pytester: pytest.Pytester, fake: FakeProvider) -> None:
    pytester.makeini(f"[pytest]\n{LOOP}dejacache_proxy_upstreams =\n    openai={fake.url}\n")
    pytester.makepyfile(agent=AGENT, test_suite=SUITE)
    cassettes = pytester.path / "cassettes" / "test_suite"

    first = pytester.runpytest("-p", "no:randomly")
    # the miss fails the passing test at teardown (an error), as dejacache_cassette does
    first.assert_outcomes(passed=2, failed=1, errors=1)
    assert sorted(p.name for p in cassettes.iterdir()) == ["test_agent.json"]
    first.stdout.fnmatch_lines(["*1 replay miss(es) in cassette*test_agent_that_misses.json*"
                                "were met by the agent behind the proxy*"])
    assert fake.count() == 2  # test_agent's call and the failing test's

    fake.stop()
    pytester.makeini(f"[pytest]\n{LOOP}dejacache_proxy_upstreams =\n"
                     "    openai=http://127.0.0.1:9\n")
    again = pytester.runpytest("-p", "no:randomly", "-k", "test_agent and not misses",
                               "--dejacache-mode=replay")
    again.assert_outcomes(passed=1, deselected=2)
