"""pytest-recording's ``--block-network``, ``--allowed-hosts`` and markers without
pytest-recording (``_pytest_network.py``), through ``pytester``.

A real server listens on loopback; 10.255.255.1 (private, unrouted) stands for a remote
host. The guard refuses at ``connect()``, so nothing is sent to it; each suite checks the
guard is in place before it tries, so a run where it is not fails without a packet leaving.
"""

from __future__ import annotations

import pytest

HELPERS = """
import http.server, socket, threading
import pytest

_REAL_CONNECT = socket.socket.connect

@pytest.fixture(scope="session")
def server():
    srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()

def reach(host, port):
    with socket.create_connection((host, port), timeout=2):
        return True

def refused(host, port):
    with pytest.raises(RuntimeError, match="^Network is disabled") as info:
        reach(host, port)
    return info.value

def far():
    # never a packet to the remote address: the guard must be in place before the try
    assert socket.socket.connect is not _REAL_CONNECT, "no guard: not trying 10.255.255.1"
    return refused("10.255.255.1", 9)
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeconftest("pytest_plugins = ['helpers']\n")
    pytester.makepyfile(helpers=HELPERS)
    pytester.syspathinsert()
    return pytester.runpytest_subprocess(
        "-p", "no:xdist", "-p", "no:randomly", "-p", "no:cassetter", "-p", "no:asyncio",
        "-p", "no:recording", "-p", "no:agentcassette", "-p", "no:cacheprovider", *args)


def test_block_network_refuses_loopback_and_remote_hosts_with_pytest_recordings_error(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sealed="""
import dejacache.errors
from helpers import far, reach, refused

def test_loopback(server):
    exc = refused("127.0.0.1", server)
    assert isinstance(exc, dejacache.errors.NetworkBlocked)
    assert "--block-network" in str(exc) and "test_loopback" in str(exc)

def test_remote():
    assert "10.255.255.1:9" in str(far())
""")
    _run(pytester, "--block-network").assert_outcomes(passed=2)


def test_allowed_hosts_option_takes_comma_separated_regexes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_allowed="""
from helpers import far, reach

def test_loopback_allowed(server):
    assert reach("127.0.0.1", server)

def test_remote_still_refused():
    far()
""")
    _run(pytester, "--block-network", r"--allowed-hosts=nomatch,127\.0\.0\.\d+"
         ).assert_outcomes(passed=2)


def test_block_network_in_addopts_seals_every_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = --block-network --allowed-hosts=nomatch\n")
    pytester.makepyfile(test_addopts="""
from helpers import refused

def test_loopback(server):
    refused("127.0.0.1", server)
""")
    _run(pytester).assert_outcomes(passed=1)


def test_the_marker_seals_only_its_test(pytester: pytest.Pytester) -> None:
    # Loopback only, this one: without the option the run starts on main's code, and a
    # test that is not sealed there must send nothing off the box.
    pytester.makepyfile(test_marked="""
import pytest
from helpers import reach, refused

@pytest.mark.block_network
def test_sealed(server):
    refused("127.0.0.1", server)

def test_open(server):
    assert reach("127.0.0.1", server)
""")
    _run(pytester).assert_outcomes(passed=2)


def test_hosts_come_from_the_marker_then_allowed_hosts_then_the_option_then_vcr_config(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_order="""
import pytest
from helpers import reach, refused

@pytest.fixture
def vcr_config():
    return {"allowed_hosts": "nomatch"}

@pytest.mark.block_network(allowed_hosts=["127.0.0.*"])
@pytest.mark.allowed_hosts(["nomatch"])
def test_block_network_kwarg_first(server):
    assert reach("127.0.0.1", server)

@pytest.mark.block_network
@pytest.mark.allowed_hosts(["localhost", "127.0.0.1"])
def test_then_the_allowed_hosts_marker(server):
    assert reach("127.0.0.1", server)

@pytest.mark.block_network
def test_then_the_option(server):
    refused("127.0.0.1", server)  # --allowed-hosts=nomatch2 wins over vcr_config's
""")
    _run(pytester, "--allowed-hosts=nomatch2").assert_outcomes(passed=3)
    pytester.makepyfile(test_order="""
import pytest
from helpers import reach

@pytest.fixture
def vcr_config():
    return {"allowed_hosts": r"127\\.0\\.0\\.1"}

@pytest.mark.block_network
def test_vcr_config_last(server):
    assert reach("127.0.0.1", server)
""")
    _run(pytester).assert_outcomes(passed=1)


def test_a_vcr_test_recording_its_cassette_is_not_sealed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_vcr="""
import pytest
from helpers import reach, refused

@pytest.mark.vcr
def test_recording(server, vcr):
    assert reach("127.0.0.1", server)

@pytest.mark.vcr(record_mode="none")
def test_replaying(server):
    refused("127.0.0.1", server)
""")
    _run(pytester, "--block-network", "--record-mode=once").assert_outcomes(passed=1, failed=1)
    # (--record-mode wins over the marker's: both record)
    _run(pytester, "--block-network", "--record-mode=none").assert_outcomes(passed=1, failed=1)
    res = _run(pytester, "--block-network")  # the marker's none for one, the default for both
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*test_recording*Network is disabled*"])


def test_a_test_naming_a_dejacache_cassette_that_records_is_not_sealed(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_named="""
from helpers import reach

def test_named(server, dejacache_cassette):
    assert reach("127.0.0.1", server)
""")
    _run(pytester, "--block-network", "--dejacache-mode=record").assert_outcomes(passed=1)
    res = _run(pytester, "--block-network", "--dejacache-mode=replay")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*Network is disabled*"])


def test_a_marker_with_other_arguments_or_a_bad_pattern_is_refused(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.block_network(allowed_host=["x"])
def test_typo():
    pass

@pytest.mark.block_network(allowed_hosts=["127.0.0.(1"])
def test_bad_pattern():
    pass
""")
    res = _run(pytester)
    res.assert_outcomes(errors=2)
    res.stdout.fnmatch_lines_random([
        "*block_network(allowed_host=...): it takes allowed_hosts= only*",
        "*allowed hosts *127.0.0.(1* (regular expressions*unterminated subpattern*",
    ])
