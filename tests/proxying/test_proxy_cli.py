"""``dejacache proxy`` as a command: it says where it listens, stops on SIGTERM/SIGINT with
its cassette written and exit status 0, replays under ``CI``, runs a command under itself,
and turns every bad input (an argument, a port in use, a non-loopback address, a damaged
cassette) into one line on stderr and a non-zero exit."""

from __future__ import annotations

import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time

import httpx2
import pytest
from fake_provider import FakeProvider
from proxy_support import entries, proxy_env

from dejacache.cli import build_parser, main
from dejacache.proxying._config import config_from_args

ENTRY = "import sys; from dejacache.cli import main; sys.exit(main(sys.argv[1:]))"
CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


def command(*args: str) -> list[str]:
    return [sys.executable, "-c", ENTRY, *args]


def start(tmp_path: pathlib.Path, *args: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(command("proxy", *args, "--ready-file", str(ready)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=proxy_env(tmp_path, **env))
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc, ready.read_text().strip()


def fails(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The command run in this process (what fails, fails before it serves)."""
    capsys.readouterr()
    try:
        status = main(["proxy", *args])
    except SystemExit as exc:
        status = int(exc.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                 pytest.param(signal.SIGINT, id="SIGINT")])
def test_it_says_where_it_listens_and_saves_when_told_to_stop(
        tmp_path: pathlib.Path, fake: FakeProvider, sig: signal.Signals) -> None:
    cassette = tmp_path / "agent.json"
    proc, url = start(tmp_path, "--cassette", str(cassette), "--upstream", f"openai={fake.url}")
    assert url.startswith("http://127.0.0.1:")
    with httpx2.Client(timeout=30) as client:  # its connection stays open, idle
        assert client.post(url + "/openai/v1/chat/completions", json=CHAT).status_code == 200
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == url  # the base URL, alone on its line
    assert "1 recorded" in err and "Traceback" not in err and "Error" not in err
    assert [e["name"] for e in entries(cassette)] == ["openai.chat.completions"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["agent.json"]


def test_under_ci_it_replays(tmp_path: pathlib.Path, fake: FakeProvider) -> None:
    cassette = tmp_path / "ci.json"
    proc, url = start(tmp_path, "--cassette", str(cassette), "--upstream",
                      f"openai={fake.url}", CI="true")
    try:
        status = httpx2.get(url + "/_dejacache", timeout=30).json()
        r = httpx2.post(url + "/openai/v1/chat/completions", json=CHAT, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert status["mode"] == "replay"
    assert r.status_code == 404 and fake.count() == 0
    assert proc.returncode == 0 and not cassette.exists()


def test_it_runs_a_command_pointed_at_itself(tmp_path: pathlib.Path,
                                            fake: FakeProvider) -> None:
    # The command's SDKs would have gone to OPENAI_BASE_URL: the proxy goes there instead.
    script = textwrap.dedent("""
        import os, sys, urllib.request
        print(os.environ["OPENAI_BASE_URL"], os.environ["ANTHROPIC_BASE_URL"],
              os.environ["DEJACACHE_PROXY"])
        req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                     data=b'{"model": "m", "messages": []}',
                                     headers={"content-type": "application/json"})
        print(urllib.request.urlopen(req).status)
        sys.exit(3)
    """)
    cassette = tmp_path / "c.json"
    out = subprocess.run(command("proxy", "--cassette", str(cassette), "--",
                                 sys.executable, "-c", script),
                         capture_output=True, text=True, timeout=60,
                         env=proxy_env(tmp_path, OPENAI_BASE_URL=fake.openai_url))
    assert out.returncode == 3, out.stderr
    printed, status = out.stdout.splitlines()  # the command's own output, nothing else
    url = printed.split()[-1]
    assert f"dejacache proxy: listening on {url}" in out.stderr
    assert printed.split() == [f"{url}/openai/v1", f"{url}/anthropic", url]
    assert status == "200" and fake.count() == 1 and len(entries(cassette)) == 1


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(("args", "says"), [
    (["--upstream", "openai"], "expected NAME=URL"),
    (["--upstream", "openai=ftp://x"], "not an http(s) URL"),
    (["--mode", "playback"], "invalid choice: 'playback'"),
    (["--max-age", "soon"], "max_age"),
    (["--live", "kind:x"], "unknown kind"),
    (["--replay-until", "-1"], "expected a count"),
    (["--port", "70000"], "expected 0 (a free port) to 65535"),
    (["--port", "eighty"], "invalid int value"),
    (["--idle-timeout", "0"], "--idle-timeout 0: expected a number of seconds > 0"),
    (["--read-timeout", "-1"], "--read-timeout -1: expected a number of seconds > 0"),
    (["--idle-timeout", "nan"], "--idle-timeout nan: expected"),
    (["--write-timeout", "0"], "--write-timeout 0: expected a number of seconds > 0"),
    (["--write-timeout", "inf"], "--write-timeout inf: expected a number of seconds > 0"),
    (["--idle-timeout", "soon"], "invalid float value"),
    (["--max-connections", "0"], "--max-connections 0: expected a whole number > 0"),
    (["--max-buffered", "-1"], "--max-buffered -1: expected a whole number > 0"),
    (["--max-connections", "many"], "invalid int value"),
    (["--max-message", "0"], "--max-message 0: expected a whole number > 0"),
    (["--max-message", "64MiB"], "invalid int value"),
    (["--max-recorded-stream", "-5"], "--max-recorded-stream -5: expected a whole number > 0"),
    (["--cassette", "c.json", "--bogus"], "unrecognized arguments: --bogus"),
    (["--cassette", "c.json", "--"], "-- must be followed by a command"),
])
def test_a_bad_argument_is_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                    says: str) -> None:
    status, err = fails(capsys, *args)
    assert status != 0 and says in one_line(err)


@pytest.mark.parametrize("written", ["none", "replay"])
def test_vcrpys_none_is_replay_as_dejacache_mode_takes_it(written: str) -> None:
    args = build_parser().parse_args(["proxy", "--mode", written])
    assert args.mode == "replay"


def test_the_timeouts_reach_the_proxy_as_given_else_their_defaults() -> None:
    parse = build_parser().parse_args
    given = config_from_args(parse(["proxy", "--read-timeout", "1.5", "--idle-timeout", "2",
                                    "--write-timeout", "0.25"]), "")
    assert (given.read_timeout, given.idle_timeout, given.write_timeout) == (1.5, 2.0, 0.25)
    default = config_from_args(parse(["proxy"]), "")
    assert (default.read_timeout, default.idle_timeout, default.write_timeout) == (
        30.0, 75.0, 60.0)


def test_the_limits_reach_the_proxy_as_given_else_their_defaults() -> None:
    parse = build_parser().parse_args
    given = config_from_args(parse(["proxy", "--max-connections", "3",
                                    "--max-buffered", "4096", "--max-message", "512",
                                    "--max-recorded-stream", "2048"]), "")
    assert (given.max_connections, given.max_buffered, given.max_message,
            given.max_recorded_stream) == (3, 4096, 512, 2048)
    default = config_from_args(parse(["proxy"]), "")
    assert (default.max_connections, default.max_buffered, default.max_message,
            default.max_recorded_stream) == (256, 1 << 30, 64 << 20, 64 << 20)


def test_a_non_loopback_address_needs_allow_remote(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    status, err = fails(capsys, "--host", "192.0.2.10")
    assert status == 1 and "is not a loopback address" in one_line(err)
    assert "--allow-remote" in err
    # Allowed, it gets as far as binding (TEST-NET-1 is no address of this machine).
    status, err = fails(capsys, "--host", "192.0.2.10", "--allow-remote")
    assert status == 1 and "cannot listen on 192.0.2.10:0" in one_line(err)


def test_a_port_in_use_is_one_line(tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        status, err = fails(capsys, "--cassette", str(tmp_path / "c.json"), "--port",
                            str(port))
    assert status == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in one_line(err)
    assert not (tmp_path / "c.json").exists()


def test_a_damaged_cassette_is_one_line_naming_it(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    status, err = fails(capsys, "--cassette", str(bad))
    assert status == 1 and str(bad) in one_line(err)
    assert bad.read_text() == "{ not json"


def test_a_command_that_passed_fails_when_its_cassette_did_not_hold(
        tmp_path: pathlib.Path, fake: FakeProvider) -> None:
    # Strict, the recorded call was never made: the command passing must not make CI green.
    cassette = tmp_path / "c.json"
    ask = ("import os, urllib.request; urllib.request.urlopen(urllib.request.Request("
           "os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=b'{\"model\": \"m\"}',"
           " headers={'content-type': 'application/json'}))")
    env = proxy_env(tmp_path, OPENAI_BASE_URL=fake.openai_url)
    first = subprocess.run(command("proxy", "--cassette", str(cassette), "--",
                                   sys.executable, "-c", ask),
                           capture_output=True, text=True, timeout=60, env=env)
    assert first.returncode == 0 and len(entries(cassette)) == 1, first.stderr
    out = subprocess.run(command("proxy", "--cassette", str(cassette), "--mode", "replay",
                                 "--strict", "--", sys.executable, "-c", "pass"),
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1, out.stderr
    assert "1 of the 1 recorded calls" in out.stderr
