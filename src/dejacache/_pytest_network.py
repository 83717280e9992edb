"""pytest-recording's network blocking, served by dejacache's socket guard (``netguard.py``).

A test is sealed by ``--block-network`` (every test) or ``@pytest.mark.block_network``: each
socket connection it opens is refused at ``connect()`` with
:class:`~dejacache.errors.NetworkDisabled` (a ``RuntimeError`` starting "Network is
disabled", as pytest-recording raises), loopback included, unless the address or the name it
was looked up under matches one of the allowed hosts: regular expressions matched from the
start of the host (``re.match``), from the first of these that names any:

1. ``@pytest.mark.block_network(allowed_hosts=[...])``;
2. ``@pytest.mark.allowed_hosts([...])`` (pytest-recording registers it, documents it as the
   hosts to allow, and reads it nowhere; here it is read, after the first);
3. ``--allowed-hosts=REGEX,REGEX``;
4. ``vcr_config``'s ``allowed_hosts``.

A list or a comma-separated string either way. A test whose cassette records (a vcr test in
any record mode but ``none``, a dejacache cassette in ``auto``/``record``, a partial replay)
is not sealed: its calls go live on purpose. Loaded by the first sealed test only.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

from . import _pytest_state as state
from .cassettes.netguard import NetworkGuard
from .errors import NetworkDisabled

if TYPE_CHECKING:
    from .cassettes.store import Cassette

__all__ = ["seal"]

_CASSETTE_FIXTURES = ("dejacache_cassette", "vcr", "vcr_cassette")


def _hosts(value: Any) -> list[str]:
    """A list, or a comma-separated string, of patterns; empty ones dropped (an empty
    pattern matches every host: a trailing comma must not unseal the test)."""
    if isinstance(value, str):
        value = value.split(",")
    return [str(v).strip() for v in value or () if str(v).strip()]


def _marked(named: pytest.Mark | None) -> Any:
    """``@pytest.mark.allowed_hosts``'s hosts: one list or string, several strings, or
    ``hosts=``."""
    if named is None:
        return None
    if "hosts" in named.kwargs:
        return named.kwargs["hosts"]
    return named.args[0] if len(named.args) == 1 else list(named.args)


def _allowed(request: pytest.FixtureRequest, marker: pytest.Mark | None) -> list[str]:
    """The first of the four places (module docstring) that names a host."""
    for value in (marker.kwargs.get("allowed_hosts") if marker is not None else None,
                  _marked(request.node.get_closest_marker("allowed_hosts")),
                  request.config.getoption("allowed_hosts", None)):
        hosts = _hosts(value)
        if hosts:
            return hosts
    return _hosts((request.getfixturevalue("vcr_config") or {}).get("allowed_hosts"))


def _records(tape: Cassette | None) -> bool:
    return tape is not None and (tape.mode != "replay" or tape.partial is not None)


def seal(request: pytest.FixtureRequest, marker: pytest.Mark | None, why: str) -> None:
    """Refuse the test's connections but to the allowed hosts until its teardown."""
    if marker is not None and (marker.args or set(marker.kwargs) - {"allowed_hosts"}):
        given = ", ".join([*map(repr, marker.args), *(f"{k}=..." for k in marker.kwargs)])
        pytest.fail(f"@pytest.mark.block_network({given}): it takes allowed_hosts= only "
                    "(pytest-recording's marker)", pytrace=False)
    for name in _CASSETTE_FIXTURES:  # a cassette the test names opens after the autouse
        if name in request.fixturenames:  # fixture that seals it: opened here, to be asked
            request.getfixturevalue(name)
    if _records(request.node.stash.get(state.TAPE, None)):
        return
    nodeid = request.node.nodeid
    patterns = _allowed(request, marker)
    try:
        guard = NetworkGuard(
            lambda where: (f"Test {nodeid} is sealed by {why}; allow the host with "
                           "@pytest.mark.block_network(allowed_hosts=[REGEX, ...]) or "
                           "--allowed-hosts=REGEX,..., or record the test's cassette "
                           "(--record-mode=once)."),
            patterns=patterns, loopback=False, lookups=False,
            refusal=NetworkDisabled, lead="Network is disabled: ")
    except re.error as exc:
        pytest.fail(f"allowed hosts {patterns!r} (regular expressions, as pytest-recording "
                    f"reads them): {exc}", pytrace=False)
    guard.__enter__()
    request.addfinalizer(lambda: guard.__exit__(None, None, None))
