"""A test failing on a dejacache error reads its message first, in about twenty lines
(src/dejacache/_pytest_failure.py), through a real pytest session (``pytester``) calling
through httpx and through the OpenAI SDK against a loopback server."""

from __future__ import annotations

import re

import pytest

from test_pytest_plugin import run

pytest.importorskip("httpx")

SERVER = """
import http.server, json, os, threading
import pytest

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["content-length"])))
        text = data["messages"][-1]["content"] if "messages" in data else data.get("city")
        body = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                           "model": "gpt-4o-mini", "choices": [{"index": 0,
                           "finish_reason": "stop", "message": {"role": "assistant",
                           "content": "re: " + str(text)}}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

@pytest.fixture(scope="session")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()
"""

TESTS = """
import os
import httpx

def ask(server):
    return os.environ.get("QUESTION", "the weather in Lisbon")

def test_httpx(dejacache_cassette, server):
    r = httpx.post(server + "/weather", json={"city": ask(server)})
    assert r.status_code == 200

def test_sdk(dejacache_cassette, server):
    from openai import OpenAI

    client = OpenAI(base_url=server + "/v1", api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": ask(server)}])
    assert reply.choices[0].message.content
"""


def _section(out: str, test: str) -> list[str]:
    """The lines of ``test``'s failure section (after its ``___ test ___`` header)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"_+ {test} _+$", line))
    end = next(i for i in range(start + 1, len(lines))
               if re.match(r"(_+ \w+ _+|=+ .* =+)$", lines[i]))
    return lines[start + 1:end]


@pytest.mark.parametrize("test", ["test_httpx", "test_sdk"])
def test_a_replay_miss_reads_first_and_short(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch,
                                             test: str) -> None:
    if test == "test_sdk":
        pytest.importorskip("openai")
    pytester.makeconftest(SERVER)
    pytester.makepyfile(test_agent=TESTS)
    run(pytester, f"test_agent.py::{test}").assert_outcomes(passed=1)
    monkeypatch.setenv("QUESTION", "the weather in Porto")
    res = run(pytester, f"test_agent.py::{test}", "--dejacache-mode=replay")
    res.assert_outcomes(failed=1)
    section = _section(res.stdout.str(), test)
    # (an SDK's call raises the miss as the SDK's own error too: ReplayMiss[openai.OpenAIError])
    assert re.match(r"ReplayMiss(\[[\w.]+\])?: dejacache replay miss: no recording of ",
                    section[0]), section[0]
    assert "to re-record: pytest test_agent.py::" in "\n".join(section[:12])
    assert len(section) <= 30, "\n".join(section)
    text = "\n".join(section)
    assert "dejacache/" not in text and "eff = Effective(" not in text
    assert "test_agent.py:" in text  # the test's own line, with its source
    # pytest's short summary still names the miss, on one line
    res.stdout.re_match_lines([rf"FAILED test_agent.py::{test} - ReplayMiss\S*: dejacache re.*"])


def test_full_trace_keeps_pytests_own_report(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(SERVER)
    pytester.makepyfile(test_agent=TESTS)
    run(pytester, "test_agent.py::test_httpx").assert_outcomes(passed=1)
    monkeypatch.setenv("QUESTION", "the weather in Porto")
    res = run(pytester, "test_agent.py::test_httpx", "--dejacache-mode=replay", "--full-trace")
    res.assert_outcomes(failed=1)
    assert "dejacache/_engine.py" in res.stdout.str()
