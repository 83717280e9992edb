"""pytest plugin (registered through the ``pytest11`` entry point).

* fixture ``dejacache_cassette``: the test's calls go to ``<test dir>/cassettes/<module>/
  <test name>.json``; written only when the test passes. An interrupted test (Ctrl-C,
  ``pytest.exit()``, ``SystemExit``) writes nothing, even with ``record_on_error=True``, and
  the summary names the calls it discarded.
* marker ``@pytest.mark.dejacache(cassette=..., mode=..., cache_key=..., redact=..., volatile=...,
  substitute=..., record_errors=..., record_on_error=..., prune=..., allow_hosts=...,
  expect_misses=..., match=...)``: same, without naming the fixture. A test that passes
  although the code under test caught a replay miss fails, unless it says
  ``expect_misses=True``. ``match="vcr"``: calls are matched on method + URL in recorded
  order, as vcrpy does (``cassettes/vcr_match.py``).
* pytest-recording's surface when no other plugin has a ``vcr`` fixture (``_pytest_vcr.py``):
  ``@pytest.mark.vcr``, ``vcr_config``, ``vcr_cassette_dir``, ``--record-mode``, the
  ``pytest_recording_configure`` hook, and the fixtures ``vcr`` / ``vcr_cassette``: the test's
  cassette with vcrpy's ``Cassette`` names (``cassettes/vcr_view.py``), so a suite moved with
  ``dejacache migrate`` runs without marker edits. pytest-recording and pytest-vcr, when
  installed, keep theirs (the report header says so).
* options (namespaced, so the plugin sits beside pytest-recording and others):
  ``--dejacache-mode`` (ini ``dejacache_mode``; ``dejacache_cassette_dir`` moves the
  cassettes), ``--dejacache-prune``, ``--dejacache-block-network``,
  ``--dejacache-strict`` (every cassette strict: calls must follow the recorded order;
  the marker's ``strict=True`` does it for one test), ``--dejacache-verify`` (``dejacache
  verify`` on the run's cassettes after it; every run records which cassettes and entries
  it used in ``.dejacache/usage.json``, which is what tells orphans),
  ``--dejacache-min-hit-rate`` (the prompt-cache gate on the run's cassettes:
  ``planner/pytest_gate.py``).
* under ``CI`` the default mode is ``replay`` and cassette tests may reach loopback only.
* a terminal summary of replayed/recorded/missed calls, unused entries and what replay saved.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
import xxhash

from . import _pytest_usage, _pytest_vcr
from ._core.durations import seconds
from .cassettes import ageing, placeholder_keys
from .cassettes import block as _block
from .cassettes.block import INTERRUPTIONS, cassette, default_mode, in_ci
from .cassettes.netguard import NetworkGuard
from .cassettes.prices import PRICES, PRICES_DATE, set_prices
from .cassettes.store import Cassette, TapeCounters, summarize
from .config import MODES
from .errors import ConfigurationError, ReplayMiss
from .keys import env_volatile
from .planner import pytest_gate

__all__ = ["cassette_path"]

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_TAPE = pytest.StashKey[Cassette]()
_TAPES = pytest.StashKey[list[tuple[str, Cassette]]]()
_REMOTE = pytest.StashKey[list[dict[str, Any]]]()
_SCENARIO = pytest.StashKey[bool]()
_ADOPTED = pytest.StashKey[list[tuple[Cassette, Callable[[bool], None]]]]()
_PLACEHOLDERS = pytest.StashKey[list[str] | None]()
_OUTER = pytest.StashKey[pytest.Item | None]()  # the test running when this one started
_SAVED = pytest.StashKey[tuple[float | None, dict[str, tuple[float, float]] | None]]()
_STOPPED = pytest.StashKey[type[BaseException]]()  # the session was interrupted by this
_RAISED = pytest.StashKey[type[BaseException]]()  # what the test's call raised
_DISCARDED = pytest.StashKey[list[tuple[pytest.Item, str]]]()  # recordings an interrupt cost
_TOLD = pytest.StashKey[Callable[[Cassette, str], None]]()
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 100


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    _pytest_vcr.addhooks(pluginmanager)  # pytest_recording_configure, when no one declares it


def pytest_report_header(config: pytest.Config) -> str | None:
    return _pytest_vcr.report_header(config)  # whose vcr fixture is in force, when not ours


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("dejacache", "dejacache record/replay")
    group.addoption("--dejacache-mode", choices=MODES, default=None,
                    help="cassette mode for this run (default: DEJACACHE_MODE, replay under CI, "
                         "else auto)")
    group.addoption("--dejacache-prune", action="store_true", default=False,
                    help="remove cassette entries that passing tests did not use")
    group.addoption("--dejacache-block-network", action="store_true", default=False,
                    help="allow only loopback connections in cassette tests (on under CI)")
    group.addoption("--dejacache-live", metavar="KINDS", default=None,
                    help="comma-separated kinds or names of calls that go live while every "
                         "other call replays, e.g. 'model' or 'tool:search_web'; recorded "
                         "into <cassette>.live.json, never the cassette (partial replay)")
    group.addoption("--dejacache-strict", action="store_true", default=False,
                    help="strict replay for every cassette: calls must follow the recorded "
                         "order (per asyncio task / thread); a divergence fails the test")
    # (settings a [tool.dejacache] table will hold: registered together, here)
    parser.addini("dejacache_mode", default="",
                  help="cassette mode when neither the test, the command line nor "
                       "DEJACACHE_MODE says: auto, replay, record, off, or vcrpy's none, "
                       "once, new_episodes, all")
    parser.addini("dejacache_cassette_dir", default="",
                  help="directory (relative to the ini file) holding each test module's "
                       "cassettes, <dir>/<module>/<test>.json, instead of "
                       "<test dir>/cassettes/<module>/")
    _pytest_vcr.addoption(parser, pluginmanager)  # --record-mode, unless pytest-recording's
    parser.addini("dejacache_prices", type="linelist", default=[],
                  help="price overrides: 'model-prefix input_per_mtok output_per_mtok' lines")
    parser.addini("dejacache_allow_hosts", type="linelist", default=[],
                  help="hosts cassette tests may reach while the network guard is on")
    group.addoption("--dejacache-scenario", action="store_true", default=False,
                    help="record and replay every langwatch-scenario run through a cassette "
                         "named after the scenario (dejacache.integrations.scenario)")
    parser.addini("dejacache_scenario", type="bool", default=False,
                  help="same as --dejacache-scenario")
    group.addoption("--dejacache-verify", action="store_true", default=False,
                    help="after the run, verify the cassettes of the modules collected "
                         "(damage, secrets, entries no test used, expiry, format: "
                         "dejacache verify) and fail the session when one fails")
    parser.addini("dejacache_max_age", default="",
                  help="cassette entries recorded longer ago replay with a warning, and fail "
                       "--dejacache-verify (e.g. 30d)")
    group.addoption("--dejacache-report", metavar="DIR", default=None,
                    help="write an HTML report of each cassette test's run into DIR: every "
                         "call replayed, recorded or unused (dejacache.report)")
    pytest_gate.add_options(group, parser)  # --dejacache-min-hit-rate ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "dejacache(cassette=None, mode=None, cache_key=None, redact=None, substitute=None, "
        "record_errors=(), record_on_error=False, prune=False, allow_hosts=(), volatile=(), "
        "expect_misses=False, strict=False, match='request', max_age=None, on_expiry=None, "
        "live=None, replay_until=None, live_path=None): "
        "record and "
        "replay this test's calls from a cassette",
    )
    _check_environment()
    # pytest-recording's names, unless another plugin (pytest-recording, pytest-vcr) has
    # them: registered later, ours would replace its fixtures.
    _pytest_vcr.configure(config, open_cassette, cassette_dir)
    config.stash[_TAPES] = []
    config.stash[_REMOTE] = []
    table: dict[str, tuple[float, float]] = {}
    for line in config.getini("dejacache_prices"):
        parts = line.replace("=", " ").replace(",", " ").split()
        if len(parts) == 3:
            table[parts[0]] = (float(parts[1]), float(parts[2]))
    # The process's settings this session changes, put back at unconfigure: a session run
    # in-process (pytester, pytest.main() again) must neither inherit nor take them away.
    config.stash[_SAVED] = (ageing.INI[0], dict(PRICES) if table else None)
    if table:
        set_prices(table)
    if config.getoption("dejacache_scenario") or config.getini("dejacache_scenario"):
        try:
            from .integrations import scenario as scenario_integration

            scenario_integration.install()
        except ConfigurationError as exc:
            raise pytest.UsageError(f"--dejacache-scenario / dejacache_scenario: {exc}") from exc
        config.stash[_SCENARIO] = True
    # Replay needs no API key: SDK clients built at import time construct with a
    # placeholder, which the guard in placeholder_keys keeps off the wire.
    if (config.getoption("dejacache_mode") or _pytest_vcr.fallback_mode(config, True)
            ) == "replay":
        config.stash[_PLACEHOLDERS] = placeholder_keys.supply()
    ini_age = config.getini("dejacache_max_age")
    if ini_age:
        try:
            ageing.INI[0] = seconds(ini_age, "dejacache_max_age")
        except ConfigurationError as exc:
            raise pytest.UsageError(str(exc)) from exc
    _pytest_usage.configure(config, current_test)  # the record of which cassettes it used
    config.stash[_DISCARDED] = []

    def discarded(tape: Cassette, note: str) -> None:
        item = current_test()
        if item is not None and item.config is config:  # not an inner session's test
            config.stash[_DISCARDED].append((item, note))

    config.stash[_TOLD] = discarded
    _block.DISCARDED.append(discarded)
    pytest_gate.configure(config)  # the prompt-cache gate, when a bar is set


def _check_environment() -> None:
    """Settings read from the environment, checked once at start-up: a bad value is a usage
    error (exit status 4), as a bad ``--dejacache-mode`` is, instead of an INTERNALERROR
    traceback (``DEJACACHE_MODE``) or the same error in every test (``DEJACACHE_VOLATILE``)."""
    for var, check in (("DEJACACHE_MODE", default_mode), ("DEJACACHE_VOLATILE", env_volatile)):
        try:
            check()
        except ConfigurationError as exc:
            why = str(exc)
            raise pytest.UsageError(why if var in why else f"{var}: {why}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    placeholder_keys.withdraw(config.stash.get(_PLACEHOLDERS, None))
    told = config.stash.get(_TOLD, None)
    if told is not None and told in _block.DISCARDED:
        _block.DISCARDED.remove(told)
    saved_age, saved_prices = config.stash.get(_SAVED, (None, None))
    ageing.INI[0] = saved_age
    if saved_prices is not None:
        set_prices(saved_prices, replace=True)
    _pytest_usage.unconfigure(config)
    if config.stash.get(_SCENARIO, False):
        from .integrations import scenario as scenario_integration

        scenario_integration.uninstall()


# ---------------------------------------------------------------- integrations
# Integrations (dejacache.integrations.scenario) open cassettes of their own inside a test:
# they ask which test is running, take its settings, and hand their tapes over so the
# summary counts them, a failure shows their misses, and the file is written only when the
# test passes.

_CURRENT_ITEM: pytest.Item | None = None


def current_test() -> pytest.Item | None:
    """The test being run in this process (None between tests)."""
    return _CURRENT_ITEM


def integration_settings(item: pytest.Item) -> dict[str, Any]:
    """Directory, mode, prune flag and re-record command for an integration's cassettes."""
    marker = item.get_closest_marker("dejacache")
    config = item.config
    return {
        "cassette_dir": cassette_path(item).with_suffix(""),
        "mode": (marker.kwargs.get("mode") if marker is not None else None)
        or config.getoption("dejacache_mode"),
        "prune": bool(config.getoption("dejacache_prune")),
        "rerecord_hint": _rerecord_command(item),
    }


def adopt_tape(item: pytest.Item, tape: Cassette, finish: Callable[[bool], None]) -> None:
    """Count ``tape`` with the test's; ``finish(test_passed)`` runs at the test's teardown."""
    item.config.stash[_TAPES].append((item.nodeid, tape))
    item.stash.setdefault(_ADOPTED, []).append((tape, finish))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    global _CURRENT_ITEM
    # Not None between them: a session run in-process from inside a test (pytester) sets
    # its own, and the outer test is the one running again when it ends.
    item.stash[_OUTER] = _CURRENT_ITEM
    _CURRENT_ITEM = item
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    global _CURRENT_ITEM
    try:
        return (yield)
    finally:
        _CURRENT_ITEM = item.stash.get(_OUTER, None)
        adopted = item.stash.get(_ADOPTED, [])
        if adopted:
            passed = _ending(item) is None
            errors: list[BaseException] = []
            for _, finish in adopted:
                try:
                    finish(passed)
                except Exception as exc:  # every tape gets closed; the first error is raised
                    errors.append(exc)
            adopted.clear()
            if errors:
                raise errors[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    item.stash.setdefault(_REPORTS, {})[rep.when] = rep
    if call.excinfo is not None and rep.when == "call":
        item.stash[_RAISED] = call.excinfo.type
    tape = item.stash.get(_TAPE, None)
    if rep.failed and tape is not None and tape.misses and call.excinfo is not None \
            and not _raised_directly(call.excinfo.value):
        _show_misses(rep, tape)
    for adopted, _ in item.stash.get(_ADOPTED, []):  # integrations' tapes (scenario runs)
        if rep.failed and adopted.misses and call.excinfo is not None \
                and not _raised_directly(call.excinfo.value):
            _show_misses(rep, adopted)
    return rep


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    # Ctrl-C or pytest.exit(): called before the session's fixtures are torn down (at
    # session finish), where the test whose call was cut short has no call report at all.
    item = current_test()
    if item is not None:
        stopped = excinfo.type  # (pytest's Exit is an Exception: stand for it as the exit)
        item.config.stash[_STOPPED] = stopped if issubclass(stopped, INTERRUPTIONS) \
            else SystemExit


def _ending(item: pytest.Item) -> type[BaseException] | None:
    """How the test's cassette blocks end: None when the test passed (they are written); an
    interruption when the session was stopped (Ctrl-C, ``pytest.exit()``) or the test raised
    one (nothing is written, and the summary says so); else ``AssertionError`` (failed,
    skipped or not run: nothing is written unless ``record_on_error``)."""
    stopped = item.config.stash.get(_STOPPED, None)
    if stopped is not None:
        return stopped
    raised = item.stash.get(_RAISED, None)
    if raised is not None and issubclass(raised, INTERRUPTIONS):
        return raised
    reports = item.stash.get(_REPORTS, {})
    call = reports.get("call")
    if call is None or not call.passed or any(r.failed for r in reports.values()):
        return AssertionError
    return None


def _raised_directly(exc: BaseException) -> bool:
    """Whether pytest's own report already leads with the ReplayMiss."""
    return isinstance(exc, ReplayMiss)


def _show_misses(rep: pytest.TestReport, tape: Cassette) -> None:
    # An SDK, litellm or scenario that wraps the miss leaves a one-line "Connection error"
    # on top and the explanation thousands of lines up: put the explanation first.
    head = [f"dejacache: this test failed after {len(tape.misses)} replay miss(es) in "
            f"cassette {tape.path}; the failure below wraps it.", ""]
    for miss in tape.misses[:5]:
        head += [str(miss), ""]
    if len(tape.misses) > 5:
        head.append(f"... and {len(tape.misses) - 5} more misses")
    rep.longrepr = "\n".join(head) + "\n---- the failure as raised ----\n" + str(rep.longrepr)


def cassette_path(item: pytest.Item, explicit: str | os.PathLike[str] | None = None
                  ) -> pathlib.Path:
    """Where a test's cassette lives: ``<test dir>/cassettes/<module>/<test name>.json`` (the
    ``dejacache_cassette_dir`` ini key moves ``<test dir>/cassettes``)."""
    test_file = pathlib.Path(str(item.path))
    if explicit is not None:
        p = pathlib.Path(explicit)
        return p if p.is_absolute() else test_file.parent / p
    parts = item.nodeid.split("::")[1:]
    name = _UNSAFE.sub("_", ".".join(parts)).strip("._") or "test"
    if len(name) > _MAX_NAME:  # long parametrize ids: keep a readable head, hash the rest
        name = name[:80] + "-" + xxhash.xxh3_64_hexdigest(".".join(parts).encode())
    return cassette_dir(item, test_file) / test_file.stem / f"{name}.json"


def cassette_dir(item: pytest.Item, test_file: pathlib.Path) -> pathlib.Path:
    """``<test dir>/cassettes``, or the ``dejacache_cassette_dir`` ini key's directory."""
    ini = str(item.config.getini("dejacache_cassette_dir"))
    if not ini:
        return test_file.parent / "cassettes"
    root = item.config.inipath.parent if item.config.inipath else item.config.rootpath
    return root / ini


def _rerecord_command(item: pytest.Item) -> str:
    return f"pytest {shlex.quote(item.nodeid)} --dejacache-mode=record"


@pytest.fixture
def dejacache_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """The test's cassette, active for the whole test (see the module docstring)."""
    item = request.node
    marker = item.get_closest_marker("dejacache")
    opts: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        opts.setdefault("cassette", marker.args[0])
    explicit = opts.get("cassette")
    yield from open_cassette(request, cassette_path(item, explicit), opts,
                             shared=explicit is not None)


def open_cassette(request: pytest.FixtureRequest, path: pathlib.Path, opts: dict[str, Any],
                  *, shared: bool) -> Iterator[Cassette]:
    """The cassette block at ``path`` for the test, open while it runs (a fixture's body:
    ``dejacache_cassette``'s, and the ``vcr`` fixture's for ``@pytest.mark.vcr``); ``opts``
    are the marker's options."""
    item = request.node
    config = request.config
    mode = opts.get("mode") or config.getoption("dejacache_mode") or _pytest_vcr.fallback_mode(
        config, path.exists())
    hint = _rerecord_command(item)
    live = opts.get("live", config.getoption("dejacache_live"))
    partial = bool(live) or opts.get("replay_until") is not None
    if partial and mode == "record":
        mode = None  # a partial block replays; --dejacache-mode=record is for the others
    # A test replaying in a session that does not (a marker's mode="replay"): its own
    # placeholders, set before the block patches the transports so the guard sits under it.
    # (Not for a partial replay: its live calls need the real credentials.)
    keys = placeholder_keys.supply() if (
        mode == "replay" and not partial and _PLACEHOLDERS not in config.stash) else None
    block = cassette(
        path,
        mode,
        redact=opts.get("redact"),
        substitute=opts.get("substitute"),
        record_on_error=bool(opts.get("record_on_error", False)),
        record_errors=tuple(opts.get("record_errors", ())),
        prune=bool(opts.get("prune", False) or config.getoption("dejacache_prune")),
        volatile=opts.get("volatile", ()),
        strict=bool(opts.get("strict", False) or config.getoption("dejacache_strict")),
        rerecord_hint=hint,
        shared=shared,
        match=opts.get("match", "request"),
        max_age=opts.get("max_age"),
        on_expiry=opts.get("on_expiry"),
        live=live,
        replay_until=opts.get("replay_until"),
        live_path=opts.get("live_path"),
        **({"cache_key": opts["cache_key"]} if "cache_key" in opts else {}),
    )
    try:
        tape = block.__enter__()
    except BaseException:
        placeholder_keys.withdraw(keys)
        raise
    config.stash[_TAPES].append((item.nodeid, tape))
    item.stash[_TAPE] = tape
    guard: NetworkGuard | None = None
    try:  # (from here: a Ctrl-C landing before the test runs still closes the block)
        if tape.mode == "replay" and (in_ci() or config.getoption("dejacache_block_network")):
            allow = [*config.getini("dejacache_allow_hosts"), *opts.get("allow_hosts", ())]
            guard = NetworkGuard(
                lambda where: (f"Test {item.nodeid} replays from cassette {path}; to record "
                               f"this call run locally: {hint} (or allow the host with "
                               "@pytest.mark.dejacache(allow_hosts=[...]))."),
                allow=allow,
            )
            guard.__enter__()
        yield tape
    finally:
        if guard is not None:
            guard.__exit__(None, None, None)
        # A test that did not pass writes nothing (a skipped one neither prunes: it stopped
        # before the calls it did not make, which are not unused).
        ending = _ending(item)
        try:
            block.__exit__(ending, None, None)  # (not None: the old cassette stays as it was)
        finally:
            placeholder_keys.withdraw(keys)
    if ending is not None and issubclass(ending, INTERRUPTIONS):
        return  # the session is stopping: no report page, no verdict on a test cut short
    report_dir = config.getoption("dejacache_report")
    if report_dir and path.exists():
        _write_report(pathlib.Path(report_dir), item, path, tape)
    if ending is None and tape.misses and not opts.get("expect_misses", False):
        # The code under test caught the miss (a broad ``except``, an SDK error handler,
        # a framework's fallback) and the test passed on a path the recording never took.
        pytest.fail(f"{len(tape.misses)} replay miss(es) in cassette {path} were caught "
                    "by the code under test, so this test passed without its recording "
                    "(a test that asserts misses says so with "
                    "@pytest.mark.dejacache(expect_misses=True)):\n\n"
                    + "\n\n".join(str(m) for m in tape.misses[:3]), pytrace=False)


def _write_report(directory: pathlib.Path, item: pytest.Item, path: pathlib.Path,
                  tape: Cassette) -> None:
    """``--dejacache-report DIR``: the test's run as a page (what it replayed, recorded and
    left unused), named after the test."""
    from .report import report

    directory.mkdir(parents=True, exist_ok=True)
    name = _UNSAFE.sub("_", item.nodeid).strip("._")[:150] or "test"
    (directory / f"{name}.html").write_text(report(path, calls=tape.calls), encoding="utf-8")


@pytest.fixture(autouse=True)
def _dejacache_marker(request: pytest.FixtureRequest) -> None:
    # Cheap for unmarked tests: one marker lookup.
    if request.node.get_closest_marker("dejacache") is not None:
        request.getfixturevalue("dejacache_cassette")


# ---------------------------------------------------------------- summary


def _counts(tapes: list[tuple[str, Cassette]]) -> dict[str, Any]:
    total = summarize(t for _, t in tapes)
    # A shared cassette holds other tests' entries: one test's unused ones are not unused
    # (and --dejacache-prune leaves a shared file alone).
    unused = [(nodeid, str(t.path), len(t.unused)) for nodeid, t in tapes
              if not t.shared and not t.pruned]
    return {"counters": total, "unused": [u for u in unused if u[2]],
            "pruned": [(nodeid, str(t.path), t.pruned) for nodeid, t in tapes if t.pruned]}


def _claimed(item: pytest.Item) -> list[pathlib.Path]:
    """The cassettes a test may use: its own, and the one its marker names."""
    marker = item.get_closest_marker("dejacache")
    named = marker and (marker.kwargs.get("cassette") or (marker.args or [None])[0])
    return [cassette_path(item), *([cassette_path(item, named)] if named else []),
            *_pytest_vcr.claimed(item)]


def pytest_deselected(items: list[pytest.Item]) -> None:
    _pytest_usage.deselected(items)  # deselected tests still claim their cassettes


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    # writes the usage record (and carries out --dejacache-verify)
    usage = _pytest_usage.finish(session, _claimed, lambda item: _pytest_usage.outcome(
        item.stash.get(_REPORTS, {})))
    if workeroutput is not None and usage is not None:
        workeroutput["dejacache_usage"] = usage
    tapes = config.stash.get(_TAPES, [])
    if workeroutput is not None and tapes:  # an xdist worker: hand the numbers over
        c = _counts(tapes)
        ctr: TapeCounters = c["counters"]
        workeroutput["dejacache"] = {
            "replayed": ctr.replayed, "recorded": ctr.recorded, "missed": ctr.missed,
            "time_saved": ctr.time_saved, "tokens_saved": ctr.tokens_saved,
            "dollars_saved": ctr.dollars_saved, "unused": c["unused"], "pruned": c["pruned"],
        }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    usage = getattr(node, "workeroutput", {}).get("dejacache_usage")
    if usage is not None:
        _pytest_usage.worker_part(node.config, usage)
    data = getattr(node, "workeroutput", {}).get("dejacache")
    if data:
        node.config.stash.setdefault(_REMOTE, []).append(data)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    _pytest_usage.summary(terminalreporter, config)
    tapes = config.stash.get(_TAPES, [])
    remote = config.stash.get(_REMOTE, [])
    # (a test that caught the interruption itself and passed lost nothing it meant to keep)
    discarded = [f"{note} ({item.nodeid})" for item, note in config.stash.get(_DISCARDED, [])
                 if _ending(item) is not None]
    if not tapes and not remote and not discarded:
        return
    terminalreporter.section("dejacache")
    if tapes or remote:
        _summary_counts(terminalreporter, tapes, remote)
    for note in discarded:  # (a test cut short writes nothing: say what it recorded)
        terminalreporter.write_line(note)


def _summary_counts(tr: Any, tapes: list[tuple[str, Cassette]], remote: list[dict[str, Any]]
                    ) -> None:
    c = _counts(tapes)
    total: TapeCounters = c["counters"]
    unused: list[Any] = list(c["unused"])
    pruned: list[Any] = list(c["pruned"])
    for r in remote:
        total.replayed += r["replayed"]
        total.recorded += r["recorded"]
        total.missed += r["missed"]
        total.time_saved += r["time_saved"]
        total.tokens_saved += r["tokens_saved"]
        total.dollars_saved += r["dollars_saved"]
        unused.extend(tuple(u) for u in r["unused"])
        pruned.extend(tuple(u) for u in r.get("pruned", ()))
    tr.write_line(
        f"calls: {total.replayed} replayed, {total.recorded} recorded, {total.missed} missed "
        f"({len(tapes) or 'xdist'} cassette uses)"
    )
    tr.write_line(
        f"replay saved: {total.time_saved:.1f} s of model time, {total.tokens_saved:,} tokens, "
        f"~${total.dollars_saved:.2f} (prices as of {PRICES_DATE}; override with the "
        "dejacache_prices ini option)"
    )
    if unused:
        n = sum(u[2] for u in unused)
        tr.write_line(f"unused entries: {n} in {len(unused)} cassettes "
                      "(remove them with --dejacache-prune):")
        for nodeid, path, k in unused[:10]:
            tr.write_line(f"  {k:>4}  {path}  ({nodeid})")
        if len(unused) > 10:
            tr.write_line(f"  ... and {len(unused) - 10} more")
    if pruned:  # --dejacache-prune (or the marker's prune=True) removed them: done
        n = sum(u[2] for u in pruned)
        tr.write_line(f"pruned: {n} unused entr{'ies' if n != 1 else 'y'} removed from "
                      f"{len(pruned)} cassette{'s' * (len(pruned) != 1)}")
